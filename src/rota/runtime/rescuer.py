"""Rescuer: expired leases become pending again, or dead (rota.domain.blame decides); pending
jobs past their expires_at are cancelled as expired."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta

from rota.store.base import RescueResult, Store

log = logging.getLogger("rota.worker")


class Rescuer:
    """Any number of workers may run one: the store fences each rewrite on the token it saw."""

    name = "rescuer"

    def __init__(self, store: Store, *, interval: timedelta, batch: int = 1000) -> None:
        self._store = store
        self._interval_s = interval.total_seconds()
        self._batch = batch

    def interval_s(self) -> float:
        return self._interval_s

    async def tick(self) -> RescueResult:
        result = await self._store.rescue(limit=self._batch)
        expired = await self._store.expire(limit=self._batch)
        if expired:
            result = replace(result, expired=expired)
            log.info(
                "%d job(s) cancelled as expired: not started by their expires_at (ids %s)",
                len(expired),
                ", ".join(map(str, expired[:20])),
            )
        if result.dead:
            log.warning(
                "%d job(s) dead: their worker died while each ran alone on its last attempt "
                "(ids %s)",
                len(result.dead),
                ", ".join(map(str, result.dead[:20])),
            )
        if result.requeued:
            log.info(
                "%d expired lease(s) returned to pending (crash suspects where their handler had "
                "started)",
                len(result.requeued),
            )
        return result
