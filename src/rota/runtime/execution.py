"""Execution: a job a worker holds (its task, context and local lease deadline), and why a
running job may be stopped from outside."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from enum import Enum
from typing import Any

from rota.domain.job import Job
from rota.domain.lease import Lease
from rota.runtime.context import JobContext


class Stop(Enum):
    """Why a running job's task was cancelled from outside."""

    LEASE_LOST = "lease lost"  #: heartbeat fenced out, cancelled, or local lease deadline passed
    RELEASE = "release"  #: graceful shutdown past its grace period: hand the job back
    ABANDON = "abandon"  #: the handler raised Abandon: report nothing, the lease will expire
    HALT = "halt"  #: a hard stop (a second signal): hand the job back at once, fenced


#: How long a hard stop waits for each job's release before leaving it to lease expiry.
HALT_S = 1.0


@dataclass(slots=True)
class Execution:
    """A job this worker holds: its task, context and local lease deadline."""

    job: Job
    ctx: JobContext
    #: Monotonic instant after which another worker may already have claimed the job.
    deadline: float
    #: The lease the claim issued (built once: every report and heartbeat needs it).
    lease: Lease
    task: asyncio.Task[None] | None = None
    stop: Stop | None = None
    started: float = 0.0
    #: The thread running a sync handler, which outlives a cancelled wait for it.
    thread: Future[Any] | None = None
    #: Set once the outcome is being written: a heartbeat that then finds the lease gone is
    #: seeing our own final write, not a lost lease.
    reporting: bool = False
    #: The deadline its lease alarm is set for (the worker keeps one alarm per deadline).
    alarm_at: float | None = None
    #: Called once the job's task is over (the worker lets go of the job): by ``Executor.run``
    #: as it returns, or, for a task cancelled before it ever ran, by ``interrupt``.
    finished: Callable[[Execution], None] | None = None
    #: Whether ``Executor.run`` began (from then on it calls ``finished`` itself).
    entered: bool = False
    #: When the request behind ``deadline`` was sent (the claim, then each renewal): an
    #: answer to an earlier request says nothing newer.
    renewed_at: float = float("-inf")

    @property
    def thread_running(self) -> bool:
        return self.thread is not None and not self.thread.done()

    def interrupt(self, why: Stop) -> None:
        """Cancel the handler for ``why`` (the first reason wins)."""
        if self.stop is None:
            self.stop = why
        self.ctx.cancel()
        task = self.task
        if task is not None and not task.done():
            task.cancel()
            finished = self.finished
            if not self.entered and finished is not None:
                # Cancelled before its first step (in the turn of the loop that claimed it,
                # after a stall past the lease): its coroutine will never run to say so.
                task.add_done_callback(lambda _: finished(self))
