"""MemoryStore: the reference semantics of the Store contract, in dicts behind one lock.

Every verb takes the lock for its whole body and never awaits inside it, so the store is safe
to share between threads (each with its own event loop) as well as between tasks.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from rota.domain import blame
from rota.domain.activity import TOP_ERRORS, ActivityBucket, AttemptEnd, ErrorGroup, attempt_end
from rota.domain.audit import AuditEntry, AuditFilter, AuditRecord, from_json_text, json_text
from rota.domain.clock import Clock, SystemClock, utc
from rota.domain.errors import (
    InvalidJob,
    JobNotFound,
    JobRunning,
    LeaseLost,
    ScheduleNotFound,
    StateConflict,
)
from rota.domain.flow import (
    EVERY_TENANT,
    Budget,
    Key,
    Limit,
    LimitScope,
    counted_keys,
    limit_for,
    select,
    validate_queue,
)
from rota.domain.job import (
    MAX_ERROR_LENGTH,
    MAX_TRACEBACK_LENGTH,
    Attempt,
    EnqueueResult,
    Job,
    JobEdit,
    JobSpec,
    previewed,
)
from rota.domain.job_state import EXPIRED, JobState, Outcome, runs_alone, unrunnable
from rota.domain.lease import Lease
from rota.domain.payload import Progress, truncate
from rota.domain.schedule import ScheduleSpec
from rota.domain.schedule_state import Firing, Missed, Schedule, decide, resumed, upserted
from rota.domain.transitions import HELD_BACK, MOVES, refusal, released_state
from rota.domain.workflow import (
    REOPENED_STATES,
    Workflow,
    WorkflowBuilder,
    cancel_reason,
    deleted_reason,
    plan,
    resolve,
    slot_graph,
    unknown_workflow,
    workflow_outcome,
)
from rota.store.memory_activity import ActivityTallies
from rota.store.memory_durable import DurableState, MemoryDurable
from rota.store.records import (
    MAX_BULK,
    MAX_PAGE_EDGES,
    MAX_PAGE_SIZE,
    AuditPage,
    Beat,
    Counted,
    Counts,
    JobFilter,
    LimitInfo,
    Page,
    QueueInfo,
    RescueResult,
    ThroughputBucket,
    WorkerInfo,
    bucketize,
    check_schedule_listing,
    decode_cursor,
    encode_cursor,
    kinds_by_queue,
)


@dataclass(slots=True)
class _Dep:
    """A workflow edge: ``child`` runs after ``parent``; ``satisfied`` once it may."""

    parent: int
    child: int
    policy: str
    satisfied: bool


class MemoryStore(MemoryDurable):
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

    async def enqueue_workflow(self, graph: Workflow, *, now: datetime | None = None) -> list[Job]:
        graph.check()
        with self._lock:
            jobs, earliest = self._write_workflow(graph, self._now(now))
            callbacks = list(self._wakeups) if earliest is not None else []
        for callback in callbacks:
            callback(earliest)
        return jobs

    def _write_workflow(self, graph: Workflow, at: datetime) -> tuple[list[Job], datetime | None]:
        """Write ``graph`` (already checked; the lock held): its jobs in the graph's order and
        the earliest run_at of those pending."""
        parents = {
            job_id: self._jobs[job_id].state for job_id in graph.parent_ids if job_id in self._jobs
        }
        planned, satisfied = plan(graph, parents)
        ids = list(range(self._next_id, self._next_id + len(graph.specs)))
        existing = [self._jobs[job_id] for job_id in graph.parent_ids]
        workflow = next((j.workflow for j in existing if j.workflow is not None), None)
        workflow = workflow or (existing[0].id if existing else ids[0])
        for job in existing:
            if job.workflow is None:
                self._jobs[job.id] = replace(job, workflow=workflow)
        results, _ = self._insert(graph.specs, at)
        jobs: list[Job] = []
        for result, item in zip(results, resolve(planned, ids), strict=True):
            job = replace(
                result.job, state=item.state, waiting_on=item.waiting_on, workflow=workflow
            )
            if item.state is JobState.CANCELLED:
                job = replace(job, finished_at=at, last_error=item.error)
                assert item.blocked_by is not None
                self._blocked_by[job.id] = item.blocked_by
            self._jobs[job.id] = job
            jobs.append(job)
        for edge, done in zip(graph.edges, satisfied, strict=True):
            parent = edge.parent_id if edge.parent_id is not None else ids[edge.parent_node or 0]
            row = _Dep(parent, ids[edge.child], edge.on_parent_failure, done)
            self._children.setdefault(parent, []).append(row)
            self._parents.setdefault(ids[edge.child], []).append(row)
        pending = [job.run_at for job in jobs if job.state is JobState.PENDING]
        return jobs, min(pending, default=None)

    async def parent_results(self, job_id: int) -> dict[int, object]:
        with self._lock:
            return {
                e.parent: self._jobs[e.parent].result
                for e in self._parents.get(job_id, [])
                if e.parent in self._jobs
            }

    async def workflow(
        self,
        workflow_id: int,
        *,
        after: int | None = None,
        limit: int | None = None,
        previews: bool = False,
    ) -> tuple[list[Job], list[tuple[int, int, str]]]:
        with self._lock:
            every = sorted(
                (j for j in self._jobs.values() if j.workflow == workflow_id), key=lambda j: j.id
            )
            members = {j.id for j in every}
            jobs = every
            if limit is not None:
                jobs = [j for j in every if after is None or j.id > after][: max(1, limit)]
            edges = [
                (e.parent, e.child, e.policy)
                for j in jobs
                for e in sorted(self._parents.get(j.id, []), key=lambda e: e.parent)
                if e.parent in members
            ]
            if limit is not None:
                edges = edges[: MAX_PAGE_EDGES + 1]
            return [previewed(j) for j in jobs] if previews else jobs, edges

    async def workflow_states(self, workflow_id: int) -> dict[JobState, int]:
        with self._lock:
            found: dict[JobState, int] = {}
            for job in self._jobs.values():
                if job.workflow == workflow_id:
                    found[job.state] = found.get(job.state, 0) + 1
            return found

    async def related(
        self, job_id: int, *, parents: bool, after: int | None = None, limit: int = 50
    ) -> list[tuple[int, JobState, str]]:
        with self._lock:
            deps = (self._parents if parents else self._children).get(job_id, [])
            found = sorted(
                (e.parent if parents else e.child, e.policy)
                for e in deps
                if (e.parent if parents else e.child) in self._jobs
            )
            return [
                (other, self._jobs[other].state, policy)
                for other, policy in found
                if after is None or other > after
            ][: max(1, limit)]

    async def cancel_workflow(self, workflow_id: int, *, now: datetime | None = None) -> int:
        with self._lock:
            at = self._now(now)
            unfinished = sorted(
                j.id
                for j in self._jobs.values()
                if j.workflow == workflow_id and not j.state.is_terminal
            )
            for job_id in unfinished:
                job = self._jobs[job_id]
                if not job.state.is_terminal:  # else: cancelled with a parent just now
                    self._finish(job, at, JobState.CANCELLED, Outcome.CANCELLED)
            return len(unfinished)

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

    def _parent_ended(self, parent: int, state: JobState, at: datetime) -> None:
        """Settle the edges to ``parent``'s children now that it ended in ``state`` (the
        lock held): the direct children only; a cancelled child settles its own in turn."""
        failed = state is not JobState.SUCCEEDED
        for edge in self._children.get(parent, []):
            child = self._jobs.get(edge.child)
            if edge.satisfied or child is None:
                continue
            if not failed or edge.policy == "run":
                edge.satisfied = True
                child = replace(child, waiting_on=child.waiting_on - 1)
                if child.state is JobState.WAITING and child.waiting_on == 0:
                    child = replace(child, state=JobState.PENDING)
                    self._jobs[child.id] = child
                    self._announce(child.run_at)
                else:
                    self._jobs[child.id] = child
            elif child.state in HELD_BACK:
                self._blocked_by[child.id] = parent
                self._finish(
                    child, at, JobState.CANCELLED, Outcome.CANCELLED, cancel_reason(parent, state)
                )

    def _orphan_children(self, doomed: set[int], at: datetime) -> None:
        """The jobs ``doomed`` are about to be deleted (the lock held): each edge by which one
        still holds a child up stops counting; a waiting child on a "cancel" edge is cancelled
        naming the deleted parent, and one whose last such edge it was becomes pending, as if
        the parent had ended dead or cancelled. Children deleted with them are left alone."""
        for parent in sorted(doomed):
            for edge in self._children.get(parent, []):
                child = self._jobs.get(edge.child)
                if edge.satisfied or child is None or child.id in doomed:
                    continue
                edge.satisfied = True
                child = replace(child, waiting_on=child.waiting_on - 1)
                self._jobs[child.id] = child
                if self._blocked_by.get(child.id) == parent:
                    del self._blocked_by[child.id]  # nothing can re-arm it any more
                if child.state not in HELD_BACK:
                    continue
                if edge.policy == "cancel":
                    self._finish(
                        child, at, JobState.CANCELLED, Outcome.CANCELLED, deleted_reason(parent)
                    )
                elif child.waiting_on == 0 and child.state is JobState.WAITING:
                    self._jobs[child.id] = replace(child, state=JobState.PENDING)
                    self._announce(child.run_at)

    def _forget_edges(self, job_id: int) -> None:
        """Drop a pruned job's edges, both ways (what ON DELETE CASCADE does in SQL)."""
        for edge in self._children.pop(job_id, []):
            self._parents[edge.child].remove(edge)
        for edge in self._parents.pop(job_id, []):
            self._children[edge.parent].remove(edge)
        self._blocked_by.pop(job_id, None)

    def _rearm_children(self, parent: int) -> None:
        """``parent`` was retried: the jobs its end cancelled wait again, unless another of
        their parents has ended dead or cancelled too (then that one blocks them); and the
        edges its end settled wait again for its new outcome (``_reopen_edges``)."""
        self._reopen_edges(parent)
        for edge in self._children.get(parent, []):
            child = self._jobs.get(edge.child)
            if child is None or self._blocked_by.get(child.id) != parent:
                continue
            if child.state is not JobState.CANCELLED:
                continue
            other = next(
                (
                    e.parent
                    for e in self._parents.get(child.id, [])
                    if e.parent != parent
                    and not e.satisfied
                    and e.policy == "cancel"
                    and e.parent in self._jobs
                    and self._jobs[e.parent].state in (JobState.DEAD, JobState.CANCELLED)
                ),
                None,
            )
            if other is not None:
                self._blocked_by[child.id] = other
                continue
            del self._blocked_by[child.id]
            self._jobs[child.id] = replace(
                child, state=JobState.WAITING, finished_at=None, last_error=None
            )
            self._rearm_children(child.id)

    def _reopen_edges(self, parent: int) -> None:
        """``parent`` runs again: each settled edge to a child that has not started since
        (waiting or pending) or may be retried (dead or cancelled) counts again, and a pending
        child waits. A running or succeeded child keeps its run."""
        for edge in self._children.get(parent, []):
            child = self._jobs.get(edge.child)
            if not edge.satisfied or child is None or child.state not in REOPENED_STATES:
                continue
            edge.satisfied = False
            state = JobState.WAITING if child.state is JobState.PENDING else child.state
            self._jobs[child.id] = replace(child, waiting_on=child.waiting_on + 1, state=state)

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

    # ------------------------------------------------------------------ queries

    async def get(self, job_id: int) -> Job:
        with self._lock:
            return self._get(job_id)

    async def get_preview(self, job_id: int, *, chars: int) -> Job:
        with self._lock:
            return previewed(self._get(job_id), chars=chars)

    def _get(self, job_id: int) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    async def get_many(self, job_ids: Sequence[int]) -> list[Job]:
        with self._lock:
            return [self._jobs[job_id] for job_id in set(job_ids) if job_id in self._jobs]

    async def list_jobs(
        self,
        filter: JobFilter,
        *,
        cursor: str | None = None,
        limit: int = 50,
        previews: bool = False,
    ) -> Page:
        limit = max(1, min(limit, MAX_PAGE_SIZE))
        after = decode_cursor(cursor) if cursor is not None else None
        with self._lock:
            ids = sorted(self._jobs, reverse=True)
            page: list[Job] = []
            for job_id in ids:
                if after is not None and job_id >= after:
                    continue
                job = self._jobs[job_id]
                if _matches(job, filter):
                    page.append(job)
                    if len(page) > limit:
                        break
        more = len(page) > limit
        page = page[:limit]
        cursor = encode_cursor(page[-1].id) if more else None
        return Page([previewed(job) for job in page] if previews else page, cursor)

    async def counts(self, *, now: datetime | None = None) -> Counts:
        with self._lock:
            at = self._now(now)
            return _count(self._jobs.values(), at)

    async def count_jobs(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        with self._lock:
            matched = sum(1 for job in self._jobs.values() if _matches(job, filter))
        return min(matched, max(0, limit))

    async def count_or_estimate(self, filter: JobFilter, *, exact_up_to: int) -> Counted:
        with self._lock:
            return Counted(sum(1 for job in self._jobs.values() if _matches(job, filter)))

    async def throughput(
        self, *, since: datetime, bucket: timedelta, now: datetime | None = None
    ) -> list[ThroughputBucket]:
        with self._lock:
            at = self._now(now)
            finished = [
                (job.finished_at, job.state, 1)
                for job in self._jobs.values()
                if job.finished_at is not None and job.state.is_terminal
            ]
        return bucketize(finished, utc(since), bucket, at)

    async def activity(
        self,
        *,
        since: datetime,
        bucket: timedelta,
        queue: str | None = None,
        kind: str | None = None,
        now: datetime | None = None,
    ) -> list[ActivityBucket]:
        with self._lock:
            return self._activity.buckets(utc(since), bucket, self._now(now), (queue, kind))

    async def top_errors(
        self,
        *,
        since: datetime,
        queue: str | None = None,
        kind: str | None = None,
        limit: int = TOP_ERRORS,
        now: datetime | None = None,
    ) -> list[ErrorGroup]:
        with self._lock:
            return self._activity.top_errors(utc(since), self._now(now), (queue, kind), limit)

    async def attempts(self, job_id: int) -> list[Attempt]:
        with self._lock:
            job = self._get(job_id)
            # The running attempt's heartbeats so far are the job's.
            return [
                replace(
                    entry,
                    heartbeats=job.heartbeats,
                    last_heartbeat_at=job.last_heartbeat_at,
                )
                if entry.outcome is Outcome.RUNNING and entry.token == job.lease_token
                else entry
                for entry in self._history[job_id]
            ]

    # ------------------------------------------------------------------ maintenance

    async def rescue(self, *, now: datetime | None = None, limit: int = 1000) -> RescueResult:
        dead: list[int] = []
        requeued: list[int] = []
        with self._lock:
            at = self._now(now)
            expired = sorted(
                (
                    job
                    for job in self._jobs.values()
                    if job.state is JobState.RUNNING
                    and job.lease_until is not None
                    and job.lease_until < at
                ),
                key=lambda job: job.id,
            )[: max(0, limit)]
            for job in expired:
                expiry = self._expiry(job)
                if expiry.dead:
                    dead_job = replace(job, crashes=expiry.crashes)
                    self._finish(dead_job, at, JobState.DEAD, Outcome.LEASE_EXPIRED, expiry.error)
                    dead.append(job.id)
                else:
                    self._end_attempt(job, at, Outcome.LEASE_EXPIRED, expiry.error)
                    # Its run_at stays: it keeps its place in the claim order (PostgreSQL's
                    # rescue statement says why).
                    self._jobs[job.id] = replace(
                        job,
                        state=JobState.PENDING,
                        attempt=expiry.attempt,
                        crashes=expiry.crashes,
                        lease_until=None,
                        last_error=expiry.error,
                    )
                    requeued.append(job.id)
            if requeued:
                self._announce(at)
        return RescueResult(dead=dead, requeued=requeued)

    async def expire(self, *, now: datetime | None = None, limit: int = 1000) -> list[int]:
        with self._lock:
            at = self._now(now)
            expired = sorted(
                job.id
                for job in self._jobs.values()
                if job.state in MOVES["expire"].sources and job.is_expired(at)
            )[: max(0, limit)]
            for job_id in expired:
                job = replace(self._jobs[job_id], last_error=EXPIRED)
                self._finish(job, at, JobState.CANCELLED, Outcome.CANCELLED)
            return expired

    async def end_unrunnable(
        self,
        *,
        grace: timedelta,
        alive_within: timedelta,
        now: datetime | None = None,
        limit: int = 1000,
    ) -> list[int]:
        with self._lock:
            at = self._now(now)
            served = kinds_by_queue(
                (info.queues, info.kinds)
                for info in self._workers.values()
                if info.beat_at is not None and info.beat_at >= at - alive_within
            )
            doomed = sorted(
                job.id
                for job in self._jobs.values()
                if job.state in MOVES["end_unrunnable"].sources
                and job.run_at <= at - grace
                and job.queue in served
                and (known := served[job.queue]) is not None
                and job.kind not in known
            )[: max(0, limit)]
            for job_id in doomed:
                job = self._jobs[job_id]
                self._finish(
                    replace(job, last_error=unrunnable(job.kind)), at, JobState.DEAD, Outcome.FAILED
                )
            return doomed

    async def prune(self, *, older_than: datetime, limit: int = 10_000) -> int:
        cutoff = utc(older_than)
        with self._lock:
            finished = sorted(
                (job.finished_at, job.id)
                for job in self._jobs.values()
                if job.state.is_terminal
                and job.finished_at is not None
                and job.finished_at < cutoff
            )
            doomed = [job_id for _, job_id in finished[: max(0, limit)]]
            self._orphan_children(set(doomed), self._now(None))
            if len(doomed) < limit:
                # As the SQL stores: the tallies of minutes whose jobs are all gone go too.
                self._activity.prune(cutoff)
            for job_id in doomed:
                job = self._jobs.pop(job_id)
                self._history.pop(job_id, None)
                self._holds.pop(job_id, None)
                if job.workflow is not None:
                    self._forget_edges(job_id)
                if job.schedule is not None and job.slot_at is not None:
                    # Slot keys outlive their job only as long as the job itself: a pruned
                    # slot is long in the past and its schedule has moved beyond it.
                    self._slots.pop((job.schedule, job.slot_at), None)
            return len(doomed)

    # ------------------------------------------------------------------ audit log

    async def record_audit(self, record: AuditRecord, *, now: datetime | None = None) -> AuditEntry:
        with self._lock:
            entry = AuditEntry(
                id=self._next_audit_id,
                at=self._now(now),
                identity=record.identity,
                action=record.action.value,
                target=record.target,
                # Kept as JSON would be: later changes to the caller's dicts change nothing.
                filter=from_json_text(json_text(record.filter)),
                detail=from_json_text(json_text(record.detail)),
                count=record.count,
            )
            self._next_audit_id += 1
            self._audit.append(entry)
            return entry

    async def list_audit(
        self, filter: AuditFilter, *, cursor: str | None = None, limit: int = 50
    ) -> AuditPage:
        limit = max(1, min(limit, MAX_PAGE_SIZE))
        after = decode_cursor(cursor) if cursor is not None else None
        page: list[AuditEntry] = []
        with self._lock:
            for entry in reversed(self._audit):
                if after is not None and entry.id >= after:
                    continue
                if filter.matches(entry):
                    page.append(entry)
                    if len(page) > limit:
                        break
        more = len(page) > limit
        page = page[:limit]
        return AuditPage(page, encode_cursor(page[-1].id) if more else None)

    async def prune_audit(self, *, older_than: datetime, limit: int = 10_000) -> int:
        cutoff = utc(older_than)
        with self._lock:
            oldest = sorted((e.at, e.id) for e in self._audit if e.at < cutoff)
            doomed = {entry_id for _, entry_id in oldest[: max(0, limit)]}
            self._audit = [e for e in self._audit if e.id not in doomed]
            return len(doomed)

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


def _matches(job: Job, filter: JobFilter) -> bool:
    if filter.states is not None and job.state not in filter.states:
        return False
    if filter.kind is not None and job.kind != filter.kind:
        return False
    if filter.queue is not None and job.queue != filter.queue:
        return False
    if filter.tenant is not None and job.tenant != filter.tenant:
        return False
    if filter.schedule is not None and job.schedule != filter.schedule:
        return False
    if filter.workflow is not None and job.workflow != filter.workflow:
        return False
    if filter.search is not None:
        return job.id == filter.search_id or job.unique_key == filter.search
    return True


def _count(jobs: Iterable[Job], at: datetime) -> Counts:
    by_state = dict.fromkeys(JobState, 0)
    by_queue: dict[str, dict[JobState, int]] = {}
    oldest: datetime | None = None
    for job in jobs:
        by_state[job.state] += 1
        per_queue = by_queue.setdefault(job.queue, dict.fromkeys(JobState, 0))
        per_queue[job.state] += 1
        if job.is_due(at) and (oldest is None or job.run_at < oldest):
            oldest = job.run_at
    return Counts(by_state=by_state, by_queue=by_queue, oldest_due_at=oldest)
