"""Claims on SQLite and every write after them: leases, fencing tokens, attempts, rescue.

A claim reads its candidates through ``candidates`` and, when limits exist, chooses among
them under a budget from ``flow``. Each function is the body of one write transaction
(``Database.write`` runs it inside ``BEGIN IMMEDIATE``), so it sees and changes the database
as the only writer: a budget read at its start stays exact to its end. Fenced writes
still carry ``state = 'running' AND lease_token = ?`` in their UPDATE: the condition is the
contract, not an optimisation, and it keeps each statement correct on its own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rota.domain import blame
from rota.domain.errors import LeaseLost
from rota.domain.flow import LimitScope
from rota.domain.job import MAX_ERROR_LENGTH, MAX_TRACEBACK_LENGTH, Job
from rota.domain.job_state import JobState, Outcome
from rota.domain.lease import Lease
from rota.domain.payload import Progress, decode_json, stored_apart, truncate
from rota.store.records import Beat, RescueResult
from rota.store.sqlite import activity, candidates, flow
from rota.store.sqlite.activity import Ended
from rota.store.sqlite.counts import count_moved, tally_finished
from rota.store.sqlite.rows import (
    CLAIMED_COLUMNS,
    Instants,
    chunks,
    claimed_job,
    clamp,
    fits,
    from_us,
    marks,
    pair_values,
    to_us,
)

_ADVANCE_TOKEN = (
    "UPDATE rota_meta SET value = value + ? WHERE name = 'fencing_token' RETURNING value"
)

# OR ROLLBACK, here and in the other writes of many rows a drain makes: a constraint they
# break undoes the whole transaction (as Database.write does after any error anyway) rather
# than the statement alone, so SQLite keeps no statement journal of the pages they change,
# which past 64 KiB it writes to a temporary file (021_counting_triggers_cannot_abort).
_TAKE = f"""
WITH taken (taken_id, taken_token) AS (VALUES {{pairs}})
UPDATE OR ROLLBACK rota_jobs
SET state = 'running', attempt = attempt + 1, lease_token = taken_token, lease_until = ?,
    worker = ?, started_at = ?, finished_at = NULL, lease_started = NOT {candidates.ALONE_NEXT},
    progress = NULL, progress_message = NULL, heartbeats = 0, last_heartbeat_at = NULL
FROM taken WHERE id = taken_id
"""
# The jobs just leased, as one JSON array of rows (CLAIMED_COLUMNS): one step of one
# statement instead of one per job, each of which would hand the GIL back and forth with
# the event loop's thread.
_TAKEN = (
    f"SELECT json_group_array(json_array({CLAIMED_COLUMNS})) FROM rota_jobs WHERE id IN ({{ids}})"
)
_BEGIN_ATTEMPTS = """
INSERT INTO rota_attempts (token, job_id, attempt, worker, started_at, outcome)
SELECT lease_token, id, attempt, worker, started_at, 'running' FROM rota_jobs WHERE id IN ({ids})
"""


@dataclass(frozen=True, slots=True)
class Claimed:
    """The jobs a claim leased, in the order it chose them, and where the next claim's walk
    over tenants starts."""

    jobs: list[Job]
    after: str


def claim(
    conn: sqlite3.Connection,
    worker: str,
    queues: Sequence[str],
    limit: int,
    lease: timedelta,
    at: datetime,
    *,
    fair: bool,
    after: str,
    runs: frozenset[str] | None = None,
) -> Claimed:
    """Lease up to ``limit`` due or expired jobs; see ``Store.claim``. The walk over tenants
    starts after ``after`` (the last tenant served, for the store's previous claim)."""
    wanted = list(dict.fromkeys(queues))
    if limit <= 0 or not wanted or (runs is not None and not runs):
        return Claimed([], after)
    limit = clamp(limit)
    paused = flow.paused_queues(conn)
    wanted = [queue for queue in wanted if queue not in paused]
    found = flow.limits(conn) if wanted else {}
    usage = flow.usage(conn, found, at) if found else None
    full = usage.budget().exhausted() if usage is not None else set()
    if all((LimitScope.QUEUE, queue) in full for queue in wanted):
        return Claimed([], after)
    blocked = candidates.Blocked(
        queues=frozenset(key for scope, key in full if scope is LimitScope.QUEUE),
        kinds=frozenset(key for scope, key in full if scope is LimitScope.KIND),
        tenants=frozenset(key for scope, key in full if scope is LimitScope.TENANT),
        runs=runs,
    )
    if not fair:  # in plain claim order a job nothing can start is simply not a candidate
        wanted = [queue for queue in wanted if queue not in blocked.queues]
    # One group per job asked for: a batch can fill from as many tenants as it has jobs.
    most = min(max(candidates.MAX_CLAIM_GROUPS, limit), candidates.MAX_WALK_GROUPS)
    walk = candidates.walk(conn, wanted, after, most)
    choice = candidates.choose(
        conn,
        walk.groups,
        queues=wanted,
        at_us=to_us(at),
        limit=limit,
        fair=fair,
        usage=usage,
        blocked=blocked,
        alone=candidates.alone(conn, wanted),
    )
    jobs = _take(conn, worker, choice, lease, at)
    if usage is not None and choice.budget is not None and choice.budget.started:
        flow.record_starts(conn, usage.limits, choice.budget.started, at)
    # The next walk starts after the last tenant served, so tenants beyond those walked get
    # their turn; after a walk cut short that found too little, beyond the cut.
    if walk.cut_at is not None and len(jobs) < limit:
        after = walk.cut_at
    elif jobs:
        after = max(job.tenant or "" for job in jobs)
    return Claimed(jobs, after)


def _take(
    conn: sqlite3.Connection,
    worker: str,
    choice: candidates.Choice,
    lease: timedelta,
    at: datetime,
) -> list[Job]:
    """Lease the chosen jobs (candidates read in this transaction), tokens in chosen order."""
    if not choice.ids:
        return []
    # One counter row, advanced by the batch size inside this write transaction: the tokens
    # first..last are ours alone, and larger than any token issued before by any process.
    (last,) = conn.execute(_ADVANCE_TOKEN, (len(choice.ids),)).fetchone()
    first = last - len(choice.ids) + 1
    at_us = to_us(at)
    # Taking over an expired lease first settles it as the rescuer would (minus the state).
    expired: set[int] = set()
    if choice.expired_tokens:
        rows = _expired_rows(conn, choice.ids)
        expired = {row[0] for row in rows}
        _expire(conn, rows, at_us, settle=False)
    taken = [(job_id, first + index) for index, job_id in enumerate(choice.ids)]
    lease_until_us = to_us(at + lease)
    lease_until, started_at = from_us(lease_until_us), from_us(at_us)
    instants = Instants()
    jobs: list[Job] = []
    for part in chunks(taken):
        sql = _TAKE.format(pairs=pair_values(len(part)))
        conn.execute(sql, [*_flat(part), lease_until_us, worker, at_us])
        ids = [job_id for job_id, _ in part]
        conn.execute(_BEGIN_ATTEMPTS.format(ids=marks(len(ids))), ids)
        (text,) = conn.execute(_TAKEN.format(ids=marks(len(ids))), ids).fetchone()
        rows = decode_json(text)
        jobs += [claimed_job(row, worker, lease_until, started_at, instants) for row in rows]
    # The rows come in no promised order; the tokens were handed out in chosen order.
    jobs.sort(key=lambda job: job.lease_token or 0)
    # Pending to running is counted here, not by the triggers (019); an expired lease taken
    # over stays running.
    count_moved(conn, [job.queue for job in jobs if job.id not in expired], "pending", "running")
    return jobs


def heartbeat(
    conn: sqlite3.Connection,
    leases: Sequence[Lease],
    lease: timedelta,
    at: datetime,
    progress: Mapping[int, Progress] | None = None,
) -> Beat:
    """Extend every held lease to at + lease, writing the progress reported for it (same
    transaction, fenced alike); the lost ones, in the order given, and ``at``."""
    # The lease's renewal counts itself on the job, in the same fenced statement.
    held = _fenced(
        conn,
        "lease_until = ?, heartbeats = heartbeats + 1, last_heartbeat_at = ?",
        [to_us(at + lease), to_us(at)],
        _pairs(leases),
    )
    if progress:
        reports = [
            (report.fraction, report.message, lease.job_id, lease.token)
            for lease in leases
            if (lease.job_id, lease.token) in held
            and (report := progress.get(lease.job_id)) is not None
        ]
        conn.executemany(_PROGRESS, reports)
    return Beat([item for item in leases if (item.job_id, item.token) not in held], at)


_PROGRESS = """
UPDATE rota_jobs SET progress = ?, progress_message = ?
WHERE id = ? AND state = 'running' AND lease_token = ?
"""


def begin(conn: sqlite3.Connection, lease: Lease) -> None:
    """Record that the lease's handler starts (see ``Store.begin``). Fenced."""
    if not _fenced(conn, "lease_started = 1", [], _pairs([lease])):
        raise LeaseLost(lease.job_id, lease.token)


def complete(
    conn: sqlite3.Connection,
    leases: Sequence[Lease],
    at: datetime,
    results: Sequence[str | None] | None = None,
) -> list[Lease]:
    """Mark each held job succeeded, with its result (JSON text) where it has one; return
    the lost leases, in the order given."""
    at_us = to_us(at)
    texts = results if results is not None else [None] * len(leases)
    with_result = {
        pair: text
        for pair, text in zip(_pairs(leases), _fitting(leases, texts), strict=True)
        if text is not None
    }
    held: dict[tuple[int, int], Ended] = {}
    # A job with a result gets a fenced statement of its own; the others share one. A long
    # result goes to rota_results (025), only for a job this completion succeeded.
    for (job_id, token), text in with_result.items():
        apart = stored_apart(text)
        found = conn.execute(
            _COMPLETE_WITH_RESULT, (None if apart else text, at_us, job_id, token)
        ).fetchall()
        for found_id, found_token, *ended in found:
            held[found_id, found_token] = (ended[0], ended[1], ended[2], ended[3])
            if apart:
                conn.execute(_STORE_APART, (found_id, found_token, text))
    plain = [pair for pair in _pairs(leases) if pair not in with_result]
    held |= _fenced(
        conn,
        "state = 'succeeded', lease_until = NULL, finished_at = ?, progress = 1, result = NULL",
        [at_us],
        plain,
    )
    end_attempts(conn, [token for _, token in held], at_us, Outcome.SUCCEEDED)
    # Running to succeeded is counted here, not by the triggers (019).
    count_moved(conn, (ended[0] for ended in held.values()), "running", "succeeded")
    tally_finished(conn, at_us, "succeeded", len(held))
    activity.record(conn, held.values(), JobState.SUCCEEDED, at_us)
    return [item for item in leases if (item.job_id, item.token) not in held]


def _fitting(leases: Sequence[Lease], texts: Sequence[str | None]) -> list[str | None]:
    """The results of the leases ``_pairs`` keeps, in its order."""
    return [
        text
        for lease, text in zip(leases, texts, strict=True)
        if fits(lease.job_id) and fits(lease.token)
    ]


_STORE_APART = "INSERT OR REPLACE INTO rota_results (job_id, token, result) VALUES (?, ?, ?)"

_COMPLETE_WITH_RESULT = """
UPDATE OR ROLLBACK rota_jobs SET state = 'succeeded', result = ?, lease_until = NULL, finished_at = ?,
    progress = 1
WHERE id = ? AND state = 'running' AND lease_token = ?
RETURNING id, lease_token, queue, kind, started_at, run_at
"""


_FAIL = """
UPDATE rota_jobs SET
    state = CASE WHEN :permanent OR attempt >= max_attempts THEN 'dead' ELSE 'pending' END,
    run_at = CASE WHEN :permanent OR attempt >= max_attempts THEN run_at ELSE :retry_at END,
    finished_at = CASE WHEN :permanent OR attempt >= max_attempts THEN :now ELSE finished_at END,
    lease_until = NULL,
    last_error = :error
WHERE id = :id AND state = 'running' AND lease_token = :token
RETURNING state, queue, kind, started_at, run_at
"""


def fail(
    conn: sqlite3.Connection,
    lease: Lease,
    error: str,
    retry_in: timedelta,
    traceback: str | None,
    permanent: bool,
    at: datetime,
) -> JobState:
    """Record a failed attempt: pending again after ``retry_in``, or dead. Fenced."""
    if not _pairs([lease]):
        raise LeaseLost(lease.job_id, lease.token)
    at_us = to_us(at)
    error_text = truncate(error, MAX_ERROR_LENGTH)
    trace = truncate(traceback, MAX_TRACEBACK_LENGTH)
    row = conn.execute(
        _FAIL,
        {
            "permanent": bool(permanent),
            "retry_at": to_us(at + retry_in),
            "now": at_us,
            "error": error_text,
            "id": lease.job_id,
            "token": lease.token,
        },
    ).fetchone()
    if row is None:
        raise LeaseLost(lease.job_id, lease.token)
    end_attempts(conn, [lease.token], at_us, Outcome.FAILED, error_text, trace)
    state = JobState(row[0])
    activity.record(conn, [row[1:]], state, at_us)
    activity.record_error(conn, row[1], row[2], error, at_us)
    return state


_GIVE_BACK = """
UPDATE rota_jobs SET state = 'pending', run_at = ?, attempt = attempt - 1, lease_until = NULL
WHERE id = ? AND state = 'running' AND lease_token = ?
RETURNING id
"""


def give_back(
    conn: sqlite3.Connection, lease: Lease, run_at: datetime, outcome: Outcome, at: datetime
) -> None:
    """Pending again at ``run_at`` with the attempt given back (snooze, release). Fenced."""
    if not _pairs([lease]):
        raise LeaseLost(lease.job_id, lease.token)
    row = conn.execute(_GIVE_BACK, (to_us(run_at), lease.job_id, lease.token)).fetchone()
    if row is None:
        raise LeaseLost(lease.job_id, lease.token)
    end_attempts(conn, [lease.token], to_us(at), outcome)


_EXPIRED = """
SELECT id, lease_token, attempt, max_attempts, crashes, lease_started, lease_until
FROM rota_jobs INDEXED BY rota_jobs_leases
WHERE state = 'running' AND lease_until < ?
ORDER BY id LIMIT ?
"""
# NOT INDEXED: by rowid, as every statement reaching a job by its id (the (state, id) index
# would serve too, at the cost of a second lookup).
_EXPIRED_BY_ID = """
SELECT id, lease_token, attempt, max_attempts, crashes, lease_started, lease_until
FROM rota_jobs NOT INDEXED
WHERE id IN ({ids}) AND state = 'running'
"""
# Fenced by the token observed, like every write after a claim: a rescue can never overwrite
# a job that completed or was re-claimed since. :settle is 0 for a claim taking the lease
# over, which then leases the row itself (so its state stays for the take). run_at stays
# either way: a job back to pending keeps its place in the claim order.
_EXPIRE = """
UPDATE rota_jobs NOT INDEXED SET
    state = CASE WHEN NOT :settle THEN state WHEN :dead THEN 'dead' ELSE 'pending' END,
    finished_at = CASE WHEN :settle AND :dead THEN :now ELSE finished_at END,
    lease_until = CASE WHEN :settle THEN NULL ELSE lease_until END,
    attempt = :attempt, crashes = :crashes, last_error = :error
WHERE id = :id AND state = 'running' AND lease_token = :token
"""


def rescue(conn: sqlite3.Connection, limit: int, at: datetime) -> RescueResult:
    """Expired leases, by ``rota.domain.blame.expire``: dead, or pending at their own run_at
    (their place in the claim order, as when a claim takes an expired lease over)."""
    if limit <= 0:
        return RescueResult()
    expired = conn.execute(_EXPIRED, (to_us(at), clamp(limit))).fetchall()
    settled = _expire(conn, expired, to_us(at), settle=True)
    return RescueResult(
        dead=sorted(job_id for job_id, expiry in settled if expiry.dead),
        requeued=sorted(job_id for job_id, expiry in settled if not expiry.dead),
    )


def _expired_rows(conn: sqlite3.Connection, ids: Sequence[int]) -> list[Any]:
    """The expired leases among the jobs ``ids`` a claim chose (still running: read in the
    claim's own transaction), as ``_expire`` takes them."""
    rows: list[Any] = []
    for part in chunks(ids):
        rows += conn.execute(_EXPIRED_BY_ID.format(ids=marks(len(part))), part).fetchall()
    return rows


def _expire(
    conn: sqlite3.Connection, rows: Sequence[Any], at_us: int, *, settle: bool
) -> list[tuple[int, blame.Expiry]]:
    """Apply the blame rule to expired leases, given as (id, token, attempt, max_attempts,
    crashes, lease_started, lease_until) rows read in this transaction; close their attempts."""
    settled: list[tuple[int, blame.Expiry]] = []
    for job_id, token, attempt, max_attempts, crashes, started, until in rows:
        expiry = blame.expire(
            attempt=attempt, max_attempts=max_attempts, crashes=crashes, started=bool(started)
        )
        changed = conn.execute(
            _EXPIRE,
            {
                "settle": settle,
                "dead": expiry.dead,
                "now": at_us,
                "attempt": expiry.attempt,
                "crashes": expiry.crashes,
                "error": expiry.error,
                "id": job_id,
                "token": token,
            },
        ).rowcount
        if changed:
            end_attempts(
                conn, [token], at_us, Outcome.LEASE_EXPIRED, expiry.error, lease_until_us=until
            )
            settled.append((job_id, expiry))
    return settled


def _fenced(
    conn: sqlite3.Connection,
    assignments: str,
    params: Sequence[object],
    pairs: Sequence[tuple[int, int]],
) -> dict[tuple[int, int], Ended]:
    """Apply ``assignments`` (a constant SQL fragment) to each job still running under the
    token paired with its id, one statement per chunk; return the (id, token) pairs that held,
    each with its job's queue, kind, started_at and run_at.
    """
    held: dict[tuple[int, int], Ended] = {}
    for part in chunks(pairs):
        sql = (
            f"WITH held (held_id, held_token) AS (VALUES {pair_values(len(part))}) "
            f"UPDATE OR ROLLBACK rota_jobs SET {assignments} FROM held "
            "WHERE id = held_id AND state = 'running' AND lease_token = held_token "
            "RETURNING id, lease_token, queue, kind, started_at, run_at"
        )
        for job_id, token, queue, kind, started, run_at in conn.execute(
            sql, [*_flat(part), *params]
        ):
            held[job_id, token] = (queue, kind, started, run_at)
    return held


def end_attempts(
    conn: sqlite3.Connection,
    tokens: Sequence[int],
    at_us: int,
    outcome: Outcome,
    error: str | None = None,
    traceback: str | None = None,
    *,
    lease_until_us: int | None = None,
) -> None:
    """Close the history rows of the attempts with these tokens, each keeping the heartbeats
    its job counted under that token (called before a claim resets them); an expired lease's
    end is ``lease_until_us``."""
    for part in chunks(tokens):
        conn.execute(
            "UPDATE OR ROLLBACK rota_attempts "
            "SET finished_at = ?, outcome = ?, error = ?, traceback = ?, lease_until = ?, "
            "heartbeats = coalesce((SELECT j.heartbeats FROM rota_jobs AS j "
            "WHERE j.id = rota_attempts.job_id AND j.lease_token = rota_attempts.token), "
            "heartbeats), "
            "last_heartbeat_at = coalesce((SELECT j.last_heartbeat_at FROM rota_jobs AS j "
            "WHERE j.id = rota_attempts.job_id AND j.lease_token = rota_attempts.token), "
            "last_heartbeat_at) "
            f"WHERE token IN ({marks(len(part))})",
            [at_us, outcome.value, error, traceback, lease_until_us, *part],
        )


def _pairs(leases: Sequence[Lease]) -> list[tuple[int, int]]:
    """(id, token) of each lease that could name a row; the others are simply not held."""
    return [
        (lease.job_id, lease.token) for lease in leases if fits(lease.job_id) and fits(lease.token)
    ]


def _flat(pairs: Iterable[tuple[int, int]]) -> list[int]:
    return [value for pair in pairs for value in pair]
