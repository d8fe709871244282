"""Hooks: middleware around every handler execution, and callbacks on each job's outcome.

Order, for one claimed job (docs/concepts/hooks.md):

1. the execution's trace span starts (when tracing);
2. each middleware, the first registered outermost, calls ``await call_next()`` to go on;
3. the handler runs, under its timeout;
4. the outcome is written to the store (complete, fail, snooze), fenced on the lease;
5. only if the store accepted it, the hooks for that outcome run, in registration order:
   ``on_success``, ``on_failure`` (the attempt failed and the job will be retried) or
   ``on_dead`` (it failed for good). Nothing runs for a snooze, a release at shutdown or a
   lost lease.

A hook that raises (or takes longer than the lease) is logged in one line and never changes
the outcome, which is already written. A middleware may time, set context variables, open a
database session, report to Sentry, and may even turn an exception into a return (or the
reverse); it may not keep the job running once its lease is lost: if the worker stopped the
job (lease lost, cancelled, shutdown) the handler's cancellation must pass, and a middleware
that swallows it (or ``LeaseLost``) changes nothing: the worker still treats the job as
stopped and reports nothing a lost lease forbids.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeAlias

from rota.domain.errors import InvalidInput
from rota.domain.job import Job
from rota.domain.job_state import JobState, Outcome

if TYPE_CHECKING:
    from rota.runtime.context import JobContext

log = logging.getLogger("rota.worker")

#: ``async def middleware(ctx, call_next)``: ``await call_next()`` runs the rest of the chain
#: and the handler, and returns the handler's return value.
Middleware: TypeAlias = Callable[["JobContext", Callable[[], Awaitable[Any]]], Awaitable[Any]]
#: ``hook(ctx, result)``, an ``async def`` or a plain ``def`` (run in the worker's threads).
Hook: TypeAlias = Callable[["JobContext", "JobResult"], Any]


@dataclass(frozen=True, slots=True)
class JobResult:
    """What a hook sees: the job as claimed, how its attempt ended and where that left it."""

    job: Job
    #: SUCCEEDED or FAILED.
    outcome: Outcome
    #: Where the attempt left the job: SUCCEEDED, PENDING (to be retried) or DEAD.
    state: JobState
    #: The recorded error (``Type: message``), None on success.
    error: str | None = None
    #: The handler's exception, None on success or when none was raised (a timeout).
    exception: BaseException | None = None
    #: When the retry is due after the failure, for ``on_failure``.
    retry_in: timedelta | None = None
    #: The handler's run time, middleware included.
    duration_s: float = 0.0


class Hooks:
    """The middleware and outcome hooks of one App; workers read them, never change them."""

    def __init__(self) -> None:
        self.middleware: list[Middleware] = []
        self.on_success: list[Hook] = []
        self.on_failure: list[Hook] = []
        self.on_dead: list[Hook] = []

    def add_middleware(self, middleware: Middleware) -> Middleware:
        """Register an ``async def middleware(ctx, call_next)``; InvalidInput otherwise."""
        if not _is_async(middleware):
            raise InvalidInput("a middleware must be an async def (ctx, call_next)")
        self.middleware.append(middleware)
        return middleware

    def add(self, event: str, hook: Hook) -> Hook:
        """Register ``hook`` for ``event`` (success, failure or dead)."""
        if not callable(hook):
            raise InvalidInput(f"the {event} hook is not callable")
        {"success": self.on_success, "failure": self.on_failure, "dead": self.on_dead}[
            event
        ].append(hook)
        return hook

    def __bool__(self) -> bool:
        return bool(self.middleware or self.on_success or self.on_failure or self.on_dead)

    async def around(self, ctx: JobContext, start: Callable[[], Awaitable[Any]]) -> Any:
        """Run the handler (``start()``) inside every middleware, the first outermost."""
        chain = self.middleware

        async def step(index: int) -> Any:
            if index == len(chain):
                return await start()
            called = False

            def call_next() -> Awaitable[Any]:
                nonlocal called
                if called:
                    raise RuntimeError("a middleware called call_next() twice")
                called = True
                return step(index + 1)

            return await chain[index](ctx, call_next)

        return await step(0)

    def hooks_for(self, state: JobState) -> list[Hook]:
        if state is JobState.SUCCEEDED:
            return self.on_success
        return self.on_dead if state is JobState.DEAD else self.on_failure

    async def fire(
        self,
        ctx: JobContext,
        result: JobResult,
        *,
        run_sync: Callable[[Callable[[], Any]], Awaitable[Any]],
        within_s: float,
    ) -> None:
        """Run the hooks for ``result.state``, each isolated: one that raises or overruns
        ``within_s`` is logged in one line, and the rest still run."""
        for hook in self.hooks_for(result.state):
            name = getattr(hook, "__qualname__", repr(hook))
            try:
                async with asyncio.timeout(within_s):
                    if _is_async(hook):
                        await hook(ctx, result)
                    else:
                        await run_sync(lambda hook=hook: hook(ctx, result))  # type: ignore[misc]
            except TimeoutError:
                log.warning(
                    "%s hook %s took longer than %gs: stopped", _event(result), name, within_s
                )
            except Exception as error:  # a hook's failure is logged, never the job's
                log.warning(
                    "%s hook %s failed (the job's outcome stands): %s",
                    _event(result),
                    name,
                    _describe(error),
                )


def _event(result: JobResult) -> str:
    return {JobState.SUCCEEDED: "on_success", JobState.DEAD: "on_dead"}.get(
        result.state, "on_failure"
    )


def _describe(error: BaseException) -> str:
    try:
        text = str(error)
    except Exception:
        text = "unprintable error"
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _is_async(fn: Callable[..., Any]) -> bool:
    call = getattr(fn, "__call__", None)  # noqa: B004 (callable objects with async __call__)
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)
