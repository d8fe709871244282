"""``app.signals`` (and ``app.signal``): send events to durable jobs waiting for them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from rota.domain.durable import SignalResult
from rota.observability.metrics import Metrics
from rota.verbs.binding import Binding


def counted(metrics: Metrics, result: SignalResult) -> SignalResult:
    """``result``, counted in ``rota_signals_sent_total``."""
    metrics.signals.labels("delivered" if result.delivered else "kept").inc()
    return result


class Signals:
    """``await app.signals.send("payment:order-42", {"paid": True})``, ``send_sync``."""

    def __init__(self, binding: Binding, metrics: Metrics) -> None:
        self._binding = binding
        self._metrics = metrics

    async def send(
        self, key: str, data: Any = None, *, expire_after: timedelta | float | None = None
    ) -> SignalResult:
        """Send ``data`` (JSON, at most 64 KiB) to ``key``: the job whose ``ctx.wait_for(key)``
        began first among those waiting gets it (once; it is due at once, and on PostgreSQL
        its workers are woken by NOTIFY). With no job waiting, it is kept for
        ``expire_after`` (seconds or a timedelta; a day by default) and taken by the next
        wait on ``key``, then dropped. Returns whom it reached, or until when it is kept.
        InvalidInput for a bad key or data; nothing is sent then."""
        client = await self._binding.opened_client()
        return counted(self._metrics, await client.signal(key, data, expire_after=expire_after))

    def send_sync(
        self, key: str, data: Any = None, *, expire_after: timedelta | float | None = None
    ) -> SignalResult:
        """``send`` for synchronous code (a Django or Flask webhook view)."""
        result = self._binding.with_client_sync(
            lambda client: client.signal(key, data, expire_after=expire_after)
        )
        return counted(self._metrics, result)
