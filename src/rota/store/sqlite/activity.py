"""The activity tallies on SQLite (029_activity): rows added by the write transaction that ends
an attempt, read by the kind and queue pages (rota.domain.activity)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from datetime import datetime, timedelta

from rota.domain.activity import (
    ActivityBucket,
    ActivityRow,
    AttemptEnd,
    ErrorGroup,
    assemble,
    check_window,
    error_fingerprint,
    error_sample,
    tally,
)
from rota.domain.job_state import JobState
from rota.store.sqlite.rows import clamp, duration_us, from_us, to_us

_MINUTE_US = 60_000_000

_ADD = """
INSERT INTO rota_activity (minute, queue, kind, bucket, succeeded, failed, dead, waited)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (minute, queue, kind, bucket) DO UPDATE SET
    succeeded = succeeded + excluded.succeeded, failed = failed + excluded.failed,
    dead = dead + excluded.dead, waited = waited + excluded.waited
"""

_ADD_ERROR = """
INSERT INTO rota_error_minutes (minute, queue, kind, fingerprint, sample, n)
VALUES (?, ?, ?, ?, ?, 1)
ON CONFLICT (minute, queue, kind, fingerprint) DO UPDATE SET
    n = n + 1, sample = excluded.sample
"""

#: A job's row as a fenced write returns it for the tallies: queue, kind, started_at, run_at.
Ended = tuple[str, str, int | None, int]


def record(conn: sqlite3.Connection, ended: Iterable[Ended], state: JobState, at_us: int) -> None:
    """Add the attempts of these jobs, ended at ``at_us`` leaving them in ``state``, to the
    minute's rows: one upsert per (queue, kind, duration bucket)."""
    ends = [
        AttemptEnd(
            queue,
            kind,
            state,
            run_us=at_us - (started if started is not None else at_us),
            wait_us=(started if started is not None else at_us) - run_at,
        )
        for queue, kind, started, run_at in ended
    ]
    if not ends:
        return
    minute = at_us - at_us % _MINUTE_US
    conn.executemany(_ADD, [(minute, *key, *counts) for key, counts in tally(ends).items()])


def record_error(conn: sqlite3.Connection, queue: str, kind: str, error: str, at_us: int) -> None:
    """Add one failed attempt's error to its fingerprint's row of the minute."""
    minute = at_us - at_us % _MINUTE_US
    conn.execute(_ADD_ERROR, (minute, queue, kind, error_fingerprint(error), error_sample(error)))


def _where(queue: str | None, kind: str | None) -> tuple[str, list[object]]:
    # The index of the filter given: by queue, else by kind, else the primary key's minutes.
    clauses: list[str] = []
    params: list[object] = []
    if queue is not None:
        clauses.append("queue = ?")
        params.append(queue)
    if kind is not None:
        clauses.append("kind = ?")
        params.append(kind)
    return "".join(f" AND {clause}" for clause in clauses), params


def buckets(
    conn: sqlite3.Connection,
    since: datetime,
    width: timedelta,
    at: datetime,
    queue: str | None,
    kind: str | None,
) -> list[ActivityBucket]:
    check_window(since, width, at)
    since_us, width_us = to_us(since), duration_us(width)
    where, params = _where(queue, kind)
    rows = conn.execute(
        "SELECT (minute - ?) / ? AS slot, bucket, sum(succeeded), sum(failed), sum(dead), "
        f"sum(waited) FROM rota_activity WHERE minute >= ? AND minute < ?{where} "
        "GROUP BY slot, bucket",
        [since_us, width_us, since_us, to_us(at), *params],
    )
    return assemble((ActivityRow(*row) for row in rows), since, width, at)


def top_errors(
    conn: sqlite3.Connection,
    since: datetime,
    at: datetime,
    queue: str | None,
    kind: str | None,
    limit: int,
) -> list[ErrorGroup]:
    where, params = _where(queue, kind)
    # max(minute) makes SQLite take the sample from the row holding the latest minute.
    rows = conn.execute(
        "SELECT fingerprint, sum(n) AS total, max(minute), sample FROM rota_error_minutes "
        f"WHERE minute >= ? AND minute < ?{where} "
        "GROUP BY fingerprint ORDER BY total DESC, fingerprint LIMIT ?",
        [to_us(since), to_us(at), *params, clamp(max(0, limit))],
    )
    return [
        ErrorGroup(fingerprint, int(total), from_us(last), sample)
        for fingerprint, total, last, sample in rows
    ]


def prune(conn: sqlite3.Connection, older_than: datetime) -> None:
    """Drop the minutes before ``older_than``'s (as the finished jobs they counted go)."""
    cutoff = to_us(older_than) - _MINUTE_US
    conn.execute("DELETE FROM rota_activity WHERE minute < ?", (cutoff,))
    conn.execute("DELETE FROM rota_error_minutes WHERE minute < ?", (cutoff,))
