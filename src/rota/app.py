"""App: the one object application code holds. It defines kinds and schedules, enqueues and
runs workers itself, and composes one object per further concept (``rota.verbs``):
``app.jobs``, ``app.results``, ``app.workflows``, ``app.queues``, ``app.limits``,
``app.schedules`` and ``app.signals``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from rota.domain.clock import Clock
from rota.domain.durable import SignalResult
from rota.domain.errors import InvalidInput
from rota.domain.job import EnqueueResult, JobSpec
from rota.domain.job_state import JobState
from rota.observability.metrics import Metrics
from rota.runtime.hooks import Hooks
from rota.runtime.registry import Registry
from rota.runtime.worker import Worker
from rota.runtime.worker_settings import WorkerSettings
from rota.store import Store
from rota.verbs.binding import Binding
from rota.verbs.definitions import Definitions
from rota.verbs.enqueue import Enqueuer
from rota.verbs.jobs import Jobs
from rota.verbs.queues import Limits, Queues
from rota.verbs.results import Results
from rota.verbs.schedules import Schedules
from rota.verbs.signals import Signals
from rota.verbs.workers import Workers, app_reference
from rota.verbs.workflows import Workflows


class App(Definitions):
    """Define kinds with ``@app.job`` and schedules with ``app.schedule``, enqueue with
    ``await app.enqueue``, run workers with ``await app.run_worker()`` (each also fires the
    schedules). Usable as ``async with App(url) as app: ...``. Jobs are read and acted on
    through ``app.jobs``, results through ``app.results``, signals through ``app.signal``.

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
        self.registry = Registry()
        #: Middleware and outcome hooks (``@app.middleware``, ``@app.on_success``, ...).
        self.hooks = Hooks()
        self.metrics = metrics or Metrics()
        #: The App's database (``rota.verbs.binding.Binding``): its URL, migration policy and
        #: LISTEN connection (settable until it opens), the store once open.
        self.database = binding = Binding(
            database_url or "memory://",
            self.registry,
            store=store,
            clock=clock,
            auto_migrate=auto_migrate,
            listen_database_url=listen_database_url,
        )
        self._enqueuer = Enqueuer(binding)
        self.jobs = Jobs(binding)  #: ``await app.jobs.get(job_id)``, ``retry``, ``cancel``...
        self.results = Results(binding)  #: ``await app.results.get(job_id, timeout=...)``
        self.workflows = Workflows(binding, self._enqueuer)  #: graphs of jobs
        self.queues = Queues(binding)  #: pause, resume and list queues
        self.limits = Limits(binding)  #: concurrency and rate limits, cluster-wide
        self.schedules = Schedules(binding, self.metrics)  #: those defined in code; the firer
        self.signals = Signals(binding, self.metrics)  #: events for durable jobs' waits
        #: Builds and runs workers; ``app.workers.add_service(factory)`` adds to each.
        self.workers = Workers(
            binding, hooks=self.hooks, metrics=self.metrics, schedules=self.schedules
        )

    # ------------------------------------------------------------------ the database

    @property
    def database_url(self) -> str:
        return self.database.database_url

    @property
    def clock(self) -> Clock | None:
        """The clock this App's store and workers read, or None for the store's own."""
        return self.database.clock

    def with_database(self, database_url: str) -> App:
        """Point this App at another database (before it opens); returns self."""
        self.database.point_at(database_url)
        return self

    def with_clock(self, clock: Clock | None) -> App:
        """Drive this App's store and workers by ``clock`` (before it opens); returns self.
        Tests pass a ``rota.testing.FakeClock`` to an App defined at module level; None goes
        back to the store's own clock. Raises InvalidInput once the store is open."""
        self.database.use_clock(clock)
        return self

    async def open(self) -> Store:
        """The App's store, opened (and migrated where automatic) on first call."""
        return await self.database.open()

    async def close(self) -> None:
        """Close the store. A store the App opened from its URL is forgotten, so the App may
        be pointed elsewhere (``with_database``, ``with_clock``) and opened again."""
        await self.database.close()

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
        """The open store (InvalidInput before the App opens)."""
        return self.database.store

    # ------------------------------------------------------------------ enqueue

    def spec(self, kind: str, payload: Any = None, **options: Any) -> JobSpec:
        """A validated JobSpec with this App's defaults for ``kind``, for ``enqueue_many``.

        Once the App has handlers, a kind without one is refused (InvalidJob naming the
        known kinds); an App with none accepts every kind, its handlers being elsewhere.
        """
        return self._enqueuer.spec(kind, payload, **options)

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
        spec = self._enqueuer.spec(
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
        return await self._enqueuer.enqueue(
            spec, connection=connection, depends_on=depends_on, on_parent_failure=on_parent_failure
        )

    async def enqueue_many(
        self, specs: Iterable[JobSpec], *, connection: Any = None
    ) -> list[EnqueueResult]:
        """Enqueue many jobs atomically (one round trip where the backend allows). A kind
        this App has no handler for is refused as in ``spec``; nothing is written then."""
        return await self._enqueuer.enqueue_many(specs, connection=connection)

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
        spec = self._enqueuer.spec(kind, payload, **options)
        return self._enqueuer.enqueue_sync(
            spec, connection=connection, depends_on=depends_on, on_parent_failure=on_parent_failure
        )

    async def signal(self, key: str, data: Any = None, **options: Any) -> SignalResult:
        """Send ``data`` to the job waiting for ``key`` (``ctx.wait_for``): app.signals.send."""
        return await self.signals.send(key, data, **options)

    # ------------------------------------------------------------------ workers

    def worker(
        self, settings: WorkerSettings | None = None, *, store: Store | None = None, **options: Any
    ) -> Worker:
        """A Worker for this App's kinds, on the App's store (which must be open) or on
        ``store`` (one opened on the loop the worker will run on: ``app.workers.open_store()``).
        ``options`` are WorkerSettings fields, with durations accepted as seconds."""
        return self.workers.worker(settings, store=store, **options)

    async def run_worker(
        self,
        settings: WorkerSettings | None = None,
        *,
        handle_signals: bool = False,
        ready: Callable[[Worker], None] | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        metrics_allowed_hosts: Iterable[str] = (),
        processes: int | None = None,
        max_jobs_per_child: int | None = None,
        max_memory_per_child: int | None = None,
        app_ref: str | None = None,
        **options: Any,
    ) -> None:
        """Run a worker until it is stopped (SIGTERM, SIGINT or SIGHUP when ``handle_signals``:
        the first stops gracefully, the second at once; see ``rota.runtime.signals``). With
        ``metrics_port``, this process's metrics are served on
        http://metrics_host:metrics_port/metrics meanwhile (InvalidInput if that address cannot
        be bound), to requests whose Host is an IP address, localhost or one of
        ``metrics_allowed_hosts``.

        With ``processes`` (or a per-child limit: ``max_jobs_per_child`` attempts,
        ``max_memory_per_child`` MiB of resident memory), this process supervises that many
        ``rota worker`` processes of this App instead (``rota.runtime.supervisor``), found by
        its module-level name or ``app_ref`` (``package.module:app``); it handles the stop
        signals itself and the metrics it serves are the fleet's."""
        if processes is not None or max_jobs_per_child or max_memory_per_child:
            if settings is not None:
                raise InvalidInput("give worker processes their settings as keyword options")
            await self.workers.run_fleet(
                app_ref or app_reference(self),
                processes=processes or 1,
                max_jobs_per_child=max_jobs_per_child,
                max_memory_per_child_mb=max_memory_per_child,
                metrics_port=metrics_port,
                metrics_host=metrics_host,
                metrics_allowed_hosts=metrics_allowed_hosts,
                **options,
            )
            return
        await self.workers.run(
            settings,
            handle_signals=handle_signals,
            ready=ready,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            metrics_allowed_hosts=metrics_allowed_hosts,
            **options,
        )
