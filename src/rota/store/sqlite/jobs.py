"""Jobs on SQLite outside a lease: enqueue, operator verbs (retry, cancel, bulk), expiry, prune.

Each function is the body of one transaction run by ``Database``: writes inside
``BEGIN IMMEDIATE``, reads inside one read snapshot.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from rota.domain.clock import utc
from rota.domain.errors import JobRunning, StateConflict
from rota.domain.job import EnqueueResult, Job, JobEdit, JobSpec
from rota.domain.job_state import (
    ACTIVE_STATES,
    EXPIRED,
    STATE_BIT_SQL,
    JobState,
    Outcome,
    state_mask,
    unrunnable,
)
from rota.domain.transitions import HELD_BACK, MOVES, accepts, in_list, refusal
from rota.domain.workflow import deleted_reason
from rota.store.records import (
    MAX_BULK,
    JobFilter,
    kinds_by_queue,
)
from rota.store.sqlite.claims import end_attempts
from rota.store.sqlite.counts import count_inserted
from rota.store.sqlite.durable import end_open_waits
from rota.store.sqlite.reads import job_row, where_of
from rota.store.sqlite.rows import (
    FINISHED,
    JOB_COLUMNS,
    chunks,
    clamp,
    duration_us,
    from_us,
    insert_rows,
    job_from_row,
    marks,
    to_us,
)

#: The states a unique key is held in whatever the job's hold says.
_KEEPS_KEY = in_list(ACTIVE_STATES)
#: The states of a child that a parent's failure (or deletion) on a "cancel" edge cancels.
_HELD_BACK = in_list(HELD_BACK)
#: The conditions the verbs' statements write with, from the table (rota.domain.transitions).
_RETRY_STATES = accepts("retry")
_RESCHEDULE_STATES = accepts("reschedule")
_HOLD_STATES = accepts("hold")
_RELEASE_STATES = accepts("release_held")
_EXPIRE_STATES = accepts("expire")
_UNRUNNABLE_STATES = accepts("end_unrunnable")

# ON CONFLICT DO NOTHING: the partial unique indexes on the active unique key and on
# (schedule, slot_at) are what make a job a duplicate; no row returned means it is one.
_INSERT = f"""
INSERT INTO rota_jobs (kind, queue, payload, state, priority, run_at, attempt, max_attempts,
                       tenant, unique_key, timeout_us, created_at, schedule, slot_at,
                       trace_context, expires_at, unique_until, unique_states)
VALUES (?, ?, ?, 'pending', ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING
RETURNING {JOB_COLUMNS}
"""
_BY_SLOT = f"SELECT {JOB_COLUMNS} FROM rota_jobs WHERE schedule = ? AND slot_at = ?"
_BY_ACTIVE_KEY = (
    f"SELECT {JOB_COLUMNS} FROM rota_jobs WHERE unique_key = ? AND state IN ({_KEEPS_KEY})"
)
# The job holding a key in any of its hold's states within its period, or while active.
_BY_HELD_KEY = f"""
SELECT {JOB_COLUMNS} FROM rota_jobs
WHERE unique_key = :key
  AND (state IN ({_KEEPS_KEY})
       OR (unique_until > :now AND (unique_states & {STATE_BIT_SQL}) != 0))
ORDER BY id DESC LIMIT 1
"""
_REPLACE = (
    f"UPDATE rota_jobs SET payload = ?, run_at = ? WHERE id = ? AND state = 'pending' "
    f"RETURNING {JOB_COLUMNS}"
)


def enqueue(
    conn: sqlite3.Connection, specs: Sequence[JobSpec], at: datetime
) -> tuple[list[EnqueueResult], datetime | None]:
    """Insert ``specs`` in order; the results, and the earliest run_at of the jobs inserted."""
    if not any(spec.keyed for spec in specs):
        return _insert_unkeyed(conn, specs, at)
    at_us = to_us(at)
    results: list[EnqueueResult] = []
    earliest: datetime | None = None
    for spec in specs:
        slot_us = None if spec.slot_at is None else to_us(spec.slot_at)
        # Looking first (we are the only writer inside BEGIN IMMEDIATE) answers a duplicate
        # without burning an AUTOINCREMENT id on a conflicting insert.
        existing = _holder(conn, spec, slot_us, at_us) if spec.keyed else None
        row = None
        if existing is None:
            expires_at = spec.expiry_at(at)
            hold_until = spec.hold_until(at)
            row = conn.execute(
                _INSERT,
                (
                    spec.kind,
                    spec.queue,
                    spec.payload_json,
                    spec.priority,
                    to_us(spec.due_at(at)),
                    spec.max_attempts,
                    spec.tenant,
                    spec.unique_key,
                    None if spec.timeout is None else duration_us(spec.timeout),
                    at_us,
                    spec.schedule,
                    slot_us,
                    None if spec.trace_context is None else json.dumps(spec.trace_context),
                    None if expires_at is None else to_us(expires_at),
                    None if hold_until is None else to_us(hold_until),
                    None if spec.unique_states is None else state_mask(spec.unique_states),
                ),
            ).fetchone()
        if row is not None:
            job = job_from_row(row)
            earliest = job.run_at if earliest is None else min(earliest, job.run_at)
            results.append(EnqueueResult(job))
            continue
        existing = existing or _holder(conn, spec, slot_us, at_us)
        if existing is None:
            raise RuntimeError("insert conflicted, yet no job holds the slot or unique key")
        holder = job_from_row(existing)
        if spec.on_conflict == "replace" and holder.state is JobState.PENDING:
            run_at = spec.due_at(at)
            replaced = conn.execute(
                _REPLACE, (spec.payload_json, to_us(run_at), holder.id)
            ).fetchone()
            earliest = run_at if earliest is None else min(earliest, run_at)
            results.append(EnqueueResult(job_from_row(replaced), duplicate=True, replaced=True))
            continue
        results.append(EnqueueResult(holder, duplicate=True))
    count_inserted(conn, [result.job for result in results if not result.duplicate])
    return results, earliest


def _insert_unkeyed(
    conn: sqlite3.Connection, specs: Sequence[JobSpec], at: datetime
) -> tuple[list[EnqueueResult], datetime | None]:
    """``enqueue`` of specs none of which can be a duplicate: INSERTs of many rows each, and
    each job built from its spec and the id it was given."""
    now = utc(at)
    now_us = to_us(now)
    # A job due now (most of them) shares the one instant and its integer.
    due = [spec.due_at(now) for spec in specs]
    due = [run_at if run_at is now else utc(run_at) for run_at in due]
    expiries = [spec.expiry_at(now) for spec in specs]
    values: list[object] = []
    for spec, run_at, expires_at in zip(specs, due, expiries, strict=True):
        values += (
            spec.kind,
            spec.queue,
            spec.payload_json,
            spec.priority,
            now_us if run_at is now else to_us(run_at),
            spec.max_attempts,
            spec.tenant,
            None if spec.timeout is None else duration_us(spec.timeout),
            now_us,
            spec.schedule,
            None if spec.slot_at is None else to_us(spec.slot_at),
            None if spec.trace_context is None else json.dumps(spec.trace_context),
            None if expires_at is None else to_us(expires_at),
        )
    inserted = insert_rows(conn, _INSERT_UNKEYED, _INSERT_ROW, values)
    if inserted != len(specs):
        raise RuntimeError(f"inserted {inserted} of {len(specs)} jobs that cannot conflict")
    # Inside BEGIN IMMEDIATE nobody else inserts, and AUTOINCREMENT gives each row the next
    # id: the batch holds the ids up to the last one, in order.
    (last,) = conn.execute("SELECT last_insert_rowid()").fetchone()
    created_at = from_us(now_us)
    jobs = [
        spec.inserted(job_id, run_at, created_at, None if expires is None else utc(expires))
        for job_id, spec, run_at, expires in zip(
            range(last - len(specs) + 1, last + 1), specs, due, expiries, strict=True
        )
    ]
    count_inserted(conn, jobs)
    return [EnqueueResult(job) for job in jobs], min(due, default=None)


# No unique key, and no schedule and slot together: nothing to conflict with, nothing to
# return; many rows per statement (insert_rows). OR ROLLBACK: see claims._TAKE.
_INSERT_UNKEYED = """
INSERT OR ROLLBACK INTO rota_jobs (kind, queue, payload, state, priority, run_at, attempt,
                                   max_attempts, tenant, timeout_us, created_at, schedule,
                                   slot_at, trace_context, expires_at)
VALUES {rows}
"""
_INSERT_ROW = "(?, ?, ?, 'pending', ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?)"


def _holder(conn: sqlite3.Connection, spec: JobSpec, slot_us: int | None, at_us: int) -> Any:
    """The row of the job holding ``spec``'s slot or else its unique key, or None.

    The slot's job wins over the unique key's holder, as in the reference store. A spec that
    holds its key beyond the active states looks for such holds too.
    """
    if spec.schedule is not None and slot_us is not None:
        row = conn.execute(_BY_SLOT, (spec.schedule, slot_us)).fetchone()
        if row is not None:
            return row
    if spec.unique_key is not None and spec.holds_beyond_active:
        return conn.execute(_BY_HELD_KEY, {"key": spec.unique_key, "now": at_us}).fetchone()
    if spec.unique_key is not None:
        return conn.execute(_BY_ACTIVE_KEY, (spec.unique_key,)).fetchone()
    return None


def slot_job(conn: sqlite3.Connection, schedule: str, slot_at: datetime) -> Job | None:
    """The job that holds ``schedule``'s slot ``slot_at``, if any."""
    row = conn.execute(_BY_SLOT, (schedule, to_us(slot_at))).fetchone()
    return None if row is None else job_from_row(row)


# ------------------------------------------------------------------ operator verbs


def retry(conn: sqlite3.Connection, job_id: int, max_attempts: int | None, at: datetime) -> Job:
    """A dead or cancelled job pending again now, attempts reset; see ``Store.retry``."""
    state, unique_key = _state_of(conn, job_id, "state, unique_key")
    _check_move(job_id, state, "retry")
    if unique_key is not None and conn.execute(_BY_ACTIVE_KEY, (unique_key,)).fetchone():
        raise StateConflict(f"job {job_id}: another active job holds unique key {unique_key!r}")
    row = conn.execute(
        "UPDATE rota_jobs SET state = CASE WHEN waiting_on > 0 THEN 'waiting' ELSE 'pending' END, "
        "run_at = ?, attempt = 0, "
        "max_attempts = max(max_attempts, ?), lease_until = NULL, finished_at = NULL "
        f"WHERE id = ? RETURNING {JOB_COLUMNS}",
        (to_us(at), max_attempts or 0, job_id),
    ).fetchone()
    end_open_waits(conn, [job_id])
    return job_from_row(row)


def rerun(conn: sqlite3.Connection, job_id: int, at: datetime) -> Job:
    """A succeeded job pending again now, a new attempt series; see ``Store.rerun``. Its
    history rows stay (they are keyed by token, which keeps increasing)."""
    state, unique_key = _state_of(conn, job_id, "state, unique_key")
    _check_move(job_id, state, "rerun")
    if unique_key is not None and conn.execute(_BY_ACTIVE_KEY, (unique_key,)).fetchone():
        raise StateConflict(f"job {job_id}: another active job holds unique key {unique_key!r}")
    row = conn.execute(
        "UPDATE rota_jobs SET state = 'pending', run_at = ?, attempt = 0, lease_until = NULL, "
        f"finished_at = NULL, last_error = NULL WHERE id = ? RETURNING {JOB_COLUMNS}",
        (to_us(at), job_id),
    ).fetchone()
    end_open_waits(conn, [job_id])
    return job_from_row(row)


def cancel(conn: sqlite3.Connection, job_id: int, at: datetime) -> Job:
    """A pending or running job cancelled; a running one's attempt ends as cancelled."""
    state, token = _state_of(conn, job_id, "state, lease_token")
    _check_move(job_id, state, "cancel")
    at_us = to_us(at)
    row = conn.execute(
        "UPDATE rota_jobs SET state = 'cancelled', lease_until = NULL, finished_at = ? "
        f"WHERE id = ? RETURNING {JOB_COLUMNS}",
        (at_us, job_id),
    ).fetchone()
    if state is JobState.RUNNING and token is not None:
        end_attempts(conn, [token], at_us, Outcome.CANCELLED)
    return job_from_row(row)


# Run once per job, in id order, so a job whose unique key an earlier one of the same batch
# (or any other active job) took back is skipped rather than failing the whole batch.
_RETRY_IF_KEY_FREE = f"""
UPDATE rota_jobs SET state = CASE WHEN waiting_on > 0 THEN 'waiting' ELSE 'pending' END,
                     run_at = ?, attempt = 0, lease_until = NULL, finished_at = NULL
WHERE id = ? AND {_RETRY_STATES}
  AND (unique_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM rota_jobs AS holder
      WHERE holder.unique_key = rota_jobs.unique_key AND holder.state IN ({_KEEPS_KEY})
  ))
"""


def bulk_retry(conn: sqlite3.Connection, filter: JobFilter, limit: int, at: datetime) -> int:
    """Retry up to ``limit`` matching dead or cancelled jobs, oldest id first."""
    chosen = _matching(conn, filter, MOVES["retry"].sources, limit, "id")
    at_us = to_us(at)
    retried = [
        job_id
        for (job_id,) in chosen
        if conn.execute(_RETRY_IF_KEY_FREE, (at_us, job_id)).rowcount > 0
    ]
    end_open_waits(conn, retried)
    return len(retried)


def bulk_cancel(conn: sqlite3.Connection, filter: JobFilter, limit: int, at: datetime) -> int:
    """Cancel up to ``limit`` matching pending or running jobs, oldest id first."""
    chosen = _matching(conn, filter, MOVES["cancel"].sources, limit, "id, state, lease_token")
    at_us = to_us(at)
    for part in chunks([job_id for job_id, _, _ in chosen]):
        conn.execute(
            "UPDATE rota_jobs SET state = 'cancelled', lease_until = NULL, finished_at = ? "
            f"WHERE id IN ({marks(len(part))})",
            [at_us, *part],
        )
    tokens = [token for _, state, token in chosen if state == JobState.RUNNING]
    end_attempts(conn, tokens, at_us, Outcome.CANCELLED)
    return len(chosen)


_HOLD = f"""
UPDATE rota_jobs SET state = 'held'
WHERE id = ? AND {_HOLD_STATES}
RETURNING {JOB_COLUMNS}
"""
_RELEASE_HELD = f"""
UPDATE rota_jobs SET state = CASE WHEN waiting_on > 0 THEN 'waiting' ELSE 'pending' END
WHERE id = ? AND {_RELEASE_STATES}
RETURNING {JOB_COLUMNS}
"""


def hold(conn: sqlite3.Connection, job_id: int) -> Job:
    """A waiting or pending job held; see ``Store.hold``."""
    return _move(conn, job_id, "hold", _HOLD)


def release_held(conn: sqlite3.Connection, job_id: int) -> Job:
    """A held job waiting or pending again; see ``Store.release_held``."""
    return _move(conn, job_id, "release_held", _RELEASE_HELD)


def _move(conn: sqlite3.Connection, job_id: int, verb: str, statement: str) -> Job:
    state, _ = _state_of(conn, job_id, "state, id")
    _check_move(job_id, state, verb)
    return job_from_row(conn.execute(statement, (job_id,)).fetchone())


def _check_move(job_id: int, state: JobState, verb: str) -> None:
    """StateConflict unless the table lets ``verb`` move a job in ``state``."""
    if state not in MOVES[verb].sources:
        raise StateConflict(refusal(job_id, state, verb))


def bulk_hold(conn: sqlite3.Connection, filter: JobFilter, limit: int) -> int:
    """Hold up to ``limit`` matching waiting or pending jobs, oldest id first."""
    return _bulk_move(conn, filter, limit, "hold", _HOLD)


def bulk_release_held(conn: sqlite3.Connection, filter: JobFilter, limit: int) -> int:
    """Release up to ``limit`` matching held jobs, oldest id first."""
    return _bulk_move(conn, filter, limit, "release_held", _RELEASE_HELD)


def _bulk_move(
    conn: sqlite3.Connection, filter: JobFilter, limit: int, verb: str, statement: str
) -> int:
    chosen = _matching(conn, filter, MOVES[verb].sources, limit, "id")
    cursor = conn.executemany(statement.replace(f"RETURNING {JOB_COLUMNS}", ""), chosen)
    return max(0, cursor.rowcount)


def delete(conn: sqlite3.Connection, job_id: int, at: datetime) -> tuple[Job, datetime | None]:
    """Remove a job no worker holds, with its attempt history; see ``Store.delete``. The job
    as it was, and the earliest run_at of the children its deletion released (if any)."""
    job = job_from_row(job_row(conn, JOB_COLUMNS, job_id))
    if job.state not in MOVES["delete"].sources:
        raise JobRunning(job_id, "delete")
    return job, _delete_ids(conn, [job_id], at)


def reschedule(conn: sqlite3.Connection, job_id: int, edit: JobEdit, at: datetime) -> Job:
    """Edit a pending job; see ``Store.reschedule``. Inside BEGIN IMMEDIATE no claim can run
    between the state check and the write, and the write checks the state again anyway."""
    state, _ = _state_of(conn, job_id, "state, id")
    if state is JobState.RUNNING:
        raise JobRunning(job_id, "edit")
    _check_move(job_id, state, "reschedule")
    run_at = at if edit.run_now else edit.run_at
    row = conn.execute(
        "UPDATE rota_jobs SET run_at = coalesce(?, run_at), priority = coalesce(?, priority), "
        f"queue = coalesce(?, queue) WHERE id = ? AND {_RESCHEDULE_STATES} "
        f"RETURNING {JOB_COLUMNS}",
        (None if run_at is None else to_us(run_at), edit.priority, edit.queue, job_id),
    ).fetchone()
    return job_from_row(row)


def purge(
    conn: sqlite3.Connection, filter: JobFilter, limit: int, at: datetime
) -> tuple[int, datetime | None]:
    """Delete up to ``limit`` matching finished jobs, oldest id first, with their history;
    how many, and the earliest run_at of the children their deletion released."""
    chosen = [job_id for (job_id,) in _matching(conn, filter, MOVES["purge"].sources, limit, "id")]
    return len(chosen), _delete_ids(conn, chosen, at)


def _delete_ids(conn: sqlite3.Connection, ids: Sequence[int], at: datetime) -> datetime | None:
    """Delete the jobs ``ids`` and their history, their children settled first (see
    ``_orphan_children``); the earliest run_at of the children released."""
    released = _orphan_children(conn, ids, at)
    for part in chunks(ids):
        conn.execute(f"DELETE FROM rota_attempts WHERE job_id IN ({marks(len(part))})", part)
        conn.execute(f"DELETE FROM rota_jobs WHERE id IN ({marks(len(part))})", part)
    return released


_ORPHAN = f"""
UPDATE rota_jobs SET waiting_on = waiting_on - :held,
    state = CASE WHEN state IN ({_HELD_BACK}) AND :reason IS NOT NULL THEN 'cancelled'
                 WHEN state = 'waiting' AND waiting_on = :held THEN 'pending' ELSE state END,
    finished_at = CASE WHEN state IN ({_HELD_BACK}) AND :reason IS NOT NULL THEN :at
                       ELSE finished_at END,
    last_error = CASE WHEN state IN ({_HELD_BACK}) AND :reason IS NOT NULL THEN :reason
                      ELSE last_error END
WHERE id = :id
RETURNING state, run_at
"""


def _orphan_children(conn: sqlite3.Connection, ids: Sequence[int], at: datetime) -> datetime | None:
    """The jobs ``ids`` are about to be deleted: each edge by which one still holds a child up
    stops counting; a waiting child on a "cancel" edge is cancelled naming the (lowest) deleted
    parent, and one whose last such edge it was becomes pending, as if the parent had ended
    without succeeding (rota.domain.workflow). Children deleted with them are left alone. The
    children's own triggers settle their children in turn. Returns the earliest run_at of the
    children that became pending."""
    doomed = set(ids)
    held: dict[int, tuple[int, int | None]] = {}
    for part in chunks(ids):
        for parent, child, policy in conn.execute(
            "SELECT parent_id, child_id, on_parent_failure FROM rota_job_deps "
            f"WHERE parent_id IN ({marks(len(part))}) AND NOT satisfied",
            part,
        ):
            if child in doomed:
                continue
            count, blocker = held.get(child, (0, None))
            if policy == "cancel" and (blocker is None or parent < blocker):
                blocker = parent
            held[child] = (count + 1, blocker)
    if not held:
        return None
    for part in chunks(ids):
        # Nothing can re-arm a job cancelled by a parent that is gone.
        conn.execute(
            f"UPDATE rota_jobs SET blocked_by = NULL WHERE blocked_by IN ({marks(len(part))})",
            part,
        )
    at_us = to_us(at)
    earliest: datetime | None = None
    for child, (count, blocker) in sorted(held.items()):
        reason = None if blocker is None else deleted_reason(blocker)
        state, run_at = conn.execute(
            _ORPHAN, {"held": count, "reason": reason, "at": at_us, "id": child}
        ).fetchone()
        if state == JobState.PENDING:
            due = from_us(run_at)
            earliest = due if earliest is None else min(earliest, due)
    return earliest


def _matching(
    conn: sqlite3.Connection,
    filter: JobFilter,
    allowed: frozenset[JobState],
    limit: int,
    columns: str,
) -> list[Any]:
    states = allowed if filter.states is None else allowed & filter.states
    where, params = where_of(filter, states)
    return conn.execute(
        f"SELECT {columns} FROM rota_jobs WHERE {where} ORDER BY id LIMIT ?",
        [*params, max(0, min(limit, MAX_BULK))],
    ).fetchall()


def _state_of(conn: sqlite3.Connection, job_id: int, columns: str) -> tuple[JobState, Any]:
    row = job_row(conn, columns, job_id)
    return JobState(row[0]), row[1]


# ------------------------------------------------------------------ maintenance


def expire(conn: sqlite3.Connection, limit: int, at: datetime) -> list[int]:
    """Cancel up to ``limit`` pending jobs whose expires_at has come; see ``Store.expire``."""
    if limit <= 0:
        return []
    at_us = to_us(at)
    rows = conn.execute(
        "UPDATE rota_jobs SET state = 'cancelled', finished_at = ?, last_error = ? "
        "WHERE id IN (SELECT id FROM rota_jobs INDEXED BY rota_jobs_expiring "
        f"WHERE {_EXPIRE_STATES} AND expires_at IS NOT NULL AND expires_at <= ? "
        "ORDER BY expires_at, id LIMIT ?) RETURNING id",
        (at_us, EXPIRED, at_us, clamp(limit)),
    ).fetchall()
    return sorted(job_id for (job_id,) in rows)


def end_unrunnable(
    conn: sqlite3.Connection, grace: timedelta, alive_within: timedelta, limit: int, at: datetime
) -> list[int]:
    """End dead the pending jobs no live worker can run; see ``Store.end_unrunnable``."""
    if limit <= 0:
        return []
    rows = conn.execute(
        "SELECT queues, kinds FROM rota_workers WHERE beat_at >= ?", (to_us(at - alive_within),)
    )
    served = kinds_by_queue(
        (json.loads(queues), None if kinds is None else json.loads(kinds)) for queues, kinds in rows
    )
    doomed: list[tuple[int, str]] = []
    for queue, known in served.items():
        if known is None or len(doomed) >= limit:
            continue
        doomed += conn.execute(
            "SELECT id, kind FROM rota_jobs INDEXED BY rota_jobs_due "
            f"WHERE {_UNRUNNABLE_STATES} AND queue = ? AND run_at <= ? AND kind NOT IN "
            f"({marks(len(known))}) LIMIT ?",
            (queue, to_us(at - grace), *sorted(known), limit - len(doomed)),
        ).fetchall()
    at_us = to_us(at)
    for job_id, kind in doomed:
        conn.execute(
            "UPDATE rota_jobs SET state = 'dead', finished_at = ?, last_error = ? "
            "WHERE id = ? AND state = 'pending'",
            (at_us, unrunnable(kind), job_id),
        )
    return sorted(job_id for job_id, _ in doomed)


def prune(conn: sqlite3.Connection, older_than: datetime, limit: int, at: datetime) -> int:
    """Delete up to ``limit`` terminal jobs finished before ``older_than``, with their history.
    A finished parent holds children up only on "cancel" edges (its end settled the rest), so
    pruning it may cancel a child but never releases one: no worker needs waking."""
    if limit <= 0:
        return 0
    doomed = [
        job_id
        for (job_id,) in conn.execute(
            # Oldest finished first, in the order of the partial index on finished_at, so the
            # statement stops after ``limit`` rows however many jobs are due for pruning.
            "SELECT id FROM rota_jobs INDEXED BY rota_jobs_finished "
            f"WHERE {FINISHED} AND finished_at < ? ORDER BY finished_at, id LIMIT ?",
            (to_us(older_than), clamp(limit)),
        )
    ]
    _delete_ids(conn, doomed, at)
    # Seconds whose every job is gone no longer count for anything.
    conn.execute(
        "DELETE FROM rota_finished_per_second WHERE second < ? AND n <= 0", (to_us(older_than),)
    )
    return len(doomed)
