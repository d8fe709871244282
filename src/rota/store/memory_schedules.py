"""The memory store's schedules (created, listed, paused, triggered, fired when due) and
its registry of workers.

A mixin of ``MemoryStore`` (memory.py): each verb holds its lock throughout, awaiting nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from rota.domain.clock import utc
from rota.domain.errors import InvalidJob, ScheduleNotFound, StateConflict
from rota.domain.job import EnqueueResult, Job, JobSpec
from rota.domain.job_state import JobState
from rota.domain.schedule import ScheduleSpec
from rota.domain.schedule_state import (
    Firing,
    Missed,
    Schedule,
    check_distinct,
    decide,
    resumed,
    upserted,
)
from rota.domain.workflow import (
    Workflow,
    WorkflowBuilder,
    slot_graph,
    unknown_workflow,
    workflow_outcome,
)
from rota.store.records import WorkerInfo, check_schedule_listing


class MemorySchedules:
    """The schedule and worker registry verbs of ``MemoryStore`` (which provides what is
    declared here)."""

    _lock: threading.RLock
    _jobs: dict[int, Job]
    _slots: dict[tuple[str, datetime], int]
    _workers: dict[str, WorkerInfo]
    _schedules: dict[str, Schedule]
    _wakeups: list[Callable[[datetime | None], None]]

    if TYPE_CHECKING:

        def _insert(
            self, specs: Sequence[JobSpec], at: datetime
        ) -> tuple[list[EnqueueResult], datetime | None]: ...
        def _now(self, now: datetime | None) -> datetime: ...
        def _write_workflow(
            self, graph: Workflow, at: datetime
        ) -> tuple[list[Job], datetime | None]: ...

    # ------------------------------------------------------------------ schedules

    async def create_schedule(self, spec: ScheduleSpec, *, now: datetime | None = None) -> Schedule:
        with self._lock:
            if spec.name in self._schedules:
                raise StateConflict(f"schedule {spec.name!r} already exists")
            return self._put_schedule(upserted(None, spec, self._now(now)))

    async def upsert_schedule(self, spec: ScheduleSpec, *, now: datetime | None = None) -> Schedule:
        with self._lock:
            existing = self._schedules.get(spec.name)
            return self._put_schedule(upserted(existing, spec, self._now(now)))

    async def upsert_schedules(
        self, specs: Sequence[ScheduleSpec], *, now: datetime | None = None
    ) -> list[Schedule]:
        check_distinct(specs)
        with self._lock:
            at = self._now(now)
            written = [upserted(self._schedules.get(spec.name), spec, at) for spec in specs]
            return [self._put_schedule(schedule) for schedule in written]

    async def replace_schedule(
        self, spec: ScheduleSpec, *, now: datetime | None = None
    ) -> Schedule:
        with self._lock:
            existing = self._schedule(spec.name)
            return self._put_schedule(upserted(existing, spec, self._now(now)))

    async def get_schedule(self, name: str) -> Schedule:
        with self._lock:
            return self._with_last_state(self._schedule(name))

    async def list_schedules(
        self, *, after: str | None = None, limit: int | None = None, due_first: bool = False
    ) -> list[Schedule]:
        check_schedule_listing(after, limit, due_first)
        with self._lock:
            if due_first:
                chosen = sorted(
                    (s for s in self._schedules.values() if not s.paused),
                    key=lambda s: (s.due_at, s.name),
                )
            else:
                chosen = [
                    self._schedules[name]
                    for name in sorted(self._schedules)
                    if after is None or name > after
                ]
            return [self._with_last_state(s) for s in chosen[:limit]]

    async def pause_schedule(
        self, name: str, *, missed: Missed = Missed.QUEUE, now: datetime | None = None
    ) -> Schedule:
        with self._lock:
            paused = replace(
                self._schedule(name), paused=True, missed=Missed(missed), updated_at=self._now(now)
            )
            return self._put_schedule(paused)

    async def resume_schedule(self, name: str, *, now: datetime | None = None) -> Schedule:
        with self._lock:
            return self._put_schedule(resumed(self._schedule(name), self._now(now)))

    async def delete_schedule(self, name: str) -> None:
        with self._lock:
            self._schedule(name)
            del self._schedules[name]

    async def trigger_schedule(
        self,
        name: str,
        *,
        now: datetime | None = None,
        workflows: Mapping[str, WorkflowBuilder] | None = None,
    ) -> EnqueueResult:
        with self._lock:
            at = self._now(now)
            schedule = self._schedule(name)
            if schedule.spec.workflow:
                builder = (workflows or {}).get(name)
                if builder is None:
                    raise StateConflict(unknown_workflow(name))
                results, earliest, failed = self._fire_workflow(schedule, (at,), builder, at)
                if failed:
                    raise InvalidJob("workflow", failed[0][1])
                [result] = results
            else:
                [result], earliest = self._insert([schedule.spec.job_spec(at)], at)
            self._schedules[name] = replace(schedule, last_job_id=result.job.id)
            callbacks = list(self._wakeups) if earliest is not None else []
        for callback in callbacks:
            callback(earliest)
        return result

    async def fire_due(
        self,
        *,
        now: datetime | None = None,
        limit: int = 100,
        workflows: Mapping[str, WorkflowBuilder] | None = None,
    ) -> list[Firing]:
        firings: list[Firing] = []
        earliest: datetime | None = None
        builders = workflows or {}
        with self._lock:
            at = self._now(now)
            due = sorted(
                (s for s in self._schedules.values() if s.is_due(at) and _fires(s, builders)),
                key=lambda s: (s.due_at, s.name),
            )[: max(0, limit)]
            for stored in due:
                schedule = self._with_last_state(stored)
                decision = decide(schedule, at)
                failed: list[tuple[datetime, str]] = []
                if schedule.spec.workflow:
                    results, inserted_at, failed = self._fire_workflow(
                        schedule, decision.enqueue, builders[schedule.name], at
                    )
                else:
                    specs = [schedule.spec.job_spec(slot) for slot in decision.enqueue]
                    results, inserted_at = self._insert(specs, at)
                if inserted_at is not None:
                    earliest = inserted_at if earliest is None else min(earliest, inserted_at)
                advanced = replace(stored, next_run_at=decision.next_run_at)
                if results:
                    latest = results[-1].job
                    advanced = replace(advanced, last_run_at=latest.slot_at, last_job_id=latest.id)
                self._schedules[stored.name] = advanced
                firings.append(
                    Firing(
                        schedule=stored.name,
                        jobs=tuple(results),
                        skipped_overlap=decision.skipped_overlap,
                        missed=decision.missed,
                        next_run_at=decision.next_run_at,
                        failed=tuple(failed),
                    )
                )
            callbacks = list(self._wakeups) if earliest is not None else []
        for callback in callbacks:
            callback(earliest)
        return firings

    def _fire_workflow(
        self,
        schedule: Schedule,
        slots: Sequence[datetime],
        builder: WorkflowBuilder,
        at: datetime,
    ) -> tuple[list[EnqueueResult], datetime | None, list[tuple[datetime, str]]]:
        """One graph per slot (the lock held): a slot that has a job already is a duplicate,
        one whose builder failed is reported and gets nothing."""
        results: list[EnqueueResult] = []
        failed: list[tuple[datetime, str]] = []
        earliest: datetime | None = None
        for slot in slots:
            taken = self._slots.get((schedule.name, slot))
            if taken is not None:
                results.append(EnqueueResult(self._jobs[taken], duplicate=True))
                continue
            try:
                graph = slot_graph(builder, schedule.name, schedule.spec.payload, slot)
            except InvalidJob as error:
                failed.append((slot, error.reason))
                continue
            jobs, pending_at = self._write_workflow(graph, at)
            if pending_at is not None:
                earliest = pending_at if earliest is None else min(earliest, pending_at)
            results.append(EnqueueResult(jobs[0]))
        return results, earliest, failed

    async def next_fire_at(self, *, workflows: Collection[str] | None = None) -> datetime | None:
        with self._lock:
            return min(
                (
                    s.due_at
                    for s in self._schedules.values()
                    if not s.paused and _fires(s, workflows or ())
                ),
                default=None,
            )

    def _schedule(self, name: str) -> Schedule:
        schedule = self._schedules.get(name)
        if schedule is None:
            raise ScheduleNotFound(name)
        return schedule

    def _put_schedule(self, schedule: Schedule) -> Schedule:
        self._schedules[schedule.name] = replace(schedule, last_job_state=None)
        return self._with_last_state(schedule)

    def _with_last_state(self, schedule: Schedule) -> Schedule:
        job = self._jobs.get(schedule.last_job_id) if schedule.last_job_id is not None else None
        if job is None:
            return replace(schedule, last_job_state=None)
        if schedule.spec.workflow and job.workflow is not None:
            states = (j.state for j in self._jobs.values() if j.workflow == job.workflow)
            return replace(schedule, last_job_state=workflow_outcome(states))
        return replace(schedule, last_job_state=job.state)

    # ------------------------------------------------------------------ workers registry

    async def register_worker(self, info: WorkerInfo, *, now: datetime | None = None) -> None:
        with self._lock:
            at = self._now(now)
            self._workers[info.name] = replace(info, started_at=at, beat_at=at)

    async def beat_worker(self, name: str, *, now: datetime | None = None) -> bool:
        with self._lock:
            info = self._workers.get(name)
            if info is None:
                return False
            self._workers[name] = replace(info, beat_at=self._now(now))
            return True

    async def deregister_worker(self, name: str) -> None:
        with self._lock:
            self._workers.pop(name, None)

    async def list_workers(self) -> list[WorkerInfo]:
        with self._lock:
            running: dict[str, int] = {}
            for job in self._jobs.values():
                if job.state is JobState.RUNNING and job.worker is not None:
                    running[job.worker] = running.get(job.worker, 0) + 1
            return [
                replace(info, running=running.get(name, 0))
                for name, info in sorted(self._workers.items())
            ]

    async def prune_workers(self, *, older_than: datetime) -> int:
        cutoff = utc(older_than)
        with self._lock:
            stale = [
                name
                for name, info in self._workers.items()
                if info.beat_at is not None and info.beat_at < cutoff
            ]
            for name in stale:
                del self._workers[name]
            return len(stale)


def _fires(schedule: Schedule, workflows: Collection[str]) -> bool:
    """Whether this firer can fire ``schedule``: a workflow schedule only where its builder
    is known (another process that knows it fires it)."""
    return not schedule.spec.workflow or schedule.name in workflows
