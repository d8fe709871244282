"""What an App defines: its kinds (``@app.job``), middleware and outcome hooks, enqueue hooks
and schedules. ``App`` inherits these decorators so they stay where users write them; each
files what it is given into the registry, hooks and schedules the App composes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from rota.domain.job import DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE
from rota.domain.retry import RetryPolicy
from rota.domain.schedule import Misfire, Overlap, ScheduleSpec
from rota.domain.workflow import WorkflowBuilder
from rota.runtime.hooks import Hook, Hooks, Middleware
from rota.runtime.registry import Handler, Registry
from rota.verbs.enqueue import AfterEnqueue, BeforeEnqueue, Enqueuer
from rota.verbs.schedules import Schedules

H = TypeVar("H", bound=Handler)
M = TypeVar("M", bound=Middleware)
K = TypeVar("K", bound=Hook)
B = TypeVar("B", bound=BeforeEnqueue)
A = TypeVar("A", bound=AfterEnqueue)


class Definitions:
    """The decorators and definitions of an App (``rota.App`` sets the attributes below)."""

    registry: Registry
    hooks: Hooks
    schedules: Schedules
    _enqueuer: Enqueuer

    def job(
        self,
        kind: str,
        *,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        timeout: timedelta | float | None = None,
        retry: RetryPolicy | None = None,
    ) -> Callable[[H], H]:
        """Register the decorated ``async def`` or plain ``def`` handler ``(ctx, payload)``."""

        def register(handler: H) -> H:
            self.registry.register(
                kind,
                handler,
                queue=queue,
                priority=priority,
                max_attempts=max_attempts,
                timeout=timeout,
                retry=retry,
            )
            return handler

        return register

    def middleware(self, middleware: M) -> M:
        """Register ``async def middleware(ctx, call_next)`` around every handler run (the first
        is outermost; it cannot keep a stopped job running). See docs/concepts/hooks.md."""
        self.hooks.add_middleware(middleware)
        return middleware

    def before_enqueue(self, hook: B) -> B:
        """Register ``hook(spec)`` (a plain ``def``), run before each job this App enqueues,
        from the library, ``rota enqueue --app``, the HTTP API of ``rota serve`` and the Django
        backend: it returns the JobSpec to enqueue instead (``dataclasses.replace(spec,
        ...)``) or None to keep it, or raises to refuse it (``rota.InvalidInput``: nothing is
        written; 400 at the API, exit 2 at the CLI). See docs/concepts/hooks.md."""
        self._enqueuer.hooks.add("before", hook)
        return hook

    def after_enqueue(self, hook: A) -> A:
        """Register ``hook(spec, result)`` (a plain ``def``), run once each job is written (or
        joined the caller's transaction), on every path ``before_enqueue`` names. A hook that
        raises is logged in one line; the job stays enqueued."""
        self._enqueuer.hooks.add("after", hook)
        return hook

    @property
    def enqueuer(self) -> Enqueuer:
        """The one path this App's jobs are enqueued through, hooks included; the HTTP API
        (``rota.api.create_app(..., enqueuer=app.enqueuer)``) enqueues through it too."""
        return self._enqueuer

    def on_success(self, hook: K) -> K:
        """Register ``hook(ctx, result)`` (async or plain ``def``), run in the worker after a
        job's success was recorded. A hook that raises is logged in one line; nothing else."""
        self.hooks.add("success", hook)
        return hook

    def on_failure(self, hook: K) -> K:
        """Register ``hook(ctx, result)``, run after an attempt failed and the job will be
        retried (``result.retry_in`` later): the retry hook."""
        self.hooks.add("failure", hook)
        return hook

    def on_dead(self, hook: K) -> K:
        """Register ``hook(ctx, result)``, run after a job failed for good (dead): alerting."""
        self.hooks.add("dead", hook)
        return hook

    def schedule(
        self,
        name: str,
        *,
        kind: str | None = None,
        workflow: WorkflowBuilder | None = None,
        cron: str | None = None,
        every: timedelta | float | None = None,
        timezone: str = "UTC",
        payload: Any = None,
        queue: str | None = None,
        priority: int | None = None,
        tenant: str | None = None,
        max_attempts: int | None = None,
        jitter: timedelta | float | None = None,
        misfire: Misfire | str = Misfire.LATEST,
        misfire_limit: int = 100,
        grace: timedelta | float | None = None,
        overlap: Overlap | str = Overlap.SKIP,
    ) -> ScheduleSpec:
        """Define a recurring schedule: a ``kind`` job for every slot of ``cron`` (5 fields or
        ``@daily``-style, read in ``timezone``) or ``every`` (a timedelta or seconds).

        Unset queue, priority and max_attempts come from the kind's registration. Durations
        accept seconds. Validated now: InvalidSchedule names the field. Every worker this App
        starts upserts its schedules (definition fields from code win; a pause set at run time
        is kept) and fires them.

        With ``workflow`` instead of ``kind`` (a function of a ``rota.ScheduledRun`` returning
        a ``rota.Workflow``), each slot writes that whole graph, atomically with the slot's
        claim, exactly once per slot (see ``workflow_schedule``).
        """
        options = {
            "kind": kind,
            "workflow": workflow,
            "cron": cron,
            "every": every,
            "timezone": timezone,
            "payload": payload,
            "queue": queue,
            "priority": priority,
            "tenant": tenant,
            "max_attempts": max_attempts,
            "jitter": jitter,
            "misfire": misfire,
            "misfire_limit": misfire_limit,
            "grace": grace,
            "overlap": overlap,
        }
        return self.schedules.define(name, options)

    def workflow_schedule(
        self, name: str, **options: Any
    ) -> Callable[[WorkflowBuilder], WorkflowBuilder]:
        """Decorate a builder of a ``rota.Workflow`` from a ``rota.ScheduledRun``: schedule
        ``name`` (``cron=`` or ``every=`` and the policies of ``schedule``) writes that graph
        whole, once per slot, in the transaction that claims the slot (so the builder must be
        quick and do no I/O). A builder that fails skips its slot with an error in the log.
        See docs/concepts/workflows.md."""

        def register(builder: WorkflowBuilder) -> WorkflowBuilder:
            self.schedule(name, workflow=builder, **options)
            return builder

        return register
