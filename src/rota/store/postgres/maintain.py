"""PostgresStore's upkeep (store.py): rescuing and expiring jobs, pruning finished ones, the
days ahead and the audit log."""

from __future__ import annotations

from datetime import datetime, timedelta

import psycopg

from rota.domain.audit import AuditEntry, AuditFilter, AuditRecord
from rota.domain.clock import utc
from rota.domain.job_state import EXPIRED, UNRUNNABLE
from rota.store.postgres import audit, retention, upkeep
from rota.store.postgres.part import PostgresPart
from rota.store.records import MAX_PAGE_SIZE, AuditPage, RescueResult, decode_cursor


class PostgresMaintenance(PostgresPart):
    """The verbs the rescuers and pruners call, and the audit log's."""

    #: The dead rows of the active jobs' table that this store's last vacuum of it could not
    #: remove (upkeep.vacuum_active).
    _dead_left: int = 0

    # ------------------------------------------------------------------ maintenance

    async def rescue(self, *, now: datetime | None = None, limit: int = 1000) -> RescueResult:
        rows = await self._fetch("rescue", {"now": self._now(now), "limit": limit})
        # Every worker's rescuer passes here every few seconds: the count deltas written
        # since stay a few thousand rows at most (017_counts), the days that finished jobs go
        # into are made ahead (019_finished_by_day), and the active jobs' statistics kept up.
        await self.fold_counts()
        await self._upkeep()
        dead = sorted(job_id for job_id, state in rows if state == "dead")
        requeued = sorted(job_id for job_id, state in rows if state == "pending")
        return RescueResult(dead=dead, requeued=requeued)

    async def _upkeep(self) -> None:
        """The days ahead, the active table's statistics and its dead rows (upkeep.py)."""
        try:
            async with self._connection() as conn:
                await upkeep.add_days(conn)
                await upkeep.refresh_statistics(conn)
                left = await upkeep.vacuum_active(conn, left=self._dead_left)
                if left is not None:
                    self._dead_left = left
        except (psycopg.errors.ReadOnlySqlTransaction, psycopg.errors.LockNotAvailable):
            # A replica keeps none; a day whose lock was busy is made on a later pass (a day
            # not made in time only sends its jobs to the default partition).
            return

    async def expire(self, *, now: datetime | None = None, limit: int = 1000) -> list[int]:
        rows = await self._fetch(
            "expire", {"now": self._now(now), "limit": limit, "reason": EXPIRED}
        )
        return sorted(row[0] for row in rows)

    async def end_unrunnable(
        self,
        *,
        grace: timedelta,
        alive_within: timedelta,
        now: datetime | None = None,
        limit: int = 1000,
    ) -> list[int]:
        if limit <= 0:
            return []
        [(at,)] = await self._fetch("now", {"now": self._now(now)})
        rows = await self._fetch(
            "end_unrunnable",
            {
                "now": self._now(now),
                "alive_since": at - alive_within,
                "due_before": at - grace,
                "limit": limit,
                "reason": UNRUNNABLE,
            },
        )
        return sorted(row[0] for row in rows)

    async def prune(self, *, older_than: datetime, limit: int = 10_000) -> int:
        """See Store.prune. Finished jobs are kept by day here (retention.py): a day whose
        jobs all finished before ``older_than`` goes whole, whatever ``limit`` says, and
        a day the cutoff falls in stays until all of it is older."""
        async with self._connection() as conn:
            return await retention.prune(conn, utc(older_than), limit)

    # ------------------------------------------------------------------ audit log

    async def record_audit(self, record: AuditRecord, *, now: datetime | None = None) -> AuditEntry:
        async with self._connection() as conn:
            return await audit.record(conn, record, self._now(now))

    async def list_audit(
        self, filter: AuditFilter, *, cursor: str | None = None, limit: int = 50
    ) -> AuditPage:
        limit = max(1, min(limit, MAX_PAGE_SIZE))
        after = decode_cursor(cursor) if cursor is not None else None
        async with self._connection() as conn:
            return await audit.list_page(conn, filter, after, limit)

    async def prune_audit(self, *, older_than: datetime, limit: int = 10_000) -> int:
        async with self._connection() as conn:
            return await audit.prune(conn, utc(older_than), limit)
