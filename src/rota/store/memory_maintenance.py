"""The memory store's maintenance: expired leases rescued, expired and unrunnable jobs
ended, finished jobs pruned; and the audit log, recorded, listed and pruned.

A mixin of ``MemoryStore`` (memory.py): each verb holds its lock throughout, awaiting nothing.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from rota.domain import blame
from rota.domain.audit import AuditEntry, AuditFilter, AuditRecord, from_json_text, json_text
from rota.domain.clock import utc
from rota.domain.job import Attempt, Job
from rota.domain.job_state import EXPIRED, JobState, Outcome, unrunnable
from rota.domain.transitions import MOVES
from rota.store.memory_activity import ActivityTallies
from rota.store.records import (
    MAX_PAGE_SIZE,
    AuditPage,
    RescueResult,
    WorkerInfo,
    decode_cursor,
    encode_cursor,
    kinds_by_queue,
)


class MemoryMaintenance:
    """The maintenance and audit verbs of ``MemoryStore`` (which provides what is declared
    here)."""

    _lock: threading.RLock
    _jobs: dict[int, Job]
    _history: dict[int, list[Attempt]]
    _slots: dict[tuple[str, datetime], int]
    _holds: dict[int, tuple[datetime, frozenset[JobState]]]
    _workers: dict[str, WorkerInfo]
    _audit: list[AuditEntry]
    _next_audit_id: int
    _activity: ActivityTallies

    if TYPE_CHECKING:

        def _announce(self, run_at: datetime) -> None: ...
        def _end_attempt(
            self,
            job: Job,
            at: datetime,
            outcome: Outcome,
            error: str | None,
            trace: str | None = None,
        ) -> None: ...
        def _expiry(self, job: Job) -> blame.Expiry: ...
        def _finish(
            self,
            job: Job,
            at: datetime,
            state: JobState,
            outcome: Outcome,
            error: str | None = None,
            trace: str | None = None,
        ) -> None: ...
        def _forget_edges(self, job_id: int) -> None: ...
        def _now(self, now: datetime | None) -> datetime: ...
        def _orphan_children(self, doomed: set[int], at: datetime) -> None: ...

    # ------------------------------------------------------------------ maintenance

    async def rescue(self, *, now: datetime | None = None, limit: int = 1000) -> RescueResult:
        dead: list[int] = []
        requeued: list[int] = []
        with self._lock:
            at = self._now(now)
            expired = sorted(
                (
                    job
                    for job in self._jobs.values()
                    if job.state is JobState.RUNNING
                    and job.lease_until is not None
                    and job.lease_until < at
                ),
                key=lambda job: job.id,
            )[: max(0, limit)]
            for job in expired:
                expiry = self._expiry(job)
                if expiry.dead:
                    dead_job = replace(job, crashes=expiry.crashes)
                    self._finish(dead_job, at, JobState.DEAD, Outcome.LEASE_EXPIRED, expiry.error)
                    dead.append(job.id)
                else:
                    self._end_attempt(job, at, Outcome.LEASE_EXPIRED, expiry.error)
                    # Its run_at stays: it keeps its place in the claim order (PostgreSQL's
                    # rescue statement says why).
                    self._jobs[job.id] = replace(
                        job,
                        state=JobState.PENDING,
                        attempt=expiry.attempt,
                        crashes=expiry.crashes,
                        lease_until=None,
                        last_error=expiry.error,
                    )
                    requeued.append(job.id)
            if requeued:
                self._announce(at)
        return RescueResult(dead=dead, requeued=requeued)

    async def expire(self, *, now: datetime | None = None, limit: int = 1000) -> list[int]:
        with self._lock:
            at = self._now(now)
            expired = sorted(
                job.id
                for job in self._jobs.values()
                if job.state in MOVES["expire"].sources and job.is_expired(at)
            )[: max(0, limit)]
            for job_id in expired:
                job = replace(self._jobs[job_id], last_error=EXPIRED)
                self._finish(job, at, JobState.CANCELLED, Outcome.CANCELLED)
            return expired

    async def end_unrunnable(
        self,
        *,
        grace: timedelta,
        alive_within: timedelta,
        now: datetime | None = None,
        limit: int = 1000,
    ) -> list[int]:
        with self._lock:
            at = self._now(now)
            served = kinds_by_queue(
                (info.queues, info.kinds)
                for info in self._workers.values()
                if info.beat_at is not None and info.beat_at >= at - alive_within
            )
            doomed = sorted(
                job.id
                for job in self._jobs.values()
                if job.state in MOVES["end_unrunnable"].sources
                and job.run_at <= at - grace
                and job.queue in served
                and (known := served[job.queue]) is not None
                and job.kind not in known
            )[: max(0, limit)]
            for job_id in doomed:
                job = self._jobs[job_id]
                self._finish(
                    replace(job, last_error=unrunnable(job.kind)), at, JobState.DEAD, Outcome.FAILED
                )
            return doomed

    async def prune(self, *, older_than: datetime, limit: int = 10_000) -> int:
        cutoff = utc(older_than)
        with self._lock:
            finished = sorted(
                (job.finished_at, job.id)
                for job in self._jobs.values()
                if job.state.is_terminal
                and job.finished_at is not None
                and job.finished_at < cutoff
            )
            doomed = [job_id for _, job_id in finished[: max(0, limit)]]
            self._orphan_children(set(doomed), self._now(None))
            if len(doomed) < limit:
                # As the SQL stores: the tallies of minutes whose jobs are all gone go too.
                self._activity.prune(cutoff)
            for job_id in doomed:
                job = self._jobs.pop(job_id)
                self._history.pop(job_id, None)
                self._holds.pop(job_id, None)
                if job.workflow is not None:
                    self._forget_edges(job_id)
                if job.schedule is not None and job.slot_at is not None:
                    # Slot keys outlive their job only as long as the job itself: a pruned
                    # slot is long in the past and its schedule has moved beyond it.
                    self._slots.pop((job.schedule, job.slot_at), None)
            return len(doomed)

    # ------------------------------------------------------------------ audit log

    async def record_audit(self, record: AuditRecord, *, now: datetime | None = None) -> AuditEntry:
        with self._lock:
            entry = AuditEntry(
                id=self._next_audit_id,
                at=self._now(now),
                identity=record.identity,
                action=record.action.value,
                target=record.target,
                # Kept as JSON would be: later changes to the caller's dicts change nothing.
                filter=from_json_text(json_text(record.filter)),
                detail=from_json_text(json_text(record.detail)),
                count=record.count,
            )
            self._next_audit_id += 1
            self._audit.append(entry)
            return entry

    async def list_audit(
        self, filter: AuditFilter, *, cursor: str | None = None, limit: int = 50
    ) -> AuditPage:
        limit = max(1, min(limit, MAX_PAGE_SIZE))
        after = decode_cursor(cursor) if cursor is not None else None
        page: list[AuditEntry] = []
        with self._lock:
            for entry in reversed(self._audit):
                if after is not None and entry.id >= after:
                    continue
                if filter.matches(entry):
                    page.append(entry)
                    if len(page) > limit:
                        break
        more = len(page) > limit
        page = page[:limit]
        return AuditPage(page, encode_cursor(page[-1].id) if more else None)

    async def prune_audit(self, *, older_than: datetime, limit: int = 10_000) -> int:
        cutoff = utc(older_than)
        with self._lock:
            oldest = sorted((e.at, e.id) for e in self._audit if e.at < cutoff)
            doomed = {entry_id for _, entry_id in oldest[: max(0, limit)]}
            self._audit = [e for e in self._audit if e.id not in doomed]
            return len(doomed)
