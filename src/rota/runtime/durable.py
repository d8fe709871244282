"""Durable execution inside a handler: steps checkpointed under the lease, durable sleeps
and waits for signals, and ``ctx.transaction()`` (C11, C12; rota.domain.durable).

``JobContext`` forwards ``ctx.step``, ``ctx.sleep``, ``ctx.wait_for`` and ``ctx.transaction``
to a ``DurableRun``, made on first use: a handler that uses none of them costs nothing more.
A run reads the job's records once (one query), answers checkpointed steps from them, and
writes one fenced statement per step that runs. A sleep or a wait that must last ends the
run: the store makes the job pending at its wake time with the attempt given back, in the
same fenced write, and ``Settled`` unwinds the handler (a BaseException, so the handler's
``except Exception`` cannot keep it running without its lease).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from rota.domain.clock import Clock, utc
from rota.domain.durable import (
    Settled,
    Step,
    StepKind,
    StepState,
    check_duration,
    check_signal_key,
    check_step_name,
    step_key,
)
from rota.domain.errors import InvalidInput, InvalidJob, StepFailed, WaitTimeout
from rota.domain.job import Job
from rota.domain.job_state import Outcome
from rota.domain.lease import Lease
from rota.domain.payload import encode_result
from rota.domain.retry import RetryPolicy
from rota.observability import tracing
from rota.observability.metrics import Metrics
from rota.runtime.failures import describe, trace
from rota.store.base import Store
from rota.store.durable import Effects

T = TypeVar("T")

log = logging.getLogger("rota.worker")


class _Context(Protocol):
    """What a run needs of its ``JobContext`` (a protocol: the context imports this module)."""

    @property
    def job(self) -> Job: ...

    @property
    def lease(self) -> Lease: ...


class _Held(Protocol):
    """What the runtime needs of a job the worker holds (``execution.Execution``)."""

    reporting: bool


class DurableRuntime:
    """What the durable runs of one worker share: its store, clock, metrics, threads, lease,
    the jobs it holds (to mark one as reporting while a settling write is in flight) and the
    retry policy of each kind."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock,
        metrics: Metrics,
        threads: ThreadPoolExecutor,
        lease: timedelta,
        held: Mapping[int, _Held],
        retry_of: Callable[[str], RetryPolicy],
    ) -> None:
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.threads = threads
        self.lease = lease
        self.held = held
        self.retry_of = retry_of
        #: The loop the worker runs on, for sync handlers' calls into the store.
        self.loop: asyncio.AbstractEventLoop | None = None


@dataclass(eq=False)
class _Transaction:
    """A ``ctx.transaction()`` whose block ended normally: open until its step's checkpoint
    (or its job's completion) commits it."""

    manager: AbstractAsyncContextManager[Effects]
    effects: Effects

    async def close(self, error: BaseException | None = None) -> None:
        """Leave the store's block: rolls back unless a commit ran."""
        await self.manager.__aexit__(
            None if error is None else type(error), error, error.__traceback__ if error else None
        )


@dataclass(eq=False)
class _Frame:
    """The step running now in a task (its transaction, once one is opened)."""

    name: str
    transaction: _Transaction | None = None
    opened: bool = False


#: The step running in the current task (contextvars follow the handler into its awaits).
_current: contextvars.ContextVar[_Frame | None] = contextvars.ContextVar("rota_step", default=None)


class DurableRun:
    """The durable side of one execution of one job. See the module docstring."""

    def __init__(self, runtime: DurableRuntime, ctx: _Context) -> None:
        self._runtime = runtime
        self._ctx = ctx
        self._records: dict[str, Step] | None = None
        self._used: set[str] = set()
        self._sleeps = 0
        self._waits = 0
        #: A transaction opened outside any step: committed with the job's completion.
        self._job_transaction: _Transaction | None = None
        self._job_transaction_opened = False
        kind = ctx.job.kind
        metrics = runtime.metrics
        self._replayed = metrics.steps.labels(kind, "replayed")
        self._succeeded = metrics.steps.labels(kind, "succeeded")
        self._failed = metrics.steps.labels(kind, "failed")
        self._duration = metrics.step_duration.labels(kind)

    # ------------------------------------------------------------------ records

    async def _load(self) -> dict[str, Step]:
        records = self._records
        if records is None:
            found = await self._runtime.store.steps(self._ctx.job.id)
            records = self._records = {step.name: step for step in found}
        return records

    def _claim_name(self, name: str, what: str) -> str:
        check_step_name(name, f"{what} name")
        if name in self._used:
            raise InvalidInput(
                f"{what} name {name!r} was used twice in one run of job {self._ctx.job.id}: "
                "names of steps, sleeps and waits must be unique within a job"
            )
        self._used.add(name)
        return name

    def _check_free(self, what: str) -> None:
        """Refuse ``what`` inside a step, or after a transaction that waits for the job's
        completion (its connection holds the transaction open until then)."""
        if _current.get() is not None:
            raise InvalidInput(f"{what} cannot run inside a step: steps do not nest")
        if self._job_transaction_opened:
            raise InvalidInput(
                f"{what} after ctx.transaction(): a transaction outside steps commits with "
                "the job's completion, so it must come last (or put it in a step)"
            )

    def _kind_of(self, record: Step | None, name: str, kind: StepKind) -> Step | None:
        if record is not None and record.kind is not kind:
            raise InvalidInput(
                f"{name!r} is a {record.kind} in job {self._ctx.job.id}'s records, not a "
                f"{kind}: give it another name"
            )
        return record

    async def _settle(self, settling: bool, write: Coroutine[Any, Any, T]) -> T:
        """``write``, marked as the job's own end while it is in flight when ``settling``
        (and unmarked again if it fails)."""
        if not settling:
            return await write
        self._settling(True)
        try:
            return await write
        except BaseException:
            self._settling(False)
            raise

    def _settling(self, settling: bool) -> None:
        """Mark the job as writing its own end (or no longer): a heartbeat that finds the
        lease gone meanwhile is seeing that write, not a lost lease."""
        held = self._runtime.held.get(self._ctx.job.id)
        if held is not None:
            held.reporting = settling

    # ------------------------------------------------------------------ steps

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        *,
        max_attempts: int | None,
        retry: RetryPolicy | None,
    ) -> Any:
        self._check_free("a step")
        self._claim_name(name, "step")
        if max_attempts is not None and (
            isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
        ):
            raise InvalidInput("a step's max_attempts must be a positive integer")
        record = self._kind_of((await self._load()).get(name), name, StepKind.STEP)
        if record is not None and record.state is StepState.SUCCEEDED:
            self._replayed.inc()
            return record.result
        frame = _Frame(name)
        reset = _current.set(frame)
        started = self._runtime.clock.monotonic()
        try:
            value = await tracing.step(self._call(fn, args), self._ctx.job, name)
            result = encode_result(value)
        except BaseException as error:
            reset_frame(reset)
            if frame.transaction is not None:
                await frame.transaction.close(error)
            if not isinstance(error, Exception):
                raise
            await self._failed_step(name, record, error, started, max_attempts, retry)
            raise
        reset_frame(reset)
        took = max(0.0, self._runtime.clock.monotonic() - started)
        duration = timedelta(seconds=took)
        store = self._runtime.store
        lease = self._ctx.lease
        if frame.transaction is None:
            await store.checkpoint(lease, name, result=result, duration=duration)
        else:
            try:
                await frame.transaction.effects.commit_step(name, result=result, duration=duration)
            finally:
                await frame.transaction.close()
        self._succeeded.inc()
        self._duration.observe(took)
        return value

    async def _call(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        if _is_async(fn):
            return await fn(*args)
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        value = await loop.run_in_executor(self._runtime.threads, context.run, fn, *args)
        if inspect.isawaitable(value):
            return await value
        return value

    async def _failed_step(
        self,
        name: str,
        record: Step | None,
        error: Exception,
        started: float,
        max_attempts: int | None,
        retry: RetryPolicy | None,
    ) -> None:
        """Record the step's failure; with attempts of its own, retry it (Settled) or give up
        (StepFailed), otherwise let the error reach the handler."""
        if isinstance(error, InvalidJob) and error.field == "result":
            # The step's value is not JSON: running it again cannot help.
            raise StepFailed(name, 1, f"its return value cannot be stored: {error}") from error
        self._failed.inc()
        attempts = (record.attempts if record is not None else 0) + 1
        text = describe(error)
        duration = timedelta(seconds=max(0.0, self._runtime.clock.monotonic() - started))
        own = max_attempts is not None
        again = own and max_attempts is not None and attempts < max_attempts
        retry_in = None
        if again:
            policy = retry or self._runtime.retry_of(self._ctx.job.kind)
            retry_in = policy.delay(attempts)
        await self._settle(
            again,
            self._runtime.store.fail_step(
                self._ctx.lease,
                name,
                error=text,
                traceback=trace(error),
                duration=duration,
                retry_in=retry_in,
            ),
        )
        if again:
            log.info(
                "step %r failed (attempt %d of %d), retrying the job in %.1fs: %s",
                name,
                attempts,
                max_attempts,
                retry_in.total_seconds() if retry_in else 0,
                text,
            )
            raise Settled(Outcome.FAILED, f"step {name!r} failed: {text}") from error
        if own:
            raise StepFailed(name, attempts, text) from error

    def step_sync(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        *,
        max_attempts: int | None,
        retry: RetryPolicy | None,
    ) -> Any:
        """``step`` from a sync handler's thread: the function runs in that thread, the
        store's writes on the worker's loop."""
        self._check_free("a step")
        self._claim_name(name, "step")
        record = self._kind_of(self.blocking(self._load()).get(name), name, StepKind.STEP)
        if record is not None and record.state is StepState.SUCCEEDED:
            self._replayed.inc()
            return record.result
        started = self._runtime.clock.monotonic()
        try:
            value = fn(*args)
            result = encode_result(value)
        except Exception as error:
            self.blocking(self._failed_step(name, record, error, started, max_attempts, retry))
            raise
        took = max(0.0, self._runtime.clock.monotonic() - started)
        self.blocking(
            self._runtime.store.checkpoint(
                self._ctx.lease, name, result=result, duration=timedelta(seconds=took)
            )
        )
        self._succeeded.inc()
        self._duration.observe(took)
        return value

    def blocking(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the worker's loop from a sync handler's thread and wait for it."""
        loop = self._runtime.loop
        if loop is None:
            coro.close()
            raise InvalidInput("the sync durable calls run inside a worker's sync handler")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise InvalidInput(
                "a sync durable call (step_sync, sleep_sync, wait_for_sync) in an async "
                "handler: await ctx.step, ctx.sleep or ctx.wait_for instead"
            )
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    # ------------------------------------------------------------------ sleeps

    async def sleep(
        self, *, delay: timedelta | None, until: datetime | None, name: str | None
    ) -> None:
        self._check_free("ctx.sleep")
        self._sleeps += 1
        name = self._claim_name(name or f"sleep-{self._sleeps}", "sleep")
        record = self._kind_of((await self._load()).get(name), name, StepKind.SLEEP)
        if record is not None and record.state is StepState.SLEPT:
            return
        if record is None and delay is not None and delay <= timedelta(0):
            return
        wake = await self._settle(
            True, self._runtime.store.sleep(self._ctx.lease, name, until=until, delay=delay)
        )
        if wake is None:
            self._settling(False)
            return
        self._runtime.metrics.sleeps.labels(self._ctx.job.kind).inc()
        raise Settled(Outcome.SLEPT, f"sleeping until {wake.isoformat()}")

    # ------------------------------------------------------------------ waits

    async def wait_for(
        self,
        key: str,
        *,
        timeout: timedelta,  # noqa: ASYNC109 (the wait's deadline, not ours)
        name: str | None,
    ) -> Any:
        self._check_free("ctx.wait_for")
        check_signal_key(key)
        timeout = check_duration(timeout, "timeout")
        self._waits += 1
        name = self._claim_name(name or f"wait-{self._waits}", "wait")
        record = self._kind_of((await self._load()).get(name), name, StepKind.WAIT)
        waits = self._runtime.metrics.waits
        kind = self._ctx.job.kind
        if record is not None and record.state is StepState.RECEIVED:
            return record.result
        if record is not None and record.state is StepState.TIMED_OUT:
            raise WaitTimeout(key, name)
        outcome = await self._settle(
            True, self._runtime.store.wait_for(self._ctx.lease, name, key, timeout=timeout)
        )
        if outcome.state is StepState.WAITING:
            waits.labels(kind, "suspended").inc()
            when = outcome.deadline.isoformat() if outcome.deadline else "?"
            raise Settled(Outcome.WAITED, f"waiting for {key!r} until {when}")
        self._settling(False)
        if outcome.state is StepState.TIMED_OUT:
            waits.labels(kind, "timed_out").inc()
            raise WaitTimeout(key, name)
        waits.labels(kind, "received").inc()
        return outcome.data

    # ------------------------------------------------------------------ transactions

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        frame = _current.get()
        if frame is not None and frame.opened:
            raise InvalidInput(
                f"step {frame.name!r} already opened ctx.transaction(): one per step"
            )
        if frame is None and self._job_transaction_opened:
            raise InvalidInput("ctx.transaction() outside steps is allowed once per run")
        manager = self._runtime.store.effects(self._ctx.lease, idle_timeout=self._runtime.lease)
        effects = await manager.__aenter__()
        opened = _Transaction(manager, effects)
        if frame is not None:
            frame.opened = True
        else:
            self._job_transaction_opened = True
        try:
            yield effects.connection
        except BaseException as error:
            if frame is None:
                self._job_transaction_opened = False
            await opened.close(error)
            raise
        if frame is not None:
            frame.transaction = opened
        else:
            self._job_transaction = opened

    def completion(self) -> _Transaction | None:
        """The transaction opened outside steps, if any: the job's success commits in it."""
        return self._job_transaction

    async def close(self) -> None:
        """The run is over: a transaction still open (the job did not succeed) rolls back."""
        opened, self._job_transaction = self._job_transaction, None
        if opened is not None:
            await opened.close()

    def step_key(self, name: str) -> str:
        return step_key(self._ctx.job.id, check_step_name(name))


def reset_frame(reset: contextvars.Token[_Frame | None]) -> None:
    """Leave a step's frame (a step that ran in another context has nothing to reset)."""
    try:
        _current.reset(reset)
    except ValueError:
        _current.set(None)


def sleep_until_of(when: datetime) -> datetime:
    """``when`` as an aware UTC instant; InvalidInput for a naive one."""
    if not isinstance(when, datetime) or when.tzinfo is None or when.utcoffset() is None:
        raise InvalidInput("sleep_until needs a timezone-aware datetime")
    return utc(when)


def _is_async(fn: Callable[..., Any]) -> bool:
    call = getattr(fn, "__call__", None)  # noqa: B004 (callable objects with async __call__)
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)
