"""JobContext: what a handler knows about the execution it is part of."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any

from rota.domain.durable import check_duration
from rota.domain.errors import InvalidInput
from rota.domain.job import Job
from rota.domain.lease import Lease
from rota.domain.payload import Progress
from rota.domain.retry import RetryPolicy
from rota.runtime.durable import DurableRun, DurableRuntime, sleep_until_of


class JobContext:
    """Passed to every handler as its first argument.

    ``fencing_token`` strictly increases with every claim of every job: pass it to your own
    downstream writes and reject writes carrying a lower token, so a worker that lost its lease
    cannot overwrite its successor's work. ``cancelled`` is set when the job is cancelled, its
    lease is lost, it times out, or the worker shuts down: long sync handlers should check
    ``ctx.is_cancelled`` between steps (async handlers are also cancelled at their next await).

    ``await ctx.progress(0.42, message="page 42 of 100")`` (``ctx.progress_sync`` in a sync
    handler) reports how far the handler is: the worker writes the latest report within a
    second, fenced on the lease, at most one write a second however often the handler reports
    (rota.runtime.progress). A job that succeeded shows progress 1.

    ``ctx.parent_results`` holds, for a job of a workflow, each parent's result by job id.

    Durable jobs (docs/concepts/durable.md): ``await ctx.step(name, fn, *args)`` runs ``fn``
    once and checkpoints its JSON result under the lease, so later runs of the job return it
    without running it (C11); ``await ctx.sleep(timedelta(hours=6))`` and
    ``ctx.sleep_until(when)`` let go of the worker until then; ``await ctx.wait_for(key,
    timeout=...)`` until a signal to ``key`` (``app.signal``) or the timeout (WaitTimeout);
    ``async with ctx.transaction() as conn:`` writes to the same database, committed with the
    step's checkpoint or the job's completion only while the lease holds (C12). Sync handlers
    use ``step_sync``, ``sleep_sync`` and ``wait_for_sync``.
    """

    __slots__ = (
        "_durable",
        "_event",
        "_flag",
        "_on_progress",
        "_progress",
        "_run",
        "_sent",
        "job",
        "parent_results",
        "worker",
    )

    def __init__(
        self,
        job: Job,
        worker: str,
        durable: DurableRuntime | None = None,
        *,
        on_progress: Callable[[], None] | None = None,
    ) -> None:
        """``on_progress`` is called (from the reporting thread) after each report."""
        self.job = job
        self._on_progress = on_progress
        self.worker = worker
        self._durable = durable
        self._run: DurableRun | None = None
        #: What each parent of a workflow job returned, by parent job id (None: it returned
        #: None); empty outside workflows. Read by the worker before the handler starts.
        self.parent_results: dict[int, Any] = {}
        self._flag = False
        # Made on first use: most handlers never look, and an Event costs a Condition and a lock.
        self._event: threading.Event | None = None
        #: The latest report, and the last one a heartbeat wrote. Each side writes only its
        #: own field (the handler's thread the first, the heartbeat the second), so a report
        #: made while a beat is in flight is never mistaken for one already sent.
        self._progress: Progress | None = None
        self._sent: Progress | None = None

    @property
    def job_id(self) -> int:
        return self.job.id

    @property
    def attempt(self) -> int:
        return self.job.attempt

    @property
    def fencing_token(self) -> int:
        assert self.job.lease_token is not None  # a context exists only for claimed jobs
        return self.job.lease_token

    @property
    def lease(self) -> Lease:
        return self.job.lease

    @property
    def is_cancelled(self) -> bool:
        return self._flag

    @property
    def cancelled(self) -> threading.Event:
        """An Event set on cancellation, for handlers that want to wait on it."""
        event = self._event
        if event is None:
            event = self._event = threading.Event()
            # cancel() sets the flag before it looks for the event: checking the flag after
            # publishing the event means one of the two always sets it.
            if self._flag:
                event.set()
        return event

    async def progress(self, fraction: float, *, message: str | None = None) -> None:
        """Report progress: ``fraction`` in [0, 1] and an optional ``message`` of at most 200
        characters (ValueError otherwise). The latest report is written within a second;
        the job's ``progress`` and ``progress_message`` show it from then on."""
        self.progress_sync(fraction, message=message)

    def progress_sync(self, fraction: float, *, message: str | None = None) -> None:
        """``progress`` for sync handlers (safe to call from the handler's thread)."""
        self._progress = Progress(fraction, message)
        if self._on_progress is not None:
            self._on_progress()

    def unsent_progress(self) -> Progress | None:
        """The latest report if no heartbeat wrote it yet (the heartbeat reads this)."""
        report = self._progress
        return report if report is not self._sent else None

    def progress_sent(self, report: Progress) -> None:
        """Record that a heartbeat wrote ``report`` (the heartbeat calls this)."""
        self._sent = report

    # ------------------------------------------------------------------ durable jobs

    def durable_run(self) -> DurableRun | None:
        """The durable side of this execution, if the handler used it (the worker reads it)."""
        return self._run

    def _durable_run(self) -> DurableRun:
        run = self._run
        if run is None:
            if self._durable is None:
                raise InvalidInput("steps, sleeps and waits run inside a worker's handler")
            run = self._run = DurableRun(self._durable, self)
        return run

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        max_attempts: int | None = None,
        retry: RetryPolicy | None = None,
    ) -> Any:
        """Run ``fn(*args)`` (async or plain; a plain one runs in a thread) as step ``name``
        and return its value. When it returns, its value (JSON, at most 64 KiB) is
        checkpointed under the lease: every later run of this job returns the stored value
        without running ``fn`` (C11). ``name`` must be unique within the job.

        When ``fn`` raises, the failure is recorded on the step and the error reaches the
        handler (uncaught, the job retries with its backoff within its attempts). With
        ``max_attempts``, the step has attempts of its own: it is retried with ``retry`` (the
        kind's policy by default) without using the job's, and raises ``StepFailed`` (the job
        dead, unless caught) once they are used up. LeaseLost: the lease was lost, nothing
        was checkpointed; stop."""
        return await self._durable_run().step(
            name, fn, args, max_attempts=max_attempts, retry=retry
        )

    def step_sync(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        max_attempts: int | None = None,
        retry: RetryPolicy | None = None,
    ) -> Any:
        """``step`` for sync handlers: ``fn`` runs in the handler's thread."""
        return self._durable_run().step_sync(name, fn, args, max_attempts=max_attempts, retry=retry)

    def step_key(self, name: str) -> str:
        """A stable idempotency key for step ``name`` of this job (the same on every run),
        for outside APIs that deduplicate requests."""
        return self._durable_run().step_key(name)

    async def sleep(self, delay: timedelta | float, *, name: str | None = None) -> None:
        """Sleep durably for ``delay`` (a timedelta or seconds): the job lets go of its slot,
        connection and lease and is due again then (shown as sleeping); no attempt is used.
        The handler then runs again from the start, its finished steps replayed from their
        checkpoints, and this call returns. ``name`` defaults to ``sleep-N``, N counting
        the sleeps of the run: name sleeps whose order may change between deploys."""
        await self._durable_run().sleep(
            delay=check_duration(delay, "sleep", allow_zero=True), until=None, name=name
        )

    async def sleep_until(self, when: datetime, *, name: str | None = None) -> None:
        """``sleep`` until the instant ``when`` (timezone-aware); returns at once when it has
        passed by the store's clock."""
        await self._durable_run().sleep(delay=None, until=sleep_until_of(when), name=name)

    def sleep_sync(self, delay: timedelta | float, *, name: str | None = None) -> None:
        """``sleep`` for sync handlers."""
        run = self._durable_run()
        run.blocking(self.sleep(delay, name=name))

    async def wait_for(
        self,
        key: str,
        *,
        timeout: timedelta | float,  # noqa: ASYNC109 (the wait's deadline, not ours)
        name: str | None = None,
    ) -> Any:
        """Wait for a signal to ``key`` (``app.signal(key, data)``, ``POST /api/signals``,
        ``rota signal``) and return its data. The job lets go of its worker while it waits;
        a signal sent before the wait began is kept (until it expires) and taken at once.
        After ``timeout`` with no signal, raises WaitTimeout (the handler may catch it). Each
        signal reaches one wait once. ``name`` defaults to ``wait-N``."""
        return await self._durable_run().wait_for(
            key, timeout=check_duration(timeout, "timeout"), name=name
        )

    def wait_for_sync(
        self,
        key: str,
        *,
        timeout: timedelta | float,
        name: str | None = None,
    ) -> Any:
        """``wait_for`` for sync handlers."""
        run = self._durable_run()
        return run.blocking(self.wait_for(key, timeout=timeout, name=name))

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        """A connection to the store's own database in a transaction that commits together
        with the current step's checkpoint (or, outside steps, with the job's success), and
        only while this lease holds: a stale worker's transaction rolls back whole with
        LeaseLost (C12). PostgreSQL: a psycopg AsyncConnection; SQLite: an
        ``EffectsConnection`` (``await conn.execute(sql, params)``). Do not commit it
        yourself. One per step; outside steps, once, last. See docs/guides/effects.md."""
        return self._durable_run().transaction()

    def cancel(self) -> None:
        """Tell the handler to stop (the worker calls this; handlers only read)."""
        self._flag = True
        if self._event is not None:
            self._event.set()

    def __repr__(self) -> str:
        return (
            f"JobContext(job_id={self.job.id}, attempt={self.job.attempt}, worker={self.worker!r})"
        )
