"""Executor: runs one claimed job and reports its outcome, fenced on its lease.

Outcomes: success -> complete (batched), with the handler's return value as the job's result
(a value that is not JSON or is over the worker's ``max_result_bytes`` fails the attempt
permanently instead: the job never succeeds without its result), or, after a ``ctx.transaction()`` outside steps,
in that transaction (rota.runtime.durable); ``Snooze`` -> pending later, attempt given back;
``Settled`` (a durable sleep or wait, a step retried on attempts of its own) -> nothing more to
report: the store already holds the outcome;
``Permanent`` or an unknown kind -> dead; a timeout or any other exception -> retry with the
kind's backoff (dead when attempts are used up). A job whose lease is lost, or that was
cancelled, reports nothing: its result is discarded. An attempt that runs alone (a crash
suspect's, ``rota.domain.blame``) waits until it is the worker's only job, and its start is
recorded (``Store.begin``) before its handler runs. An outcome write that raises (anything but
an unreachable store) fails the attempt with that error instead, fenced: never left to its
lease, where it would count as a crash and be given back on the last attempt.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from rota.domain.clock import Clock
from rota.domain.durable import Settled
from rota.domain.errors import (
    Abandon,
    InvalidJob,
    LeaseLost,
    Permanent,
    Snooze,
    StoreUnavailable,
)
from rota.domain.job_state import JobState, Outcome
from rota.domain.payload import DEFAULT_MAX_RESULT_BYTES, encode_result
from rota.domain.retry import RetryPolicy
from rota.domain.wording import counted
from rota.observability import tracing
from rota.observability.logging import job_context
from rota.observability.metrics import KindMetrics, Metrics
from rota.runtime.completions import Completer
from rota.runtime.execution import HALT_S, Execution, Stop
from rota.runtime.failures import describe, trace
from rota.runtime.hooks import Hooks, JobResult
from rota.runtime.registry import KindConfig, Registry
from rota.runtime.services import bounded
from rota.store.base import Store

log = logging.getLogger("rota.worker")

DEFAULT_RETRY = RetryPolicy()


class Executor:
    """Runs claimed jobs for one worker."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        *,
        worker: str,
        clock: Clock,
        metrics: Metrics,
        threads: ThreadPoolExecutor,
        completer: Completer,
        lease: timedelta,
        on_abandon: Callable[[], None] = lambda: None,
        until_alone: Callable[[Execution], Awaitable[None]] | None = None,
        hooks: Hooks | None = None,
        on_parent_finished: Callable[[], None] = lambda: None,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        self._store = store
        self._registry = registry
        self._worker = worker
        self._clock = clock
        self._metrics = metrics
        self._threads = threads
        self._completer = completer
        self._on_abandon = on_abandon
        #: Whether the process ends as soon as the worker stops (``rota worker``, ``rota
        #: serve``): a hard stop may then hand back a job whose sync handler still runs,
        #: since its thread ends with the process.
        self.threads_end_with_process = False
        self._until_alone = until_alone
        #: Called after a workflow job's success or failure was written: its children may
        #: have become pending in that write, and no store pushes that to its own process
        #: (only PostgreSQL notifies, and not through every pooler).
        self._on_parent_finished = on_parent_finished
        self._lease_s = lease.total_seconds()
        self._max_result_bytes = max_result_bytes
        self._unreported_at = -math.inf  # when _unreported last warned
        self._by_kind: dict[str, KindMetrics] = {}
        #: Read on every job (registrations may come after the worker is made); with none
        #: registered the path is as before: two list checks, nothing allocated.
        self._hooks = hooks or Hooks()

    def _kind_metrics(self, kind: str) -> KindMetrics:
        found = self._by_kind.get(kind)
        if found is None:
            found = self._by_kind[kind] = KindMetrics(self._metrics, kind)
        return found

    async def run(self, execution: Execution) -> None:
        """Execute and report; never raises (except cancellation of the worker itself).
        Calls ``execution.finished`` as it returns, however it ends."""
        execution.entered = True
        job = execution.job
        try:
            with job_context(job.id, job.kind, job.attempt, self._worker):
                try:
                    if job.runs_alone and self._until_alone is not None:
                        await self._until_alone(execution)
                    await self._run(execution)
                except asyncio.CancelledError:
                    await self._on_interrupted(execution)
                except Exception as error:  # a bug of ours must not kill the worker
                    log.exception("internal error while running job %s", job.id)
                    await self._fail_after_internal_error(execution, error)
        finally:
            if execution.finished is not None:
                execution.finished(execution)

    async def _run(self, execution: Execution) -> None:
        job = execution.job
        if self._clock.monotonic() >= execution.deadline:
            # Claimed, then stalled (a paused process, a blocked loop) past the lease: another
            # worker may own the job by now, so starting it could run it twice at once.
            execution.stop = Stop.LEASE_LOST
            self._lost(execution, "the handler started")
            return
        config = self._registry.get(job.kind)
        if config is None:
            log.error("no handler for kind %r: the job is dead", job.kind)
            await self._report_failure(
                execution,
                f"no handler registered for kind {job.kind!r} on worker {self._worker}",
                None,
                permanent=True,
                retry=DEFAULT_RETRY,
            )
            return
        if job.runs_alone and not await self._begin(execution):
            return
        metrics = self._kind_metrics(job.kind)
        metrics.lag.observe(max(0.0, ((job.started_at or job.run_at) - job.run_at).total_seconds()))
        timeout = job.timeout or config.timeout
        metrics.running.inc()
        execution.started = self._clock.monotonic()
        outcome = Outcome.SUCCEEDED
        try:
            if job.workflow is not None:
                # Inside the try: a store that cannot answer fails the attempt (and retries).
                execution.ctx.parent_results = await self._store.parent_results(job.id)
            work: Awaitable[Any]
            if self._hooks.middleware:
                work = self._through_middleware(execution, config, timeout)
            elif timeout is None:
                work = self._call(config, execution)
            else:
                work = _with_timeout(self._call(config, execution), timeout)
            value = await tracing.execution(work, job, self._worker)
        except Settled as settled:
            outcome = settled.outcome
            log.info("job let go of its worker: %s", settled.why)
        except LeaseLost:
            # A checkpoint (or a transaction's commit) was fenced out: report nothing.
            outcome = Outcome.LEASE_EXPIRED
            if execution.stop is None:
                execution.stop = Stop.LEASE_LOST
            self._lost(execution, "a checkpoint")
        except Snooze as snooze:
            outcome = Outcome.SNOOZED
            delay = snooze.delay
            await self._report(execution, lambda: self._store.snooze(execution.lease, delay))
        except Abandon:
            outcome = Outcome.LEASE_EXPIRED
            execution.stop = Stop.ABANDON
            log.warning("handler abandoned the job: no more heartbeats; its lease will expire")
            self._on_abandon()
        except Permanent as error:
            outcome = Outcome.FAILED
            await self._report_failure(
                execution,
                describe(error),
                trace(error),
                permanent=True,
                retry=config.retry,
                exception=error,
            )
        except _HandlerTimeout:
            outcome = Outcome.FAILED
            execution.ctx.cancel()
            if not await self._thread_stopped(execution):
                # A thread cannot be killed: retrying now would run the job twice at once.
                # Hold nothing more and report nothing, so a retry waits for the lease to end.
                outcome = Outcome.LEASE_EXPIRED
                execution.stop = Stop.ABANDON
                log.error(
                    "sync handler ignored its timeout and cancellation for a whole lease; "
                    "leaving the job to lease expiry (check ctx.is_cancelled in long handlers)"
                )
                return
            seconds = timeout.total_seconds() if timeout else 0
            await self._report_failure(
                execution,
                f"timed out after {seconds:g}s",
                None,
                permanent=False,
                retry=config.retry,
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:
            outcome = Outcome.FAILED
            await self._report_failure(
                execution,
                describe(error),
                trace(error),
                permanent=False,
                retry=config.retry,
                exception=error,
            )
        else:
            try:
                result = encode_result(value, self._max_result_bytes)
            except InvalidJob as error:
                outcome = Outcome.FAILED
                await self._report_failure(
                    execution,
                    f"the handler's return value cannot be stored: {error}",
                    None,
                    permanent=True,
                    retry=config.retry,
                )
            else:
                await self._complete(execution, result)
        finally:
            metrics.running.dec()
            metrics.duration(outcome).observe(max(0.0, self._clock.monotonic() - execution.started))
            run = execution.ctx.durable_run()
            if run is not None:  # a transaction left open (the job did not succeed) rolls back
                await run.close()

    def _call(self, config: KindConfig, execution: Execution) -> Awaitable[Any]:
        if config.is_async:
            return config.handler(execution.ctx, execution.job.payload)  # type: ignore[no-any-return]
        return self._call_sync(config.handler, execution)

    async def _through_middleware(
        self, execution: Execution, config: KindConfig, limit: timedelta | None
    ) -> Any:
        """The handler inside the middleware chain. Once the worker stopped the job (its lease
        lost, a release at shutdown), the job ends as stopped whatever a middleware made of
        the cancellation: swallowed, turned into a return or into another error. LeaseLost
        raised through the chain is a lost lease too, never a handler failure."""
        try:
            result = await self._hooks.around(
                execution.ctx, lambda: _with_timeout(self._call(config, execution), limit)
            )
        except asyncio.CancelledError:
            raise
        except LeaseLost:
            if execution.stop is None:
                execution.stop = Stop.LEASE_LOST
            raise asyncio.CancelledError from None
        except BaseException:
            if execution.stop is not None:
                raise asyncio.CancelledError from None
            raise
        if execution.stop is not None:
            raise asyncio.CancelledError
        return result

    async def _fire(
        self,
        execution: Execution,
        state: JobState,
        *,
        error: str | None = None,
        exception: BaseException | None = None,
        retry_in: timedelta | None = None,
    ) -> None:
        """Run the outcome hooks registered for ``state``, if any (after the store accepted
        the outcome)."""
        if not self._hooks.hooks_for(state):
            return
        result = JobResult(
            job=execution.job,
            outcome=Outcome.SUCCEEDED if state is JobState.SUCCEEDED else Outcome.FAILED,
            state=state,
            error=error,
            exception=exception,
            retry_in=retry_in if state is JobState.PENDING else None,
            duration_s=max(0.0, self._clock.monotonic() - execution.started)
            if execution.started
            else 0.0,
        )
        loop = asyncio.get_running_loop()

        def run_sync(call: Callable[[], Any]) -> Awaitable[Any]:
            context = contextvars.copy_context()
            return loop.run_in_executor(self._threads, context.run, call)

        await self._hooks.fire(execution.ctx, result, run_sync=run_sync, within_s=self._lease_s)

    async def _begin(self, execution: Execution) -> bool:
        """Record the start of an attempt that runs alone before its handler runs; False if
        it must not run."""
        log.warning(
            "running a crash suspect alone: its worker died %s while running it",
            counted(execution.job.crashes, "time"),
        )

        async def begin() -> bool:
            await self._store.begin(execution.lease)
            return True

        try:
            if await self._retrying(execution, begin):
                return True
        except LeaseLost:
            self._lost(execution, "the handler started")
            return False
        return False  # the store stayed unreachable until the lease ran out: never started

    async def _call_sync(self, handler: Callable[..., Any], execution: Execution) -> Any:
        # Carry the job's logging context into the thread, and keep the thread's future: it
        # tells when the handler really stopped, which a cancelled await cannot.
        context = contextvars.copy_context()
        execution.thread = self._threads.submit(
            context.run, handler, execution.ctx, execution.job.payload
        )
        return await asyncio.wrap_future(execution.thread)

    async def _thread_stopped(self, execution: Execution) -> bool:
        """Wait (up to one lease, heartbeats still running) for a sync handler's thread."""
        if execution.thread is None:
            return True
        done, _ = await asyncio.wait([asyncio.wrap_future(execution.thread)], timeout=self._lease_s)
        return bool(done)

    async def _complete(self, execution: Execution, result: str | None) -> None:
        job = execution.job
        execution.reporting = True
        completer = self._completer
        run = execution.ctx.durable_run()
        opened = run.completion() if run is not None else None
        try:
            if opened is not None:
                # The handler's transaction commits with its success, fenced (C12). Never
                # retried: a commit whose answer was lost may have landed; if it did not, the
                # lease expires and the job runs again, its transaction with it.
                try:
                    await opened.effects.commit_completion(result=result)
                    accepted: bool | None = True
                except StoreUnavailable as error:
                    self._unreported(error)
                    accepted = None
            else:
                try:
                    accepted = await completer.submit(execution.lease, result)
                except StoreUnavailable as error:
                    accepted = await self._retrying(
                        execution,
                        lambda: completer.submit(execution.lease, result),
                        bound=False,
                        failed=error,
                    )
        except LeaseLost:
            accepted = False
        if accepted:
            self._kind_metrics(job.kind).finished(Outcome.SUCCEEDED).inc()
            if job.workflow is not None:
                self._on_parent_finished()
            if self._hooks.on_success:
                await self._fire(execution, JobState.SUCCEEDED)
        elif accepted is False:
            self._lost(execution, "completion")

    async def _report_failure(
        self,
        execution: Execution,
        error: str,
        trace: str | None,
        *,
        permanent: bool,
        retry: RetryPolicy,
        exception: BaseException | None = None,
    ) -> None:
        job = execution.job
        delay = retry.delay(job.attempt)
        state = await self._report(
            execution,
            lambda: self._store.fail(
                job.lease, error=error, traceback=trace, retry_in=delay, permanent=permanent
            ),
        )
        self._kind_metrics(job.kind).finished(Outcome.FAILED).inc()
        if job.workflow is not None:
            self._on_parent_finished()  # a dead parent may release its "run" children
        if permanent or job.attempt >= job.max_attempts:
            log.warning("job failed for good (dead): %s", error)
        else:
            log.info("job failed, retrying in %.1fs: %s", delay.total_seconds(), error)
        if isinstance(state, JobState) and (self._hooks.on_failure or self._hooks.on_dead):
            await self._fire(execution, state, error=error, exception=exception, retry_in=delay)

    async def _fail_after_internal_error(self, execution: Execution, error: Exception) -> None:
        """Fail the attempt with ``error`` (an outcome write that raised, a bug of ours), fenced.

        Left to its lease instead, the attempt would count as its worker's crash, which a
        job on its last attempt is given back (rota.domain.blame): it would run once more
        than ``max_attempts`` allows, and its error would be lost. An execution the worker
        stopped (lease lost, release, abandon) reports nothing, as ever; a job whose outcome
        was written already refuses the write (fenced), which is harmless."""
        if execution.stop is not None:
            return
        job = execution.job
        config = self._registry.get(job.kind)
        delay = (config.retry if config is not None else DEFAULT_RETRY).delay(job.attempt)
        message = f"internal error while running the job: {describe(error)}"

        def write(traceback: str | None) -> Callable[[], Awaitable[JobState]]:
            return lambda: self._store.fail(
                job.lease, error=message, traceback=traceback, retry_in=delay, permanent=False
            )

        for traceback in (trace(error), None):  # the second time without what may have failed
            try:
                await self._retrying(execution, write(traceback))
            except LeaseLost:
                return  # its outcome was written, or the lease is gone: nothing to add
            except Exception:
                log.exception("could not record the internal error of job %s", job.id)
                continue
            self._kind_metrics(job.kind).finished(Outcome.FAILED).inc()
            return

    async def _report(self, execution: Execution, write: Callable[[], Awaitable[Any]]) -> Any:
        """The fenced write's result; None when the lease was lost or the store unreachable."""
        execution.reporting = True
        try:
            return await self._retrying(execution, write)
        except LeaseLost:
            self._lost(execution, "report")
            return None

    async def _retrying(
        self,
        execution: Execution,
        write: Callable[[], Awaitable[Any]],
        *,
        bound: bool = True,
        failed: StoreUnavailable | None = None,
    ) -> Any:
        """Run a fenced write, retrying while the store is unreachable and the lease may still
        be ours; past the local lease deadline the job will be re-run elsewhere anyway.
        ``bound=False`` is for a write that bounds its own wait (the completer's); ``failed``,
        the error of a first try the caller made itself."""
        delay = 0.05
        while True:
            if failed is not None:
                if self._clock.monotonic() + delay >= execution.deadline:
                    self._unreported(failed)
                    return None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
            try:
                # Bounded: a write stuck on a dead connection must not hold the job forever
                # (heartbeats on other connections would keep renewing its lease).
                if not bound:
                    return await write()
                return await bounded(write(), self._lease_s, "reporting the outcome")
            except StoreUnavailable as error:
                failed = error

    def _unreported(self, error: Exception) -> None:
        """Log an outcome that could not be written: one warning per lease's time, since an
        outage fails every job's report at once; the others at debug level."""
        now = self._clock.monotonic()
        if now - self._unreported_at < self._lease_s:
            log.debug("could not report the outcome before the lease ran out: %s", error)
            return
        self._unreported_at = now
        log.warning(
            "could not report the outcome before the lease ran out: %s (other jobs failing "
            "so within %gs are logged at debug level)",
            error,
            self._lease_s,
        )

    def _lost(self, execution: Execution, during: str) -> None:
        self._metrics.leases_lost.labels(execution.job.kind).inc()
        # A loss the heartbeat already reported (one line for all its jobs) is detail here.
        level = logging.INFO if execution.stop is Stop.LEASE_LOST else logging.WARNING
        log.log(level, "lease lost before %s: result discarded (re-claimed or cancelled)", during)

    async def _on_interrupted(self, execution: Execution) -> None:
        """The task was cancelled: report according to why, never as a handler failure."""
        why = execution.stop
        if why is Stop.LEASE_LOST:
            self._lost(execution, "the handler finished")
        elif why is Stop.RELEASE and execution.thread_running:
            # Handing the job back while its thread still runs would let another worker start
            # it at once, beside the thread: leave it to lease expiry instead.
            log.warning("sync handler still running at shutdown: its lease will expire")
        elif why is Stop.RELEASE:
            execution.reporting = True
            try:
                await self._retrying(execution, lambda: self._store.release(execution.lease))
                log.info("released at shutdown; the attempt is given back")
            except LeaseLost:
                self._lost(execution, "release")
        elif why is Stop.HALT:
            await self._halted(execution)
        # ABANDON, or the whole worker being torn down: report nothing; the lease expires.

    async def _halted(self, execution: Execution) -> None:
        """A hard stop: hand the job back within HALT_S, fenced on its lease, so it runs again
        now rather than after its lease. A store that cannot answer that fast leaves it to
        lease expiry, as does a sync handler still running in a process that goes on."""
        if execution.thread_running and not self.threads_end_with_process:
            log.warning("sync handler still running at a hard stop: its lease will expire")
            return
        execution.reporting = True
        try:
            await bounded(self._store.release(execution.lease), HALT_S, "a release")
            log.info("handed back at a hard stop; the attempt is given back")
        except LeaseLost:
            self._lost(execution, "release")
        except StoreUnavailable as error:
            log.warning(
                "could not hand the job back at a hard stop (%s): its lease will expire", error
            )


class _HandlerTimeout(Exception):
    """The handler ran past its timeout (kept apart from TimeoutErrors the handler raises)."""

    rota_error_type = "timeout"  #: what a trace calls it (``error.type``)


async def _with_timeout(awaitable: Awaitable[Any], limit: timedelta | None) -> Any:
    if limit is None:
        return await awaitable
    try:
        async with asyncio.timeout(limit.total_seconds()) as scope:
            return await awaitable
    except TimeoutError:
        if scope.expired():
            raise _HandlerTimeout from None
        raise  # the handler's own TimeoutError: an ordinary failure
