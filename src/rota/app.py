"""App: the one object application code holds: kinds, schedules, enqueueing, running workers."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import signal
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Literal, Protocol, TypeVar, cast
from urllib.parse import urlsplit

from rota import workflows
from rota.client import (
    Client,
    KindDefaults,
    QueueStatus,
    job_spec,
    limit_selected,
    limit_spec,
)
from rota.domain.clock import Clock
from rota.domain.errors import InvalidInput, InvalidSchedule, MigrationsPending
from rota.domain.flow import Limit
from rota.domain.job import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    Attempt,
    EnqueueResult,
    Job,
    JobSpec,
    JobState,
    check_known_kind,
)
from rota.domain.retry import RetryPolicy
from rota.domain.schedule import Misfire, Overlap, Rule, ScheduleSpec
from rota.domain.workflow import Workflow, WorkflowBuilder
from rota.observability.metrics import Metrics, serve_metrics
from rota.results import ResultWaiter
from rota.runtime.hooks import Hook, Hooks, Middleware
from rota.runtime.registry import Handler, KindConfig, Registry
from rota.runtime.scheduler import MAX_WAIT, PUSHED_MAX_WAIT, Scheduler
from rota.runtime.services import Service
from rota.runtime.signals import stop_signals
from rota.runtime.worker import Worker, WorkerSettings
from rota.store import JobFilter, Page, Store, open_store, redact_url
from rota.store.base import MAX_BULK, LimitInfo, QueueInfo
from rota.workflows import WorkflowRun

H = TypeVar("H", bound=Handler)
M = TypeVar("M", bound=Middleware)
K = TypeVar("K", bound=Hook)

log = logging.getLogger("rota")

#: How long a worker sleeps between claims when nothing wakes it, by backend: PostgreSQL
#: wakes workers with NOTIFY; SQLite can only be polled by other processes.
POLL_BY_SCHEME = {"memory": 1.0, "sqlite": 0.25, "postgresql": 2.0, "postgres": 2.0}


class App:
    """Define kinds with ``@app.job`` and schedules with ``app.schedule``, enqueue with
    ``await app.enqueue``, run workers with ``await app.run_worker()`` (each also fires the
    schedules). Usable as ``async with App(url) as app: ...``.

    The store opens on first use. Schema migrations are applied automatically for memory and
    SQLite; on PostgreSQL run ``rota migrate`` (or pass ``auto_migrate=True``), and the App
    refuses to start on an outdated schema with MigrationsPending. A database that cannot be
    connected to raises ConnectionFailed, saying why. Behind a transaction pooler such as
    PgBouncer, give ``listen_database_url`` a direct connection for LISTEN (else workers poll).
    """

    def __init__(
        self,
        database_url: str | None = None,
        *,
        store: Store | None = None,
        clock: Clock | None = None,
        auto_migrate: bool | None = None,
        metrics: Metrics | None = None,
        listen_database_url: str | None = None,
    ) -> None:
        if database_url is None and store is None:
            raise InvalidInput("give App a database URL (e.g. sqlite:///rota.db) or a store")
        self.database_url = database_url or "memory://"
        self.registry = Registry()
        #: Middleware and outcome hooks (``@app.middleware``, ``@app.on_success``, ...).
        self.hooks = Hooks()
        self.metrics = metrics or Metrics()
        self._clock = clock
        self._store = store
        #: A store the App opened from its URL is the App's to forget on close.
        self._owns_store = store is None
        self.auto_migrate = auto_migrate
        #: A direct PostgreSQL connection for LISTEN, when database_url goes through a
        #: transaction pooler (set before the App opens).
        self.listen_database_url = listen_database_url
        self._open_lock: asyncio.Lock | None = None
        self._client: Client | None = None
        #: Each registered kind's defaults beside the registration they were read from (a
        #: bulk enqueue asks once per spec; read again if the registry holds another).
        self._kind_defaults: dict[str, tuple[KindConfig, KindDefaults]] = {}
        self._bridge: _SyncBridge | None = None
        self._waiter: ResultWaiter | None = None
        self._services: list[Callable[[Store, Worker], Service]] = []
        #: Schedules defined in code, by name: their options as given, so a kind registered
        #: after the schedule still lends it its defaults when a worker starts.
        self._schedules: dict[str, dict[str, Any]] = {}

    # ------------------------------------------------------------------ definition

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
        """Register ``async def middleware(ctx, call_next)`` around every handler execution:
        ``return await call_next()`` runs the rest (later middleware, then the handler) and
        returns its value. The first registered is outermost. It may not keep a stopped job
        running: a lease lost (or a shutdown) stops the job whatever it does with the
        cancellation. See docs/concepts/hooks.md for the order and the rules."""
        self.hooks.add_middleware(middleware)
        return middleware

    def on_success(self, hook: K) -> K:
        """Register ``hook(ctx, result)`` (async or plain ``def``), run in the worker after a
        job's success was recorded. A hook that raises is logged in one line; the outcome
        stands."""
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
        if name in self._schedules:
            raise InvalidSchedule("name", f"schedule {name!r} is already defined")
        if (kind is None) == (workflow is None):
            raise InvalidSchedule("kind", "give exactly one of kind or workflow")
        if workflow is not None and not callable(workflow):
            raise InvalidSchedule("workflow", "must be a function returning a rota.Workflow")
        options: dict[str, Any] = {
            "name": name,
            "kind": name if workflow is not None else kind,
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
        spec = self._schedule_spec(options)
        self._schedules[name] = options
        return spec

    def workflow_schedule(
        self, name: str, **options: Any
    ) -> Callable[[WorkflowBuilder], WorkflowBuilder]:
        """Decorate a builder: a schedule ``name`` (``cron=`` or ``every=`` and the policies of
        ``schedule``) whose every slot writes the graph the builder returns for it.

        The builder gets a ``rota.ScheduledRun`` (schedule, slot_at, payload) and returns a
        ``rota.Workflow``; it runs inside the transaction that claims the slot, so it must be
        quick and do no I/O. The graph is written whole in that transaction, its first job
        holding the slot's unique key: one graph per slot however many workers fire. Overlap
        (``overlap="skip"``, the default) waits for the whole previous workflow. A builder
        that raises (or returns something else, or a kind this App has no handler for) skips
        that slot with an error in the log; the schedule goes on.
        """

        def register(builder: WorkflowBuilder) -> WorkflowBuilder:
            self.schedule(name, workflow=builder, **options)
            return builder

        return register

    def workflow_builders(self) -> dict[str, WorkflowBuilder]:
        """The builders of this App's workflow schedules, by schedule name, each checking the
        kinds of the graph it returns against this App's handlers."""
        accepted = self.registry.accepted_kinds()
        return {
            name: workflows.checking_kinds(options["workflow"], accepted)
            for name, options in self._schedules.items()
            if options.get("workflow") is not None
        }

    @property
    def schedules(self) -> list[ScheduleSpec]:
        """The schedules defined in code, with the kinds' defaults as registered now."""
        return [self._schedule_spec(options) for options in self._schedules.values()]

    def _schedule_spec(self, options: dict[str, Any]) -> ScheduleSpec:
        every, cron = options["every"], options["cron"]
        if (every is None) == (cron is None):
            raise InvalidSchedule("rule", "give exactly one of every or cron")
        if every is not None:
            rule = Rule.every(_duration("every", every))
            if options["timezone"] != "UTC":
                raise InvalidSchedule("timezone", "applies only to cron schedules")
        else:
            rule = Rule.cron(cron, options["timezone"])
        kind_config = (
            self.registry.get(options["kind"]) if isinstance(options["kind"], str) else None
        )
        fields: dict[str, Any] = {
            "queue": kind_config.queue if kind_config else DEFAULT_QUEUE,
            "priority": kind_config.priority if kind_config else 0,
            "max_attempts": kind_config.max_attempts if kind_config else DEFAULT_MAX_ATTEMPTS,
        }
        fields.update({key: options[key] for key in fields if options[key] is not None})
        for key in ("jitter", "grace"):
            if options[key] is not None:
                fields[key] = _duration(key, options[key])
        return ScheduleSpec(
            name=options["name"],
            kind=options["kind"],
            rule=rule,
            payload={} if options["payload"] is None else options["payload"],
            tenant=options["tenant"],
            misfire=options["misfire"],
            misfire_limit=options["misfire_limit"],
            overlap=options["overlap"],
            workflow=options.get("workflow") is not None,
            **fields,
        )

    def scheduler(self, store: Store | None = None) -> Scheduler:
        """The schedule firer a worker of this App runs (on the App's store, which must be
        open, or on ``store``): it upserts the schedules defined in code on its first tick,
        then fires every due slot."""
        store = store or self.store
        specs = self.schedules
        kinds = {spec.kind for spec in specs if not spec.workflow}
        unknown = sorted(kinds - set(self.registry.kinds()))
        if unknown:
            log.warning(
                "schedules enqueue kinds with no handler in this app: %s", ", ".join(unknown)
            )
        pushed = store.pushes_schedule_changes
        return Scheduler(
            store,
            specs=specs,
            workflows=self.workflow_builders(),
            metrics=self.metrics,
            max_wait=PUSHED_MAX_WAIT if pushed else MAX_WAIT,
        )

    def add_service(self, factory: Callable[[Store, Worker], Service]) -> None:
        """Run an extra background service in every worker this App starts."""
        self._services.append(factory)

    def with_database(self, database_url: str) -> App:
        """Point this App at another database (before it opens); returns self."""
        if self._store is not None:
            raise InvalidInput("the App's store is already open")
        self.database_url = database_url
        return self

    @property
    def clock(self) -> Clock | None:
        """The clock this App's store and workers read, or None for the store's own."""
        return self._clock

    def with_clock(self, clock: Clock | None) -> App:
        """Drive this App's store and workers by ``clock`` (before it opens); returns self.

        Tests pass a ``rota.testing.FakeClock`` to an App defined at module level; None goes
        back to the store's own clock. Raises InvalidInput once the store is open.
        """
        if self._store is not None:
            raise InvalidInput("the App's store is already open")
        self._clock = clock
        return self

    # ------------------------------------------------------------------ store lifecycle

    @property
    def scheme(self) -> str:
        return urlsplit(self.database_url).scheme.lower()

    async def open(self) -> Store:
        """The App's store, opened (and migrated where automatic) on first call."""
        if self._store is not None and self._open_lock is not None:
            return self._store
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if self._store is None:
                self._store = open_store(
                    self.database_url,
                    clock=self._clock,
                    listen_database_url=self.listen_database_url,
                )
            auto = self.auto_migrate
            if auto is None:
                auto = self.scheme in ("memory", "sqlite")
            if auto:
                await self._store.migrate()
            else:
                pending = await self._store.pending_migrations()
                if pending:
                    raise MigrationsPending(
                        f"the database at {redact_url(self.database_url)} needs migrations "
                        f"{', '.join(pending)}: run `rota migrate`"
                    )
        return self._store

    async def close(self) -> None:
        """Close the store. A store the App opened from its URL is forgotten, so the App may
        be pointed elsewhere (``with_database``, ``with_clock``) and opened again."""
        if self._bridge is not None:
            self._bridge.close()
            self._bridge = None
        if self._waiter is not None:
            await self._waiter.close()
            self._waiter = None
        if self._store is not None:
            await self._store.close()
            if self._owns_store:
                self._store = None
                self._client = None
                self._open_lock = None

    async def __aenter__(self) -> App:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def store(self) -> Store:
        if self._store is None:
            raise InvalidInput(
                "the App is not open yet: use `async with app` or `await app.open()`"
            )
        return self._store

    @property
    def client(self) -> Client:
        """The enqueue/query use cases bound to this App's store and kinds."""
        if self._client is None or self._client.store is not self.store:
            self._client = Client(self.store, defaults=self._defaults)
        return self._client

    def _defaults(self, kind: str) -> KindDefaults | None:
        config = self.registry.get(kind)
        if config is None:
            return None
        return self._defaults_of(kind, config)

    def _defaults_of(self, kind: str, config: KindConfig) -> KindDefaults:
        known = self._kind_defaults.get(kind)
        if known is not None and known[0] is config:
            return known[1]
        defaults = KindDefaults(
            queue=config.queue,
            priority=config.priority,
            max_attempts=config.max_attempts,
            timeout=config.timeout,
        )
        self._kind_defaults[kind] = (config, defaults)
        return defaults

    # ------------------------------------------------------------------ enqueue and query

    def spec(self, kind: str, payload: Any = None, **options: Any) -> JobSpec:
        """A validated JobSpec with this App's defaults for ``kind``, for ``enqueue_many``.

        Once the App has handlers, a kind without one is refused (InvalidJob naming the
        known kinds); an App with none accepts every kind, its handlers being elsewhere.
        """
        config = self.registry.get(kind)
        if config is None:  # refused, unless the App has no handlers at all
            check_known_kind(kind, self.registry.accepted_kinds())
            return job_spec(kind, payload, **options)
        return job_spec(kind, payload, defaults=self._defaults_of(kind, config), **options)

    async def enqueue(
        self,
        kind: str,
        payload: Any = None,
        *,
        delay: timedelta | float | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        tenant: str | None = None,
        unique_key: str | None = None,
        max_attempts: int | None = None,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109 (the job's timeout, not ours)
        expires_at: datetime | None = None,
        expire_after: timedelta | float | None = None,
        unique_for: timedelta | float | None = None,
        unique_states: Iterable[JobState | str] | None = None,
        on_conflict: str = "skip",
        connection: Any = None,
        depends_on: Iterable[int] | None = None,
        on_parent_failure: str = "cancel",
    ) -> EnqueueResult:
        """Enqueue one job; returns it and whether an active job already held ``unique_key``.

        ``expires_at`` (or ``expire_after``, from the store's now; seconds or a timedelta):
        no attempt starts at or after it, and a job still waiting then ends cancelled with
        last_error "expired".

        ``unique_for`` (a period from this enqueue) and ``unique_states`` (by default pending,
        running and succeeded) hold ``unique_key`` beyond the active states, say to dedupe a
        webhook for a day; ``on_conflict="replace"`` makes a second enqueue update a holder
        still pending (payload and run_at: a debounce) instead of only reporting it.

        With ``connection`` (a psycopg AsyncConnection on the same PostgreSQL database) the job
        is written inside that connection's transaction: it exists only if that commits.
        With ``depends_on`` (job ids) the job waits until every one of them succeeded; when
        one ends dead or cancelled (or is deleted) it is cancelled too, or runs anyway with
        ``on_parent_failure="run"`` (rota.domain.workflow); ``depends_on`` and
        ``connection`` combine (the parents are looked up, and locked, in that transaction).
        Raises InvalidJob naming the field for bad input, an unknown parent included;
        nothing is written then.
        """
        spec = self.spec(
            kind,
            payload,
            delay=delay,
            run_at=run_at,
            priority=priority,
            queue=queue,
            tenant=tenant,
            unique_key=unique_key,
            max_attempts=max_attempts,
            timeout=timeout,
            expires_at=expires_at,
            expire_after=expire_after,
            unique_for=unique_for,
            unique_states=unique_states,
            on_conflict=on_conflict,
        )
        store = await self.open()
        if depends_on is not None:
            graph = workflows.graph_after(spec, depends_on, on_parent_failure)
            if connection is not None:
                [job] = await _transactional(store).enqueue_workflow_on(connection, graph)
                return EnqueueResult(job)
            [job] = await store.enqueue_workflow(graph)
            return EnqueueResult(job)
        if connection is not None:
            [result] = await _transactional(store).enqueue_on(connection, [spec])
            return result
        [result] = await store.enqueue([spec])
        return result

    async def enqueue_workflow(self, graph: Workflow, *, connection: Any = None) -> WorkflowRun:
        """Write a whole graph of jobs (``rota.Workflow``, ``chain``, ``group``, ``chord``)
        in one transaction, checked before anything is written: at most MAX_WORKFLOW_JOBS
        jobs, no unique keys, parents known (InvalidJob otherwise). Returns its workflow id,
        jobs and edges. With ``connection`` (a psycopg AsyncConnection) the graph joins that
        connection's transaction, as in ``enqueue``."""
        self._check_kinds(graph)
        store = await self.open()
        if connection is not None:
            jobs = await _transactional(store).enqueue_workflow_on(connection, graph)
            return workflows.run_of(graph, jobs)
        return await workflows.enqueue_workflow(store, graph)

    def enqueue_workflow_sync(self, graph: Workflow, *, connection: Any = None) -> WorkflowRun:
        """``enqueue_workflow`` for synchronous code (Django, Flask); with ``connection`` (a
        sync psycopg Connection) the graph joins that connection's transaction. Bad input
        raises before anything is written."""
        self._check_kinds(graph)
        if connection is not None:
            jobs = _transactional(self._sync_store()).enqueue_workflow_on_sync(connection, graph)
            return workflows.run_of(graph, jobs)
        run: WorkflowRun = self._on_bridge(self._workflow_on_bridge(graph))
        return run

    def _check_kinds(self, graph: Workflow) -> None:
        graph = workflows.checked(graph)
        accepted = self.registry.accepted_kinds()
        for spec in graph.specs:
            check_known_kind(spec.kind, accepted)

    async def _workflow_on_bridge(self, graph: Workflow) -> WorkflowRun:
        assert self._bridge is not None
        return await workflows.enqueue_workflow(await self._bridge.store(), graph)

    async def workflow(self, workflow_id: int) -> WorkflowRun:
        """The workflow's jobs (with their states) and edges. WorkflowNotFound."""
        return await workflows.get_workflow(await self.open(), workflow_id)

    async def cancel_workflow(self, workflow_id: int) -> int:
        """Cancel every job of the workflow that has not finished; how many. WorkflowNotFound."""
        return await workflows.cancel_workflow(await self.open(), workflow_id)

    async def enqueue_many(
        self, specs: Iterable[JobSpec], *, connection: Any = None
    ) -> list[EnqueueResult]:
        """Enqueue many jobs atomically (one round trip where the backend allows). A kind
        this App has no handler for is refused as in ``spec``; nothing is written then."""
        accepted = self.registry.accepted_kinds()
        if connection is None and not isinstance(specs, Sequence):
            store = await self.open()
            stream = getattr(store, "enqueue_stream", None)
            if stream is not None:
                # Made one by one (a generator): the store may write early specs while later
                # ones are being made; a bad spec midway still leaves nothing written.
                streamed: list[EnqueueResult] = await stream(_known(specs, accepted))
                return streamed
        batch = list(specs)
        for spec in batch:
            check_known_kind(spec.kind, accepted)
        store = await self.open()
        if connection is not None:
            return await _transactional(store).enqueue_on(connection, batch)
        return await store.enqueue(batch)

    def enqueue_sync(
        self,
        kind: str,
        payload: Any = None,
        *,
        connection: Any = None,
        depends_on: Iterable[int] | None = None,
        on_parent_failure: str = "cancel",
        **options: Any,
    ) -> EnqueueResult:
        """``enqueue`` for synchronous code (Django, Flask). With ``connection`` (a sync psycopg
        Connection) the job joins that connection's transaction; ``depends_on`` and
        ``on_parent_failure`` as in ``enqueue``, with or without ``connection``. Bad input (an
        unknown kind included) raises InvalidInput before anything is opened or written."""
        spec = self.spec(kind, payload, **options)
        graph = (
            None
            if depends_on is None
            else workflows.graph_after(spec, depends_on, on_parent_failure)
        )
        if connection is not None:
            joining = _transactional(self._sync_store())
            if graph is not None:
                [job] = joining.enqueue_workflow_on_sync(connection, graph)
                return EnqueueResult(job)
            [joined] = joining.enqueue_on_sync(connection, [spec])
            return joined
        result: EnqueueResult = self._on_bridge(self._enqueue_on_bridge(spec, graph))
        return result

    def _sync_store(self) -> Store:
        """The store whose statements run on a caller's sync connection (no pool is used)."""
        store = self._store or open_store(self.database_url, clock=self._clock)
        self._store = store
        return store

    def _on_bridge(self, coro: Any) -> Any:
        if self._bridge is None:
            self._bridge = _SyncBridge(self)
        return self._bridge.call(coro)

    async def _enqueue_on_bridge(self, spec: JobSpec, graph: Workflow | None) -> EnqueueResult:
        assert self._bridge is not None
        store = await self._bridge.store()
        if graph is not None:
            [job] = await store.enqueue_workflow(graph)
            return EnqueueResult(job)
        [result] = await store.enqueue([spec])
        return result

    async def get(self, job_id: int) -> Job:
        await self.open()
        return await self.client.get(job_id)

    async def attempts(self, job_id: int) -> list[Attempt]:
        """Every recorded execution of the job, oldest first (empty for an unknown id)."""
        await self.open()
        return await self.client.attempts(job_id)

    def get_sync(self, job_id: int) -> Job:
        """``get`` for synchronous code (Django, Flask), on the ``enqueue_sync`` bridge."""
        return cast(Job, self._with_client(lambda client: client.get(job_id)))

    def attempts_sync(self, job_id: int) -> list[Attempt]:
        """``attempts`` for synchronous code, on the ``enqueue_sync`` bridge."""
        return cast(list[Attempt], self._with_client(lambda client: client.attempts(job_id)))

    def _with_client(self, use: Callable[[Client], Awaitable[Any]]) -> Any:
        """``use`` a Client on the bridge's store, from sync code."""
        if self._bridge is None:
            self._bridge = _SyncBridge(self)
        bridge = self._bridge

        async def call() -> Any:
            return await use(Client(await bridge.store(), defaults=self._defaults))

        return bridge.call(call())

    # ------------------------------------------------------------------ results

    async def result(
        self,
        job_id: int,
        *,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109 (raised as ResultTimeout)
    ) -> Any:
        """Wait until the job finishes and return what its handler returned (None for None).

        Raises JobFailed (it went dead; ``.error`` is its last error), JobCancelled,
        JobNotFound, or ResultTimeout (a TimeoutError) once ``timeout`` (seconds or a
        timedelta; None waits for ever) passes: the job itself carries on. On PostgreSQL the
        wait is woken by a notification when the job finishes; on SQLite it polls.
        """
        return await (await self._results()).result(job_id, timeout=timeout)

    async def results(
        self,
        job_ids: Iterable[int],
        *,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109 (raised as ResultTimeout)
    ) -> list[Any]:
        """Wait for every job; their results in the order given, with one query per wake-up
        for all of them. Raises as ``result`` does, as soon as one job is seen to fail."""
        return await (await self._results()).results(job_ids, timeout=timeout)

    async def as_completed(
        self,
        job_ids: Iterable[int],
        *,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109 (raised as ResultTimeout)
    ) -> AsyncGenerator[Job, None]:
        """Each job as it finishes (succeeded, dead or cancelled), in the order seen; pass a
        yielded job to nothing: ``job.result``, ``job.state`` and ``job.last_error`` say how
        it ended. ``timeout`` bounds the whole iteration (ResultTimeout)."""
        waiter = await self._results()
        async with contextlib.aclosing(waiter.as_completed(job_ids, timeout=timeout)) as jobs:
            async for job in jobs:
                yield job

    def result_sync(self, job_id: int, *, timeout: timedelta | float | None = None) -> Any:
        """``result`` for synchronous code (Django, Flask), on the ``enqueue_sync`` bridge."""
        return self._on_bridge(self._result_on_bridge(job_id, timeout))

    async def _result_on_bridge(
        self,
        job_id: int,
        timeout: timedelta | float | None,  # noqa: ASYNC109 (raised as ResultTimeout)
    ) -> Any:
        assert self._bridge is not None
        return await (await self._bridge.waiter()).result(job_id, timeout=timeout)

    async def _results(self) -> ResultWaiter:
        store = await self.open()
        if self._waiter is None:
            self._waiter = ResultWaiter(store)
        return self._waiter

    async def list_jobs(
        self, filter: JobFilter | None = None, *, cursor: str | None = None, limit: int = 50
    ) -> Page:
        await self.open()
        return await self.client.list_jobs(filter, cursor=cursor, limit=limit)

    async def retry(self, job_id: int, *, max_attempts: int | None = None) -> Job:
        await self.open()
        return await self.client.retry(job_id, max_attempts=max_attempts)

    async def cancel(self, job_id: int) -> Job:
        await self.open()
        return await self.client.cancel(job_id)

    async def rerun(self, job_id: int) -> Job:
        """Run a succeeded job again, now: its attempt counter starts over (the new series has
        all of max_attempts) and its earlier attempts stay in its history. StateConflict for
        any other state, or while another active job holds its unique key."""
        await self.open()
        return await self.client.rerun(job_id)

    async def delete_job(self, job_id: int) -> Job:
        """Remove a pending or finished job and its attempt history; returns the job as it
        was. JobNotFound; JobRunning while a worker holds it: cancel it first."""
        await self.open()
        return await self.client.delete(job_id)

    async def reschedule(
        self,
        job_id: int,
        *,
        run_at: datetime | Literal["now"] | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> Job:
        """Change a pending job's run_at (``"now"`` pulls it forward), priority and/or queue;
        fenced against a concurrent claim: JobRunning if a worker took it first (nothing
        changes). InvalidJob for bad values; StateConflict once it finished."""
        await self.open()
        return await self.client.reschedule(job_id, run_at=run_at, priority=priority, queue=queue)

    async def purge_jobs(self, filter: JobFilter | None = None, *, limit: int = MAX_BULK) -> int:
        """Delete up to ``limit`` finished (succeeded, dead, cancelled) jobs matching
        ``filter`` (all finished jobs without one), with their history; returns how many."""
        await self.open()
        return await self.client.purge(filter or JobFilter(), limit=limit)

    # ------------------------------------------------------------------ flow control

    async def pause_queue(self, name: str) -> QueueInfo:
        """Stop every worker claiming from queue ``name`` until ``resume_queue``; jobs already
        running finish. The pause is stored, so it holds across restarts and deploys."""
        await self.open()
        return await self.client.pause_queue(name)

    async def resume_queue(self, name: str) -> QueueInfo:
        await self.open()
        return await self.client.resume_queue(name)

    async def queues(self) -> list[QueueStatus]:
        """Every queue with jobs, settings or a limit: paused or not, counts by state, and
        its concurrency limit."""
        await self.open()
        return await self.client.queues()

    async def set_limit(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        tenant: str | None = None,
        concurrency: int | None = None,
        rate: int | None = None,
        per: timedelta | float | None = None,
    ) -> Limit:
        """Limit one kind, queue or tenant cluster-wide, replacing its previous limit:
        ``concurrency`` caps the jobs running at once, ``rate`` the starts ``per`` period.

        ``set_limit(kind="pdf", concurrency=3)``; ``set_limit(tenant="*", concurrency=2)``
        caps each tenant separately; ``set_limit(kind="api", rate=100, per=timedelta(minutes=1))``.
        Rates apply to kinds and tenants. Raises InvalidInput for a bad combination; nothing
        is written then.
        """
        limit = limit_spec(
            kind=kind, queue=queue, tenant=tenant, concurrency=concurrency, rate=rate, per=per
        )
        await self.open()
        return await self.client.set_limit(limit)

    async def delete_limit(
        self, *, kind: str | None = None, queue: str | None = None, tenant: str | None = None
    ) -> bool:
        """Remove the limit on one kind, queue or tenant; False if it had none."""
        scope, name = limit_selected(kind=kind, queue=queue, tenant=tenant)
        await self.open()
        return await self.client.delete_limit(scope, name)

    async def limits(self) -> list[LimitInfo]:
        """Every limit with its use now: running jobs and starts in the current period."""
        await self.open()
        return await self.client.limits()

    async def running_by_tenant(self) -> dict[str, int]:
        """Jobs running now (live lease) per tenant."""
        await self.open()
        return await self.client.running_by_tenant()

    # ------------------------------------------------------------------ workers

    def worker(
        self, settings: WorkerSettings | None = None, *, store: Store | None = None, **options: Any
    ) -> Worker:
        """A Worker for this App's kinds, on the App's store (which must be open) or on
        ``store`` (one opened on the loop the worker will run on; see ``open_worker_store``).
        ``options`` are WorkerSettings fields, with durations accepted as seconds."""
        store = store or self.store
        settings = settings or _settings(options, default_poll=POLL_BY_SCHEME.get(self.scheme))
        worker = Worker(
            store,
            self.registry,
            settings,
            clock=self._clock,
            metrics=self.metrics,
            hooks=self.hooks,
        )
        worker.add_service(self.scheduler(store))
        for factory in self._services:
            worker.add_service(factory(store, worker))
        return worker

    def open_worker_store(self) -> Store:
        """A store of this App's database for workers on another event loop and thread: the
        App's own memory store (the only place its jobs live; safe across threads), otherwise
        a store with its own connections, so that work on the App's loop and connections
        (API requests) never queues in front of a heartbeat. Close it on that loop."""
        if self.scheme == "memory":
            return self.store
        return open_store(
            self.database_url, clock=self._clock, listen_database_url=self.listen_database_url
        )

    async def run_worker(
        self,
        settings: WorkerSettings | None = None,
        *,
        handle_signals: bool = False,
        ready: Callable[[Worker], None] | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        **options: Any,
    ) -> None:
        """Run a worker until it is stopped (SIGTERM, SIGINT or SIGHUP when ``handle_signals``:
        the first stops gracefully, the second at once; see ``rota.runtime.signals``). With
        ``metrics_port``, this process's metrics are served on
        http://metrics_host:metrics_port/metrics meanwhile (InvalidInput if that address cannot
        be bound)."""
        await self.open()
        worker = self.worker(settings, **options)
        exporter = (
            serve_metrics(self.metrics, port=metrics_port, host=metrics_host)
            if metrics_port is not None
            else None
        )
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if handle_signals:
            for signum in stop_signals():
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(signum, worker.request_stop)
                    installed.append(signum)
        if ready is not None:
            ready(worker)
        try:
            await worker.run()
        finally:
            for signum in installed:
                loop.remove_signal_handler(signum)
            if exporter is not None:
                exporter.close()


def _duration(field: str, value: object) -> timedelta:
    """A schedule duration given as a timedelta or seconds; InvalidSchedule naming ``field``."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidSchedule(field, "must be a timedelta or a number of seconds")
    try:
        return timedelta(seconds=value)
    except (OverflowError, ValueError):
        raise InvalidSchedule(field, "is out of range") from None


def _settings(options: dict[str, Any], *, default_poll: float | None) -> WorkerSettings:
    durations = (
        "lease",
        "heartbeat",
        "poll",
        "rescue",
        "shutdown_timeout",
        "retention",
        "unrunnable_grace",
        "audit_retention",
    )
    values: dict[str, Any] = {}
    for key, value in options.items():
        if value is None:
            continue
        if key in ("retention", "unrunnable_grace", "audit_retention") and value == "off":
            values[key] = None
            continue
        if key in durations and not isinstance(value, timedelta):
            value = timedelta(seconds=float(value))
        values[key] = value
    if "poll" not in values and default_poll is not None:
        values["poll"] = timedelta(seconds=default_poll)
    try:
        return WorkerSettings(**values)
    except TypeError as error:
        raise InvalidInput(f"unknown worker setting: {error}") from None


class _TransactionalStore(Protocol):
    async def enqueue_on(
        self, connection: Any, specs: Sequence[JobSpec]
    ) -> list[EnqueueResult]: ...

    def enqueue_on_sync(self, connection: Any, specs: Sequence[JobSpec]) -> list[EnqueueResult]: ...

    async def enqueue_workflow_on(self, connection: Any, graph: Workflow) -> list[Job]: ...

    def enqueue_workflow_on_sync(self, connection: Any, graph: Workflow) -> list[Job]: ...


def _known(specs: Iterable[JobSpec], accepted: frozenset[str] | None) -> Iterator[JobSpec]:
    """``specs``, each checked as it is taken (``check_known_kind``)."""
    for spec in specs:
        check_known_kind(spec.kind, accepted)
        yield spec


def _transactional(store: Store) -> _TransactionalStore:
    if not hasattr(store, "enqueue_on"):
        raise InvalidInput("enqueueing on your own connection needs a PostgreSQL database")
    return cast(_TransactionalStore, store)


class _SyncBridge:
    """An event loop on a daemon thread, for ``enqueue_sync`` from code with no loop running.

    PostgreSQL pools belong to the loop that opened them, so the bridge opens a store of its
    own; memory and SQLite stores are shared, being safe across threads.

    A sync script seldom closes its App, so the bridge also closes itself at interpreter exit:
    left to the interpreter's teardown, its pool's tasks are destroyed mid-wait and each prints
    "Task was destroyed but it is pending!".
    """

    def __init__(self, app: App) -> None:
        self._app = app
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="rota-sync-bridge", daemon=True
        )
        self._thread.start()
        self._store: Store | None = None
        self._waiter: ResultWaiter | None = None
        atexit.register(self.close)

    async def store(self) -> Store:
        if self._store is None:
            app = self._app
            if app.scheme in ("postgresql", "postgres"):
                self._store = open_store(app.database_url, clock=app._clock)
            else:
                self._store = app._store or await app.open()
        return self._store

    async def waiter(self) -> ResultWaiter:
        if self._waiter is None:
            self._waiter = ResultWaiter(await self.store())
        return self._waiter

    def call(self, coro: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result()

    def close(self) -> None:
        atexit.unregister(self.close)
        if self._loop.is_closed():
            return
        with contextlib.suppress(Exception):
            self.call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    async def _shutdown(self) -> None:
        """Close the bridge's own store, then end whatever else still runs on its loop."""
        if self._waiter is not None:
            await self._waiter.close()
        if self._store is not None and self._store is not self._app._store:
            with contextlib.suppress(Exception):
                await self._store.close()
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        await self._loop.shutdown_asyncgens()
