"""SqliteStore: the Store contract on one SQLite file, shared safely by several processes.

Each verb hands one transaction body (from ``claims``, ``jobs`` or ``workers``) to the store's
``Database``, which runs it on the store's own thread. ``now=None`` is read from the store's
clock inside the transaction, once the write lock is held, so instants written by successive
transactions (in any process) follow the order of the writes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial

from rota.domain.activity import TOP_ERRORS, ActivityBucket, ErrorGroup
from rota.domain.clock import Clock, SystemClock, utc
from rota.domain.errors import LeaseLost, RotaError
from rota.domain.job import Attempt, EnqueueResult, Job, JobEdit, JobSpec
from rota.domain.job_state import JobState, Outcome
from rota.domain.lease import Lease
from rota.domain.payload import Progress
from rota.domain.workflow import Workflow
from rota.store.records import (
    MAX_BULK,
    Beat,
    Counted,
    Counts,
    JobFilter,
    Page,
    RescueResult,
    ThroughputBucket,
    decode_cursor,
)
from rota.store.sqlite import (
    activity,
    claims,
    jobs,
    migrations,
    reads,
    workflows,
)
from rota.store.sqlite.admin import SqliteAdmin
from rota.store.sqlite.connection import Database
from rota.store.sqlite.durable import SqliteDurable
from rota.store.sqlite.rows import fits, to_us
from rota.store.sqlite.url import DEFAULT_BUSY_TIMEOUT_MS, SqliteOptions, parse_url

logger = logging.getLogger(__name__)


class SqliteStore(SqliteAdmin, SqliteDurable):
    """The embedded store: one SQLite file in WAL mode, for one machine and several processes.

    Every call runs on a thread owned by this store (one connection, calls in order), so the
    event loop never waits on the disk or on another process's lock. Write transactions begin
    with ``BEGIN IMMEDIATE``; a database that stays busy beyond ``busy_timeout`` is retried a
    bounded number of times and then reported as ``StoreUnavailable``, never as "database is
    locked". Raises ``MigrationsPending`` until ``migrate()`` has created the schema.
    """

    pushes_schedule_changes = False
    #: Other processes' completions cannot be heard: waiting for results polls.
    pushes_finished = False

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        synchronous: str = "normal",
    ) -> None:
        options = SqliteOptions(
            path=os.fspath(path), busy_timeout_ms=busy_timeout_ms, synchronous=synchronous
        )
        self._clock = clock or SystemClock()
        self._db = Database(options)
        self._wakeups: list[Callable[[datetime | None], None]] = []
        self._wakeups_lock = threading.Lock()
        #: The tenant after which this store's next claim walks the groups (see claims.claim).
        self._after = ""

    @classmethod
    def from_url(cls, url: str, *, clock: Clock | None = None) -> SqliteStore:
        """The store for ``sqlite:///relative.db`` or ``sqlite:////absolute.db``.

        Options in the query string: ``busy_timeout_ms`` and ``synchronous`` (``normal`` or
        ``full``). InvalidInput for anything else, and for ``sqlite:///:memory:`` (use
        ``memory://``). Nothing is opened until the first call.
        """
        options = parse_url(url)
        return cls(
            options.path,
            clock=clock,
            busy_timeout_ms=options.busy_timeout_ms,
            synchronous=options.synchronous,
        )

    @property
    def path(self) -> str:
        """The absolute path of the database file."""
        return self._db.options.path

    # ------------------------------------------------------------------ lifecycle

    async def migrate(self) -> list[str]:
        return await self._db.write(
            lambda conn: migrations.apply_pending(conn, to_us(self._clock.now()))
        )

    async def pending_migrations(self) -> list[str]:
        return await self._db.read(migrations.pending)

    async def close(self) -> None:
        await self._db.close()

    async def now(self) -> datetime:
        return self._clock.now()

    async def watch(
        self,
        on_due: Callable[[datetime | None], None],
        *,
        on_schedules: Callable[[], None] | None = None,
        check_every_s: float = 0.1,
    ) -> None:
        """Until cancelled, call ``on_due(run_at)`` when jobs may have arrived. Schedule
        changes are not pushed (``pushes_schedule_changes`` is False): firers poll.

        An enqueue through this store calls it at once after its commit (from the enqueuing
        task's thread) with the earliest run_at it inserted. Jobs inserted by other processes
        (or other stores on the file) are noticed by a cheap look every ``check_every_s`` of
        the store's clock. A hint only: workers poll as well.
        """
        with self._wakeups_lock:
            self._wakeups.append(on_due)
        try:
            seen: reads.Seen | None = None
            while True:
                try:
                    seen, earliest = await self._db.read(partial(reads.arrivals, seen=seen))
                except RotaError as error:
                    if self._db.closed:
                        return
                    logger.warning("watching %s for new jobs failed: %s", self.path, error)
                else:
                    if earliest is not None:
                        on_due(earliest)
                await self._clock.sleep(check_every_s)
        finally:
            with self._wakeups_lock:
                self._wakeups.remove(on_due)

    async def connection_settings(self) -> dict[str, str | int]:
        """The pragmas in force on this store's connection (journal mode, busy timeout, ...)."""

        def read(conn: sqlite3.Connection) -> dict[str, str | int]:
            found: dict[str, str | int] = {}
            for name in ("journal_mode", "busy_timeout", "synchronous", "foreign_keys"):
                (value,) = conn.execute(f"PRAGMA {name}").fetchone()
                found[name] = value
            return found

        return await self._db.read(read)

    def _at(self, now: datetime | None) -> datetime:
        return utc(now) if now is not None else self._clock.now()

    # ------------------------------------------------------------------ enqueue and claim

    async def enqueue(
        self, specs: Sequence[JobSpec], *, now: datetime | None = None
    ) -> list[EnqueueResult]:
        specs = list(specs)
        if not specs:
            return []
        results, earliest = await self._db.write(
            lambda conn: jobs.enqueue(conn, specs, self._at(now))
        )
        self._woken(earliest)
        return results

    def _woken(self, earliest: datetime | None) -> None:
        """Tell this store's watchers about jobs inserted with ``earliest`` as their first
        run_at; called after the commit, so a woken worker's claim can already see them."""
        if earliest is None:
            return
        with self._wakeups_lock:
            callbacks = list(self._wakeups)
        for callback in callbacks:
            callback(earliest)

    async def claim(
        self,
        worker: str,
        *,
        queues: Sequence[str],
        limit: int,
        lease: timedelta,
        fair: bool = True,
        kinds: Collection[str] | None = None,
        now: datetime | None = None,
    ) -> list[Job]:
        if limit <= 0 or not queues:
            return []
        wanted = list(queues)
        after = self._after
        runs = None if kinds is None else frozenset(kinds)
        claimed = await self._db.write(
            lambda conn: claims.claim(
                conn, worker, wanted, limit, lease, self._at(now), fair=fair, after=after, runs=runs
            )
        )
        self._after = claimed.after
        return claimed.jobs

    # ------------------------------------------------------------------ fenced writes

    async def heartbeat(
        self,
        leases: Sequence[Lease],
        *,
        lease: timedelta,
        progress: Mapping[int, Progress] | None = None,
        now: datetime | None = None,
    ) -> Beat:
        held = list(leases)
        if not held:
            return Beat([], self._at(now))
        return await self._db.write(
            lambda conn: claims.heartbeat(conn, held, lease, self._at(now), progress)
        )

    async def begin(self, lease: Lease, *, now: datetime | None = None) -> None:
        await self._db.write(lambda conn: claims.begin(conn, lease))

    async def complete(self, lease: Lease, *, now: datetime | None = None) -> None:
        lost = await self._db.write(lambda conn: claims.complete(conn, [lease], self._at(now)))
        if lost:
            raise LeaseLost(lease.job_id, lease.token)

    async def complete_many(
        self,
        leases: Sequence[Lease],
        *,
        results: Sequence[str | None] | None = None,
        now: datetime | None = None,
    ) -> list[Lease]:
        held = list(leases)
        if not held:
            return []
        texts = list(results) if results is not None else None
        return await self._db.write(lambda conn: claims.complete(conn, held, self._at(now), texts))

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
        state: JobState = await self._db.write(
            lambda conn: claims.fail(
                conn, lease, error, retry_in, traceback, permanent, self._at(now)
            )
        )
        if state is JobState.PENDING:
            self._woken(self._at(now) + retry_in)
        return state

    async def snooze(self, lease: Lease, delay: timedelta, *, now: datetime | None = None) -> None:
        def body(conn: sqlite3.Connection) -> None:
            at = self._at(now)
            claims.give_back(conn, lease, at + delay, Outcome.SNOOZED, at)

        await self._db.write(body)
        self._woken(self._at(now) + delay)

    async def release(self, lease: Lease, *, now: datetime | None = None) -> None:
        def body(conn: sqlite3.Connection) -> None:
            at = self._at(now)
            claims.give_back(conn, lease, at, Outcome.RELEASED, at)

        await self._db.write(body)
        self._woken(self._at(now))

    # ------------------------------------------------------------------ operator verbs

    async def retry(
        self, job_id: int, *, max_attempts: int | None = None, now: datetime | None = None
    ) -> Job:
        job: Job = await self._db.write(
            lambda conn: jobs.retry(conn, job_id, max_attempts, self._at(now))
        )
        self._woken(job.run_at)
        return job

    async def rerun(self, job_id: int, *, now: datetime | None = None) -> Job:
        job: Job = await self._db.write(lambda conn: jobs.rerun(conn, job_id, self._at(now)))
        self._woken(job.run_at)
        return job

    async def cancel(self, job_id: int, *, now: datetime | None = None) -> Job:
        return await self._db.write(lambda conn: jobs.cancel(conn, job_id, self._at(now)))

    async def bulk_retry(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        done: int = await self._db.write(
            lambda conn: jobs.bulk_retry(conn, filter, limit, self._at(None))
        )
        if done:
            self._woken(self._at(None))
        return done

    async def bulk_cancel(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        return await self._db.write(
            lambda conn: jobs.bulk_cancel(conn, filter, limit, self._at(None))
        )

    async def hold(self, job_id: int, *, now: datetime | None = None) -> Job:
        return await self._db.write(lambda conn: jobs.hold(conn, job_id))

    async def release_held(self, job_id: int, *, now: datetime | None = None) -> Job:
        job: Job = await self._db.write(lambda conn: jobs.release_held(conn, job_id))
        if job.state is JobState.PENDING:
            self._woken(job.run_at)
        return job

    async def bulk_hold(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        return await self._db.write(lambda conn: jobs.bulk_hold(conn, filter, limit))

    async def bulk_release_held(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        done: int = await self._db.write(lambda conn: jobs.bulk_release_held(conn, filter, limit))
        if done:
            self._woken(self._at(None))
        return done

    async def delete(self, job_id: int) -> Job:
        job, released = await self._db.write(lambda conn: jobs.delete(conn, job_id, self._at(None)))
        self._woken(released)
        return job

    async def reschedule(self, job_id: int, edit: JobEdit, *, now: datetime | None = None) -> Job:
        job: Job = await self._db.write(
            lambda conn: jobs.reschedule(conn, job_id, edit, self._at(now))
        )
        self._woken(job.run_at)
        return job

    async def purge(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        count, released = await self._db.write(
            lambda conn: jobs.purge(conn, filter, limit, self._at(None))
        )
        self._woken(released)
        return count

    # ------------------------------------------------------------------ workflows

    async def enqueue_workflow(self, graph: Workflow, *, now: datetime | None = None) -> list[Job]:
        graph.check()
        written, earliest = await self._db.write(
            lambda conn: workflows.enqueue_workflow(conn, graph, self._at(now))
        )
        self._woken(earliest)
        return written

    async def parent_results(self, job_id: int) -> dict[int, object]:
        return await self._db.read(lambda conn: workflows.parent_results(conn, job_id))

    async def workflow(
        self,
        workflow_id: int,
        *,
        after: int | None = None,
        limit: int | None = None,
        previews: bool = False,
    ) -> tuple[list[Job], list[tuple[int, int, str]]]:
        if not fits(workflow_id):
            return [], []
        if limit is None:
            return await self._db.read(lambda conn: workflows.workflow(conn, workflow_id))
        start, size = after or 0, max(1, limit)
        return await self._db.read(
            lambda conn: workflows.workflow_page(conn, workflow_id, start, size, previews=previews)
        )

    async def workflow_states(self, workflow_id: int) -> dict[JobState, int]:
        if not fits(workflow_id):
            return {}
        return await self._db.read(lambda conn: workflows.workflow_states(conn, workflow_id))

    async def related(
        self, job_id: int, *, parents: bool, after: int | None = None, limit: int = 50
    ) -> list[tuple[int, JobState, str]]:
        if not fits(job_id):
            return []
        start, size = after or 0, max(1, limit)
        return await self._db.read(
            lambda conn: workflows.related(conn, job_id, parents, start, size)
        )

    async def cancel_workflow(self, workflow_id: int, *, now: datetime | None = None) -> int:
        return await self._db.write(
            lambda conn: workflows.cancel_workflow(conn, workflow_id, self._at(now))
        )

    # ------------------------------------------------------------------ queries

    async def get_many(self, job_ids: Sequence[int]) -> list[Job]:
        wanted = list(job_ids)
        return await self._db.read(lambda conn: reads.get_many(conn, wanted))

    async def expect_finished(self, job_ids: Sequence[int]) -> None:
        """Nothing to do: nothing is reported (``pushes_finished`` is False)."""

    async def watch_finished(self, on_finished: Callable[[], None]) -> None:
        """Never calls ``on_finished``: other processes' completions cannot be heard here
        (``pushes_finished`` is False), so waiters poll. Waits until cancelled."""
        await asyncio.Event().wait()

    async def get(self, job_id: int) -> Job:
        return await self._db.read(lambda conn: reads.get(conn, job_id))

    async def get_preview(self, job_id: int, *, chars: int) -> Job:
        return await self._db.read(lambda conn: reads.get_preview(conn, job_id, chars))

    async def list_jobs(
        self,
        filter: JobFilter,
        *,
        cursor: str | None = None,
        limit: int = 50,
        previews: bool = False,
    ) -> Page:
        after = decode_cursor(cursor) if cursor is not None else None
        return await self._db.read(
            lambda conn: reads.list_jobs(conn, filter, after, limit, previews=previews)
        )

    async def counts(self, *, now: datetime | None = None) -> Counts:
        return await self._db.read(lambda conn: reads.counts(conn, self._at(now)))

    async def count_jobs(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        return await self._db.read(lambda conn: reads.count_jobs(conn, filter, limit))

    async def count_or_estimate(self, filter: JobFilter, *, exact_up_to: int) -> Counted:
        return await self._db.read(lambda conn: reads.count_or_estimate(conn, filter, exact_up_to))

    async def throughput(
        self, *, since: datetime, bucket: timedelta, now: datetime | None = None
    ) -> list[ThroughputBucket]:
        start = utc(since)
        return await self._db.read(
            lambda conn: reads.throughput(conn, start, bucket, self._at(now))
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
        start, at = utc(since), self._at(now)
        return await self._db.read(
            lambda conn: activity.buckets(conn, start, bucket, at, queue, kind)
        )

    async def top_errors(
        self,
        *,
        since: datetime,
        queue: str | None = None,
        kind: str | None = None,
        limit: int = TOP_ERRORS,
        now: datetime | None = None,
    ) -> list[ErrorGroup]:
        start, at = utc(since), self._at(now)
        return await self._db.read(
            lambda conn: activity.top_errors(conn, start, at, queue, kind, limit)
        )

    async def attempts(self, job_id: int) -> list[Attempt]:
        return await self._db.read(lambda conn: reads.attempts(conn, job_id))

    # ------------------------------------------------------------------ maintenance

    async def rescue(self, *, now: datetime | None = None, limit: int = 1000) -> RescueResult:
        result: RescueResult = await self._db.write(
            lambda conn: claims.rescue(conn, limit, self._at(now))
        )
        if result.requeued:
            self._woken(self._at(now))
        return result

    async def expire(self, *, now: datetime | None = None, limit: int = 1000) -> list[int]:
        return await self._db.write(lambda conn: jobs.expire(conn, limit, self._at(now)))

    async def end_unrunnable(
        self,
        *,
        grace: timedelta,
        alive_within: timedelta,
        now: datetime | None = None,
        limit: int = 1000,
    ) -> list[int]:
        return await self._db.write(
            lambda conn: jobs.end_unrunnable(conn, grace, alive_within, limit, self._at(now))
        )

    async def prune(self, *, older_than: datetime, limit: int = 10_000) -> int:
        cutoff = utc(older_than)

        def body(conn: sqlite3.Connection) -> int:
            gone = jobs.prune(conn, cutoff, limit, self._at(None))
            if gone < limit:
                activity.prune(conn, cutoff)
            return gone

        return await self._db.write(body)
