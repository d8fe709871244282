"""ApiContext: what every route of one app shares (client, settings, metrics, kind list)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from rota.api.security import Authenticator
from rota.api.settings import ApiSettings
from rota.client import Client
from rota.observability.metrics import Metrics


@dataclass(frozen=True, slots=True)
class ApiContext:
    client: Client
    settings: ApiSettings
    metrics: Metrics
    #: The kinds POST /api/jobs accepts; None accepts any valid kind name.
    kinds: frozenset[str] | None
    demo: bool
    authenticator: Authenticator

    async def now(self) -> datetime:
        """The store's clock: the API's only source of "now"."""
        return await self.client.store.now()

    @property
    def heartbeat(self) -> timedelta:
        """The workers' heartbeat interval, which says who is alive (WorkerInfo.is_alive)."""
        return timedelta(seconds=self.settings.heartbeat_interval_seconds)
