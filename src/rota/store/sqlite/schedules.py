"""Schedules on SQLite: upsert, read, pause, delete, run now, and firing due slots.

Each function is the body of one transaction run by ``Database``. Writes run inside
``BEGIN IMMEDIATE``: the write lock is held from the first statement, so no other connection
(in this process or another) can fire, edit or delete a schedule between our read of it and
our write, and the slot's job is inserted in the same transaction that advances next_run_at.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from rota.domain.errors import InvalidJob, ScheduleNotFound, StateConflict
from rota.domain.job import EnqueueResult
from rota.domain.job_state import UNFINISHED_STATES, JobState
from rota.domain.schedule import ScheduleSpec
from rota.domain.schedule_state import (
    Firing,
    Missed,
    Schedule,
    UpsertMode,
    decide,
    resumed,
    spec_columns,
    spec_from_columns,
    upserted,
)
from rota.domain.transitions import in_list
from rota.domain.workflow import WorkflowBuilder, slot_graph, unknown_workflow
from rota.store.sqlite import jobs
from rota.store.sqlite import workflows as workflows_sql
from rota.store.sqlite.rows import from_us, marks, to_us

_DEFINITION = (
    "name",
    "kind",
    "payload",
    "queue",
    "priority",
    "tenant",
    "max_attempts",
    "every_us",
    "cron",
    "timezone",
    "anchor",
    "jitter_us",
    "misfire",
    "misfire_limit",
    "grace_us",
    "overlap",
    "workflow",
)
_STATE = (
    "paused",
    "next_run_at",
    "last_run_at",
    "last_job_id",
    "created_at",
    "updated_at",
    "missed",
)
_WRITTEN = (*_DEFINITION, *_STATE, "due_at")
#: A schedule's columns and its last job's state, in the order ``_from_row`` reads them.
#: A workflow schedule's last state is its last workflow's (rota.domain.workflow
#: .workflow_outcome), read by the rota_jobs_workflow index.
_UNFINISHED = in_list(UNFINISHED_STATES)
_LAST_STATE = f"""CASE WHEN s.workflow AND j.workflow IS NOT NULL THEN (
    SELECT CASE WHEN max(w.state IN ({_UNFINISHED})) THEN 'running'
                WHEN max(w.state = 'dead') THEN 'dead'
                WHEN max(w.state = 'cancelled') THEN 'cancelled' ELSE 'succeeded' END
    FROM rota_jobs w WHERE w.workflow = j.workflow) ELSE j.state END"""
_SELECT = (
    "SELECT "
    + ", ".join(f"s.{column}" for column in (*_DEFINITION, *_STATE))
    + f", {_LAST_STATE} FROM rota_schedules s LEFT JOIN rota_jobs j ON j.id = s.last_job_id"
)
_UPSERT = (
    f"INSERT INTO rota_schedules ({', '.join(_WRITTEN)}) "
    f"VALUES ({', '.join(':' + column for column in _WRITTEN)}) "
    "ON CONFLICT (name) DO UPDATE SET "
    + ", ".join(f"{column} = excluded.{column}" for column in _WRITTEN if column != "name")
)


def _from_row(row: Sequence[Any]) -> Schedule:
    values = dict(zip((*_DEFINITION, *_STATE), row, strict=False))
    columns = {
        **values,
        "payload": json.loads(values["payload"]),
        "anchor": None if values["anchor"] is None else from_us(values["anchor"]),
    }
    last_state = row[len(_DEFINITION) + len(_STATE)]
    return Schedule(
        spec=spec_from_columns(columns),
        paused=bool(values["paused"]),
        next_run_at=from_us(values["next_run_at"]),
        last_run_at=None if values["last_run_at"] is None else from_us(values["last_run_at"]),
        last_job_id=values["last_job_id"],
        last_job_state=None if last_state is None else JobState(last_state),
        created_at=from_us(values["created_at"]),
        updated_at=from_us(values["updated_at"]),
        missed=Missed(values["missed"]),
    )


def _row_values(schedule: Schedule) -> dict[str, Any]:
    columns = spec_columns(schedule.spec)
    anchor = columns["anchor"]
    return {
        **columns,
        "workflow": int(columns["workflow"]),
        "anchor": None if anchor is None else to_us(anchor),
        "paused": int(schedule.paused),
        "next_run_at": to_us(schedule.next_run_at),
        "due_at": to_us(schedule.due_at),
        "last_run_at": None if schedule.last_run_at is None else to_us(schedule.last_run_at),
        "last_job_id": schedule.last_job_id,
        "created_at": to_us(schedule.created_at),
        "updated_at": to_us(schedule.updated_at),
        "missed": schedule.missed.value,
    }


def _find(conn: sqlite3.Connection, name: str) -> Schedule | None:
    row = conn.execute(f"{_SELECT} WHERE s.name = ?", (name,)).fetchone()
    return None if row is None else _from_row(row)


def _get(conn: sqlite3.Connection, name: str) -> Schedule:
    schedule = _find(conn, name)
    if schedule is None:
        raise ScheduleNotFound(name)
    return schedule


def _write(conn: sqlite3.Connection, schedule: Schedule) -> Schedule:
    conn.execute(_UPSERT, _row_values(schedule))
    return _get(conn, schedule.name)


# ------------------------------------------------------------------ definitions


def upsert(
    conn: sqlite3.Connection, spec: ScheduleSpec, at: datetime, *, mode: UpsertMode
) -> Schedule:
    """Write ``spec`` over the stored schedule (see ``schedule_state.upserted``): ``create``
    only when there is none, ``replace`` only when there is one, ``upsert`` either way."""
    existing = _find(conn, spec.name)
    if existing is not None and mode == "create":
        raise StateConflict(f"schedule {spec.name!r} already exists")
    if existing is None and mode == "replace":
        raise ScheduleNotFound(spec.name)
    return _write(conn, upserted(existing, spec, at))


def get(conn: sqlite3.Connection, name: str) -> Schedule:
    return _get(conn, name)


def list_page(
    conn: sqlite3.Connection, after: str | None, limit: int | None, due_first: bool
) -> list[Schedule]:
    """Schedules by name after ``after`` (the primary key's order is code-point order), or the
    unpaused ones soonest due first (the rota_schedules_due index)."""
    if due_first:
        query = f"{_SELECT} WHERE s.paused = 0 ORDER BY s.due_at, s.name LIMIT ?"
        rows = conn.execute(query, (-1 if limit is None else limit,))
    else:
        query = f"{_SELECT} WHERE ? IS NULL OR s.name > ? ORDER BY s.name LIMIT ?"
        rows = conn.execute(query, (after, after, -1 if limit is None else limit))
    return [_from_row(row) for row in rows]


def pause(conn: sqlite3.Connection, name: str, missed: Missed, at: datetime) -> Schedule:
    cursor = conn.execute(
        "UPDATE rota_schedules SET paused = 1, missed = ?, updated_at = ? WHERE name = ?",
        (Missed(missed).value, to_us(at), name),
    )
    if cursor.rowcount == 0:
        raise ScheduleNotFound(name)
    return _get(conn, name)


def resume(conn: sqlite3.Connection, name: str, at: datetime) -> Schedule:
    """Resumed as ``schedule_state.resumed`` says, inside the caller's write transaction."""
    schedule = resumed(_get(conn, name), at)
    conn.execute(
        "UPDATE rota_schedules SET paused = 0, next_run_at = ?, due_at = ?, updated_at = ? "
        "WHERE name = ?",
        (to_us(schedule.next_run_at), to_us(schedule.due_at), to_us(at), name),
    )
    return schedule


def delete(conn: sqlite3.Connection, name: str) -> None:
    if conn.execute("DELETE FROM rota_schedules WHERE name = ?", (name,)).rowcount == 0:
        raise ScheduleNotFound(name)


def _fires(workflows: Collection[str]) -> list[str]:
    """The names of the workflow schedules this firer can fire, for the condition
    ``(s.workflow = 0 OR s.name IN (...))``: a workflow schedule only where its builder is
    known (another process that knows it fires it). An empty IN list is false in SQLite."""
    return sorted(workflows)


def next_fire_at(conn: sqlite3.Connection, workflows: Collection[str]) -> datetime | None:
    names = _fires(workflows)
    (due,) = conn.execute(
        "SELECT min(due_at) FROM rota_schedules AS s INDEXED BY rota_schedules_due "
        f"WHERE paused = 0 AND (s.workflow = 0 OR s.name IN ({marks(len(names))}))",
        names,
    ).fetchone()
    return None if due is None else from_us(due)


# ------------------------------------------------------------------ running


def trigger(
    conn: sqlite3.Connection,
    name: str,
    at: datetime,
    workflows: Mapping[str, WorkflowBuilder],
) -> tuple[EnqueueResult, datetime | None]:
    """Enqueue a run of ``name`` at slot ``at``; the result and the run_at inserted (if any)."""
    schedule = _get(conn, name)
    if schedule.spec.workflow:
        builder = workflows.get(name)
        if builder is None:
            raise StateConflict(unknown_workflow(name))
        results, earliest, failed = _fire_workflow(conn, schedule, (at,), builder, at)
        if failed:
            raise InvalidJob("workflow", failed[0][1])
        [result] = results
    else:
        [result], earliest = jobs.enqueue(conn, [schedule.spec.job_spec(at)], at)
    conn.execute("UPDATE rota_schedules SET last_job_id = ? WHERE name = ?", (result.job.id, name))
    return result, earliest


def _fire_workflow(
    conn: sqlite3.Connection,
    schedule: Schedule,
    slots: Sequence[datetime],
    builder: WorkflowBuilder,
    at: datetime,
) -> tuple[list[EnqueueResult], datetime | None, list[tuple[datetime, str]]]:
    """One graph per slot, in the caller's write transaction: a slot that has a job already
    is a duplicate, one whose builder failed is reported and gets nothing."""
    results: list[EnqueueResult] = []
    failed: list[tuple[datetime, str]] = []
    earliest: datetime | None = None
    for slot in slots:
        taken = jobs.slot_job(conn, schedule.name, slot)
        if taken is not None:
            results.append(EnqueueResult(taken, duplicate=True))
            continue
        try:
            graph = slot_graph(builder, schedule.name, schedule.spec.payload, slot)
        except InvalidJob as error:
            failed.append((slot, error.reason))
            continue
        written, pending_at = workflows_sql.enqueue_workflow(conn, graph, at)
        if pending_at is not None:
            earliest = pending_at if earliest is None else min(earliest, pending_at)
        results.append(EnqueueResult(written[0]))
    return results, earliest, failed


def fire_due(
    conn: sqlite3.Connection,
    at: datetime,
    limit: int,
    workflows: Mapping[str, WorkflowBuilder],
) -> tuple[list[Firing], datetime | None]:
    """Fire up to ``limit`` due schedules, earliest first; see ``Store.fire_due``.

    Returns the firings and the earliest run_at of the jobs inserted (to wake workers).
    """
    names = _fires(workflows)
    rows = conn.execute(
        f"{_SELECT} WHERE s.paused = 0 AND s.due_at <= ? "
        f"AND (s.workflow = 0 OR s.name IN ({marks(len(names))})) "
        "ORDER BY s.due_at, s.name LIMIT ?",
        (to_us(at), *names, max(0, limit)),
    ).fetchall()
    firings: list[Firing] = []
    earliest: datetime | None = None
    for row in rows:
        schedule = _from_row(row)
        decision = decide(schedule, at)
        failed: list[tuple[datetime, str]] = []
        if schedule.spec.workflow:
            results, inserted_at, failed = _fire_workflow(
                conn, schedule, decision.enqueue, workflows[schedule.name], at
            )
        else:
            specs = [schedule.spec.job_spec(slot) for slot in decision.enqueue]
            results, inserted_at = jobs.enqueue(conn, specs, at) if specs else ([], None)
        if inserted_at is not None:
            earliest = inserted_at if earliest is None else min(earliest, inserted_at)
        advanced = replace(schedule, next_run_at=decision.next_run_at)
        if results:
            latest = results[-1].job
            advanced = replace(advanced, last_run_at=latest.slot_at, last_job_id=latest.id)
        conn.execute(
            "UPDATE rota_schedules SET next_run_at = ?, due_at = ?, last_run_at = ?, "
            "last_job_id = ? WHERE name = ?",
            (
                to_us(advanced.next_run_at),
                to_us(advanced.due_at),
                None if advanced.last_run_at is None else to_us(advanced.last_run_at),
                advanced.last_job_id,
                advanced.name,
            ),
        )
        firings.append(
            Firing(
                schedule=schedule.name,
                jobs=tuple(results),
                skipped_overlap=decision.skipped_overlap,
                missed=decision.missed,
                next_run_at=decision.next_run_at,
                failed=tuple(failed),
            )
        )
    return firings, earliest
