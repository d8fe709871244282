"""Rows of the SQLite schema to domain objects and back; instants as integer microseconds.

Every ``*_at`` column and the lease expiry hold microseconds since the Unix epoch in UTC, so SQL
compares integers and a round trip is exact (a datetime has microsecond resolution too).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, TypeVar

from rota.domain.clock import utc
from rota.domain.job import Attempt, Job
from rota.domain.job_state import JobState, Outcome
from rota.domain.payload import PREVIEW_CHARS, Preview, decode_json
from rota.store.records import WorkerInfo

T = TypeVar("T")

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

#: Every column of rota_jobs, in the order ``job_from_row`` reads them.
JOB_COLUMNS = (
    "id, kind, queue, payload, state, priority, run_at, attempt, max_attempts, created_at, "
    "tenant, unique_key, timeout_us, lease_token, lease_until, worker, started_at, finished_at, "
    "last_error, schedule, slot_at, crashes, trace_context, result, progress, progress_message, "
    "expires_at, workflow, waiting_on, heartbeats, last_heartbeat_at"
)


#: JOB_COLUMNS as a list reads them: the first characters of the payload, result and last
#: error (job_from_row(..., previews=True) makes Previews of the first two).
def preview_columns(chars: int) -> str:
    """JOB_COLUMNS with the payload, result and last error cut to their first ``chars``
    characters in SQL."""
    n = int(chars)
    return (
        JOB_COLUMNS.replace("payload,", f"substr(payload, 1, {n}),")
        .replace("last_error,", f"substr(last_error, 1, {n}),")
        # A result kept apart (025) is cut from rota_results, under the token that wrote it.
        .replace(
            "result,",
            "CASE WHEN result IS NULL AND state = 'succeeded' THEN (SELECT "
            f"substr(r.result, 1, {n}) FROM rota_results AS r WHERE r.job_id = "
            "rota_jobs.id AND r.token = rota_jobs.lease_token) "
            f"ELSE substr(result, 1, {n}) END,",
        )
    )


LIST_COLUMNS = preview_columns(PREVIEW_CHARS)
#: A job in a finished state, spelled as the partial index rota_jobs_finished spells its WHERE
#: (a query must repeat it for SQLite to use the index); comparisons rather than IN, which
#: builds a temporary table where SQLite checks it per row (020_no_lists_per_row).
FINISHED = "(state = 'succeeded' OR state = 'dead' OR state = 'cancelled')"
#: An attempt's columns (alias a), its heartbeats taken from its job (alias j) while it runs.
ATTEMPT_COLUMNS = (
    "a.attempt, a.token, a.worker, a.started_at, a.finished_at, a.outcome, a.error, a.traceback, "
    "CASE WHEN a.outcome = 'running' AND j.lease_token = a.token THEN j.heartbeats "
    "ELSE a.heartbeats END, "
    "CASE WHEN a.outcome = 'running' AND j.lease_token = a.token THEN j.last_heartbeat_at "
    "ELSE a.last_heartbeat_at END, a.lease_until"
)
WORKER_COLUMNS = (
    "name, host, pid, queues, concurrency, started_at, beat_at, kinds, heartbeat_seconds"
)

#: Enough placeholders per statement for any SQLite build (older builds allow 999).
CHUNK = 400


def to_us(instant: datetime) -> int:
    """``instant`` as microseconds since the epoch; naive datetimes are refused."""
    return (utc(instant) - EPOCH) // _MICROSECOND


def from_us(value: int) -> datetime:
    return EPOCH + timedelta(microseconds=value)


def duration_us(duration: timedelta) -> int:
    return duration // _MICROSECOND


def _maybe_instant(value: int | None) -> datetime | None:
    return None if value is None else EPOCH + timedelta(microseconds=value)


def job_from_row(row: Sequence[Any], *, previews: bool = False) -> Job:
    """A Job from a row selected (or returned) as JOB_COLUMNS (as LIST_COLUMNS with
    ``previews``)."""
    (
        job_id, kind, queue, payload, state, priority, run_at, attempt, max_attempts, created_at,
        tenant, unique_key, timeout_us, lease_token, lease_until, worker, started_at, finished_at,
        last_error, schedule, slot_at, crashes, trace_context, result, progress, progress_message,
        expires_at, workflow, waiting_on, heartbeats, last_heartbeat_at,
    ) = row  # fmt: skip
    return Job(
        id=job_id,
        kind=kind,
        queue=queue,
        payload=Preview(payload) if previews else decode_json(payload),
        state=JobState(state),
        priority=priority,
        run_at=from_us(run_at),
        attempt=attempt,
        max_attempts=max_attempts,
        created_at=from_us(created_at),
        tenant=tenant,
        unique_key=unique_key,
        timeout=None if timeout_us is None else timedelta(microseconds=timeout_us),
        lease_token=lease_token,
        lease_until=_maybe_instant(lease_until),
        worker=worker,
        started_at=_maybe_instant(started_at),
        finished_at=_maybe_instant(finished_at),
        last_error=last_error,
        schedule=schedule,
        slot_at=_maybe_instant(slot_at),
        crashes=crashes,
        trace_context=None if trace_context is None else decode_json(trace_context),
        result=None if result is None else Preview(result) if previews else decode_json(result),
        progress=progress,
        progress_message=progress_message,
        expires_at=_maybe_instant(expires_at),
        workflow=workflow,
        waiting_on=waiting_on,
        heartbeats=heartbeats,
        last_heartbeat_at=_maybe_instant(last_heartbeat_at),
    )


#: What a claim returns of each job it leases: every column but those the claim itself set
#: (state, lease_until, worker, started_at) or cleared (finished_at, progress, its message).
CLAIMED_COLUMNS = (
    "id, kind, queue, payload, priority, run_at, attempt, max_attempts, created_at, tenant, "
    "unique_key, timeout_us, lease_token, last_error, schedule, slot_at, crashes, "
    "trace_context, result, expires_at, workflow, waiting_on"
)


class Instants:
    """Instants of integer microseconds, each built once: the jobs of one batch share most
    of theirs (enqueued together, due together)."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[int, datetime] = {}

    def __call__(self, value: int) -> datetime:
        instant = self._seen.get(value)
        if instant is None:
            instant = self._seen[value] = EPOCH + timedelta(0, 0, value)
        return instant

    def maybe(self, value: int | None) -> datetime | None:
        return None if value is None else self(value)


def claimed_job(
    row: Sequence[Any],
    worker: str,
    lease_until: datetime,
    started_at: datetime,
    instants: Instants,
) -> Job:
    """A Job leased by a claim from its row returned as CLAIMED_COLUMNS and what the claim
    set; built positionally in Job's field order (a claim builds one per job)."""
    (
        job_id, kind, queue, payload, priority, run_at, attempt, max_attempts, created_at,
        tenant, unique_key, timeout_us, lease_token, last_error, schedule, slot_at, crashes,
        trace_context, result, expires_at, workflow, waiting_on,
    ) = row  # fmt: skip
    return Job(
        job_id,
        kind,
        queue,
        decode_json(payload),
        JobState.RUNNING,
        priority,
        instants(run_at),
        attempt,
        max_attempts,
        instants(created_at),
        tenant,
        unique_key,
        None if timeout_us is None else timedelta(microseconds=timeout_us),
        lease_token,
        lease_until,
        worker,
        started_at,
        None,  # finished_at
        last_error,
        schedule,
        instants.maybe(slot_at),
        crashes,
        None if trace_context is None else decode_json(trace_context),
        None if result is None else decode_json(result),
        None,  # progress
        None,  # progress_message
        instants.maybe(expires_at),
        workflow,
        waiting_on,
    )


def attempt_from_row(row: Sequence[Any]) -> Attempt:
    """An Attempt from a row selected as ATTEMPT_COLUMNS."""
    (
        attempt, token, worker, started_at, finished_at, outcome, error, traceback,
        heartbeats, last_heartbeat_at, lease_until,
    ) = row  # fmt: skip
    return Attempt(
        attempt=attempt,
        token=token,
        worker=worker,
        started_at=from_us(started_at),
        finished_at=_maybe_instant(finished_at),
        outcome=Outcome(outcome),
        error=error,
        traceback=traceback,
        heartbeats=heartbeats,
        last_heartbeat_at=_maybe_instant(last_heartbeat_at),
        lease_until=_maybe_instant(lease_until),
    )


def worker_from_row(row: Sequence[Any], running: int) -> WorkerInfo:
    """A WorkerInfo from a row selected as WORKER_COLUMNS."""
    name, host, pid, queues, concurrency, started_at, beat_at, kinds, heartbeat = row
    return WorkerInfo(
        name=name,
        host=host,
        pid=pid,
        queues=tuple(json.loads(queues)),
        concurrency=concurrency,
        started_at=from_us(started_at),
        beat_at=from_us(beat_at),
        running=running,
        kinds=None if kinds is None else tuple(json.loads(kinds)),
        heartbeat=None if heartbeat is None else timedelta(seconds=heartbeat),
    )


#: SQLite stores 64-bit integers; binding a larger Python int raises OverflowError.
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def fits(value: object) -> bool:
    """Whether ``value`` can name a row: anything else (too large, not an int) matches none."""
    return isinstance(value, int) and _INT64_MIN <= value <= _INT64_MAX


def clamp(value: int) -> int:
    """``value`` within SQLite's integers, for limits (a limit beyond them means no limit)."""
    return max(_INT64_MIN, min(value, _INT64_MAX))


def marks(count: int) -> str:
    """``count`` positional placeholders for an IN list: ``?, ?, ?``."""
    return ", ".join(["?"] * count)


def pair_values(count: int) -> str:
    """``count`` two-column VALUES rows: ``(?, ?), (?, ?)``."""
    return ", ".join(["(?, ?)"] * count)


def insert_rows(conn: sqlite3.Connection, statement: str, row: str, values: Sequence[Any]) -> int:
    """Run ``statement`` (an INSERT ending in ``VALUES {rows}``) over ``values``, the flat
    values of rows of ``row``'s placeholders, as many rows per statement as this SQLite allows
    placeholders for, up to MAX_ROWS_PER_INSERT; the rows inserted.

    SQLite runs one statement of many rows for far less than as many statements of one
    (executemany), whose every run also does the statement's fixed work again (on a table
    with AUTOINCREMENT, reading and rewriting its counter).
    """
    width = row.count("?")
    allowed = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // width
    per_statement = max(1, min(allowed, MAX_ROWS_PER_INSERT)) * width
    inserted = 0
    for first in range(0, len(values), per_statement):
        part = values[first : first + per_statement]
        inserted += conn.execute(_many_rows(statement, row, len(part) // width), part).rowcount
    return inserted


#: Rows per INSERT at most: beyond this, longer statements save next to nothing.
MAX_ROWS_PER_INSERT = 200


@cache
def _many_rows(statement: str, row: str, rows: int) -> str:
    return statement.format(rows=", ".join([row] * rows))


def chunks(items: Sequence[T], size: int = CHUNK) -> Iterator[Sequence[T]]:
    """``items`` in slices of at most ``size``, so no statement exceeds the placeholder limit."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
