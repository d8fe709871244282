"""PostgresStore's reads (store.py): jobs, pages, counts and estimates, throughput, activity,
errors and attempts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from rota.domain.activity import TOP_ERRORS, ActivityBucket, ErrorGroup
from rota.domain.clock import utc
from rota.domain.errors import JobNotFound
from rota.domain.job import Attempt, Job
from rota.domain.job_state import JobState, Outcome
from rota.store.postgres import activity, filters
from rota.store.postgres.filters import guarded, where
from rota.store.postgres.part import PostgresPart
from rota.store.postgres.queries import JOB_COLUMNS, LIST_COLUMNS, preview_columns, query
from rota.store.postgres.rows import micros, row_to_job, row_to_listed
from rota.store.records import (
    MAX_BULK,
    MAX_PAGE_SIZE,
    Counted,
    Counts,
    JobFilter,
    Page,
    ThroughputBucket,
    bucketize,
    decode_cursor,
    encode_cursor,
)

#: counts() folds the count deltas itself when it finds more than this many (017_counts):
#: the rescuers fold them every few seconds, but a store may run without workers a while.
FOLD_ON_READ = 10_000


class PostgresReads(PostgresPart):
    """The reads of jobs and of their tallies."""

    async def get_many(self, job_ids: Sequence[int]) -> list[Job]:
        wanted = sorted({job_id for job_id in job_ids if -(2**63) <= job_id < 2**63})
        if not wanted:
            return []
        found = [row_to_job(row) for row in await self._fetch("get_many", {"ids": wanted})]
        return await self._with_results_apart(found)

    async def get(self, job_id: int) -> Job:
        rows = await self._fetch("get", {"id": job_id})
        if not rows:
            raise JobNotFound(job_id)
        return (await self._with_results_apart([row_to_job(rows[0])]))[0]

    async def get_preview(self, job_id: int, *, chars: int) -> Job:
        if not -(2**63) <= job_id < 2**63:
            raise JobNotFound(job_id)
        statement = sql.SQL("SELECT {} FROM rota_jobs WHERE id = {}").format(
            sql.SQL(preview_columns(max(1, chars))), sql.Literal(job_id)
        )
        async with self._connection() as conn:
            row = await (await conn.execute(statement, prepare=False)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return row_to_listed(row)

    async def _with_results_apart(self, found: list[Job]) -> list[Job]:
        """``found`` with the results kept in rota_results (025) put on their succeeded jobs:
        one more statement, only when a succeeded job's row holds no result."""
        maybe = {
            job.id: job.lease_token
            for job in found
            if job.state is JobState.SUCCEEDED and job.result is None
        }
        if not maybe:
            return found
        rows = await self._fetch("results_apart", {"ids": list(maybe)})
        apart: dict[int, Any] = {
            job_id: result for job_id, token, result in rows if maybe[job_id] == token
        }
        if not apart:
            return found
        return [replace(job, result=apart[job.id]) if job.id in apart else job for job in found]

    async def list_jobs(
        self,
        filter: JobFilter,
        *,
        cursor: str | None = None,
        limit: int = 50,
        previews: bool = False,
    ) -> Page:
        limit = max(1, min(limit, MAX_PAGE_SIZE))
        after = decode_cursor(cursor) if cursor is not None else None
        statement = filters.page(
            filter, LIST_COLUMNS if previews else JOB_COLUMNS, after=after, limit=limit + 1
        )
        rows = await self._filtered(statement, again=after is None)
        jobs = [(row_to_listed if previews else row_to_job)(row) for row in rows[:limit]]
        more = len(rows) > limit
        return Page(jobs, encode_cursor(jobs[-1].id) if more else None)

    async def counts(self, *, now: datetime | None = None) -> Counts:
        at = self._now(now)
        async with self._connection() as conn:
            rows = await (await conn.execute(query("counts"))).fetchall()
            oldest_row = await (await conn.execute(query("oldest_due"), {"now": at})).fetchone()
        by_state = dict.fromkeys(JobState, 0)
        by_queue: dict[str, dict[JobState, int]] = {}
        for queue, state, count, _ in rows:
            job_state = JobState(state)
            by_state[job_state] += count
            by_queue.setdefault(queue, dict.fromkeys(JobState, 0))[job_state] += count
        if rows and rows[0][3] > FOLD_ON_READ:
            # No rescuer folded them lately (no worker runs): this reader does, once.
            await self.fold_counts()
        return Counts(
            by_state=by_state,
            by_queue=by_queue,
            oldest_due_at=oldest_row[0] if oldest_row else None,
        )

    async def fold_counts(self) -> None:
        """Folds the committed count deltas into the totals (017_counts); a no-op on a read
        replica, whose primary's rescuers fold them."""
        try:
            # Two statements, each committing on its own: a folder stopped between them
            # holds no lock (the fold's turn is a transaction-level lock of its statement),
            # and a zero left behind counts for nothing until the next fold drops it.
            async with self._connection() as conn:
                await conn.execute(query("fold_counts"))
                await conn.execute(query("drop_zero_counts"))
        except psycopg.errors.ReadOnlySqlTransaction:
            return

    async def count_jobs(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        if filters.counted(filter):
            # The maintained counts (017) hold it exactly: no job is read.
            statement = filters.from_counts(filter)
            async with self._connection() as conn:
                row = await (await conn.execute(statement, prepare=False)).fetchone()
            return min(int(row[0]) if row else 0, max(0, limit))
        rows = await self._filtered(_bounded_count(filter, limit), again=True)
        return int(rows[0][0]) if rows else 0

    async def count_or_estimate(self, filter: JobFilter, *, exact_up_to: int) -> Counted:
        if filters.counted(filter):
            return Counted(await self.count_jobs(filter, limit=2**62))
        counting = _bounded_count(filter, exact_up_to + 1)
        # One transaction for the bounded count and, past it, the planner's estimate of the
        # rows the filter matches: planned, never run, from the statistics of each partition
        # the filter's states leave in the plan.
        async with self._connection() as conn, conn.transaction():
            await conn.execute("SET LOCAL jit = off")
            row = await (await conn.execute(counting)).fetchone()
            found = int(row[0]) if row else 0
            if found <= exact_up_to:
                return Counted(found)
            plan = await (await conn.execute(filters.estimate(filter), prepare=False)).fetchone()
        planned = int(plan[0][0]["Plan"]["Plan Rows"]) if plan else 0
        return Counted(max(planned, exact_up_to + 1), estimated=True)

    async def throughput(
        self, *, since: datetime, bucket: timedelta, now: datetime | None = None
    ) -> list[ThroughputBucket]:
        at = self._now(now)
        async with self._connection() as conn:
            current = at or (await (await conn.execute("SELECT now()")).fetchone() or [None])[0]
            rows = await (
                await conn.execute(query("throughput"), {"since": utc(since), "now": current})
            ).fetchall()
        # Per-minute rows land in the bucket holding their minute's start.
        return bucketize(
            ((minute, JobState(state), n) for minute, state, n in rows), utc(since), bucket, current
        )

    async def activity(
        self,
        *,
        since: datetime,
        bucket: timedelta,
        queue: str | None = None,
        kind: str | None = None,
        now: datetime | None = None,
    ) -> list[ActivityBucket]:
        async with self._connection() as conn:
            return await activity.buckets(conn, utc(since), bucket, self._now(now), queue, kind)

    async def top_errors(
        self,
        *,
        since: datetime,
        queue: str | None = None,
        kind: str | None = None,
        limit: int = TOP_ERRORS,
        now: datetime | None = None,
    ) -> list[ErrorGroup]:
        async with self._connection() as conn:
            return await activity.top_errors(conn, utc(since), self._now(now), queue, kind, limit)

    async def attempts(self, job_id: int) -> list[Attempt]:
        rows = await self._fetch("attempts", {"id": job_id})
        if not rows:
            raise JobNotFound(job_id)
        state, attempt, token, worker, started_at, finished_at, history, beats, beat_at = rows[0]
        records = [
            Attempt(
                attempt=entry["attempt"],
                token=entry["token"],
                worker=entry.get("worker"),
                started_at=micros(entry.get("started_us")) or datetime.fromtimestamp(0, UTC),
                finished_at=micros(entry.get("finished_us")),
                outcome=Outcome(entry["outcome"]),
                error=entry.get("error"),
                traceback=entry.get("traceback"),
                heartbeats=entry.get("heartbeats") or 0,
                last_heartbeat_at=micros(entry.get("last_heartbeat_us")),
                lease_until=micros(entry.get("lease_until_us")),
            )
            for entry in (history or [])
        ]
        if state in ("running", "succeeded") and token is not None:
            # The row itself describes its running (or succeeded) attempt, heartbeats too.
            outcome = Outcome.RUNNING if state == "running" else Outcome.SUCCEEDED
            end = finished_at if state == "succeeded" else None
            records.append(
                Attempt(
                    attempt,
                    token,
                    worker,
                    started_at,
                    end,
                    outcome,
                    heartbeats=beats,
                    last_heartbeat_at=beat_at,
                )
            )
        return records


def _bounded_count(filter: JobFilter, limit: int) -> sql.Composable:
    """How many jobs match ``filter``, counting no further than ``limit`` (guarded by the
    maintained counts: a kind or queue with no job ends it at once)."""
    return guarded(
        sql.SQL(query("count_jobs").rstrip(";")).format(
            where=where(filter), limit=sql.Literal(max(0, limit))
        ),
        filter,
    )
