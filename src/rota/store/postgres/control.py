"""PostgresStore's flow control (store.py): paused queues, limits, and the running jobs by
tenant."""

from __future__ import annotations

from datetime import datetime

from rota.domain.flow import Limit, LimitScope, validate_queue
from rota.store.postgres.limits import limits_in_use
from rota.store.postgres.part import PostgresPart
from rota.store.postgres.rows import us
from rota.store.records import LimitInfo, QueueInfo


class PostgresControl(PostgresPart):
    """The verbs of queues and limits."""

    # ------------------------------------------------------------------ flow control

    async def pause_queue(self, queue: str, *, now: datetime | None = None) -> QueueInfo:
        return await self._set_queue_paused(queue, True, now)

    async def resume_queue(self, queue: str, *, now: datetime | None = None) -> QueueInfo:
        return await self._set_queue_paused(queue, False, now)

    async def _set_queue_paused(self, queue: str, paused: bool, now: datetime | None) -> QueueInfo:
        rows = await self._fetch(
            "pause_queue",
            {"name": validate_queue(queue), "paused": paused, "now": self._now(now)},
        )
        name, is_paused, updated_at = rows[0]
        return QueueInfo(name=name, paused=is_paused, updated_at=updated_at)

    async def list_queues(self) -> list[QueueInfo]:
        rows = await self._fetch("list_queues", {})
        return [QueueInfo(name=n, paused=p, updated_at=u) for n, p, u in rows]

    async def set_limit(self, limit: Limit, *, now: datetime | None = None) -> None:
        await self._fetch(
            "set_limit",
            {
                "now": self._now(now),
                "scope": limit.scope.value,
                "key": limit.key,
                "concurrency": limit.concurrency,
                "rate": limit.rate,
                "period_us": us(limit.period) if limit.period is not None else None,
            },
        )

    async def delete_limit(self, scope: LimitScope, key: str) -> bool:
        rows = await self._fetch("delete_limit", {"scope": LimitScope(scope).value, "key": key})
        return bool(rows)

    async def list_limits(self, *, now: datetime | None = None) -> list[LimitInfo]:
        async with self._connection() as conn:
            return await limits_in_use(conn, {"now": self._now(now)})

    async def running_by_tenant(self, *, now: datetime | None = None) -> dict[str, int]:
        rows = await self._fetch("running_by_tenant", {"now": self._now(now)})
        return {tenant: int(count) for tenant, count in rows}
