"""Rows to domain objects and back: the shapes statements return and the values they take."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias

from rota.domain.flow import Key, LimitScope
from rota.domain.job import Job, JobState

Row: TypeAlias = tuple[Any, ...]


def row_to_job(row: Row) -> Job:
    """A Job from a row selected with JOB_COLUMNS."""
    timeout_us = row[12]
    return Job(
        id=row[0],
        kind=row[1],
        queue=row[2],
        payload=row[3],
        state=JobState(row[4]),
        priority=row[5],
        run_at=row[6],
        attempt=row[7],
        max_attempts=row[8],
        created_at=row[9],
        tenant=row[10],
        unique_key=row[11],
        timeout=timedelta(microseconds=timeout_us) if timeout_us is not None else None,
        lease_token=row[13],
        lease_until=row[14],
        worker=row[15],
        started_at=row[16],
        finished_at=row[17],
        last_error=row[18],
        schedule=row[19],
        slot_at=row[20],
        crashes=row[21],
        trace_context=row[22],
        result=row[23],
        progress=row[24],
        progress_message=row[25],
        expires_at=row[26],
        workflow=row[27],
        waiting_on=row[28],
    )


def candidate_job(row: Row) -> Job:
    """A claim candidate with just the fields the budget and the claim order look at (the
    row's last column, whether it runs alone, is the caller's)."""
    job_id, kind, queue, tenant, priority, run_at, state, attempt, max_attempts, created = row[:10]
    return Job(
        id=job_id,
        kind=kind,
        queue=queue,
        payload=None,
        state=JobState(state),
        priority=priority,
        run_at=run_at,
        attempt=attempt,
        max_attempts=max_attempts,
        created_at=created,
        tenant=tenant,
    )


def counted_keys_of(queue: str, kind: str, tenant: str | None) -> list[Key]:
    keys: list[Key] = [(LimitScope.QUEUE, queue), (LimitScope.KIND, kind)]
    if tenant is not None:
        keys.append((LimitScope.TENANT, tenant))
    return keys


def micros(value: int | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromtimestamp(0, UTC) + timedelta(microseconds=value)


def array_or_null(values: list[Any]) -> list[Any] | None:
    """``values`` as an array parameter, or NULL when every one is None: a multi-array
    unnest pads a NULL array with NULLs, and nothing is sent for it."""
    return None if all(value is None for value in values) else values


def us(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
