"""The memory store's queries: jobs by id, pages and counts by filter, throughput,
activity, top errors and a job's attempts; they change nothing.

A mixin of ``MemoryStore`` (memory.py): each verb holds its lock throughout, awaiting nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from rota.domain.activity import TOP_ERRORS, ActivityBucket, ErrorGroup
from rota.domain.clock import utc
from rota.domain.job import Attempt, Job, previewed
from rota.domain.job_state import JobState, Outcome
from rota.store.memory_activity import ActivityTallies
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


class MemoryQueries:
    """The read-only queries of ``MemoryStore`` (which provides what is declared here)."""

    _lock: threading.RLock
    _jobs: dict[int, Job]
    _history: dict[int, list[Attempt]]
    _activity: ActivityTallies

    if TYPE_CHECKING:

        def _get(self, job_id: int) -> Job: ...
        def _now(self, now: datetime | None) -> datetime: ...

    # ------------------------------------------------------------------ queries

    async def get(self, job_id: int) -> Job:
        with self._lock:
            return self._get(job_id)

    async def get_preview(self, job_id: int, *, chars: int) -> Job:
        with self._lock:
            return previewed(self._get(job_id), chars=chars)

    async def get_many(self, job_ids: Sequence[int]) -> list[Job]:
        with self._lock:
            return [self._jobs[job_id] for job_id in set(job_ids) if job_id in self._jobs]

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
        with self._lock:
            ids = sorted(self._jobs, reverse=True)
            page: list[Job] = []
            for job_id in ids:
                if after is not None and job_id >= after:
                    continue
                job = self._jobs[job_id]
                if _matches(job, filter):
                    page.append(job)
                    if len(page) > limit:
                        break
        more = len(page) > limit
        page = page[:limit]
        cursor = encode_cursor(page[-1].id) if more else None
        return Page([previewed(job) for job in page] if previews else page, cursor)

    async def counts(self, *, now: datetime | None = None) -> Counts:
        with self._lock:
            at = self._now(now)
            return _count(self._jobs.values(), at)

    async def count_jobs(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        with self._lock:
            matched = sum(1 for job in self._jobs.values() if _matches(job, filter))
        return min(matched, max(0, limit))

    async def count_or_estimate(self, filter: JobFilter, *, exact_up_to: int) -> Counted:
        with self._lock:
            return Counted(sum(1 for job in self._jobs.values() if _matches(job, filter)))

    async def throughput(
        self, *, since: datetime, bucket: timedelta, now: datetime | None = None
    ) -> list[ThroughputBucket]:
        with self._lock:
            at = self._now(now)
            finished = [
                (job.finished_at, job.state, 1)
                for job in self._jobs.values()
                if job.finished_at is not None and job.state.is_terminal
            ]
        return bucketize(finished, utc(since), bucket, at)

    async def activity(
        self,
        *,
        since: datetime,
        bucket: timedelta,
        queue: str | None = None,
        kind: str | None = None,
        now: datetime | None = None,
    ) -> list[ActivityBucket]:
        with self._lock:
            return self._activity.buckets(utc(since), bucket, self._now(now), (queue, kind))

    async def top_errors(
        self,
        *,
        since: datetime,
        queue: str | None = None,
        kind: str | None = None,
        limit: int = TOP_ERRORS,
        now: datetime | None = None,
    ) -> list[ErrorGroup]:
        with self._lock:
            return self._activity.top_errors(utc(since), self._now(now), (queue, kind), limit)

    async def attempts(self, job_id: int) -> list[Attempt]:
        with self._lock:
            job = self._get(job_id)
            # The running attempt's heartbeats so far are the job's.
            return [
                replace(
                    entry,
                    heartbeats=job.heartbeats,
                    last_heartbeat_at=job.last_heartbeat_at,
                )
                if entry.outcome is Outcome.RUNNING and entry.token == job.lease_token
                else entry
                for entry in self._history[job_id]
            ]


def _matches(job: Job, filter: JobFilter) -> bool:
    if filter.states is not None and job.state not in filter.states:
        return False
    if filter.kind is not None and job.kind != filter.kind:
        return False
    if filter.queue is not None and job.queue != filter.queue:
        return False
    if filter.tenant is not None and job.tenant != filter.tenant:
        return False
    if filter.schedule is not None and job.schedule != filter.schedule:
        return False
    if filter.workflow is not None and job.workflow != filter.workflow:
        return False
    if filter.search is not None:
        return job.id == filter.search_id or job.unique_key == filter.search
    return True


def _count(jobs: Iterable[Job], at: datetime) -> Counts:
    by_state = dict.fromkeys(JobState, 0)
    by_queue: dict[str, dict[JobState, int]] = {}
    oldest: datetime | None = None
    for job in jobs:
        by_state[job.state] += 1
        per_queue = by_queue.setdefault(job.queue, dict.fromkeys(JobState, 0))
        per_queue[job.state] += 1
        if job.is_due(at) and (oldest is None or job.run_at < oldest):
            oldest = job.run_at
    return Counts(by_state=by_state, by_queue=by_queue, oldest_due_at=oldest)
