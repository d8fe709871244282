"""Rows to domain objects and back: the shapes statements return and the values they take."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias

import psycopg

from rota.domain.flow import Key, LimitScope
from rota.domain.job import Job
from rota.domain.job_state import JobState
from rota.domain.payload import Preview, stored_apart

Row: TypeAlias = tuple[Any, ...]


#: JobState by its stored name: a dict lookup, several times cheaper than ``JobState(name)``.
_STATES = {state.value: state for state in JobState}


def row_to_job(row: Row) -> Job:
    """A Job from a row selected with JOB_COLUMNS, whose order is Job's fields' (built
    positionally: a claim builds one per job, and 29 keywords cost four times as much)."""
    timeout_us = row[12]
    # Slices of an untyped row: their lengths are what mypy cannot see (the unit test
    # test_the_job_columns_are_job_s_fields_in_order... checks them).
    return Job(  # type: ignore[call-arg]
        *row[:4],
        _STATES[row[4]],
        *row[5:12],
        timedelta(microseconds=timeout_us) if timeout_us is not None else None,
        *row[13:31],
    )


def row_to_listed(row: Row) -> Job:
    """A Job from a row selected with LIST_COLUMNS: payload and result as Previews."""
    listed = list(row)
    listed[3] = Preview(listed[3])
    if listed[23] is not None:
        listed[23] = Preview(listed[23])
    return row_to_job(tuple(listed))


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


def returns_rows(cursor: psycopg.AsyncCursor[Any] | psycopg.Cursor[Any]) -> bool:
    """Whether the statement just run returned rows to fetch. ``cursor.description`` says the
    same by building a Column object per column (about 1.5 µs each), on every statement."""
    result = cursor.pgresult
    return result is not None and result.nfields > 0


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


def completion(
    ids: list[int], tokens: list[int], results: list[str | None] | None, now: datetime | None
) -> tuple[str, dict[str, Any]]:
    """The statement completing these leases and its parameters: "complete", or, when a
    result is too long for its job's row, "complete_apart" with those results set aside."""
    params: dict[str, Any] = {"now": now, "ids": ids, "tokens": tokens}
    if results is None or not any(stored_apart(text) for text in results):
        params["results"] = array_or_null(list(results)) if results is not None else None
        return "complete", params
    apart = [
        (job_id, token, text)
        for job_id, token, text in zip(ids, tokens, results, strict=True)
        if stored_apart(text)
    ]
    params["results"] = array_or_null([None if stored_apart(text) else text for text in results])
    params["apart_ids"] = [job_id for job_id, _, _ in apart]
    params["apart_tokens"] = [token for _, token, _ in apart]
    params["apart"] = [text for _, _, text in apart]
    return "complete_apart", params
