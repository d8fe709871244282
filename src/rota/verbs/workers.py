"""Workers for the App's kinds: built with its hooks, schedules and extra services, and run
in this process until stopped."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any

from rota.domain.errors import InvalidInput
from rota.observability.metrics import Metrics, serve_metrics
from rota.runtime.hooks import Hooks
from rota.runtime.services import Service
from rota.runtime.signals import stop_signals
from rota.runtime.supervised import Link
from rota.runtime.supervisor import FleetSettings, Supervisor, child_environment
from rota.runtime.worker import Worker
from rota.runtime.worker_settings import (
    WorkerSettings,
    default_worker_name,
    validate_worker_name,
)
from rota.store import Store, open_store
from rota.verbs.binding import Binding
from rota.verbs.schedules import Schedules

#: How long a worker sleeps between claims when nothing wakes it, by backend: PostgreSQL
#: wakes workers with NOTIFY; SQLite can only be polled by other processes.
POLL_BY_SCHEME = {"memory": 1.0, "sqlite": 0.25, "postgresql": 2.0, "postgres": 2.0}
#: The worker settings that are durations: given as seconds, they become timedeltas.
DURATIONS = (
    "lease",
    "heartbeat",
    "poll",
    "rescue",
    "shutdown_timeout",
    "retention",
    "unrunnable_grace",
    "audit_retention",
)
#: The durations that ``"off"`` turns off (None).
OPTIONAL = ("retention", "unrunnable_grace", "audit_retention")


class Workers:
    """Builds and runs the App's workers (``App.worker``, ``App.run_worker``)."""

    def __init__(
        self, binding: Binding, *, hooks: Hooks, metrics: Metrics, schedules: Schedules
    ) -> None:
        self._binding = binding
        self._hooks = hooks
        self._metrics = metrics
        self._schedules = schedules
        self._services: list[Callable[[Store, Worker], Service]] = []

    @property
    def store(self) -> Store:
        """The App's store (InvalidInput before the App opens)."""
        return self._binding.store

    def add_service(self, factory: Callable[[Store, Worker], Service]) -> None:
        """Run an extra background service in every worker (``factory(store, worker)``)."""
        self._services.append(factory)

    def worker(
        self, settings: WorkerSettings | None = None, *, store: Store | None = None, **options: Any
    ) -> Worker:
        """A Worker on the App's store (which must be open) or on ``store``; ``options`` are
        WorkerSettings fields, with durations accepted as seconds."""
        binding = self._binding
        store = store or binding.store
        settings = settings or settings_of(options, default_poll=POLL_BY_SCHEME.get(binding.scheme))
        worker = Worker(
            store,
            binding.registry,
            settings,
            clock=binding.clock,
            metrics=self._metrics,
            hooks=self._hooks,
        )
        worker.add_service(self._schedules.scheduler(store))
        for factory in self._services:
            worker.add_service(factory(store, worker))
        return worker

    def open_store(self) -> Store:
        """A store of the App's database for workers on another event loop and thread: the
        App's own memory store (the only place its jobs live; safe across threads), otherwise
        a store with its own connections, so that work on the App's loop and connections
        (API requests) never queues in front of a heartbeat. Close it on that loop."""
        binding = self._binding
        if binding.scheme == "memory":
            return binding.store
        return open_store(
            binding.database_url,
            clock=binding.clock,
            listen_database_url=binding.listen_database_url,
        )

    async def run(
        self,
        settings: WorkerSettings | None = None,
        *,
        handle_signals: bool = False,
        ready: Callable[[Worker], None] | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        metrics_allowed_hosts: Iterable[str] = (),
        link: Link | None = None,
        **options: Any,
    ) -> None:
        """Run a worker until it is stopped; see ``App.run_worker``. ``link``: this process is
        a child of a supervisor (``rota.runtime.supervised``)."""
        await self._binding.open()
        if link is not None:
            link.attach(self._hooks)  # before the worker reads the hooks
        worker = self.worker(settings, **options)
        exporter = (
            serve_metrics(
                self._metrics,
                port=metrics_port,
                host=metrics_host,
                allowed_hosts=metrics_allowed_hosts,
            )
            if metrics_port is not None
            else None
        )
        if link is not None:
            link.ready(worker, metrics_port=exporter.port if exporter is not None else None)
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

    async def run_fleet(
        self,
        app_ref: str,
        *,
        processes: int,
        name: str | None = None,
        max_jobs_per_child: int | None = None,
        max_memory_per_child_mb: int | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        metrics_allowed_hosts: Iterable[str] = (),
        cli_args: Sequence[str] = (),
        **options: Any,
    ) -> int:
        """Run ``processes`` worker processes of the App at ``app_ref`` under a supervisor
        until it is stopped (``rota.runtime.supervisor``); 0 after a graceful stop, else 1."""
        binding = self._binding
        if binding.scheme == "memory":
            raise InvalidInput(
                "a memory:// store lives in one process: give worker processes a "
                "SQLite or PostgreSQL database"
            )
        if not 1 <= processes <= 256:
            raise InvalidInput("processes must be between 1 and 256")
        settings_of(dict(options), default_poll=None).validated()  # refuse bad ones here, once
        env = {"ROTA_DATABASE_URL": binding.database_url, **child_environment(options)}
        if binding.listen_database_url:
            env["ROTA_LISTEN_DATABASE_URL"] = binding.listen_database_url
        fleet = FleetSettings(
            app_ref=app_ref,
            processes=processes,
            name=validate_worker_name(name) if name else default_worker_name(),
            env=env,
            cli_args=tuple(cli_args),
            max_jobs_per_child=max_jobs_per_child,
            max_memory_per_child_mb=max_memory_per_child_mb,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            metrics_allowed_hosts=tuple(metrics_allowed_hosts),
        )
        return await Supervisor(fleet).run()


def app_reference(app: object) -> str:
    """``module:attribute`` of a module-level ``app`` its worker processes can import;
    InvalidInput when there is none (an App made in a function or in a script run as
    ``__main__`` without ``-m``)."""
    for module_name, module in list(sys.modules.items()):
        try:
            names = list(vars(module).items())
        except TypeError:  # an object in sys.modules that is no module
            continue
        for attribute, value in names:
            if value is not app:
                continue
            if module_name == "__main__":
                spec = getattr(module, "__spec__", None)
                if spec is None or not spec.name:
                    continue
                module_name = spec.name
            return f"{module_name}:{attribute}"
    raise InvalidInput(
        "worker processes import the App by name: define it at module level in an importable "
        "module, or pass app_ref='package.module:app'"
    )


def settings_of(options: dict[str, Any], *, default_poll: float | None) -> WorkerSettings:
    """WorkerSettings from keyword options: None leaves a setting at its default, durations
    may be seconds, ``"off"`` turns an optional one off. InvalidInput for an unknown one."""
    values: dict[str, Any] = {}
    for key, value in options.items():
        if value is None:
            continue
        if key in OPTIONAL and value == "off":
            values[key] = None
            continue
        if key in DURATIONS and not isinstance(value, timedelta):
            value = timedelta(seconds=float(value))
        values[key] = value
    if "poll" not in values and default_poll is not None:
        values["poll"] = timedelta(seconds=default_poll)
    try:
        return WorkerSettings(**values)
    except TypeError as error:
        raise InvalidInput(f"unknown worker setting: {error}") from None
