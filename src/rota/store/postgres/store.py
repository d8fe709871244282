"""PostgresStore: the Store contract on PostgreSQL with psycopg 3 and an async pool.

Each verb is one statement (or one short transaction) from queries.sql. Connections are
autocommit and carry no session state (advisory locks are transaction-level only; behind a
transaction pooler no statement is prepared and LISTEN goes to a direct connection or is
replaced by polling), so PgBouncer in transaction mode works. Connections: connect.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from rota.domain.activity import (
    TOP_ERRORS,
    ActivityBucket,
    ErrorGroup,
    error_fingerprint,
    error_sample,
)
from rota.domain.audit import AuditEntry, AuditFilter, AuditRecord
from rota.domain.clock import Clock, utc
from rota.domain.errors import (
    JobNotFound,
    JobRunning,
    LeaseLost,
    ScheduleNotFound,
    StateConflict,
    StoreUnavailable,
)
from rota.domain.flow import (
    Limit,
    LimitScope,
    claim_order,
    validate_queue,
)
from rota.domain.job import (
    MAX_ERROR_LENGTH,
    MAX_TRACEBACK_LENGTH,
    Attempt,
    EnqueueResult,
    Job,
    JobEdit,
    JobSpec,
)
from rota.domain.job_state import EXPIRED, UNRUNNABLE, JobState, Outcome
from rota.domain.lease import Lease
from rota.domain.payload import Progress, truncate
from rota.domain.schedule import ScheduleSpec
from rota.domain.schedule_state import Firing, Missed, Schedule
from rota.domain.transitions import MOVES, refusal
from rota.domain.workflow import Workflow, WorkflowBuilder
from rota.store.postgres import activity, audit, filters, retention, schedules, upkeep
from rota.store.postgres.connect import Borrowed, Connections, PoolConnection
from rota.store.postgres.durable import PostgresDurable
from rota.store.postgres.enqueue import (
    COPY_THRESHOLD,
    Flow,
    copy_jobs,
    drive_async,
    drive_sync,
    enqueue_any_flow,
    enqueue_flow,
    enqueue_plain_params,
    plain_result,
    stream_jobs,
)
from rota.store.postgres.failures import SCHEMA_ERRORS, migrations_pending
from rota.store.postgres.filters import guarded, where
from rota.store.postgres.limits import claim_limited, limits_in_use
from rota.store.postgres.listen import SCHEDULES_CHANNEL, listen
from rota.store.postgres.moved import again_if_moved
from rota.store.postgres.queries import (
    CROWDED_MARKER,
    EXPIRED_MARKER,
    JOB_COLUMNS,
    LIST_COLUMNS,
    ROUTINES,
    migrations,
    preview_columns,
    query,
)
from rota.store.postgres.rows import (
    Row,
    completion,
    micros,
    row_to_job,
    row_to_listed,
    us,
)
from rota.store.postgres.urls import url_settings
from rota.store.postgres.workflows import enqueue_workflow_flow
from rota.store.records import (
    MAX_BULK,
    MAX_PAGE_EDGES,
    MAX_PAGE_SIZE,
    AuditPage,
    Beat,
    Counted,
    Counts,
    JobFilter,
    LimitInfo,
    Page,
    QueueInfo,
    RescueResult,
    ThroughputBucket,
    WorkerInfo,
    bucketize,
    check_schedule_listing,
    decode_cursor,
    encode_cursor,
)

log = logging.getLogger("rota.store.postgres")

_PLAIN = query("enqueue_plain")


#: How many (tenant, priority) groups one claim walks per queue at least; a claim of more jobs
#: walks as many groups as it asks for jobs, so a batch fills one job per tenant where each
#: tenant holds few. More tenants than that are reached over successive claims, each starting
#: after the last tenant served.
MAX_CLAIM_GROUPS = 64
#: counts() folds the count deltas itself when it finds more than this many (017_counts):
#: the rescuers fold them every few seconds, but a store may run without workers a while.
FOLD_ON_READ = 10_000
#: The most groups one claim walks per queue, however many jobs it asks for.
MAX_WALK_GROUPS = 1000
#: After rota_claim_all found more due jobs than its batch takes, this many claims go straight
#: to rota_claim_fresh before it is tried again: where other queues keep a backlog, a store
#: whose own queues stay idle pays the extra round trip once in that many claims.
CROWDED_SKIP = 16
_MIGRATION_LOCK = 0x726F7461  # "rota": the advisory lock that serialises migrators
#: A claim that takes nothing: no queue, no kind (an empty list, where None means any). Its
#: functions run through every part of their plans and change no row.
_CLAIM_NOTHING: dict[str, Any] = {
    "now": None,
    "queues": [],
    "take": 1,
    "lease": timedelta(seconds=1),
    "worker": "",
    "fair": True,
    "after": "",
    "max_groups": MAX_CLAIM_GROUPS,
    "blocked_kinds": [],
    "blocked_tenants": [],
    "kinds": [],
    "limited": False,
}


_COPY_NULL = "\\N"


async def _statement(conn: PoolConnection, name: str, params: dict[str, Any]) -> list[Row]:
    """The rows of the statement ``name``: one statement that commits by itself, run again if
    it met a moved job."""

    async def run() -> list[Row]:
        rows: list[Row] = await conn.run(query(name), params)
        return rows

    return await again_if_moved(run)


async def _warm_claims(conn: PoolConnection) -> None:
    """Ready a connection the pool just opened for claims, once a store claims: the first call
    of each claim function in a session compiles the function and plans its statement,
    several milliseconds of the server's time each on the benchmark's cluster, which a claim
    taking a job into an idle worker would otherwise wait for whenever it lands on a
    connection the pool opened since."""
    for name in ROUTINES:  # the claim's functions
        await conn.run(query(name), _CLAIM_NOTHING)


class PostgresStore(PostgresDurable):
    """The Store contract on PostgreSQL; see the module docstring."""

    #: Schedule changes from any process reach ``watch``'s ``on_schedules``; False once
    #: opened behind a transaction pooler with no listen URL (nothing is pushed then).
    pushes_schedule_changes = True
    #: Terminal transitions from any process reach ``watch_finished``; False as above.
    pushes_finished = True

    def __init__(
        self,
        conninfo: str,
        *,
        clock: Clock | None = None,
        pool_min: int = 1,
        pool_max: int = 10,
        prepare: bool | None = None,
        pooler: str = "auto",
        listen_conninfo: str | None = None,
    ) -> None:
        self._clock = clock
        self._connections = Connections(
            conninfo,
            pool_min=pool_min,
            pool_max=pool_max,
            prepare=prepare,
            pooler=pooler,
            listen_conninfo=listen_conninfo,
        )
        #: The tenant this store's last fair claim served, where the next one's walk starts.
        self._after = ""
        #: Whether the next claim tries rota_claim_all first: its last claim came back short,
        #: and no rota_claim_all found a crowd within the last CROWDED_SKIP claims.
        self._all_next = True
        self._fresh_left = 0
        #: Whether this store claims (it did, or a worker registered through it): then every
        #: connection its pool opens is warmed for claims (_warm_claims).
        self._claims = False
        #: The connection the last claim ran on, which the next takes if it is free.
        self._claimer: PoolConnection | None = None

    @classmethod
    def from_url(
        cls, url: str, *, clock: Clock | None = None, listen_url: str | None = None
    ) -> PostgresStore:
        """A store for ``postgresql://...``; our own options (pool_min, pool_max, prepare,
        pooler) are read from the query string and the rest is passed to libpq.

        ``pooler``: ``auto`` (the default) notices a transaction pooler such as PgBouncer by
        the backend keys it hands out; ``transaction`` says there is one; ``none`` says there
        is none (a direct connection, or session pooling). ``listen_url`` is a direct
        connection for LISTEN, for use behind a transaction pooler."""
        settings = url_settings(url, listen_url=listen_url)
        return cls(
            settings.conninfo,
            clock=clock,
            pool_min=settings.pool_min,
            pool_max=settings.pool_max,
            prepare=settings.prepare,
            pooler=settings.pooler,
            listen_conninfo=settings.listen_conninfo,
        )

    # ------------------------------------------------------------------ plumbing

    def _now(self, now: datetime | None) -> datetime | None:
        if now is not None:
            return utc(now)
        return self._clock.now() if self._clock is not None else None

    def fail_at_once(self) -> None:
        """Say why the first connection failed at its first failure, a refused one included,
        instead of retrying it for CONNECT_WAIT_S (a server restarting): for one-shot
        commands, whose user is waiting for the answer. Call before the store is first used."""
        self._connections.connect_wait_s = 0.0

    @property
    def behind_pooler(self) -> bool | None:
        """Whether connections go through a transaction pooler; None until first used."""
        return self._connections.pooled

    async def _ensure_open(self) -> None:
        if not self._connections.is_open:
            await self._connections.open()
            self.pushes_schedule_changes = self._connections.listen_conninfo is not None
            self.pushes_finished = self.pushes_schedule_changes

    def _start_claiming(self) -> bool:
        """Note that this store claims, and from then on warm each connection its pool opens
        for claims (_warm_claims); whether this call was the first to say so."""
        if self._claims:
            return False
        self._claims = True
        self._connections.warm_with(_warm_claims)
        return True

    def _connection(self, prefer: PoolConnection | None = None) -> Borrowed:
        return self._connections.connection(self._schema_errors, self._ensure_open, prefer=prefer)

    async def _schema_errors(self, error: Exception) -> Exception | None:
        if isinstance(error, SCHEMA_ERRORS):
            return await self._schema_error(error)
        return None

    async def _schema_error(self, error: psycopg.Error) -> Exception:
        """MigrationsPending when a statement found part of the schema missing because
        migrations are pending (or cannot be checked now); otherwise the error itself."""
        try:
            pending = await self.pending_migrations()
        except StoreUnavailable:
            pending = ["?"]
        return migrations_pending(error) if pending else error

    async def _fetch(self, name: str, params: dict[str, Any]) -> list[Row]:
        async with self._connection() as conn:
            return await _statement(conn, name, params)

    async def _fetch_claim(self, name: str, params: dict[str, Any]) -> list[Row]:
        """``_fetch`` on the connection of the last claim when it is free: after a vacuum or
        an analyse of a table a claim reads, each connection's next claim plans its statement
        again (milliseconds, against a fraction of one for the claim itself), so claims that
        keep to one connection pay for that once rather than once per connection they met."""
        async with self._connection(prefer=self._claimer) as conn:
            self._claimer = conn
            return await _statement(conn, name, params)

    async def _run_flow(self, flow: Flow, *, announce_schedules: bool = False) -> Any:
        async with self._connection() as conn, conn.transaction():
            result = await drive_async(conn, flow)
            if announce_schedules:  # sent on commit: firers elsewhere re-read their next due
                await conn.execute("SELECT pg_notify(%s, '')", [SCHEDULES_CHANNEL])
            return result

    # ------------------------------------------------------------------ lifecycle

    async def migrate(self) -> list[str]:
        applied: list[str] = []
        async with self._connection() as conn, conn.transaction():
            # Transaction-level lock: concurrent migrators queue here, and nothing outlives
            # the transaction (no session state for a pooler to lose).
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", [_MIGRATION_LOCK])
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS rota_migrations ("
                "version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {
                row[0]
                for row in await (
                    await conn.execute("SELECT version FROM rota_migrations")
                ).fetchall()
            }
            for version, text in migrations():
                if version in done:
                    continue
                await conn.execute(text, prepare=False)  # many statements: never prepared
                await conn.execute("INSERT INTO rota_migrations (version) VALUES (%s)", [version])
                applied.append(version)
        return applied

    async def pending_migrations(self) -> list[str]:
        async with self._connection() as conn:
            exists = await (
                await conn.execute("SELECT to_regclass('rota_migrations') IS NOT NULL")
            ).fetchone()
            done: set[str] = set()
            if exists and exists[0]:
                rows = await (await conn.execute("SELECT version FROM rota_migrations")).fetchall()
                done = {row[0] for row in rows}
        return [version for version, _ in migrations() if version not in done]

    async def close(self) -> None:
        await self._connections.close()

    async def now(self) -> datetime:
        [(instant,)] = await self._fetch("now", {"now": self._now(None)})
        return instant  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ enqueue

    async def enqueue(
        self, specs: Sequence[JobSpec], *, now: datetime | None = None
    ) -> list[EnqueueResult]:
        if not specs:
            return []
        at = self._now(now)
        if any(spec.keyed for spec in specs):
            # Duplicates are looked up and raced inserts retried: one transaction for all.
            results: list[EnqueueResult] = await self._run_flow(enqueue_any_flow(specs, at))
            return results
        if len(specs) >= COPY_THRESHOLD:
            return await self._copy(specs, at)
        if len(specs) == 1 and specs[0].plain:
            # The commonest call, one job with no options that can conflict: its statement
            # straight, without the flow's bookkeeping (~10 µs of a ~90 µs call).
            [spec] = specs
            async with self._connection() as conn:
                [row] = await conn.run(_PLAIN, enqueue_plain_params(spec, at))
            return [plain_result(spec, row)]
        # Nothing can conflict: one INSERT statement is atomic on its own (one round trip).
        async with self._connection() as conn:
            plain: list[EnqueueResult] = await drive_async(conn, enqueue_flow(specs, at))
        return plain

    async def enqueue_stream(self, specs: Iterable[JobSpec]) -> list[EnqueueResult]:
        """``enqueue`` of specs made one by one (a generator), as atomic: from COPY_THRESHOLD
        keyless specs on, each chunk is written while the caller makes the next, so making the
        specs and inserting the rows overlap (stream_jobs). An exception raised by ``specs``
        midway rolls everything back and propagates."""
        rest = iter(specs)
        head = list(itertools.islice(rest, COPY_THRESHOLD))
        if len(head) < COPY_THRESHOLD or any(spec.keyed for spec in head):
            return await self.enqueue([*head, *rest])
        async with self._connection() as conn, conn.transaction():
            return await stream_jobs(conn, head, rest, self._now(None))

    async def _copy(self, specs: Sequence[JobSpec], now: datetime | None) -> list[EnqueueResult]:
        async with self._connection() as conn, conn.transaction():
            return await copy_jobs(conn, specs, now)

    async def enqueue_on(
        self, connection: psycopg.AsyncConnection[Any], specs: Sequence[JobSpec]
    ) -> list[EnqueueResult]:
        """Enqueue on the caller's own connection, inside whatever transaction it has open:
        the jobs exist only if and when that transaction commits."""
        if not specs:
            return []
        results: list[EnqueueResult] = await self._run_on(
            connection, enqueue_any_flow(specs, self._now(None))
        )
        return results

    async def enqueue_workflow_on(
        self, connection: psycopg.AsyncConnection[Any], graph: Workflow
    ) -> list[Job]:
        """``enqueue_workflow`` on the caller's own connection, as ``enqueue_on``: the graph
        exists, whole, only if and when that transaction commits."""
        graph.check()
        jobs: list[Job] = await self._run_on(
            connection, enqueue_workflow_flow(graph, self._now(None))
        )
        return jobs

    async def _run_on(self, connection: psycopg.AsyncConnection[Any], flow: Flow) -> Any:
        try:
            if connection.autocommit:
                # No transaction of the caller's to join: the flow is atomic on its own.
                async with connection.transaction():
                    return await drive_async(connection, flow)
            # Join the caller's transaction. psycopg opens one implicitly on the first
            # statement if none is open; transaction() here would instead commit on exit.
            return await drive_async(connection, flow)
        except SCHEMA_ERRORS as error:
            raise await self._schema_error(error) from error

    def enqueue_on_sync(
        self, connection: psycopg.Connection[Any], specs: Sequence[JobSpec]
    ) -> list[EnqueueResult]:
        """``enqueue_on`` for a synchronous psycopg connection (Django, Flask)."""
        if not specs:
            return []
        results: list[EnqueueResult] = self._run_on_sync(
            connection, enqueue_any_flow(specs, self._now(None))
        )
        return results

    def enqueue_workflow_on_sync(
        self, connection: psycopg.Connection[Any], graph: Workflow
    ) -> list[Job]:
        """``enqueue_workflow_on`` for a synchronous psycopg connection (Django, Flask)."""
        graph.check()
        jobs: list[Job] = self._run_on_sync(
            connection, enqueue_workflow_flow(graph, self._now(None))
        )
        return jobs

    def _run_on_sync(self, connection: psycopg.Connection[Any], flow: Flow) -> Any:
        try:
            if connection.autocommit:
                with connection.transaction():
                    return drive_sync(connection, flow)
            return drive_sync(connection, flow)
        except SCHEMA_ERRORS as error:
            # No loop here to ask the pool which migrations are pending: the error says it.
            raise migrations_pending(error) from error

    # ------------------------------------------------------------------ claim and leases

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
        if limit <= 0 or not queues or (kinds is not None and not kinds):
            return []
        self._start_claiming()
        params = {
            "now": self._now(now),
            "queues": list(queues),
            "take": limit,
            "lease": lease,
            "worker": worker,
            "fair": fair,
            "after": self._after,
            "max_groups": min(max(MAX_CLAIM_GROUPS, limit), MAX_WALK_GROUPS),
            "blocked_kinds": [],
            "blocked_tenants": [],
            "kinds": None if kinds is None else sorted(kinds),
            "limited": False,
        }
        rows = await self._claim_rows(params)
        markers = [row for row in rows if row[0] is None]
        walked_to = next((row[10] for row in markers if row[10] is not None), None)
        if any(row[10] is None for row in markers):  # a limit exists: claim under its budget
            jobs = await self._claim_limited(params, limit)
        else:
            jobs = [row_to_job(row) for row in rows if row[0] is not None]
        if fair and jobs:
            # The next claim's walk over tenants starts after the last tenant served here...
            self._after = max(job.tenant or "" for job in jobs)
        if fair and walked_to is not None and len(jobs) < limit:
            # ...or, when the walk was cut short before the batch filled, after the last
            # tenant it reached: tenants beyond the first groups (say, all with only future
            # jobs) get their turn on the next claim instead of never.
            self._after = walked_to
        self._all_next = len(jobs) < limit
        jobs.sort(key=claim_order)
        return jobs

    async def _claim_rows(self, params: dict[str, Any]) -> list[Row]:
        """The rows of one claim: one statement that commits by itself (a claimer stopped at
        any moment holds no lock), a function planned once per connection (Routine).

        While this store's last claim came back short, its queues are likely idle, and it
        calls rota_claim_all, which claims every due job when they all fit in the batch (the
        fair choice then) with a much smaller plan than the others'. When more are due, it
        claims nothing and says so, and the claim goes on as otherwise: rota_claim_fresh, the
        fair walk without the takeover of expired leases, and only when a lease it could take
        over has expired, rota_claim, which takes them over too."""
        rows: list[Row] | None = None
        if self._all_next and not self._fresh_left:
            rows = await self._fetch_claim("claim_all_call", params)
            if _marked(rows, CROWDED_MARKER) and not _marked(rows, EXPIRED_MARKER):
                self._fresh_left = CROWDED_SKIP
                rows = None
        else:
            self._fresh_left = max(0, self._fresh_left - 1)
        if rows is None:
            rows = await self._fetch_claim("claim_fresh_call", params)
        if _marked(rows, EXPIRED_MARKER):
            rows = await self._fetch_claim("claim_call", params)
        return rows

    async def _claim_limited(self, params: dict[str, Any], limit: int) -> list[Job]:
        async with self._connection() as conn:

            async def run() -> list[Job]:
                async with conn.transaction():
                    return await claim_limited(conn, params, limit)

            return await again_if_moved(run)

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

    # ------------------------------------------------------------------ operator verbs

    async def retry(
        self, job_id: int, *, max_attempts: int | None = None, now: datetime | None = None
    ) -> Job:
        try:
            rows = await self._fetch(
                "retry",
                {"now": self._now(now), "ids": [job_id], "max_attempts": max_attempts or 1},
            )
        except psycopg.errors.UniqueViolation:
            raise StateConflict(f"job {job_id}: another active job holds its unique key") from None
        if rows:
            return row_to_job(rows[0])
        raise await self._conflict(job_id, "retry")

    async def rerun(self, job_id: int, *, now: datetime | None = None) -> Job:
        try:
            rows = await self._fetch("rerun", {"now": self._now(now), "id": job_id})
        except psycopg.errors.UniqueViolation:
            raise StateConflict(f"job {job_id}: another active job holds its unique key") from None
        if rows:
            return row_to_job(rows[0])
        raise await self._conflict(job_id, "rerun")

    async def cancel(self, job_id: int, *, now: datetime | None = None) -> Job:
        rows = await self._fetch("cancel", {"now": self._now(now), "ids": [job_id]})
        if rows:
            return row_to_job(rows[0])
        raise await self._conflict(job_id, "cancel")

    async def _conflict(self, job_id: int, verb: str) -> Exception:
        """Why ``verb`` changed no row: the job is gone, or the table refuses its state."""
        rows = await self._fetch("state_of", {"id": job_id})
        if not rows:
            return JobNotFound(job_id)
        return StateConflict(refusal(job_id, rows[0][0], verb))

    async def bulk_retry(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        ids = await self._matching_ids(filter, _values(MOVES["retry"].sources), limit)
        if not ids:
            return 0
        try:
            rows = await self._fetch(
                "retry", {"now": self._now(None), "ids": ids, "max_attempts": 1}
            )
            return len(rows)
        except psycopg.errors.UniqueViolation:
            # Some job's unique key is held by an active twin: retry the rest one by one.
            done = 0
            for job_id in ids:
                with contextlib.suppress(StateConflict, JobNotFound):
                    await self.retry(job_id)
                    done += 1
            return done

    async def bulk_cancel(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        ids = await self._matching_ids(filter, _values(MOVES["cancel"].sources), limit)
        if not ids:
            return 0
        return len(await self._fetch("cancel", {"now": self._now(None), "ids": ids}))

    async def hold(self, job_id: int, *, now: datetime | None = None) -> Job:
        return await self._move("hold", job_id)

    async def release_held(self, job_id: int, *, now: datetime | None = None) -> Job:
        return await self._move("release_held", job_id)

    async def _move(self, verb: str, job_id: int) -> Job:
        rows = await self._fetch(verb, {"ids": [job_id]})
        if rows:
            return row_to_job(rows[0])
        raise await self._conflict(job_id, verb)

    async def bulk_hold(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        return await self._bulk_move("hold", filter, limit)

    async def bulk_release_held(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        return await self._bulk_move("release_held", filter, limit)

    async def _bulk_move(self, verb: str, filter: JobFilter, limit: int) -> int:
        ids = await self._matching_ids(filter, _values(MOVES[verb].sources), limit)
        if not ids:
            return 0
        return len(await self._fetch(verb, {"ids": ids}))

    async def delete(self, job_id: int) -> Job:
        rows = await self._fetch("delete", {"id": job_id})
        if rows:
            return row_to_job(rows[0])
        if not await self._fetch("state_of", {"id": job_id}):
            raise JobNotFound(job_id)
        raise JobRunning(job_id, "delete")

    async def reschedule(self, job_id: int, edit: JobEdit, *, now: datetime | None = None) -> Job:
        rows = await self._fetch(
            "reschedule",
            {
                "now": self._now(now),
                "id": job_id,
                "run_now": edit.run_now,
                "run_at": edit.run_at,
                "priority": edit.priority,
                "queue": edit.queue,
            },
        )
        if rows:
            return row_to_job(rows[0])
        state = await self._fetch("state_of", {"id": job_id})
        if not state:
            raise JobNotFound(job_id)
        if state[0][0] == JobState.RUNNING:
            raise JobRunning(job_id, "edit")
        raise StateConflict(refusal(job_id, state[0][0], "reschedule"))

    async def purge(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        ids = await self._matching_ids(filter, _values(MOVES["purge"].sources), limit)
        if not ids:
            return 0
        return len(await self._fetch("purge", {"ids": ids}))

    async def _matching_ids(
        self, filter: JobFilter, allowed: tuple[str, ...], limit: int
    ) -> list[int]:
        states = set(allowed)
        if filter.states is not None:
            states &= {state.value for state in filter.states}
        if not states:
            return []
        statement = guarded(
            sql.SQL("SELECT id FROM rota_jobs WHERE {} ORDER BY id LIMIT {}").format(
                where(filter, states_override=sorted(states)),
                sql.Literal(max(0, min(limit, MAX_BULK))),
            ),
            filter,
            states=sorted(states),
        )
        rows = await self._filtered(statement)
        return [row[0] for row in rows]

    async def _filtered(self, statement: sql.Composable, *, again: bool = False) -> list[Row]:
        """The rows of a statement that filters jobs (filters.py), without JIT compilation. A
        filter the counts end at once is still planned as the scans it will not run, and at
        ten million jobs their cost set off JIT: 292 functions compiled for 15 s to read no
        row.

        Its values are literals in its text, so it is planned for them whether prepared or
        not. ``again``: a statement asked again word for word (a list's first page and the
        counts, which the dashboard polls) is prepared where the connection prepares, so a
        connection plans it once: planning one over a week of day partitions took 13 to 40 ms
        at ten million jobs on a busy machine, running it 1 to 3 ms. Other pages, whose
        cursor makes each text new, run unprepared."""
        async with self._connection() as conn, conn.transaction():
            await conn.execute("SET LOCAL jit = off")
            prepare = None if again else False
            rows: list[Row] = await (await conn.execute(statement, prepare=prepare)).fetchall()
        return rows

    # ------------------------------------------------------------------ queries

    # ------------------------------------------------------------------ workflows

    async def enqueue_workflow(self, graph: Workflow, *, now: datetime | None = None) -> list[Job]:
        graph.check()
        jobs: list[Job] = await self._run_flow(enqueue_workflow_flow(graph, self._now(now)))
        return jobs

    async def parent_results(self, job_id: int) -> dict[int, object]:
        return dict(await self._fetch("parent_results", {"id": job_id}))

    async def workflow(
        self,
        workflow_id: int,
        *,
        after: int | None = None,
        limit: int | None = None,
        previews: bool = False,
    ) -> tuple[list[Job], list[tuple[int, int, str]]]:
        if not -(2**63) <= workflow_id < 2**63:
            return [], []
        params: dict[str, Any] = {"workflow": workflow_id}
        async with self._connection() as conn, conn.transaction():
            if limit is None:
                job_rows = await (await conn.execute(query("workflow_jobs"), params)).fetchall()
                edge_rows = await (await conn.execute(query("workflow_edges"), params)).fetchall()
            else:
                statement = sql.SQL(
                    "SELECT {} FROM rota_jobs WHERE workflow = {} AND id > {} ORDER BY id LIMIT {}"
                ).format(
                    sql.SQL(LIST_COLUMNS if previews else JOB_COLUMNS),
                    sql.Literal(workflow_id),
                    sql.Literal(after if after is not None else 0),
                    sql.Literal(max(1, limit)),
                )
                job_rows = await (await conn.execute(statement, prepare=False)).fetchall()
                edge_rows = []
                if job_rows:
                    params.update(first=job_rows[0][0], last=job_rows[-1][0])
                    params["limit"] = MAX_PAGE_EDGES + 1
                    edge_rows = await (
                        await conn.execute(query("workflow_edges_into"), params)
                    ).fetchall()
        edges = [(int(parent), int(child), str(policy)) for parent, child, policy in edge_rows]
        build = row_to_listed if previews else row_to_job
        return [build(row) for row in job_rows], edges

    async def workflow_states(self, workflow_id: int) -> dict[JobState, int]:
        if not -(2**63) <= workflow_id < 2**63:
            return {}
        rows = await self._fetch("workflow_states", {"workflow": workflow_id})
        return {JobState(state): int(n) for state, n in rows}

    async def related(
        self, job_id: int, *, parents: bool, after: int | None = None, limit: int = 50
    ) -> list[tuple[int, JobState, str]]:
        if not -(2**63) <= job_id < 2**63:
            return []
        rows = await self._fetch(
            "parents_of" if parents else "children_of",
            {"id": job_id, "after": after if after is not None else 0, "limit": max(1, limit)},
        )
        return [(int(other), JobState(state), str(policy)) for other, state, policy in rows]

    async def cancel_workflow(self, workflow_id: int, *, now: datetime | None = None) -> int:
        [(count,)] = await self._fetch(
            "cancel_workflow", {"now": self._now(now), "workflow": workflow_id}
        )
        return int(count)

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

    async def _upkeep(self) -> None:
        """The days ahead and the active table's statistics (upkeep.py)."""
        try:
            async with self._connection() as conn:
                await upkeep.add_days(conn)
                await upkeep.refresh_statistics(conn)
        except (psycopg.errors.ReadOnlySqlTransaction, psycopg.errors.LockNotAvailable):
            # A replica keeps none; a day whose lock was busy is made on a later pass (a day
            # not made in time only sends its jobs to the default partition).
            return

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

    # ------------------------------------------------------------------ wake-ups

    async def watch(
        self,
        on_due: Callable[[datetime | None], None],
        *,
        on_schedules: Callable[[], None] | None = None,
        check_every_s: float = 5.0,
    ) -> None:
        """LISTEN for new jobs (and schedule changes) on a dedicated connection until
        cancelled (see listen). Behind a transaction pooler with no listen URL nothing can
        be heard: this waits to be cancelled, and workers find jobs by polling."""
        await self._connections.open_patiently()
        await self._ensure_open()
        target = self._connections.listen_conninfo
        if target is None:
            log.info(
                "%s is reached through a transaction pooler and no listen database URL is "
                "set: no LISTEN, workers poll for jobs (set ROTA_LISTEN_DATABASE_URL to a "
                "direct connection for prompt wake-ups)",
                self._connections.address,
            )
            await asyncio.Event().wait()
            return
        await listen(target, on_due, on_schedules=on_schedules, check_every_s=check_every_s)

    async def expect_finished(self, job_ids: Sequence[int]) -> None:
        wanted = sorted({job_id for job_id in job_ids if -(2**63) <= job_id < 2**63})
        if wanted:
            await self._fetch("expect_finished", {"ids": wanted})

    async def watch_finished(
        self, on_finished: Callable[[], None], *, check_every_s: float = 5.0
    ) -> None:
        """LISTEN for terminal transitions of expected jobs (NOTIFY rota_finished, sent by
        the statements that finish them) on a dedicated connection until cancelled (see
        listen). Behind a
        transaction pooler with no listen URL nothing can be heard: this waits to be
        cancelled, and waiters poll."""
        await self._connections.open_patiently()
        await self._ensure_open()
        target = self._connections.listen_conninfo
        if target is None:
            await asyncio.Event().wait()
            return
        await listen(target, None, on_finished=on_finished, check_every_s=check_every_s)


def _values(states: Iterable[JobState]) -> tuple[str, ...]:
    """``states`` as the text the rows hold, in JobState's order."""
    chosen = set(states)
    return tuple(state.value for state in JobState if state in chosen)


def _marked(rows: Sequence[Row], state: str) -> bool:
    """Whether a claim function's rows hold its marker row of ``state`` (queries.EXPIRED_MARKER,
    queries.CROWDED_MARKER): NULLs but for the state."""
    return any(row[0] is None and row[4] == state for row in rows)


def _bounded_count(filter: JobFilter, limit: int) -> sql.Composable:
    """How many jobs match ``filter``, counting no further than ``limit`` (guarded by the
    maintained counts: a kind or queue with no job ends it at once)."""
    return guarded(
        sql.SQL(query("count_jobs").rstrip(";")).format(
            where=where(filter), limit=sql.Literal(max(0, limit))
        ),
        filter,
    )
