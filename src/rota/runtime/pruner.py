"""Pruner: deletes finished jobs, and audit entries, once older than their retention periods."""

from __future__ import annotations

import logging
from datetime import timedelta

from rota.domain.wording import counted
from rota.store.base import Store

log = logging.getLogger("rota.worker")


class Pruner:
    """Any number of workers may run one: each pass deletes at most ``batch`` finished jobs
    (succeeded, dead, cancelled) whose finish is older than ``retention``, and at most
    ``batch`` audit entries older than ``audit_retention``, by the store's clock, and passes
    until a short one, so a large backlog drains without one huge statement. A retention of
    None keeps everything of its kind."""

    name = "pruner"

    def __init__(
        self,
        store: Store,
        *,
        retention: timedelta | None,
        audit_retention: timedelta | None = None,
        interval: timedelta = timedelta(minutes=1),
        batch: int = 5_000,
    ) -> None:
        self._store = store
        self._retention = retention
        self._audit_retention = audit_retention
        self._interval_s = interval.total_seconds()
        self._batch = batch

    def interval_s(self) -> float:
        return self._interval_s

    async def tick(self) -> int:
        """Prune once; how many jobs and audit entries were deleted."""
        now = await self._store.now()
        total = 0
        if self._retention is not None:
            cutoff = now - self._retention
            jobs = 0
            for _ in range(20):  # bounded: the next tick continues
                deleted = await self._store.prune(older_than=cutoff, limit=self._batch)
                jobs += deleted
                if deleted < self._batch:
                    break
            if jobs:
                log.info("pruned %s older than %s", counted(jobs, "finished job"), self._retention)
            total += jobs
        if self._audit_retention is not None:
            cutoff = now - self._audit_retention
            entries = 0
            for _ in range(20):
                deleted = await self._store.prune_audit(older_than=cutoff, limit=self._batch)
                entries += deleted
                if deleted < self._batch:
                    break
            if entries:
                log.info("pruned %d audit entries older than %s", entries, self._audit_retention)
            total += entries
        return total
