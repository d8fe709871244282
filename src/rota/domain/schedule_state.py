"""A stored schedule: its definition and run-time state, and what an upsert or a firing does to it.

Every store (memory, SQLite, PostgreSQL) owns its own transaction and locking, but the
decisions inside them are made here, once, so the backends cannot drift apart:

- :func:`upserted`: which fields of a new definition replace the stored ones, and when the
  next slot is recomputed;
- :func:`decide`: which due slots get a job now, which the overlap policy skips, how many the
  misfire policy dropped, and the next slot to wait for.

All of it is pure: time is an argument, and nothing here reads a clock or a database.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Literal

from rota.domain.errors import InvalidSchedule
from rota.domain.job import EnqueueResult
from rota.domain.job_state import JobState
from rota.domain.schedule import Overlap, Rule, ScheduleSpec, first_slot
from rota.domain.schedule_plan import Misfire

__all__ = [
    "FireDecision",
    "Firing",
    "Missed",
    "Schedule",
    "decide",
    "resumed",
    "schedule_fields",
    "spec_columns",
    "spec_from_columns",
    "upserted",
]

_MICROSECOND = timedelta(microseconds=1)


class Missed(StrEnum):
    """What a resume does with the slots that fell due while the schedule was paused (chosen
    when it is paused)."""

    #: They fire on resume as any late slots do: under the misfire policy, at most
    #: ``misfire_limit`` of them (``latest``: one run; ``skip``: those within ``grace``;
    #: ``all``: the most recent ``misfire_limit``).
    QUEUE = "queue"
    #: None fires: the schedule waits for its first slot due after the resume.
    DROP = "drop"


@dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule as a store holds it: its definition and where it stands.

    ``next_run_at`` is the next nominal slot (it becomes due ``jitter_offset`` later);
    ``last_run_at`` is the latest slot that got a job, ``last_job_id`` that job (or the latest
    run-now job), and ``last_job_state`` its state when the record was read (None when there
    is none, or it was pruned).
    """

    spec: ScheduleSpec
    next_run_at: datetime
    created_at: datetime
    updated_at: datetime
    paused: bool = False
    last_run_at: datetime | None = None
    last_job_id: int | None = None
    last_job_state: JobState | None = None
    #: What resuming does with the slots missed while paused (set by the last pause).
    missed: Missed = Missed.QUEUE

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def rule(self) -> Rule:
        return self.spec.rule

    @property
    def due_at(self) -> datetime:
        """When the next slot is due: ``next_run_at`` plus the schedule's fixed jitter offset."""
        return self.next_run_at + self.spec.jitter_offset

    @property
    def previous_run_active(self) -> bool:
        """Whether the schedule's last job is still pending or running (what overlap checks);
        for a workflow schedule, whether any job of its last workflow is unfinished (its stores
        report the workflow's outcome, rota.domain.workflow.workflow_outcome, as the state)."""
        return self.last_job_state is not None and self.last_job_state.is_active

    def is_due(self, now: datetime) -> bool:
        return not self.paused and self.due_at <= now

    def upcoming(self, count: int) -> list[datetime]:
        """The next ``count`` nominal slots, starting with ``next_run_at``; fewer near the end
        of time. Never raises for a stored schedule."""
        slots = [self.next_run_at]
        while len(slots) < count:
            try:
                slots.append(self.rule.next_after(slots[-1]))
            except ValueError:  # no slot before the year 9999
                break
        return slots[:count]


@dataclass(frozen=True, slots=True)
class FireDecision:
    """What to do with one due schedule at ``now`` (see :func:`decide`)."""

    #: Slots to enqueue now, oldest first.
    enqueue: tuple[datetime, ...]
    #: Due slots not enqueued because the previous run is still active (``overlap=skip``).
    skipped_overlap: tuple[datetime, ...]
    #: Due slots the misfire policy dropped, counted exactly however many there are.
    missed: int
    next_run_at: datetime


@dataclass(frozen=True, slots=True)
class Firing:
    """What ``Store.fire_due`` did with one due schedule, in the transaction that advanced it.

    ``jobs`` holds one result per enqueued slot, oldest first; a result with ``duplicate=True``
    is a slot that already had a job (a run-now at that very instant), so nothing was inserted.
    For a workflow schedule each result is the first job of the slot's graph, and ``failed``
    holds the slots whose builder failed (slot, why): they got nothing, and the schedule moved
    past them.
    """

    schedule: str
    jobs: tuple[EnqueueResult, ...]
    skipped_overlap: tuple[datetime, ...]
    missed: int
    next_run_at: datetime
    failed: tuple[tuple[datetime, str], ...] = ()

    @property
    def inserted(self) -> tuple[EnqueueResult, ...]:
        return tuple(result for result in self.jobs if not result.duplicate)


#: How a definition is written: only when the name is free (``create``), only over an
#: existing schedule (``replace``: an edit never creates), or either way (``upsert``).
UpsertMode = Literal["create", "replace", "upsert"]


def upserted(existing: Schedule | None, spec: ScheduleSpec, now: datetime) -> Schedule:
    """The record after writing ``spec`` at ``now`` over ``existing`` (None: a new schedule).

    Every definition field comes from ``spec``. ``paused``, ``created_at`` and the run history
    are kept. ``next_run_at`` is kept while the rule is the same (an interval rule without an
    anchor keeps its stored anchor, so its grid does not move); a new rule starts at its first
    slot at or after ``now``, and never at or before the last slot that already fired. A
    changed jitter keeps ``next_run_at`` (the slot grid is the same; only when it is due moves).
    Raises ``InvalidSchedule`` for a rule with no slot left before the year 9999.
    """
    if existing is not None and _same_rule(existing.spec.rule, spec.rule):
        return replace(existing, spec=replace(spec, rule=existing.spec.rule), updated_at=now)
    rule = spec.rule.anchored(now)
    try:
        next_run_at = first_slot(rule, now)
        last = existing.last_run_at if existing is not None else None
        # A rule changed while the clock was behind the last fired slot must not reach back to
        # it: slots only move forward.
        if last is not None and next_run_at <= last:
            next_run_at = rule.next_after(last)
    except ValueError as error:
        if isinstance(error, InvalidSchedule):
            raise
        raise InvalidSchedule("rule", "has no slot before the year 9999") from None
    spec = replace(spec, rule=rule)
    if existing is None:
        return Schedule(spec=spec, next_run_at=next_run_at, created_at=now, updated_at=now)
    return replace(existing, spec=spec, next_run_at=next_run_at, updated_at=now)


def check_distinct(specs: Sequence[ScheduleSpec]) -> None:
    """InvalidSchedule when two of ``specs`` share a name (a batch upsert writes each once)."""
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise InvalidSchedule("name", f"{spec.name!r} is given twice")
        seen.add(spec.name)


def resumed(schedule: Schedule, now: datetime) -> Schedule:
    """The record after resuming ``schedule`` at ``now``: unpaused; under ``Missed.DROP`` a
    slot that fell due while paused moves on to the first slot due after ``now``, so none of
    the missed slots ever fires (slots only move forward: it can never fire later either).
    Under ``Missed.QUEUE`` the next slot is kept and the next firing treats the missed slots
    as its misfire policy says (:func:`decide`)."""
    next_run_at = schedule.next_run_at
    if schedule.paused and schedule.missed is Missed.DROP and schedule.due_at <= now:
        # No slot left before the year 9999 (ValueError): nothing can fire anyway.
        with contextlib.suppress(ValueError):
            next_run_at = schedule.rule.next_after(now - schedule.spec.jitter_offset)
    return replace(schedule, paused=False, next_run_at=next_run_at, updated_at=now)


def _same_rule(stored: Rule, incoming: Rule) -> bool:
    return (
        stored.interval == incoming.interval
        and stored.expression == incoming.expression
        and stored.timezone == incoming.timezone
        and (incoming.anchor is None or incoming.anchor == stored.anchor)
    )


def decide(schedule: Schedule, now: datetime) -> FireDecision:
    """What firing ``schedule`` at ``now`` does, given its last job's state as read under the
    store's lock.

    The misfire policy picks the due slots (``ScheduleSpec.plan``; nothing when the next slot
    is not due, which is also what a clock that went backwards sees). Under ``overlap=skip``
    no slot is enqueued while the previous run is pending or running: the due slots are
    skipped and the schedule moves on all the same. Several slots due at once (``misfire=all``
    catching up) are enqueued together; overlap is judged between firings.
    """
    plan = schedule.spec.plan(schedule.next_run_at, now)
    if not plan.slots and plan.next_slot == schedule.next_run_at:
        return FireDecision((), (), 0, schedule.next_run_at)
    horizon = now - schedule.spec.jitter_offset
    missed = max(0, _count_due(schedule.rule, schedule.next_run_at, horizon) - len(plan.slots))
    slots = tuple(plan.slots)
    if slots and schedule.spec.overlap is Overlap.SKIP and schedule.previous_run_active:
        return FireDecision((), slots, missed, plan.next_slot)
    return FireDecision(slots, (), missed, plan.next_slot)


def _count_due(rule: Rule, first: datetime, horizon: datetime) -> int:
    """How many slots lie in [first, horizon]; ``first`` counts as one (it is the slot the
    schedule was waiting for)."""
    if first > horizon:
        return 0
    if rule.interval is not None:
        following = rule.next_after(first)
        return 1 + (0 if following > horizon else (horizon - following) // rule.interval + 1)
    return 1 + rule.count_slots(first, horizon)


def schedule_fields(schedule: Schedule, *, upcoming: int = 5) -> dict[str, Any]:
    """The schedule as plain values, for JSON on the CLI and the API (instants stay datetimes):
    its definition, a human description of its rule, its next ``upcoming`` nominal slots, and
    its last run with that job's state as ``last_outcome``."""
    spec = schedule.spec
    rule = spec.rule
    return {
        "name": spec.name,
        "kind": spec.kind,
        "queue": spec.queue,
        "priority": spec.priority,
        "tenant": spec.tenant,
        "max_attempts": spec.max_attempts,
        "payload": spec.payload,
        "every_seconds": None if rule.interval is None else rule.interval.total_seconds(),
        "cron": rule.expression,
        "timezone": rule.timezone,
        "description": rule.describe(),
        "jitter_seconds": spec.jitter.total_seconds(),
        "misfire": spec.misfire.value,
        "misfire_limit": spec.misfire_limit,
        "grace_seconds": spec.grace.total_seconds(),
        "overlap": spec.overlap.value,
        "workflow": spec.workflow,
        "paused": schedule.paused,
        "missed": schedule.missed.value,
        "next_run_at": schedule.next_run_at,
        "due_at": schedule.due_at,
        "next_runs": schedule.upcoming(upcoming),
        "last_run_at": schedule.last_run_at,
        "last_job_id": schedule.last_job_id,
        "last_outcome": None if schedule.last_job_state is None else schedule.last_job_state.value,
        "created_at": schedule.created_at,
        "updated_at": schedule.updated_at,
    }


# ---------------------------------------------------------------- storage columns


def spec_columns(spec: ScheduleSpec) -> dict[str, Any]:
    """The definition as plain column values (durations in microseconds, the rule as
    every_us / cron / timezone / anchor, the payload as its canonical JSON text)."""
    rule = spec.rule.to_dict()
    return {
        "name": spec.name,
        "kind": spec.kind,
        "payload": spec.payload_json,
        "queue": spec.queue,
        "priority": spec.priority,
        "tenant": spec.tenant,
        "max_attempts": spec.max_attempts,
        "every_us": None if spec.rule.interval is None else spec.rule.interval // _MICROSECOND,
        "cron": rule["cron"],
        "timezone": rule["timezone"],
        "anchor": rule["anchor"],
        "jitter_us": spec.jitter // _MICROSECOND,
        "misfire": spec.misfire.value,
        "misfire_limit": spec.misfire_limit,
        "grace_us": spec.grace // _MICROSECOND,
        "overlap": spec.overlap.value,
        "workflow": spec.workflow,
    }


def spec_from_columns(columns: Mapping[str, Any]) -> ScheduleSpec:
    """The ScheduleSpec that :func:`spec_columns` described; ``payload`` is the decoded value
    and ``anchor`` an aware datetime (or None)."""
    every_us = columns["every_us"]
    rule = Rule.from_dict(
        {
            "every_seconds": None if every_us is None else every_us / 1_000_000,
            "cron": columns["cron"],
            "timezone": columns["timezone"],
            "anchor": columns["anchor"],
        }
    )
    return ScheduleSpec(
        name=columns["name"],
        kind=columns["kind"],
        rule=rule,
        payload=columns["payload"],
        queue=columns["queue"],
        priority=columns["priority"],
        tenant=columns["tenant"],
        max_attempts=columns["max_attempts"],
        jitter=timedelta(microseconds=columns["jitter_us"]),
        misfire=Misfire(columns["misfire"]),
        misfire_limit=columns["misfire_limit"],
        grace=timedelta(microseconds=columns["grace_us"]),
        overlap=Overlap(columns["overlap"]),
        workflow=bool(columns.get("workflow", False)),
    )
