"""Rescuer: expired leases become pending again, or dead (rota.domain.blame decides); pending
jobs past their expires_at are cancelled as expired; and jobs of a kind no live worker runs
end dead once they have waited longer than a grace period for one (a rolling deploy's new
workers register their kinds well within it)."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta

from rota.domain.wording import counted
from rota.store.base import Store
from rota.store.records import RescueResult

log = logging.getLogger("rota.worker")

#: About how often, in seconds, the rescuer looks for jobs no live worker runs.
UNRUNNABLE_SWEEP_S = 60.0


class Rescuer:
    """Any number of workers may run one: the store fences each rewrite on the token it saw."""

    name = "rescuer"

    def __init__(
        self,
        store: Store,
        *,
        interval: timedelta,
        batch: int = 1000,
        unrunnable_grace: timedelta | None = None,
        alive_within: timedelta = timedelta(seconds=30),
    ) -> None:
        self._store = store
        self._interval_s = interval.total_seconds()
        self._batch = batch
        self._unrunnable_grace = unrunnable_grace
        self._alive_within = alive_within
        # Looking for jobs no worker runs scans the due jobs: the first tick, then about once
        # a minute (the grace is minutes; an hour-long backlog is not read every few seconds),
        # or every tenth of a shorter grace.
        sweep_s = UNRUNNABLE_SWEEP_S
        if unrunnable_grace is not None:
            sweep_s = min(sweep_s, unrunnable_grace.total_seconds() / 10)
        self._unrunnable_every = max(1, round(sweep_s / max(self._interval_s, 1e-3)))
        self._ticks = 0

    def interval_s(self) -> float:
        return self._interval_s

    async def tick(self) -> RescueResult:
        result = await self._store.rescue(limit=self._batch)
        expired = await self._store.expire(limit=self._batch)
        if expired:
            result = replace(result, expired=expired)
            log.info(
                "%s cancelled as expired: not started before expires_at (ids %s)",
                counted(len(expired), "job"),
                ", ".join(map(str, expired[:20])),
            )
        self._ticks += 1
        if self._unrunnable_grace is not None and (self._ticks - 1) % self._unrunnable_every == 0:
            unrunnable = await self._store.end_unrunnable(
                grace=self._unrunnable_grace, alive_within=self._alive_within, limit=self._batch
            )
            if unrunnable:
                result = replace(result, unrunnable=unrunnable)
                log.warning(
                    "%s dead: no live worker of the queue runs the kind, for longer than %s "
                    "(ids %s)",
                    counted(len(unrunnable), "job"),
                    self._unrunnable_grace,
                    ", ".join(map(str, unrunnable[:20])),
                )
        if result.dead:
            log.warning(
                "%s dead: worker died during the last attempt, run alone (ids %s)",
                counted(len(result.dead), "job"),
                ", ".join(map(str, result.dead[:20])),
            )
        if result.requeued:
            log.info(
                "%s returned to pending, as crash suspect (the handler had started)",
                counted(len(result.requeued), "expired lease"),
            )
        return result
