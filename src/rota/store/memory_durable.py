"""The memory store's durable verbs (store/durable.py): the reference semantics of step
records, sleeps, waits and signals, in dicts behind the store's one lock.

``MemoryStore`` mixes ``MemoryDurable`` in; each verb takes the store's lock for its whole body
and never awaits inside it, as every other verb of the memory store does.
"""

from __future__ import annotations

import json
import threading
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from rota.domain.durable import SignalResult, Step, StepKind, StepState, WaitOutcome
from rota.domain.errors import InvalidInput
from rota.domain.job import MAX_ERROR_LENGTH, MAX_TRACEBACK_LENGTH, Job
from rota.domain.job_state import JobState, Outcome
from rota.domain.lease import Lease
from rota.domain.payload import truncate
from rota.store.durable import Effects

#: The states of a job whose wait a signal reaches: a held job's wait still waits (it takes
#: its signal now and is due once released), a cancelled or finished job's does not.
_SIGNALLED = (JobState.PENDING, JobState.RUNNING, JobState.HELD)


@dataclass(eq=False)
class _Signal:
    key: str
    data: Any
    sent_at: datetime
    expires_at: datetime


@dataclass
class DurableState:
    """The records of every job (by job id, then name), and the signals kept for waits."""

    steps: dict[int, dict[str, Step]] = field(default_factory=dict)
    signals: list[_Signal] = field(default_factory=list)
    next_seq: int = 1


def _parsed(text: str | None) -> Any:
    """Stored as a database would give it back: a copy, parsed from JSON."""
    return None if text is None else json.loads(text)


class MemoryDurable:
    """The durable verbs of ``MemoryStore`` (which provides what is declared here)."""

    _durable: DurableState
    _lock: threading.RLock
    _jobs: dict[int, Job]

    if TYPE_CHECKING:

        def _now(self, now: datetime | None) -> datetime: ...
        def _held(self, lease: Lease) -> Job: ...
        def _give_back(
            self, job: Job, at: datetime, run_at: datetime, outcome: Outcome
        ) -> None: ...
        def _end_attempt(
            self,
            job: Job,
            at: datetime,
            outcome: Outcome,
            error: str | None,
            trace: str | None = None,
        ) -> None: ...
        def _announce(self, run_at: datetime) -> None: ...

    async def steps(self, job_id: int) -> list[Step]:
        with self._lock:
            return sorted(self._durable.steps.get(job_id, {}).values(), key=lambda s: s.seq)

    def _record(self, job: Job, step: Step) -> None:
        """Write ``step`` for ``job`` (the lock held), keeping the seq of an earlier record."""
        records = self._durable.steps.setdefault(job.id, {})
        earlier = records.get(step.name)
        if earlier is not None:
            # A step's run starts anew; a sleep or a wait keeps its first start and deadline.
            first = step.started_at if step.kind is StepKind.STEP else earlier.started_at
            step = replace(step, seq=earlier.seq, started_at=first or step.started_at)
        else:
            step = replace(step, seq=self._durable.next_seq)
            self._durable.next_seq += 1
        records[step.name] = step

    def _end_open_waits(self, job_id: int) -> None:
        """Forget the waits ``job_id``'s earlier run left waiting (the lock held): the job is
        made to run again, and its new run waits afresh for whatever it waits for."""
        records = self._durable.steps.get(job_id)
        if records is None:
            return
        for name in [n for n, step in records.items() if step.state is StepState.WAITING]:
            del records[name]

    def _existing(self, job_id: int, name: str) -> Step | None:
        return self._durable.steps.get(job_id, {}).get(name)

    async def checkpoint(
        self,
        lease: Lease,
        name: str,
        *,
        result: str | None,
        duration: timedelta = timedelta(0),
        now: datetime | None = None,
    ) -> None:
        with self._lock:
            job = self._held(lease)
            self._checkpoint(job, lease, name, result, duration, self._now(now))

    def _checkpoint(
        self,
        job: Job,
        lease: Lease,
        name: str,
        result: str | None,
        duration: timedelta,
        at: datetime,
    ) -> None:
        earlier = self._existing(job.id, name)
        if earlier is not None and earlier.state is StepState.SUCCEEDED:
            return
        attempts = (earlier.attempts if earlier is not None else 0) + 1
        self._record(
            job,
            Step(
                job.id,
                name,
                StepKind.STEP,
                StepState.SUCCEEDED,
                0,
                attempts=attempts,
                result=_parsed(result),
                error=earlier.error if earlier is not None else None,
                started_at=at - duration,
                finished_at=at,
                token=lease.token,
            ),
        )

    async def fail_step(
        self,
        lease: Lease,
        name: str,
        *,
        error: str,
        traceback: str | None = None,
        duration: timedelta = timedelta(0),
        retry_in: timedelta | None = None,
        now: datetime | None = None,
    ) -> None:
        with self._lock:
            job = self._held(lease)
            at = self._now(now)
            earlier = self._existing(job.id, name)
            if earlier is not None and earlier.state is StepState.SUCCEEDED:
                return
            text = truncate(error, MAX_ERROR_LENGTH)
            self._record(
                job,
                Step(
                    job.id,
                    name,
                    StepKind.STEP,
                    StepState.FAILED,
                    0,
                    attempts=(earlier.attempts if earlier is not None else 0) + 1,
                    error=text,
                    started_at=at - duration,
                    finished_at=at,
                    token=lease.token,
                ),
            )
            if retry_in is None:
                return
            self._end_attempt(
                job, at, Outcome.FAILED, text, truncate(traceback, MAX_TRACEBACK_LENGTH)
            )
            self._jobs[job.id] = replace(
                job,
                state=JobState.PENDING,
                run_at=at + retry_in,
                attempt=job.attempt - 1,
                lease_until=None,
                last_error=text,
            )
            self._announce(at + retry_in)

    async def sleep(
        self,
        lease: Lease,
        name: str,
        *,
        until: datetime | None = None,
        delay: timedelta | None = None,
        now: datetime | None = None,
    ) -> datetime | None:
        with self._lock:
            job = self._held(lease)
            at = self._now(now)
            earlier = self._existing(job.id, name)
            if earlier is not None and earlier.state is StepState.SLEPT:
                return None
            if earlier is not None and earlier.wake_at is not None:
                wake = earlier.wake_at
            else:
                wake = until if until is not None else at + (delay or timedelta(0))
            if wake <= at:
                self._record(
                    job,
                    Step(
                        job.id,
                        name,
                        StepKind.SLEEP,
                        StepState.SLEPT,
                        0,
                        started_at=at,
                        finished_at=at,
                        wake_at=wake,
                        token=lease.token,
                    ),
                )
                return None
            self._record(
                job,
                Step(
                    job.id,
                    name,
                    StepKind.SLEEP,
                    StepState.SLEEPING,
                    0,
                    started_at=at,
                    wake_at=wake,
                    token=lease.token,
                ),
            )
            self._give_back(job, at, wake, Outcome.SLEPT)
            return wake

    async def wait_for(
        self,
        lease: Lease,
        name: str,
        key: str,
        *,
        timeout: timedelta,  # noqa: ASYNC109 (the wait's deadline, not ours)
        now: datetime | None = None,
    ) -> WaitOutcome:
        with self._lock:
            job = self._held(lease)
            at = self._now(now)
            earlier = self._existing(job.id, name)
            if earlier is not None and earlier.state is StepState.RECEIVED:
                return WaitOutcome(StepState.RECEIVED, earlier.result)
            if earlier is not None and earlier.state is StepState.TIMED_OUT:
                return WaitOutcome(StepState.TIMED_OUT)
            deadline = earlier.wake_at if earlier is not None else None
            if deadline is None:
                deadline = at + timeout
            wait = Step(
                job.id,
                name,
                StepKind.WAIT,
                StepState.WAITING,
                0,
                started_at=at,
                wake_at=deadline,
                key=key,
                token=lease.token,
            )
            kept = self._take_signal(key, at)
            if kept is not None:
                self._record(
                    job, replace(wait, state=StepState.RECEIVED, result=kept.data, finished_at=at)
                )
                return WaitOutcome(StepState.RECEIVED, kept.data)
            if deadline <= at:
                self._record(job, replace(wait, state=StepState.TIMED_OUT, finished_at=at))
                return WaitOutcome(StepState.TIMED_OUT)
            self._record(job, wait)
            self._give_back(job, at, deadline, Outcome.WAITED)
            return WaitOutcome(StepState.WAITING, deadline=deadline)

    def _take_signal(self, key: str, at: datetime) -> _Signal | None:
        """The oldest unexpired signal kept for ``key``, removed (the lock held)."""
        for kept in self._durable.signals:
            if kept.key == key and kept.expires_at > at:
                self._durable.signals.remove(kept)
                return kept
        return None

    async def signal(
        self,
        key: str,
        data: str | None,
        *,
        expire_after: timedelta,
        now: datetime | None = None,
    ) -> SignalResult:
        with self._lock:
            at = self._now(now)
            waits = [
                step
                for job_id, records in self._durable.steps.items()
                if (job := self._jobs.get(job_id)) is not None and job.state in _SIGNALLED
                for step in records.values()
                if step.state is StepState.WAITING and step.key == key
            ]
            if not waits:
                expires_at = at + expire_after
                self._durable.signals.append(_Signal(key, _parsed(data), at, expires_at))
                return SignalResult(key, expires_at=expires_at)
            wait = min(waits, key=lambda step: step.seq)
            self._durable.steps[wait.job_id][wait.name] = replace(
                wait, state=StepState.RECEIVED, result=_parsed(data), finished_at=at
            )
            job = self._jobs[wait.job_id]
            if job.state is not JobState.RUNNING and job.run_at > at:
                # A held job is due once released; it wakes no worker before.
                self._jobs[job.id] = replace(job, run_at=at)
            if job.state is JobState.PENDING:
                self._announce(min(job.run_at, at))
            return SignalResult(key, delivered_to=job.id)

    async def prune_durable(self, *, older_than: datetime, now: datetime | None = None) -> int:
        with self._lock:
            at = self._now(now)
            gone = 0
            for job_id in list(self._durable.steps):
                records = self._durable.steps[job_id]
                first = min(
                    (step.started_at for step in records.values() if step.started_at is not None),
                    default=None,
                )
                if job_id not in self._jobs and (first is None or first < older_than):
                    gone += len(records)
                    del self._durable.steps[job_id]
            kept = [s for s in self._durable.signals if s.expires_at > at]
            gone += len(self._durable.signals) - len(kept)
            self._durable.signals = kept
            return gone

    def effects(
        self, lease: Lease, *, idle_timeout: timedelta | None = None
    ) -> AbstractAsyncContextManager[Effects]:
        return _NoDatabase()


class _NoDatabase:
    """``effects`` of the memory store, which has no database to write into."""

    async def __aenter__(self) -> Effects:
        raise InvalidInput(
            "ctx.transaction() needs a database to write into: the memory store has none "
            "(use SQLite or PostgreSQL)"
        )

    async def __aexit__(self, *exc_info: object) -> None:
        return None
