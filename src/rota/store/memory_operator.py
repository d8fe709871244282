"""The memory store's operator verbs: queues paused and resumed, limits, and the moves an
operator makes on jobs (retry, rerun, cancel, hold, release, delete, purge, reschedule), one
at a time or in bulk.

A mixin of ``MemoryStore`` (memory.py): each verb holds its lock throughout, awaiting nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from rota.domain.errors import JobRunning, StateConflict
from rota.domain.flow import EVERY_TENANT, Key, Limit, LimitScope, counted_keys, validate_queue
from rota.domain.job import Attempt, Job, JobEdit
from rota.domain.job_state import JobState, Outcome
from rota.domain.transitions import MOVES, refusal, released_state
from rota.store.memory_queries import _matches
from rota.store.memory_workflows import _Dep
from rota.store.records import MAX_BULK, JobFilter, LimitInfo, QueueInfo


class MemoryOperator:
    """The operator verbs of ``MemoryStore`` (which provides what is declared here)."""

    _lock: threading.RLock
    _jobs: dict[int, Job]
    _history: dict[int, list[Attempt]]
    _active_keys: dict[str, int]
    _slots: dict[tuple[str, datetime], int]
    _holds: dict[int, tuple[datetime, frozenset[JobState]]]
    _queues: dict[str, QueueInfo]
    _limits: dict[Key, Limit]
    _starts: dict[Key, list[datetime]]
    _children: dict[int, list[_Dep]]

    if TYPE_CHECKING:

        def _announce(self, run_at: datetime) -> None: ...
        def _end_open_waits(self, job_id: int) -> None: ...
        def _finish(
            self,
            job: Job,
            at: datetime,
            state: JobState,
            outcome: Outcome,
            error: str | None = None,
            trace: str | None = None,
        ) -> None: ...
        def _forget_edges(self, job_id: int) -> None: ...
        def _get(self, job_id: int) -> Job: ...
        def _live_running(self, at: datetime) -> Iterable[Job]: ...
        def _now(self, now: datetime | None) -> datetime: ...
        def _orphan_children(self, doomed: set[int], at: datetime) -> None: ...
        def _rearm_children(self, parent: int) -> None: ...

    # ------------------------------------------------------------------ flow control

    async def pause_queue(self, queue: str, *, now: datetime | None = None) -> QueueInfo:
        return self._set_queue_paused(queue, True, now)

    async def resume_queue(self, queue: str, *, now: datetime | None = None) -> QueueInfo:
        return self._set_queue_paused(queue, False, now)

    def _set_queue_paused(self, queue: str, paused: bool, now: datetime | None) -> QueueInfo:
        validate_queue(queue)
        with self._lock:
            info = QueueInfo(name=queue, paused=paused, updated_at=self._now(now))
            self._queues[queue] = info
            return info

    async def list_queues(self) -> list[QueueInfo]:
        with self._lock:
            return [self._queues[name] for name in sorted(self._queues)]

    async def set_limit(self, limit: Limit, *, now: datetime | None = None) -> None:
        with self._lock:
            self._limits[limit.ident] = limit

    async def delete_limit(self, scope: LimitScope, key: str) -> bool:
        with self._lock:
            return self._limits.pop((LimitScope(scope), key), None) is not None

    async def list_limits(self, *, now: datetime | None = None) -> list[LimitInfo]:
        with self._lock:
            at = self._now(now)
            running: dict[Key, int] = {}
            for job in self._live_running(at):
                for scope, name in counted_keys(job):
                    for key in ((scope, name), (scope, EVERY_TENANT)):
                        running[key] = running.get(key, 0) + 1
            infos = []
            for ident in sorted(self._limits):
                limit = self._limits[ident]
                recent = 0
                if limit.rate is not None and limit.period is not None:
                    since = at - limit.period
                    recent = sum(
                        1
                        for (scope, name), starts in self._starts.items()
                        if scope is limit.scope and (name == limit.key or limit.key == EVERY_TENANT)
                        for instant in starts
                        if instant > since
                    )
                infos.append(LimitInfo(limit, running.get(ident, 0), recent))
            return infos

    async def running_by_tenant(self, *, now: datetime | None = None) -> dict[str, int]:
        with self._lock:
            counts: dict[str, int] = {}
            for job in self._live_running(self._now(now)):
                if job.tenant is not None:
                    counts[job.tenant] = counts.get(job.tenant, 0) + 1
            return dict(sorted(counts.items()))

    # ------------------------------------------------------------------ operator verbs

    async def retry(
        self, job_id: int, *, max_attempts: int | None = None, now: datetime | None = None
    ) -> Job:
        with self._lock:
            job = self._get(job_id)
            self._retry(job, max_attempts, self._now(now))
            return self._jobs[job_id]

    def _retry(self, job: Job, max_attempts: int | None, at: datetime) -> None:
        self._check_move(job, "retry")
        if job.unique_key is not None and job.unique_key in self._active_keys:
            raise StateConflict(
                f"job {job.id}: another active job holds unique key {job.unique_key!r}"
            )
        self._jobs[job.id] = replace(
            job,
            state=JobState.WAITING if job.waiting_on else JobState.PENDING,
            run_at=at,
            attempt=0,
            max_attempts=max(job.max_attempts, max_attempts or 0),
            lease_until=None,
            finished_at=None,
        )
        self._end_open_waits(job.id)
        if job.unique_key is not None:
            self._active_keys[job.unique_key] = job.id
        self._announce(at)
        if job.id in self._children:
            self._rearm_children(job.id)

    async def rerun(self, job_id: int, *, now: datetime | None = None) -> Job:
        with self._lock:
            job = self._get(job_id)
            self._check_move(job, "rerun")
            if job.unique_key is not None and job.unique_key in self._active_keys:
                raise StateConflict(
                    f"job {job_id}: another active job holds unique key {job.unique_key!r}"
                )
            at = self._now(now)
            rerun = replace(
                job,
                state=JobState.PENDING,
                run_at=at,
                attempt=0,
                lease_until=None,
                finished_at=None,
                last_error=None,
            )
            self._jobs[job_id] = rerun
            self._end_open_waits(job_id)
            if job.unique_key is not None:
                self._active_keys[job.unique_key] = job_id
            self._announce(at)
            return rerun

    async def cancel(self, job_id: int, *, now: datetime | None = None) -> Job:
        with self._lock:
            job = self._get(job_id)
            self._cancel(job, self._now(now))
            return self._jobs[job_id]

    def _cancel(self, job: Job, at: datetime) -> None:
        self._check_move(job, "cancel")
        self._finish(job, at, JobState.CANCELLED, Outcome.CANCELLED)

    async def bulk_retry(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        with self._lock:
            at = self._now(None)
            chosen = self._matching(filter, MOVES["retry"].sources, limit)
            done = 0
            for chosen_job in chosen:
                # As it is now: retrying a parent chosen with it may have re-opened its edges.
                job = self._jobs[chosen_job.id]
                try:
                    self._retry(job, None, at)
                except StateConflict:
                    continue
                done += 1
            return done

    async def bulk_cancel(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        with self._lock:
            at = self._now(None)
            chosen = self._matching(filter, MOVES["cancel"].sources, limit)
            for job in chosen:
                self._cancel(job, at)
            return len(chosen)

    async def hold(self, job_id: int, *, now: datetime | None = None) -> Job:
        with self._lock:
            job = self._get(job_id)
            self._check_move(job, "hold")
            held = self._jobs[job_id] = replace(job, state=JobState.HELD)
            return held

    async def release_held(self, job_id: int, *, now: datetime | None = None) -> Job:
        with self._lock:
            job = self._get(job_id)
            self._check_move(job, "release_held")
            released = self._jobs[job_id] = replace(job, state=released_state(job.waiting_on))
        if released.state is JobState.PENDING:
            self._announce(released.run_at)
        return released

    def _check_move(self, job: Job, verb: str) -> None:
        if job.state not in MOVES[verb].sources:
            raise StateConflict(refusal(job.id, job.state, verb))

    async def bulk_hold(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        with self._lock:
            chosen = self._matching(filter, MOVES["hold"].sources, limit)
            for job in chosen:
                self._jobs[job.id] = replace(job, state=JobState.HELD)
            return len(chosen)

    async def bulk_release_held(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        with self._lock:
            chosen = self._matching(filter, MOVES["release_held"].sources, limit)
            for job in chosen:
                self._jobs[job.id] = replace(job, state=released_state(job.waiting_on))
            due = [job.run_at for job in chosen if not job.waiting_on]
        if due:
            self._announce(min(due))
        return len(chosen)

    async def delete(self, job_id: int) -> Job:
        with self._lock:
            job = self._get(job_id)
            if job.state not in MOVES["delete"].sources:
                raise JobRunning(job_id, "delete")
            self._orphan_children({job_id}, self._now(None))
            self._forget(job)
            return job

    async def purge(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        with self._lock:
            chosen = self._matching(filter, MOVES["purge"].sources, limit)
            self._orphan_children({job.id for job in chosen}, self._now(None))
            for job in chosen:
                self._forget(job)
            return len(chosen)

    async def reschedule(self, job_id: int, edit: JobEdit, *, now: datetime | None = None) -> Job:
        with self._lock:
            job = self._get(job_id)
            if job.state is JobState.RUNNING:
                raise JobRunning(job_id, "edit")
            self._check_move(job, "reschedule")
            at = self._now(now)
            edited = replace(
                job,
                run_at=at if edit.run_now else edit.run_at or job.run_at,
                priority=job.priority if edit.priority is None else edit.priority,
                queue=edit.queue or job.queue,
            )
            self._jobs[job_id] = edited
        self._announce(edited.run_at)
        return edited

    def _forget(self, job: Job) -> None:
        """Remove a job that no worker holds, with its history, key and slot (the lock held)."""
        del self._jobs[job.id]
        self._history.pop(job.id, None)
        self._holds.pop(job.id, None)
        if job.unique_key is not None and self._active_keys.get(job.unique_key) == job.id:
            del self._active_keys[job.unique_key]
        if job.schedule is not None and job.slot_at is not None:
            self._slots.pop((job.schedule, job.slot_at), None)
        if job.workflow is not None:
            self._forget_edges(job.id)  # as ON DELETE CASCADE does in SQL

    def _matching(self, filter: JobFilter, allowed: frozenset[JobState], limit: int) -> list[Job]:
        states = allowed if filter.states is None else allowed & filter.states
        selected = [
            job
            for job in sorted(self._jobs.values(), key=lambda j: j.id)
            if job.state in states and _matches(job, filter)
        ]
        return selected[: max(0, min(limit, MAX_BULK))]
