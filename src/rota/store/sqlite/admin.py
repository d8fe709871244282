"""The verbs of ``SqliteStore`` around its jobs: flow control (paused queues, limits), the
workers registry, the audit log and schedules; each one transaction."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from rota.domain.audit import AuditEntry, AuditFilter, AuditRecord
from rota.domain.clock import utc
from rota.domain.flow import Limit, LimitScope
from rota.domain.job import EnqueueResult
from rota.domain.schedule import ScheduleSpec
from rota.domain.schedule_state import Firing, Missed, Schedule, check_distinct
from rota.domain.workflow import WorkflowBuilder
from rota.store.records import (
    MAX_PAGE_SIZE,
    AuditPage,
    LimitInfo,
    QueueInfo,
    WorkerInfo,
    check_schedule_listing,
    decode_cursor,
)
from rota.store.sqlite import audit, flow, schedules, workers

if TYPE_CHECKING:
    from rota.store.sqlite.connection import Database


class SqliteAdmin:
    """The flow control, workers, audit and schedule verbs of ``SqliteStore`` (which provides
    what is declared here)."""

    _db: Database

    if TYPE_CHECKING:

        def _at(self, now: datetime | None) -> datetime: ...
        def _woken(self, earliest: datetime | None) -> None: ...

    # ------------------------------------------------------------------ flow control

    async def pause_queue(self, queue: str, *, now: datetime | None = None) -> QueueInfo:
        return await self._db.write(lambda conn: flow.set_paused(conn, queue, True, self._at(now)))

    async def resume_queue(self, queue: str, *, now: datetime | None = None) -> QueueInfo:
        return await self._db.write(lambda conn: flow.set_paused(conn, queue, False, self._at(now)))

    async def list_queues(self) -> list[QueueInfo]:
        return await self._db.read(flow.list_queues)

    async def set_limit(self, limit: Limit, *, now: datetime | None = None) -> None:
        await self._db.write(lambda conn: flow.set_limit(conn, limit, self._at(now)))

    async def delete_limit(self, scope: LimitScope, key: str) -> bool:
        scope = LimitScope(scope)
        return await self._db.write(lambda conn: flow.delete_limit(conn, scope, key))

    async def list_limits(self, *, now: datetime | None = None) -> list[LimitInfo]:
        return await self._db.read(lambda conn: flow.list_limits(conn, self._at(now)))

    async def running_by_tenant(self, *, now: datetime | None = None) -> dict[str, int]:
        return await self._db.read(lambda conn: flow.running_by_tenant(conn, self._at(now)))

    # ------------------------------------------------------------------ workers registry

    async def register_worker(self, info: WorkerInfo, *, now: datetime | None = None) -> None:
        await self._db.write(lambda conn: workers.register(conn, info, self._at(now)))

    async def beat_worker(self, name: str, *, now: datetime | None = None) -> bool:
        return await self._db.write(lambda conn: workers.beat(conn, name, self._at(now)))

    async def deregister_worker(self, name: str) -> None:
        await self._db.write(lambda conn: workers.deregister(conn, name))

    async def list_workers(self) -> list[WorkerInfo]:
        return await self._db.read(workers.list_all)

    async def prune_workers(self, *, older_than: datetime) -> int:
        cutoff = utc(older_than)
        return await self._db.write(lambda conn: workers.prune(conn, cutoff))

    # ------------------------------------------------------------------ audit log

    async def record_audit(self, record: AuditRecord, *, now: datetime | None = None) -> AuditEntry:
        return await self._db.write(lambda conn: audit.record(conn, record, self._at(now)))

    async def list_audit(
        self, filter: AuditFilter, *, cursor: str | None = None, limit: int = 50
    ) -> AuditPage:
        limit = max(1, min(limit, MAX_PAGE_SIZE))
        after = decode_cursor(cursor) if cursor is not None else None
        return await self._db.read(lambda conn: audit.list_page(conn, filter, after, limit))

    async def prune_audit(self, *, older_than: datetime, limit: int = 10_000) -> int:
        cutoff = utc(older_than)
        return await self._db.write(lambda conn: audit.prune(conn, cutoff, limit))

    # ------------------------------------------------------------------ schedules

    async def create_schedule(self, spec: ScheduleSpec, *, now: datetime | None = None) -> Schedule:
        return await self._db.write(
            lambda conn: schedules.upsert(conn, spec, self._at(now), mode="create")
        )

    async def upsert_schedule(self, spec: ScheduleSpec, *, now: datetime | None = None) -> Schedule:
        return await self._db.write(
            lambda conn: schedules.upsert(conn, spec, self._at(now), mode="upsert")
        )

    async def upsert_schedules(
        self, specs: Sequence[ScheduleSpec], *, now: datetime | None = None
    ) -> list[Schedule]:
        check_distinct(specs)
        at = self._at(now)
        return await self._db.write(
            lambda conn: [schedules.upsert(conn, spec, at, mode="upsert") for spec in specs]
        )

    async def replace_schedule(
        self, spec: ScheduleSpec, *, now: datetime | None = None
    ) -> Schedule:
        return await self._db.write(
            lambda conn: schedules.upsert(conn, spec, self._at(now), mode="replace")
        )

    async def get_schedule(self, name: str) -> Schedule:
        return await self._db.read(lambda conn: schedules.get(conn, name))

    async def list_schedules(
        self, *, after: str | None = None, limit: int | None = None, due_first: bool = False
    ) -> list[Schedule]:
        check_schedule_listing(after, limit, due_first)
        return await self._db.read(lambda conn: schedules.list_page(conn, after, limit, due_first))

    async def pause_schedule(
        self, name: str, *, missed: Missed = Missed.QUEUE, now: datetime | None = None
    ) -> Schedule:
        return await self._db.write(lambda conn: schedules.pause(conn, name, missed, self._at(now)))

    async def resume_schedule(self, name: str, *, now: datetime | None = None) -> Schedule:
        return await self._db.write(lambda conn: schedules.resume(conn, name, self._at(now)))

    async def delete_schedule(self, name: str) -> None:
        await self._db.write(lambda conn: schedules.delete(conn, name))

    async def trigger_schedule(
        self,
        name: str,
        *,
        now: datetime | None = None,
        workflows: Mapping[str, WorkflowBuilder] | None = None,
    ) -> EnqueueResult:
        result, earliest = await self._db.write(
            lambda conn: schedules.trigger(conn, name, self._at(now), workflows or {})
        )
        self._woken(earliest)
        return result

    async def fire_due(
        self,
        *,
        now: datetime | None = None,
        limit: int = 100,
        workflows: Mapping[str, WorkflowBuilder] | None = None,
    ) -> list[Firing]:
        firings, earliest = await self._db.write(
            lambda conn: schedules.fire_due(conn, self._at(now), limit, workflows or {})
        )
        self._woken(earliest)
        return firings

    async def next_fire_at(self, *, workflows: Collection[str] | None = None) -> datetime | None:
        return await self._db.read(lambda conn: schedules.next_fire_at(conn, workflows or ()))
