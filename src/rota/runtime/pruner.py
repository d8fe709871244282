"""Pruner: deletes finished jobs once they are older than the retention period."""

from __future__ import annotations

import logging
from datetime import timedelta

from rota.store.base import Store

log = logging.getLogger("rota.worker")


class Pruner:
    """Any number of workers may run one: each pass deletes at most ``batch`` finished jobs
    (succeeded, dead, cancelled) whose finish is older than ``retention`` by the store's clock,
    and passes until a short one, so a large backlog drains without one huge statement."""

    name = "pruner"

    def __init__(
        self,
        store: Store,
        *,
        retention: timedelta,
        interval: timedelta = timedelta(minutes=1),
        batch: int = 5_000,
    ) -> None:
        self._store = store
        self._retention = retention
        self._interval_s = interval.total_seconds()
        self._batch = batch

    def interval_s(self) -> float:
        return self._interval_s

    async def tick(self) -> int:
        cutoff = await self._store.now() - self._retention
        total = 0
        for _ in range(20):  # bounded: the next tick continues
            deleted = await self._store.prune(older_than=cutoff, limit=self._batch)
            total += deleted
            if deleted < self._batch:
                break
        if total:
            log.info("pruned %d finished job(s) older than %s", total, self._retention)
        return total
