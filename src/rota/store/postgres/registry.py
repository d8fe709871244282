"""PostgresStore's registries (store.py): the workers that run and the schedules that fire."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta

from rota.domain.clock import utc
from rota.domain.errors import ScheduleNotFound
from rota.domain.job import EnqueueResult
from rota.domain.schedule import ScheduleSpec
from rota.domain.schedule_state import Firing, Missed, Schedule, check_distinct
from rota.domain.workflow import WorkflowBuilder
from rota.store.postgres import schedules
from rota.store.postgres.enqueue import enqueue_flow
from rota.store.postgres.part import PostgresPart
from rota.store.postgres.queries import query
from rota.store.records import WorkerInfo, check_schedule_listing


class PostgresRegistry(PostgresPart):
    """The workers' and the schedules' verbs."""

    # ------------------------------------------------------------------ workers registry

    async def register_worker(self, info: WorkerInfo, *, now: datetime | None = None) -> None:
        if self._start_claiming():  # a worker starts: it will claim through this store
            # The connections the pool opened before, too: done before the worker's row is
            # written, which says it is about to claim.
            await self._connections.warm_idle()
        await self._fetch(
            "register_worker",
            {
                "now": self._now(now),
                "name": info.name,
                "host": info.host,
                "pid": info.pid,
                "queues": list(info.queues),
                "concurrency": info.concurrency,
                "kinds": None if info.kinds is None else list(info.kinds),
                "heartbeat_seconds": None
                if info.heartbeat is None
                else info.heartbeat.total_seconds(),
            },
        )

    async def beat_worker(self, name: str, *, now: datetime | None = None) -> bool:
        return bool(await self._fetch("beat_worker", {"now": self._now(now), "name": name}))

    async def deregister_worker(self, name: str) -> None:
        await self._fetch("deregister_worker", {"name": name})

    async def list_workers(self) -> list[WorkerInfo]:
        rows = await self._fetch("list_workers", {})
        return [
            WorkerInfo(
                name=name,
                host=host,
                pid=pid,
                queues=tuple(queues),
                concurrency=concurrency,
                started_at=started_at,
                beat_at=beat_at,
                running=running,
                kinds=None if kinds is None else tuple(kinds),
                heartbeat=None if heartbeat is None else timedelta(seconds=heartbeat),
            )
            for (
                name,
                host,
                pid,
                queues,
                concurrency,
                started_at,
                beat_at,
                running,
                kinds,
                heartbeat,
            ) in rows
        ]

    async def prune_workers(self, *, older_than: datetime) -> int:
        async with self._connection() as conn:
            cursor = await conn.execute(query("prune_workers"), {"older_than": utc(older_than)})
            return int(cursor.rowcount)

    # ------------------------------------------------------------------ schedules

    async def create_schedule(self, spec: ScheduleSpec, *, now: datetime | None = None) -> Schedule:
        schedule: Schedule = await self._run_flow(
            schedules.upsert_flow(spec, self._now(now), mode="create"),
            announce_schedules=True,
        )
        return schedule

    async def upsert_schedule(self, spec: ScheduleSpec, *, now: datetime | None = None) -> Schedule:
        schedule: Schedule = await self._run_flow(
            schedules.upsert_flow(spec, self._now(now), mode="upsert"),
            announce_schedules=True,
        )
        return schedule

    async def upsert_schedules(
        self, specs: Sequence[ScheduleSpec], *, now: datetime | None = None
    ) -> list[Schedule]:
        check_distinct(specs)
        if not specs:
            return []
        written: list[Schedule] = await self._run_flow(
            schedules.upsert_many_flow(specs, self._now(now)), announce_schedules=True
        )
        return written

    async def replace_schedule(
        self, spec: ScheduleSpec, *, now: datetime | None = None
    ) -> Schedule:
        schedule: Schedule = await self._run_flow(
            schedules.upsert_flow(spec, self._now(now), mode="replace"),
            announce_schedules=True,
        )
        return schedule

    async def get_schedule(self, name: str) -> Schedule:
        rows = await self._fetch("get_schedule", {"name": name})
        if not rows:
            raise ScheduleNotFound(name)
        return schedules.row_to_schedule(rows[0])

    async def list_schedules(
        self, *, after: str | None = None, limit: int | None = None, due_first: bool = False
    ) -> list[Schedule]:
        check_schedule_listing(after, limit, due_first)
        query = "list_due_schedules" if due_first else "list_schedules"
        rows = await self._fetch(query, {"after": after, "limit": limit})
        return [schedules.row_to_schedule(row) for row in rows]

    async def pause_schedule(
        self, name: str, *, missed: Missed = Missed.QUEUE, now: datetime | None = None
    ) -> Schedule:
        rows = await self._fetch(
            "pause_schedule", {"name": name, "missed": Missed(missed).value, "now": self._now(now)}
        )
        if not rows:
            raise ScheduleNotFound(name)
        return schedules.row_to_schedule(rows[0])

    async def resume_schedule(self, name: str, *, now: datetime | None = None) -> Schedule:
        schedule: Schedule = await self._run_flow(
            schedules.resume_flow(name, self._now(now)), announce_schedules=True
        )
        return schedule

    async def delete_schedule(self, name: str) -> None:
        if not await self._fetch("delete_schedule", {"name": name}):
            raise ScheduleNotFound(name)

    async def trigger_schedule(
        self,
        name: str,
        *,
        now: datetime | None = None,
        workflows: Mapping[str, WorkflowBuilder] | None = None,
    ) -> EnqueueResult:
        result: EnqueueResult = await self._run_flow(
            schedules.trigger_flow(name, self._now(now), enqueue_flow, workflows or {})
        )
        return result

    async def fire_due(
        self,
        *,
        now: datetime | None = None,
        limit: int = 100,
        workflows: Mapping[str, WorkflowBuilder] | None = None,
    ) -> list[Firing]:
        firings: list[Firing] = await self._run_flow(
            schedules.fire_flow(self._now(now), limit, enqueue_flow, workflows or {})
        )
        return firings

    async def next_fire_at(self, *, workflows: Collection[str] | None = None) -> datetime | None:
        [(due,)] = await self._fetch("next_fire_at", {"workflows": sorted(workflows or ())})
        return due  # type: ignore[no-any-return]
