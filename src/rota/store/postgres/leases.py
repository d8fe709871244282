"""PostgresStore's verbs on leased jobs (store.py): heartbeats, completions, failures and
giving a job back, each one statement fenced on the lease's token."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from rota.domain.activity import error_fingerprint, error_sample
from rota.domain.errors import LeaseLost
from rota.domain.job import MAX_ERROR_LENGTH, MAX_TRACEBACK_LENGTH
from rota.domain.job_state import JobState, Outcome
from rota.domain.lease import Lease
from rota.domain.payload import Progress, truncate
from rota.store.postgres.part import PostgresPart
from rota.store.postgres.rows import completion
from rota.store.records import Beat


class PostgresLeases(PostgresPart):
    """The verbs a worker calls on the jobs it holds."""

    async def heartbeat(
        self,
        leases: Sequence[Lease],
        *,
        lease: timedelta,
        progress: Mapping[int, Progress] | None = None,
        now: datetime | None = None,
    ) -> Beat:
        if not leases:
            [(instant,)] = await self._fetch("now", {"now": self._now(now)})
            return Beat([], instant)
        params: dict[str, Any] = {
            "now": self._now(now),
            "lease": lease,
            "ids": [held.job_id for held in leases],
            "tokens": [held.token for held in leases],
        }
        name = "heartbeat"
        if progress:
            # Only beats that carry a report pay for the wider statement.
            name = "heartbeat_progress"
            reports = [progress.get(held.job_id) for held in leases]
            params["reported"] = [report is not None for report in reports]
            params["fractions"] = [report.fraction if report else None for report in reports]
            params["messages"] = [report.message if report else None for report in reports]
        [(instant, renewed)] = await self._fetch(name, params)
        kept = set(renewed)
        return Beat([held for held in leases if held.job_id not in kept], instant)

    async def begin(self, lease: Lease, *, now: datetime | None = None) -> None:
        if not await self._fetch("begin", {"id": lease.job_id, "token": lease.token}):
            raise LeaseLost(lease.job_id, lease.token)

    async def complete(self, lease: Lease, *, now: datetime | None = None) -> None:
        if await self.complete_many([lease], now=now):
            raise LeaseLost(lease.job_id, lease.token)

    async def complete_many(
        self,
        leases: Sequence[Lease],
        *,
        results: Sequence[str | None] | None = None,
        now: datetime | None = None,
    ) -> list[Lease]:
        if not leases:
            return []
        name, params = completion(
            [held.job_id for held in leases],
            [held.token for held in leases],
            list(results) if results is not None else None,
            self._now(now),
        )
        rows = await self._fetch(name, params)
        done = {row[0] for row in rows}
        return [held for held in leases if held.job_id not in done]

    async def fail(
        self,
        lease: Lease,
        *,
        error: str,
        retry_in: timedelta,
        traceback: str | None = None,
        permanent: bool = False,
        now: datetime | None = None,
    ) -> JobState:
        error_text = truncate(error, MAX_ERROR_LENGTH)
        rows = await self._fetch(
            "fail",
            {
                "now": self._now(now),
                "id": lease.job_id,
                "token": lease.token,
                "error": error_text,
                "fingerprint": error_fingerprint(error),
                "sample": error_sample(error),
                "traceback": truncate(traceback, MAX_TRACEBACK_LENGTH),
                "retry_in": retry_in,
                "permanent": permanent,
            },
        )
        if not rows:
            raise LeaseLost(lease.job_id, lease.token)
        return JobState(rows[0][0])

    async def snooze(self, lease: Lease, delay: timedelta, *, now: datetime | None = None) -> None:
        await self._give_back(lease, delay, Outcome.SNOOZED, now)

    async def release(self, lease: Lease, *, now: datetime | None = None) -> None:
        await self._give_back(lease, timedelta(0), Outcome.RELEASED, now)

    async def _give_back(
        self, lease: Lease, delay: timedelta, outcome: Outcome, now: datetime | None
    ) -> None:
        rows = await self._fetch(
            "give_back",
            {
                "now": self._now(now),
                "id": lease.job_id,
                "token": lease.token,
                "delay": delay,
                "outcome": outcome.value,
            },
        )
        if not rows:
            raise LeaseLost(lease.job_id, lease.token)
