"""The schedule verbs of the Store contract: defining, pausing, triggering and firing
schedules. ``Store`` includes them (store/base.py)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from rota.domain.job import EnqueueResult
from rota.domain.schedule import ScheduleSpec
from rota.domain.schedule_state import Firing, Missed, Schedule
from rota.domain.workflow import WorkflowBuilder


class ScheduleVerbs(Protocol):
    """What every backend guarantees of schedules."""

    # ------------------------------------------------------------------ schedules
    # C5: each (schedule, slot) produces at most one job however many processes fire at once;
    # the slot's job is inserted in the same transaction that advances next_run_at.

    async def create_schedule(self, spec: ScheduleSpec, *, now: datetime | None = None) -> Schedule:
        """Add a new schedule, first slot at or after now (an interval without an anchor is
        anchored at now). StateConflict when a schedule of that name exists; nothing changes.
        """
        ...

    async def upsert_schedule(self, spec: ScheduleSpec, *, now: datetime | None = None) -> Schedule:
        """Create the schedule, or replace its definition: every definition field comes from
        ``spec``; ``paused`` and the run history are kept; ``next_run_at`` is kept unless the
        rule changed, and then starts again at the new rule's first slot at or after now
        (never at or before the last fired slot). See ``schedule_state.upserted``.
        """
        ...

    async def upsert_schedules(
        self, specs: Sequence[ScheduleSpec], *, now: datetime | None = None
    ) -> list[Schedule]:
        """``upsert_schedule`` of every spec, in one transaction: a firer sees the stored
        definitions before or after all of them, never some. The Schedules, in the specs'
        order. InvalidSchedule when two specs share a name; then nothing changes."""
        ...

    async def replace_schedule(
        self, spec: ScheduleSpec, *, now: datetime | None = None
    ) -> Schedule:
        """Replace an existing schedule's definition as ``upsert_schedule`` does, in one
        atomic step: ScheduleNotFound when there is none (also when it is deleted while this
        runs), and then nothing is created."""
        ...

    async def get_schedule(self, name: str) -> Schedule:
        """The schedule, with its last job's current state; ScheduleNotFound."""
        ...

    async def list_schedules(
        self, *, after: str | None = None, limit: int | None = None, due_first: bool = False
    ) -> list[Schedule]:
        """Schedules by name (in code-point order), each with its last job's current state:
        those named after ``after``, at most ``limit`` (None: all). A keyset,
        so a page is stable however many schedules are added or removed meanwhile.

        With ``due_first``: only unpaused schedules, the soonest due (``due_at``) first, then
        by name, one page (``after`` is refused). InvalidInput for a limit out of range.
        """
        ...

    async def pause_schedule(
        self, name: str, *, missed: Missed = Missed.QUEUE, now: datetime | None = None
    ) -> Schedule:
        """Stop firing the schedule until resumed (kept across upserts), saying what the
        resume does with the slots that fall due meanwhile (``missed``; pausing a paused
        schedule changes only that). ScheduleNotFound."""
        ...

    async def resume_schedule(self, name: str, *, now: datetime | None = None) -> Schedule:
        """Fire the schedule again (``schedule_state.resumed``): with ``Missed.QUEUE`` the
        slots missed while paused fire as its misfire policy allows (``latest``: one run; at
        most ``misfire_limit``), with ``Missed.DROP`` none does and the first slot due after
        the resume fires next. Each slot still gets at most one job. ScheduleNotFound."""
        ...

    async def delete_schedule(self, name: str) -> None:
        """Remove the schedule; jobs it already enqueued stay. ScheduleNotFound."""
        ...

    async def trigger_schedule(
        self,
        name: str,
        *,
        now: datetime | None = None,
        workflows: Mapping[str, WorkflowBuilder] | None = None,
    ) -> EnqueueResult:
        """Run the schedule now, outside its slot grid: a job for it with slot_at = the store's
        now, recorded as its last job. next_run_at does not move, and a paused schedule can be
        run too. ScheduleNotFound. A workflow schedule writes its builder's graph (from
        ``workflows``, by schedule name) and returns its first job: StateConflict when its
        builder is not given, InvalidJob when the builder fails; nothing is written then.
        """
        ...

    async def fire_due(
        self,
        *,
        now: datetime | None = None,
        limit: int = 100,
        workflows: Mapping[str, WorkflowBuilder] | None = None,
    ) -> list[Firing]:
        """Fire up to ``limit`` unpaused schedules whose next slot is due (slot + jitter offset
        <= now), earliest first, in one transaction.

        Each due schedule is locked (other callers skip it), its slots are chosen by
        ``schedule_state.decide`` (misfire policy, then overlap against its last job), each
        chosen slot's job is inserted with schedule = name and slot_at = slot (the unique
        (schedule, slot_at) index turns a taken slot into a duplicate result, never an error),
        and next_run_at, last_run_at and last_job_id advance in the same transaction. Any
        number of processes may call this at once: each slot gets at most one job, and since
        next_run_at only moves forward, a clock that goes backwards never fires a slot twice.

        A workflow schedule fires only where its builder is in ``workflows`` (by schedule
        name; other callers pass it over): each chosen slot's graph is written whole in the same
        transaction, its first job carrying the slot's unique (schedule, slot_at) key, so a
        slot gets one graph however many processes fire; last_job_id is that first job (whose
        id is the workflow's). A slot whose builder fails gets nothing and is reported in
        ``Firing.failed``; the other slots and schedules fire all the same.
        """
        ...

    async def next_fire_at(self, *, workflows: Collection[str] | None = None) -> datetime | None:
        """The earliest instant an unpaused schedule becomes due (next_run_at plus its jitter
        offset), by the store's clock; None without unpaused schedules. Workflow schedules
        count only when named in ``workflows`` (those this caller can fire)."""
        ...
