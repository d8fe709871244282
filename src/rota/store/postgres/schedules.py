"""Schedules on PostgreSQL: the statements of each schedule verb as sans-I/O flows.

A flow yields (statement, parameters) and receives the rows; ``PostgresStore`` runs the
flows that write inside one transaction. Locks: ``fire_due`` takes due rows with
``FOR UPDATE SKIP LOCKED`` (concurrent firers take other schedules, never the same one twice)
and advances them in the transaction that inserts their jobs; upsert and run-now lock their
row with ``FOR UPDATE``, so they never interleave with a firing of the same schedule.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeAlias

from rota.domain.errors import InvalidJob, ScheduleNotFound, StateConflict, StoreUnavailable
from rota.domain.job import EnqueueResult, JobSpec
from rota.domain.job_state import JobState
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
from rota.domain.workflow import WorkflowBuilder, slot_graph, unknown_workflow
from rota.store.postgres.enqueue import slot_holders
from rota.store.postgres.queries import query
from rota.store.postgres.workflows import enqueue_workflow_flow

Row: TypeAlias = tuple[Any, ...]
Step: TypeAlias = tuple[str, dict[str, Any]]
Flow: TypeAlias = Generator[Step, list[Row], Any]
#: The store's enqueue flow (``store.enqueue_flow``), passed in to keep one way of inserting.
EnqueueFlow: TypeAlias = Callable[[Sequence[JobSpec], datetime | None], Flow]

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
#: After paused, next/last run, last job, created, updated and missed.
_LAST_STATE = len(_DEFINITION) + 7
#: Creating a schedule races only with creations of the same name; each lost race means the
#: row now exists, so the next round updates it.
_ROUNDS = 3


def row_to_schedule(row: Row) -> Schedule:
    """A Schedule from a row selected with SCHEDULE_COLUMNS (extra trailing columns ignored)."""
    columns = dict(zip(_DEFINITION, row, strict=False))
    paused, next_run_at, last_run_at, last_job_id, created_at, updated_at, missed = row[
        len(_DEFINITION) : _LAST_STATE
    ]
    state = row[_LAST_STATE]
    return Schedule(
        spec=spec_from_columns(columns),
        paused=paused,
        next_run_at=next_run_at,
        last_run_at=last_run_at,
        last_job_id=last_job_id,
        last_job_state=None if state is None else JobState(state),
        created_at=created_at,
        updated_at=updated_at,
        missed=Missed(missed),
    )


def _params(schedule: Schedule) -> dict[str, Any]:
    return {
        **spec_columns(schedule.spec),
        "paused": schedule.paused,
        "next_run_at": schedule.next_run_at,
        "due_at": schedule.due_at,
        "last_run_at": schedule.last_run_at,
        "last_job_id": schedule.last_job_id,
        "created_at": schedule.created_at,
        "updated_at": schedule.updated_at,
    }


def resume_flow(name: str, now: datetime | None) -> Flow:
    """Resume the schedule under its row's lock (``schedule_state.resumed``); the Schedule."""
    [(at,)] = yield query("now"), {"now": now}
    rows = yield query("schedule_for_update"), {"name": name, "now": at}
    if not rows:
        raise ScheduleNotFound(name)
    schedule = resumed(row_to_schedule(rows[0]), at)
    yield (
        query("resume_schedule"),
        {
            "name": name,
            "next_run_at": schedule.next_run_at,
            "due_at": schedule.due_at,
            "now": at,
        },
    )
    return schedule


def upsert_flow(spec: ScheduleSpec, now: datetime | None, *, mode: UpsertMode) -> Flow:
    """Create or replace ``spec`` (see ``schedule_state.upserted`` and ``UpsertMode``); returns
    the Schedule. A replace reads the row under its lock, so a delete either comes first (not
    found) or waits for the replace to commit."""
    [(at,)] = yield query("now"), {"now": now}
    for _ in range(_ROUNDS):
        rows = yield query("schedule_for_update"), {"name": spec.name, "now": at}
        if rows:
            if mode == "create":
                raise StateConflict(f"schedule {spec.name!r} already exists")
            schedule = upserted(row_to_schedule(rows[0]), spec, at)
            yield query("update_schedule"), _params(schedule)
            return schedule
        if mode == "replace":
            raise ScheduleNotFound(spec.name)
        schedule = upserted(None, spec, at)
        if (yield query("insert_schedule"), _params(schedule)):
            return schedule
    raise StoreUnavailable(f"creating schedule {spec.name!r} kept racing with other writers")


def upsert_many_flow(specs: Sequence[ScheduleSpec], now: datetime | None) -> Flow:
    """``upsert_flow`` of every spec, in one transaction (``Store.upsert_schedules``, names
    checked distinct); returns the Schedules in the specs' order. Batches take turns; each
    locks its stored rows in name order, updates them, and inserts the rest in one statement
    each."""
    yield query("lock_schedule_batches"), {}
    [(at,)] = yield query("now"), {"now": now}
    written: dict[str, Schedule] = {}
    left = sorted(specs, key=lambda spec: spec.name)
    for _ in range(_ROUNDS):
        rows = yield query("schedules_for_update"), {"names": [spec.name for spec in left]}
        stored = {schedule.name: schedule for schedule in map(row_to_schedule, rows)}
        updated = [upserted(stored[spec.name], spec, at) for spec in left if spec.name in stored]
        created = [upserted(None, spec, at) for spec in left if spec.name not in stored]
        if updated:
            yield query("update_schedules"), _batch(updated)
            written.update((schedule.name, schedule) for schedule in updated)
        if created:
            inserted = {name for (name,) in (yield query("insert_schedules"), _batch(created))}
            written.update((s.name, s) for s in created if s.name in inserted)
        left = [spec for spec in left if spec.name not in written]
        if not left:
            return [written[spec.name] for spec in specs]
    raise StoreUnavailable("creating schedules kept racing with other writers")


def _batch(schedules: Sequence[Schedule]) -> dict[str, list[Any]]:
    """The records' columns as arrays, one a column (the _schedule_rows fragment)."""
    rows = [_params(schedule) for schedule in schedules]
    return {column: [row[column] for row in rows] for column in rows[0]}


def trigger_flow(
    name: str, now: datetime | None, enqueue: EnqueueFlow, workflows: Mapping[str, WorkflowBuilder]
) -> Flow:
    """Enqueue a run of ``name`` with slot_at = the store's now; returns its EnqueueResult."""
    rows = yield query("schedule_for_update"), {"name": name, "now": now}
    if not rows:
        raise ScheduleNotFound(name)
    schedule, at = row_to_schedule(rows[0]), rows[0][-1]
    if schedule.spec.workflow:
        builder = workflows.get(name)
        if builder is None:
            raise StateConflict(unknown_workflow(name))
        results, failed = yield from _fire_workflow(schedule, (at,), builder, at)
        if failed:
            raise InvalidJob("workflow", failed[0][1])
        [result] = results
    else:
        [result] = yield from enqueue([schedule.spec.job_spec(at)], at)
    yield query("set_schedule_last_job"), {"name": name, "job_id": result.job.id}
    return result


def _fire_workflow(
    schedule: Schedule, slots: Sequence[datetime], builder: WorkflowBuilder, at: datetime
) -> Flow:
    """One graph per slot, in the transaction that holds the schedule's row lock (every
    writer of its slots takes it first, so the slot check below cannot race): a slot that has
    a job already is a duplicate, one whose builder failed is reported and gets nothing.
    Returns (results, failed)."""
    results: list[EnqueueResult] = []
    failed: list[tuple[datetime, str]] = []
    for slot in slots:
        taken = yield from slot_holders([schedule.spec.job_spec(slot)])
        if taken:
            results.append(EnqueueResult(next(iter(taken.values())), duplicate=True))
            continue
        try:
            graph = slot_graph(builder, schedule.name, schedule.spec.payload, slot)
        except InvalidJob as error:
            failed.append((slot, error.reason))
            continue
        jobs = yield from enqueue_workflow_flow(graph, at)
        results.append(EnqueueResult(jobs[0]))
    return results, failed


def fire_flow(
    now: datetime | None,
    limit: int,
    enqueue: EnqueueFlow,
    workflows: Mapping[str, WorkflowBuilder],
) -> Flow:
    """Fire the due schedules (see ``Store.fire_due``); returns the list of Firings."""
    rows = yield (
        query("due_schedules"),
        {"now": now, "limit": max(0, limit), "workflows": sorted(workflows)},
    )
    if not rows:
        return []
    at = rows[0][-1]
    schedules = [row_to_schedule(row) for row in rows]
    decisions = [decide(schedule, at) for schedule in schedules]
    specs = [
        schedule.spec.job_spec(slot)
        for schedule, decision in zip(schedules, decisions, strict=True)
        if not schedule.spec.workflow
        for slot in decision.enqueue
    ]
    results: list[EnqueueResult] = (yield from enqueue(specs, at)) if specs else []
    firings: list[Firing] = []
    advanced: list[Schedule] = []
    taken = 0
    for schedule, decision in zip(schedules, decisions, strict=True):
        failed: list[tuple[datetime, str]] = []
        if schedule.spec.workflow:
            mine, failed = yield from _fire_workflow(
                schedule, decision.enqueue, workflows[schedule.name], at
            )
            mine = tuple(mine)
        else:
            mine = tuple(results[taken : taken + len(decision.enqueue)])
            taken += len(decision.enqueue)
        moved = replace(schedule, next_run_at=decision.next_run_at)
        if mine:
            moved = replace(moved, last_run_at=mine[-1].job.slot_at, last_job_id=mine[-1].job.id)
        advanced.append(moved)
        firings.append(
            Firing(
                schedule=schedule.name,
                jobs=mine,
                skipped_overlap=decision.skipped_overlap,
                missed=decision.missed,
                next_run_at=decision.next_run_at,
                failed=tuple(failed),
            )
        )
    yield (
        query("advance_schedules"),
        {
            "names": [s.name for s in advanced],
            "next_run_at": [s.next_run_at for s in advanced],
            "due_at": [s.due_at for s in advanced],
            "last_run_at": [s.last_run_at for s in advanced],
            "last_job_id": [s.last_job_id for s in advanced],
        },
    )
    return firings
