"""The worker's row in the registry: written as it starts, kept fresh, read by `rota workers`,
the API and the dashboard to tell who is alive (each by its own heartbeat interval)."""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Sequence
from datetime import timedelta

from rota.runtime.registry import Registry
from rota.store.base import Store
from rota.store.records import WorkerInfo


class Registration:
    """Keeps this worker's row in the registry fresh (and prunes long-silent workers)."""

    name = "registry"
    #: Workers silent this long are forgotten.
    forget_after = timedelta(hours=1)

    def __init__(
        self,
        store: Store,
        registry: Registry,
        *,
        name: str,
        queues: Sequence[str],
        concurrency: int,
        heartbeat: timedelta,
    ) -> None:
        self._store = store
        self._registry = registry
        self._name = name
        self._queues = tuple(queues)
        self._concurrency = concurrency
        self._heartbeat = heartbeat

    def interval_s(self) -> float:
        return self._heartbeat.total_seconds()

    def info(self) -> WorkerInfo:
        return WorkerInfo(
            name=self._name,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=self._queues,
            concurrency=self._concurrency,
            kinds=tuple(self._registry.kinds()),
            heartbeat=self._heartbeat,
        )

    async def register(self) -> None:
        await self._store.register_worker(self.info())

    async def tick(self) -> None:
        store = self._store
        if not await store.beat_worker(self._name):
            await self.register()  # our row was pruned while we were silent: come back
        if random.random() < 0.05:  # pruning is cheap but need not run on every beat
            now = await store.now()
            await store.prune_workers(older_than=now - self.forget_after)
