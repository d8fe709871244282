"""Binding: the App's database as its verbs use it: the store, opened (and migrated where
automatic) on first use, the Client on it with the App's kind defaults, and the sync bridge."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar
from urllib.parse import urlsplit

from rota.client import Client, KindDefaults
from rota.domain.clock import Clock
from rota.domain.errors import InvalidInput, MigrationsPending
from rota.results import ResultWaiter
from rota.runtime.registry import KindConfig, Registry
from rota.store import Store, open_store, redact_url

T = TypeVar("T")


class Binding:
    """The App's store and what is built on it. See the module docstring.

    The store opens on first use. Schema migrations are applied automatically for memory and
    SQLite; otherwise ``auto_migrate`` decides, and an outdated schema raises
    MigrationsPending.
    """

    def __init__(
        self,
        database_url: str,
        registry: Registry,
        *,
        store: Store | None,
        clock: Clock | None,
        auto_migrate: bool | None,
        listen_database_url: str | None,
    ) -> None:
        self.database_url = database_url
        self.registry = registry
        self.clock = clock
        self.auto_migrate = auto_migrate
        self.listen_database_url = listen_database_url
        self._store = store
        #: A store opened from the URL is the App's to forget on close.
        self._owns_store = store is None
        self._open_lock: asyncio.Lock | None = None
        self._client: Client | None = None
        #: Each registered kind's defaults beside the registration they were read from (a
        #: bulk enqueue asks once per spec; read again if the registry holds another).
        self._kind_defaults: dict[str, tuple[KindConfig, KindDefaults]] = {}
        self._bridge: SyncBridge | None = None
        self._waiter: ResultWaiter | None = None

    @property
    def scheme(self) -> str:
        return urlsplit(self.database_url).scheme.lower()

    @property
    def is_open(self) -> bool:
        return self._store is not None

    def point_at(self, database_url: str) -> None:
        """Use another database, before the store opens (InvalidInput after)."""
        self._unopened()
        self.database_url = database_url

    def use_clock(self, clock: Clock | None) -> None:
        """Use another clock (None: the store's own), before the store opens."""
        self._unopened()
        self.clock = clock

    def _unopened(self) -> None:
        if self._store is not None:
            raise InvalidInput("the App's store is already open")

    async def open(self) -> Store:
        """The store, opened (and migrated where automatic) on first call."""
        if self._store is not None and self._open_lock is not None:
            return self._store
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if self._store is None:
                self._store = open_store(
                    self.database_url,
                    clock=self.clock,
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
        """Close the store. A store opened from the URL is forgotten, so the App may be
        pointed elsewhere and opened again."""
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

    @property
    def store(self) -> Store:
        if self._store is None:
            raise InvalidInput(
                "the App is not open yet: use `async with app` or `await app.open()`"
            )
        return self._store

    @property
    def client(self) -> Client:
        """The enqueue/query use cases on the open store, with the App's kind defaults."""
        if self._client is None or self._client.store is not self.store:
            self._client = Client(self.store, defaults=self.defaults)
        return self._client

    async def opened_client(self) -> Client:
        await self.open()
        return self.client

    def defaults(self, kind: str) -> KindDefaults | None:
        """The registered defaults of ``kind`` (None for a kind with no handler here)."""
        config = self.registry.get(kind)
        if config is None:
            return None
        return self.defaults_of(kind, config)

    def defaults_of(self, kind: str, config: KindConfig) -> KindDefaults:
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

    async def waiter(self) -> ResultWaiter:
        """The result waiter on the open store (one per App)."""
        store = await self.open()
        if self._waiter is None:
            self._waiter = ResultWaiter(store)
        return self._waiter

    # ------------------------------------------------------------------ synchronous callers

    def sync_store(self) -> Store:
        """The store whose statements run on a caller's sync connection (no pool is used)."""
        store = self._store or open_store(self.database_url, clock=self.clock)
        self._store = store
        return store

    def on_bridge(self, call: Callable[[SyncBridge], Coroutine[Any, Any, T]]) -> T:
        """Run ``call(bridge)`` on the bridge's loop and return its value, from sync code."""
        if self._bridge is None:
            self._bridge = SyncBridge(self)
        bridge = self._bridge
        return bridge.call(call(bridge))

    def with_client_sync(self, use: Callable[[Client], Awaitable[T]]) -> T:
        """``use`` a Client on the bridge's store, from sync code."""

        async def call(bridge: SyncBridge) -> T:
            return await use(Client(await bridge.store(), defaults=self.defaults))

        return self.on_bridge(call)


class SyncBridge:
    """An event loop on a daemon thread, for ``enqueue_sync`` from code with no loop running.

    PostgreSQL pools belong to the loop that opened them, so the bridge opens a store of its
    own; memory and SQLite stores are shared, being safe across threads.

    A sync script seldom closes its App, so the bridge also closes itself at interpreter exit:
    left to the interpreter's teardown, its pool's tasks are destroyed mid-wait and each prints
    "Task was destroyed but it is pending!".
    """

    def __init__(self, binding: Binding) -> None:
        self._binding = binding
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
            binding = self._binding
            if binding.scheme in ("postgresql", "postgres"):
                self._store = open_store(binding.database_url, clock=binding.clock)
            else:
                self._store = binding._store or await binding.open()
        return self._store

    async def waiter(self) -> ResultWaiter:
        if self._waiter is None:
            self._waiter = ResultWaiter(await self.store())
        return self._waiter

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
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
        if self._store is not None and self._store is not self._binding._store:
            with contextlib.suppress(Exception):
                await self._store.close()
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        await self._loop.shutdown_asyncgens()
