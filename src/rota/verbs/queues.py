"""``app.queues`` and ``app.limits``: flow control, stored so it holds across restarts."""

from __future__ import annotations

from datetime import timedelta

from rota.client import QueueStatus, limit_selected, limit_spec
from rota.domain.flow import Limit
from rota.store.records import LimitInfo, QueueInfo
from rota.verbs.binding import Binding


class Queues:
    """``await app.queues.pause("emails")``, ``resume``, ``list()``."""

    def __init__(self, binding: Binding) -> None:
        self._binding = binding

    async def pause(self, name: str) -> QueueInfo:
        """Stop every worker claiming from queue ``name`` until ``resume``; jobs already
        running finish. The pause is stored, so it holds across restarts and deploys."""
        return await (await self._binding.opened_client()).pause_queue(name)

    async def resume(self, name: str) -> QueueInfo:
        """Let workers claim from queue ``name`` again."""
        return await (await self._binding.opened_client()).resume_queue(name)

    async def list(self) -> list[QueueStatus]:
        """Every queue with jobs, settings or a limit: paused or not, counts by state, and
        its concurrency limit."""
        return await (await self._binding.opened_client()).queues()


class Limits:
    """Cluster-wide limits on kinds, queues and tenants: ``await app.limits.set(...)``."""

    def __init__(self, binding: Binding) -> None:
        self._binding = binding

    async def set(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        tenant: str | None = None,
        concurrency: int | None = None,
        rate: int | None = None,
        per: timedelta | float | None = None,
    ) -> Limit:
        """Limit one kind, queue or tenant cluster-wide, replacing its previous limit:
        ``concurrency`` caps the jobs running at once, ``rate`` the starts ``per`` period.

        ``set(kind="pdf", concurrency=3)``; ``set(tenant="*", concurrency=2)`` caps each
        tenant separately; ``set(kind="api", rate=100, per=timedelta(minutes=1))``. Rates
        apply to kinds and tenants. Raises InvalidInput for a bad combination; nothing is
        written then.
        """
        limit = limit_spec(
            kind=kind, queue=queue, tenant=tenant, concurrency=concurrency, rate=rate, per=per
        )
        return await (await self._binding.opened_client()).set_limit(limit)

    async def delete(
        self, *, kind: str | None = None, queue: str | None = None, tenant: str | None = None
    ) -> bool:
        """Remove the limit on one kind, queue or tenant; False if it had none."""
        scope, name = limit_selected(kind=kind, queue=queue, tenant=tenant)
        return await (await self._binding.opened_client()).delete_limit(scope, name)

    async def list(self) -> list[LimitInfo]:
        """Every limit with its use now: running jobs and starts in the current period."""
        return await (await self._binding.opened_client()).limits()

    async def running_by_tenant(self) -> dict[str, int]:
        """Jobs running now (live lease) per tenant."""
        return await (await self._binding.opened_client()).running_by_tenant()
