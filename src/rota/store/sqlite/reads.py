"""Jobs read on SQLite: one job, many by id, a page by filter, counts and their estimates,
throughput and attempts; and the WHERE clause a filter makes.

Each function is the body of one read transaction run by ``Database``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from rota.domain.errors import JobNotFound
from rota.domain.job import Attempt, Job
from rota.domain.job_state import JobState
from rota.store.records import (
    MAX_PAGE_SIZE,
    Counted,
    Counts,
    JobFilter,
    Page,
    ThroughputBucket,
    bucketize,
    encode_cursor,
)
from rota.store.sqlite.rows import (
    ATTEMPT_COLUMNS,
    FINISHED,
    JOB_COLUMNS,
    LIST_COLUMNS,
    attempt_from_row,
    chunks,
    clamp,
    duration_us,
    fits,
    from_us,
    job_from_row,
    marks,
    preview_columns,
    to_us,
)


def job_row(conn: sqlite3.Connection, columns: str, job_id: int) -> Any:
    """The job's ``columns``; JobNotFound for an id no row has (or no integer could have)."""
    row = None
    if fits(job_id):
        row = conn.execute(f"SELECT {columns} FROM rota_jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        raise JobNotFound(job_id)
    return row


def one_at_a_time(conn: sqlite3.Connection, filter: JobFilter) -> list[frozenset[JobState] | None]:
    """The states a list reads in turn: each on its own for a filter on a tenant, kind, queue
    or schedule over several states (or all), whose index (024) leads with what it pins, then
    the state, and yields a state's jobs in id order (several states at once, it does not:
    the page would sort every job of the kind); otherwise the filter's states at once. With a
    queue, only the states the counts hold jobs of in that queue: a queue with no running job
    otherwise costs a read of every running job to learn it."""
    states = filter.states
    narrowed = any(
        value is not None for value in (filter.tenant, filter.kind, filter.queue, filter.schedule)
    )
    if filter.search is not None or not narrowed or (states is not None and len(states) <= 1):
        return [states]
    chosen = set(states if states is not None else JobState)
    if filter.queue is not None:
        held = conn.execute(
            "SELECT state FROM rota_counts WHERE queue = ? AND n > 0", (filter.queue,)
        ).fetchall()
        chosen &= {JobState(state) for (state,) in held}
        if not chosen:
            return [frozenset()]
    return [frozenset({state}) for state in sorted(chosen)]


def where_of(filter: JobFilter, states: frozenset[JobState] | None) -> tuple[str, list[object]]:
    """The WHERE clause for ``filter`` (column names are constants; values are parameters)."""
    clauses: list[str] = []
    params: list[object] = []
    if states is not None:
        if not states:
            return "0", []
        clauses.append(f"state IN ({marks(len(states))})")
        params += sorted(state.value for state in states)
    for column, value in (
        ("kind", filter.kind),
        ("queue", filter.queue),
        ("tenant", filter.tenant),
        ("schedule", filter.schedule),
        ("workflow", filter.workflow),
    ):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    if filter.search is not None:
        if filter.search_id is not None:
            clauses.append("(id = ? OR unique_key = ?)")
            params += [filter.search_id, filter.search]
        else:
            clauses.append("unique_key = ?")
            params.append(filter.search)
    return " AND ".join(clauses) or "1", params


def get(conn: sqlite3.Connection, job_id: int) -> Job:
    return with_results_apart(conn, [job_from_row(job_row(conn, JOB_COLUMNS, job_id))])[0]


def get_preview(conn: sqlite3.Connection, job_id: int, chars: int) -> Job:
    """The job with its payload, result and last error cut to ``chars`` characters in SQL."""
    return job_from_row(job_row(conn, preview_columns(max(1, chars)), job_id), previews=True)


def get_many(conn: sqlite3.Connection, job_ids: Sequence[int]) -> list[Job]:
    """The jobs with these ids that exist (by rowid, a chunk of ids per statement)."""
    wanted = sorted({job_id for job_id in job_ids if fits(job_id)})
    found: list[Job] = []
    for part in chunks(wanted):
        rows = conn.execute(
            f"SELECT {JOB_COLUMNS} FROM rota_jobs WHERE id IN ({marks(len(part))})", part
        ).fetchall()
        found += [job_from_row(row) for row in rows]
    return with_results_apart(conn, found)


def with_results_apart(conn: sqlite3.Connection, found: list[Job]) -> list[Job]:
    """``found`` with the results kept in rota_results (025) put on their succeeded jobs."""
    maybe = {
        job.id: job.lease_token
        for job in found
        if job.state is JobState.SUCCEEDED and job.result is None
    }
    if not maybe:
        return found
    apart: dict[int, Any] = {}
    for part in chunks(list(maybe)):
        rows = conn.execute(
            f"SELECT job_id, token, result FROM rota_results WHERE job_id IN ({marks(len(part))})",
            part,
        )
        apart.update(
            (job_id, json.loads(text)) for job_id, token, text in rows if maybe[job_id] == token
        )
    if not apart:
        return found
    return [replace(job, result=apart[job.id]) if job.id in apart else job for job in found]


def list_jobs(
    conn: sqlite3.Connection,
    filter: JobFilter,
    after: int | None,
    limit: int,
    *,
    previews: bool = False,
) -> Page:
    """A keyset page, newest first: ids below ``after``; one extra row says if more exist."""
    limit = max(1, min(limit, MAX_PAGE_SIZE))
    columns = LIST_COLUMNS if previews else JOB_COLUMNS
    parts: list[str] = []
    params: list[object] = []
    for states in one_at_a_time(conn, filter):
        where, values = where_of(filter, states)
        if after is not None:
            where += " AND id < ?"
            values.append(after)
        parts.append(
            f"SELECT * FROM (SELECT {columns} FROM rota_jobs WHERE {where}"
            " ORDER BY id DESC LIMIT ?)"
        )
        params += [*values, limit + 1]
    rows = conn.execute(
        f"{' UNION ALL '.join(parts)} ORDER BY 1 DESC LIMIT ?", [*params, limit + 1]
    ).fetchall()
    jobs = [job_from_row(row, previews=previews) for row in rows[:limit]]
    more = len(rows) > limit
    return Page(jobs, encode_cursor(jobs[-1].id) if more else None)


def counts(conn: sqlite3.Connection, at: datetime) -> Counts:
    """Counts from the trigger-kept counters; the oldest pending run_at from its index."""
    by_state = dict.fromkeys(JobState, 0)
    by_queue: dict[str, dict[JobState, int]] = {}
    for queue, state, n in conn.execute(
        "SELECT queue, state, n FROM rota_counts WHERE n > 0 ORDER BY queue, state"
    ):
        by_state[JobState(state)] += n
        per_queue = by_queue.setdefault(queue, dict.fromkeys(JobState, 0))
        per_queue[JobState(state)] += n
    (oldest,) = conn.execute(
        "SELECT min(run_at) FROM rota_jobs INDEXED BY rota_jobs_pending_run_at "
        "WHERE state = 'pending'"
    ).fetchone()
    # The oldest pending job is the oldest due one, if it is due at all.
    oldest_due_at = None if oldest is None or oldest > to_us(at) else from_us(oldest)
    return Counts(by_state=by_state, by_queue=by_queue, oldest_due_at=oldest_due_at)


#: What a watcher has seen: the connection's data_version and the highest job id.
Seen = tuple[int, int]


def arrivals(conn: sqlite3.Connection, seen: Seen | None) -> tuple[Seen, datetime | None]:
    """What changed since ``seen``: the new mark, and the earliest run_at of pending jobs
    inserted since (None if none, or on the first look).

    ``PRAGMA data_version`` changes only when another connection commits, so a quiet
    database costs one pragma per look.
    """
    (version,) = conn.execute("PRAGMA data_version").fetchone()
    if seen is not None and version == seen[0]:
        return seen, None
    (top,) = conn.execute("SELECT max(id) FROM rota_jobs").fetchone()
    if seen is None:
        return (version, top or 0), None
    # Ids only grow (AUTOINCREMENT), but pruning the newest jobs can lower max(id).
    top = max(top or 0, seen[1])
    if top == seen[1]:
        return (version, top), None
    (earliest,) = conn.execute(
        "SELECT min(run_at) FROM rota_jobs WHERE id > ? AND state = 'pending'", (seen[1],)
    ).fetchone()
    return (version, top), None if earliest is None else from_us(earliest)


def count_jobs(conn: sqlite3.Connection, filter: JobFilter, limit: int) -> int:
    """How many jobs match ``filter``; the scan stops after ``limit`` rows."""
    where, params = where_of(filter, filter.states)
    (count,) = conn.execute(
        f"SELECT count(*) FROM (SELECT 1 FROM rota_jobs WHERE {where} LIMIT ?)",
        [*params, clamp(max(0, limit))],
    ).fetchone()
    return int(count)


#: An estimate reads this many windows of ids, evenly spread from the lowest id to the
#: highest, each of ESTIMATE_WINDOW_IDS ids: at most 17,000 rows by rowid, however many match.
ESTIMATE_WINDOWS = 16
ESTIMATE_WINDOW_IDS = 1000


def count_or_estimate(conn: sqlite3.Connection, filter: JobFilter, exact_up_to: int) -> Counted:
    """Exact up to ``exact_up_to``; beyond, the share of matches among the jobs of evenly
    spread windows of ids, times the jobs the maintained counts hold (rota_counts)."""
    found = count_jobs(conn, filter, exact_up_to + 1)
    if found <= exact_up_to:
        return Counted(found)
    where, params = where_of(filter, filter.states)
    # Apart: each alone is one descent of the rowid's b-tree; together, a scan of every job.
    (low,) = conn.execute("SELECT min(id) FROM rota_jobs").fetchone()
    (high,) = conn.execute("SELECT max(id) FROM rota_jobs").fetchone()
    (total,) = conn.execute("SELECT coalesce(sum(n), 0) FROM rota_counts").fetchone()
    step = max(ESTIMATE_WINDOW_IDS, (high - low + 1) // ESTIMATE_WINDOWS)
    seen = matched = 0
    for start in range(low, high + 1, step):
        rows, hits = conn.execute(
            f"SELECT count(*), coalesce(sum({where}), 0) FROM rota_jobs WHERE id BETWEEN ? AND ?",
            [*params, start, start + ESTIMATE_WINDOW_IDS - 1],
        ).fetchone()
        seen += rows
        matched += hits
    share = matched / seen if seen else 0.0
    return Counted(max(round(share * total), exact_up_to + 1), estimated=True)


_SECOND_US = 1_000_000
_TALLIED_PER_BUCKET = """
SELECT (second - :since) / :bucket AS slot, state, sum(n) FROM rota_finished_per_second
WHERE second >= :start AND second < :until AND n > 0
GROUP BY slot, state
"""
# FINISHED is the partial index's own WHERE, so SQLite can use it (INDEXED BY: without
# statistics it would pick the (state, id) index and read every finished job).
_FINISHED_PER_BUCKET = f"""
SELECT (finished_at - :since) / :bucket AS slot, state, count(*)
FROM rota_jobs INDEXED BY rota_jobs_finished
WHERE {FINISHED} AND finished_at >= :start AND finished_at < :until
GROUP BY slot, state
"""


def throughput(
    conn: sqlite3.Connection, since: datetime, bucket: timedelta, at: datetime
) -> list[ThroughputBucket]:
    """Finished jobs per bucket, counted exactly as the reference store counts them.

    Whole seconds come from the per-second tallies; the second still in progress (and any
    window whose edges are not whole seconds) is counted from the jobs themselves.
    """
    bucketize((), since, bucket, at)  # InvalidInput for a bad bucket, before any query
    since_us, bucket_us, now_us = to_us(since), duration_us(bucket), to_us(at)
    params = {"since": since_us, "bucket": bucket_us, "start": since_us, "until": now_us}
    rows: list[tuple[int, str, int]] = []
    if since_us % _SECOND_US == 0 and bucket_us % _SECOND_US == 0:
        whole = max(since_us, now_us - now_us % _SECOND_US)
        rows += conn.execute(_TALLIED_PER_BUCKET, {**params, "until": whole}).fetchall()
        params["start"] = whole
    rows += conn.execute(_FINISHED_PER_BUCKET, params).fetchall()
    # Each row is one bucket's count: hand it to bucketize at that bucket's start.
    finished = [(since + slot * bucket, JobState(state), int(n)) for slot, state, n in rows]
    return bucketize(finished, since, bucket, at)


def attempts(conn: sqlite3.Connection, job_id: int) -> list[Attempt]:
    job_row(conn, "id", job_id)
    rows = conn.execute(
        f"SELECT {ATTEMPT_COLUMNS} FROM rota_attempts AS a JOIN rota_jobs AS j ON j.id = a.job_id "
        "WHERE a.job_id = ? ORDER BY a.token",
        (job_id,),
    )
    return [attempt_from_row(row) for row in rows]
