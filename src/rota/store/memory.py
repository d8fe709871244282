"""MemoryStore: the reference semantics of the Store contract, in dicts behind one lock.

Every verb takes the lock for its whole body and never awaits inside it, so the store is safe
to share between threads (each with its own event loop) as well as between tasks.

This module holds the store's state and its core: enqueue, claim and leases, and how a job
ends. The other verbs live in mixins, one concept each, over the same state and lock:
operator verbs (memory_operator.py), queries (memory_queries.py), workflows and their edges
(memory_workflows.py), schedules and workers (memory_schedules.py), maintenance and the audit
log (memory_maintenance.py), durable steps (memory_durable.py).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from rota.domain import blame
from rota.domain.activity import AttemptEnd, attempt_end
from rota.domain.audit import AuditEntry
from rota.domain.clock import Clock, SystemClock, utc
from rota.domain.errors import JobNotFound, LeaseLost
from rota.domain.flow import Budget, Key, Limit, counted_keys, limit_for, select
from rota.domain.job import (
    MAX_ERROR_LENGTH,
    MAX_TRACEBACK_LENGTH,
    Attempt,
    EnqueueResult,
    Job,
    JobSpec,
)
from rota.domain.job_state import JobState, Outcome, runs_alone
from rota.domain.lease import Lease
from rota.domain.payload import Progress, truncate
from rota.domain.schedule_state import Schedule
from rota.store.memory_activity import ActivityTallies
from rota.store.memory_durable import DurableState, MemoryDurable
from rota.store.memory_maintenance import MemoryMaintenance
from rota.store.memory_operator import MemoryOperator
from rota.store.memory_queries import MemoryQueries
from rota.store.memory_schedules import MemorySchedules
from rota.store.memory_workflows import MemoryWorkflows, _Dep
from rota.store.records import (
    Beat,
    QueueInfo,
    WorkerInfo,
)


class MemoryStore(
    MemoryOperator,
    MemoryQueries,
    MemoryWorkflows,
    MemorySchedules,
    MemoryMaintenance,
    MemoryDurable,
):
    """An in-process store for tests and demos; it loses everything when the process exits."""

    pushes_schedule_changes = False
    pushes_finished = True

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._lock = threading.RLock()
        self._jobs: dict[int, Job] = {}
        self._history: dict[int, list[Attempt]] = {}
        self._active_keys: dict[str, int] = {}
        self._slots: dict[tuple[str, datetime], int] = {}
        #: Jobs whose unique key is held beyond the active states: until when, in which.
        self._holds: dict[int, tuple[datetime, frozenset[JobState]]] = {}
        self._workers: dict[str, WorkerInfo] = {}
        #: Stored without last_job_state, which is read from the job whenever asked.
        self._schedules: dict[str, Schedule] = {}
        self._next_id = 1
        self._next_token = 1
        #: Tokens of the leases whose handler started (rota.domain.blame): every ordinary
        #: lease from its claim, a suspect's once its worker calls ``begin``.
        self._started: set[int] = set()
        self._wakeups: list[Callable[[datetime | None], None]] = []
        self._finished_hooks: list[Callable[[], None]] = []
        self._queues: dict[str, QueueInfo] = {}
        self._limits: dict[Key, Limit] = {}
        self._starts: dict[Key, list[datetime]] = {}
        #: Workflow edges, by parent and by child.
        self._children: dict[int, list[_Dep]] = {}
        self._parents: dict[int, list[_Dep]] = {}
        #: The parent whose end cancelled a waiting job (its retry re-arms the job).
        self._blocked_by: dict[int, int] = {}
        #: The audit log, oldest first (ids ascending), and the next entry's id.
        self._audit: list[AuditEntry] = []
        self._next_audit_id = 1
        self._durable = DurableState()  #: step records and signals (store/memory_durable.py)
        self._activity = ActivityTallies()  #: per-minute tallies (store/memory_activity.py)

    # ------------------------------------------------------------------ lifecycle

    async def migrate(self) -> list[str]:
        return []

    async def pending_migrations(self) -> list[str]:
        return []

    async def close(self) -> None:
        return None

    async def now(self) -> datetime:
        return self._now(None)

    async def watch(
        self,
        on_due: Callable[[datetime | None], None],
        *,
        on_schedules: Callable[[], None] | None = None,
    ) -> None:
        """Until cancelled, call ``on_due(run_at)`` (from the enqueuing thread) after every
        enqueue with the earliest run_at it inserted. In-process only: nothing else can write.
        Schedule changes are not pushed (``pushes_schedule_changes`` is False): firers poll."""
        with self._lock:
            self._wakeups.append(on_due)
        try:
            await asyncio.Event().wait()
        finally:
            with self._lock:
                self._wakeups.remove(on_due)

    async def expect_finished(self, job_ids: Sequence[int]) -> None:
        """Nothing to do: every terminal transition is reported, in process, for free."""

    async def watch_finished(self, on_finished: Callable[[], None]) -> None:
        """Until cancelled, call ``on_finished()`` (from the finishing thread, the lock held:
        it must only schedule a wake-up) whenever a job reaches a terminal state."""
        with self._lock:
            self._finished_hooks.append(on_finished)
        try:
            await asyncio.Event().wait()
        finally:
            with self._lock:
                self._finished_hooks.remove(on_finished)

    def _now(self, now: datetime | None) -> datetime:
        return utc(now) if now is not None else self._clock.now()

    # ------------------------------------------------------------------ enqueue

    async def enqueue(
        self, specs: Sequence[JobSpec], *, now: datetime | None = None
    ) -> list[EnqueueResult]:
        with self._lock:
            results, earliest = self._insert(specs, self._now(now))
            callbacks = list(self._wakeups) if earliest is not None else []
        for callback in callbacks:
            callback(earliest)
        return results

    def _insert(
        self, specs: Sequence[JobSpec], at: datetime
    ) -> tuple[list[EnqueueResult], datetime | None]:
        """Insert ``specs`` (the lock held); the results and the earliest run_at inserted."""
        results: list[EnqueueResult] = []
        earliest: datetime | None = None
        for spec in specs:
            existing = self._existing_for(spec, at)
            if existing is not None:
                holder = self._jobs[existing]
                if spec.on_conflict == "replace" and holder.state is JobState.PENDING:
                    holder = replace(holder, payload=spec.payload, run_at=spec.due_at(at))
                    self._jobs[holder.id] = holder
                    earliest = holder.run_at if earliest is None else min(earliest, holder.run_at)
                    results.append(EnqueueResult(holder, duplicate=True, replaced=True))
                else:
                    results.append(EnqueueResult(holder, duplicate=True))
                continue
            job = spec.inserted(self._next_id, spec.due_at(at), at, spec.expiry_at(at))
            self._next_id += 1
            self._jobs[job.id] = job
            self._history[job.id] = []
            if job.unique_key is not None:
                self._active_keys[job.unique_key] = job.id
            if spec.unique_states is not None:
                until = spec.hold_until(at)
                assert until is not None
                self._holds[job.id] = (until, spec.unique_states)
            if job.schedule is not None and job.slot_at is not None:
                self._slots[(job.schedule, job.slot_at)] = job.id
            earliest = job.run_at if earliest is None else min(earliest, job.run_at)
            results.append(EnqueueResult(job))
        return results, earliest

    def _existing_for(self, spec: JobSpec, at: datetime) -> int | None:
        if spec.schedule is not None and spec.slot_at is not None:
            slot_job = self._slots.get((spec.schedule, spec.slot_at))
            if slot_job is not None:
                return slot_job
        if spec.unique_key is None:
            return None
        active = self._active_keys.get(spec.unique_key)
        if active is not None or not spec.holds_beyond_active:
            return active
        # A key held beyond the active states: by a job in one of its states, in its period.
        held = [
            job_id
            for job_id, (until, states) in self._holds.items()
            if at < until
            and (job := self._jobs.get(job_id)) is not None
            and job.unique_key == spec.unique_key
            and job.state in states
        ]
        return max(held, default=None)

    # ------------------------------------------------------------------ claim and leases

    async def claim(
        self,
        worker: str,
        *,
        queues: Sequence[str],
        limit: int,
        lease: timedelta,
        fair: bool = True,
        kinds: Collection[str] | None = None,
        now: datetime | None = None,
    ) -> list[Job]:
        if limit <= 0:
            return []
        runs = None if kinds is None else frozenset(kinds)
        with self._lock:
            at = self._now(now)
            wanted = {queue for queue in queues if not self._paused(queue)}
            candidates = [
                job
                for job in self._jobs.values()
                if job.queue in wanted
                and (runs is None or job.kind in runs)
                and self._is_claimable(job, at)
            ]
            budget = self._budget(at) if self._limits else None
            claimed: list[Job] = []
            chosen = select(
                candidates, limit=limit, budget=budget, fair=fair, alone=self._runs_alone_next
            )
            for job in chosen:
                attempt, crashes, last_error = job.attempt, job.crashes, job.last_error
                if job.state is JobState.RUNNING:
                    expiry = self._expiry(job)
                    self._end_attempt(job, at, Outcome.LEASE_EXPIRED, expiry.error)
                    attempt, crashes, last_error = expiry.attempt, expiry.crashes, expiry.error
                token = self._next_token
                self._next_token += 1
                if not runs_alone(crashes, attempt + 1, job.max_attempts):
                    self._started.add(token)  # an ordinary attempt starts as it is claimed
                taken = replace(
                    job,
                    state=JobState.RUNNING,
                    attempt=attempt + 1,
                    crashes=crashes,
                    last_error=last_error,
                    lease_token=token,
                    lease_until=at + lease,
                    worker=worker,
                    started_at=at,
                    finished_at=None,
                    progress=None,
                    progress_message=None,
                    heartbeats=0,
                    last_heartbeat_at=None,
                )
                self._jobs[job.id] = taken
                self._history[job.id].append(
                    Attempt(taken.attempt, token, worker, at, None, Outcome.RUNNING)
                )
                claimed.append(taken)
            if budget is not None:
                for key in budget.started:
                    self._record_start(key, at)
            return claimed

    def _paused(self, queue: str) -> bool:
        info = self._queues.get(queue)
        return info is not None and info.paused

    def _live_running(self, at: datetime) -> Iterable[Job]:
        return (
            job
            for job in self._jobs.values()
            if job.state is JobState.RUNNING
            and job.lease_until is not None
            and job.lease_until >= at
        )

    def _budget(self, at: datetime) -> Budget:
        running: dict[Key, int] = {}
        for job in self._live_running(at):
            for key in counted_keys(job):
                running[key] = running.get(key, 0) + 1
        return Budget(self._limits, running, self._starts, at)

    def _record_start(self, key: Key, at: datetime) -> None:
        limit = limit_for(self._limits, *key)
        if limit is None or limit.rate is None:
            return
        starts = self._starts.setdefault(key, [])
        starts.append(at)
        del starts[: max(0, len(starts) - limit.rate)]  # only the last `rate` starts matter

    def _is_claimable(self, job: Job, at: datetime) -> bool:
        if job.state is JobState.PENDING:
            return job.run_at <= at and not job.is_expired(at)
        return (
            job.state is JobState.RUNNING
            and job.lease_until is not None
            and job.lease_until < at
            and not self._expiry(job).dead
        )

    def _runs_alone_next(self, job: Job) -> bool:
        """Whether the claim candidate ``job``'s next attempt runs alone (the lock held)."""
        if job.state is JobState.RUNNING:
            return blame.alone_after(self._expiry(job), job.max_attempts)
        return runs_alone(job.crashes, job.attempt + 1, job.max_attempts)

    def _expiry(self, job: Job) -> blame.Expiry:
        """What the expiry of ``job``'s current lease does to it (the lock held)."""
        return blame.expire(
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            crashes=job.crashes,
            started=job.lease_token in self._started,
        )

    def _held(self, lease: Lease) -> Job:
        """The job if ``lease`` still holds it; LeaseLost otherwise (the fencing check)."""
        job = self._jobs.get(lease.job_id)
        if job is None or job.state is not JobState.RUNNING or job.lease_token != lease.token:
            raise LeaseLost(lease.job_id, lease.token)
        return job

    async def heartbeat(
        self,
        leases: Sequence[Lease],
        *,
        lease: timedelta,
        progress: Mapping[int, Progress] | None = None,
        now: datetime | None = None,
    ) -> Beat:
        lost: list[Lease] = []
        reported = progress or {}
        with self._lock:
            at = self._now(now)
            for held in leases:
                try:
                    job = self._held(held)
                except LeaseLost:
                    lost.append(held)
                    continue
                renewed = replace(
                    job,
                    lease_until=at + lease,
                    heartbeats=job.heartbeats + 1,
                    last_heartbeat_at=at,
                )
                report = reported.get(job.id)
                if report is not None:
                    renewed = replace(
                        renewed, progress=report.fraction, progress_message=report.message
                    )
                self._jobs[job.id] = renewed
        return Beat(lost, at)

    async def begin(self, lease: Lease, *, now: datetime | None = None) -> None:
        with self._lock:
            self._held(lease)
            self._started.add(lease.token)

    async def complete(self, lease: Lease, *, now: datetime | None = None) -> None:
        with self._lock:
            job = self._held(lease)
            at = self._now(now)
            self._activity.add([attempt_end(job, JobState.SUCCEEDED, at)], at)
            self._finish(job, at, JobState.SUCCEEDED, Outcome.SUCCEEDED)

    async def complete_many(
        self,
        leases: Sequence[Lease],
        *,
        results: Sequence[str | None] | None = None,
        now: datetime | None = None,
    ) -> list[Lease]:
        lost: list[Lease] = []
        texts = list(results) if results is not None else [None] * len(leases)
        with self._lock:
            at = self._now(now)
            ended: list[AttemptEnd] = []
            for lease, text in zip(leases, texts, strict=True):
                try:
                    job = self._held(lease)
                except LeaseLost:
                    lost.append(lease)
                    continue
                ended.append(attempt_end(job, JobState.SUCCEEDED, at))
                # Stored as it would come back from a database: a copy, parsed from JSON; None
                # replaces the result a re-run job kept from its series before.
                job = replace(job, result=None if text is None else json.loads(text))
                self._finish(job, at, JobState.SUCCEEDED, Outcome.SUCCEEDED)
            self._activity.add(ended, at)
        return lost

    async def fail(
        self,
        lease: Lease,
        *,
        error: str,
        retry_in: timedelta,
        traceback: str | None = None,
        permanent: bool = False,
        now: datetime | None = None,
    ) -> JobState:
        with self._lock:
            job = self._held(lease)
            at = self._now(now)
            error_text = truncate(error, MAX_ERROR_LENGTH)
            trace = truncate(traceback, MAX_TRACEBACK_LENGTH)
            dies = permanent or job.attempt >= job.max_attempts
            ended = attempt_end(job, JobState.DEAD if dies else JobState.PENDING, at)
            self._activity.add([ended], at)
            self._activity.add_error(job.queue, job.kind, error, at)
            if dies:
                self._finish(job, at, JobState.DEAD, Outcome.FAILED, error_text, trace)
                return JobState.DEAD
            self._end_attempt(job, at, Outcome.FAILED, error_text, trace)
            self._jobs[job.id] = replace(
                job,
                state=JobState.PENDING,
                run_at=at + retry_in,
                lease_until=None,
                last_error=error_text,
            )
            self._announce(at + retry_in)
            return JobState.PENDING

    async def snooze(self, lease: Lease, delay: timedelta, *, now: datetime | None = None) -> None:
        with self._lock:
            job = self._held(lease)
            at = self._now(now)
            self._give_back(job, at, at + delay, Outcome.SNOOZED)

    async def release(self, lease: Lease, *, now: datetime | None = None) -> None:
        with self._lock:
            job = self._held(lease)
            at = self._now(now)
            self._give_back(job, at, at, Outcome.RELEASED)

    def _give_back(self, job: Job, at: datetime, run_at: datetime, outcome: Outcome) -> None:
        self._end_attempt(job, at, outcome, None)
        self._jobs[job.id] = replace(
            job, state=JobState.PENDING, run_at=run_at, attempt=job.attempt - 1, lease_until=None
        )
        self._announce(run_at)

    def _announce(self, run_at: datetime) -> None:
        """Tell watchers a job became pending (due at ``run_at``), as enqueue does. The
        callbacks only schedule a wake-up; they never call back into the store."""
        for callback in list(self._wakeups):
            callback(run_at)

    def _finish(
        self,
        job: Job,
        at: datetime,
        state: JobState,
        outcome: Outcome,
        error: str | None = None,
        trace: str | None = None,
    ) -> None:
        if job.state is JobState.RUNNING:
            self._end_attempt(job, at, outcome, error, trace)
        self._jobs[job.id] = replace(
            job,
            state=state,
            lease_until=None,
            finished_at=at,
            last_error=error if error is not None else job.last_error,
            # A job that succeeded has done all its work, whatever it last reported.
            progress=1.0 if state is JobState.SUCCEEDED else job.progress,
        )
        if job.unique_key is not None and self._active_keys.get(job.unique_key) == job.id:
            del self._active_keys[job.unique_key]
        for hook in list(self._finished_hooks):
            hook()
        if job.id in self._children:
            self._parent_ended(job.id, state, at)

    def _end_attempt(
        self,
        job: Job,
        at: datetime,
        outcome: Outcome,
        error: str | None,
        trace: str | None = None,
    ) -> None:
        self._started.discard(job.lease_token or 0)
        history = self._history[job.id]
        for index in range(len(history) - 1, -1, -1):
            if history[index].token == job.lease_token:
                history[index] = replace(
                    history[index],
                    finished_at=at,
                    outcome=outcome,
                    error=error,
                    traceback=trace,
                    heartbeats=job.heartbeats,
                    last_heartbeat_at=job.last_heartbeat_at,
                    lease_until=job.lease_until if outcome is Outcome.LEASE_EXPIRED else None,
                )
                return

    def _get(self, job_id: int) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job
