"""PostgresStore: the Store contract on PostgreSQL with psycopg 3 and an async pool.

Each verb is one statement (or one short transaction) from queries.sql. Connections are
autocommit and carry no session state (advisory locks are transaction-level only, prepared
statements can be switched off), so PgBouncer in transaction mode works.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias
from urllib.parse import parse_qsl, urlencode, urlsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from rota.domain.clock import Clock, utc
from rota.domain.errors import (
    InvalidInput,
    JobNotFound,
    LeaseLost,
    ScheduleNotFound,
    StateConflict,
    StoreUnavailable,
)
from rota.domain.flow import (
    EVERY_TENANT,
    Budget,
    Key,
    Limit,
    LimitScope,
    claim_order,
    select,
    validate_queue,
)
from rota.domain.job import (
    MAX_ERROR_LENGTH,
    MAX_TRACEBACK_LENGTH,
    Attempt,
    EnqueueResult,
    Job,
    JobSpec,
    JobState,
    Outcome,
    truncate,
)
from rota.domain.lease import Lease
from rota.domain.schedule import ScheduleSpec
from rota.domain.schedule_state import Firing, Schedule
from rota.store.base import (
    MAX_BULK,
    MAX_PAGE_SIZE,
    Counts,
    JobFilter,
    LimitInfo,
    Page,
    QueueInfo,
    RescueResult,
    ThroughputBucket,
    WorkerInfo,
    bucketize,
    decode_cursor,
    encode_cursor,
)
from rota.store.postgres import schedules
from rota.store.postgres.queries import JOB_COLUMNS, migrations, query

log = logging.getLogger("rota.store.postgres")

Row: TypeAlias = tuple[Any, ...]
#: A statement to run and the rows it returned: the steps of a sans-I/O flow.
Step: TypeAlias = tuple[str, dict[str, Any]]
Flow: TypeAlias = Generator[Step, list[Row], Any]

#: From this many jobs without unique keys, enqueue uses COPY instead of one INSERT.
COPY_THRESHOLD = 2_000
#: How many (tenant, priority) groups one claim walks per queue; more tenants than this are
#: reached over successive claims, each starting after the last tenant served.
MAX_CLAIM_GROUPS = 64
#: Above this many rows, counts() samples terminal states instead of counting every row.
EXACT_COUNT_LIMIT = 200_000
_OUR_PARAMS = {"pool_min", "pool_max", "prepare"}
_MIGRATION_LOCK = 0x726F7461  # "rota": the advisory lock that serialises migrators
_LISTEN_CHANNEL = "rota_jobs"


def row_to_job(row: Row) -> Job:
    """A Job from a row selected with JOB_COLUMNS."""
    timeout_us = row[12]
    return Job(
        id=row[0],
        kind=row[1],
        queue=row[2],
        payload=row[3],
        state=JobState(row[4]),
        priority=row[5],
        run_at=row[6],
        attempt=row[7],
        max_attempts=row[8],
        created_at=row[9],
        tenant=row[10],
        unique_key=row[11],
        timeout=timedelta(microseconds=timeout_us) if timeout_us is not None else None,
        lease_token=row[13],
        lease_until=row[14],
        worker=row[15],
        started_at=row[16],
        finished_at=row[17],
        last_error=row[18],
        schedule=row[19],
        slot_at=row[20],
    )


def _candidate(row: Row) -> Job:
    """A claim candidate with just the fields the budget and the claim order look at."""
    job_id, kind, queue, tenant, priority, run_at, state, attempt, max_attempts, created = row
    return Job(
        id=job_id,
        kind=kind,
        queue=queue,
        payload=None,
        state=JobState(state),
        priority=priority,
        run_at=run_at,
        attempt=attempt,
        max_attempts=max_attempts,
        created_at=created,
        tenant=tenant,
    )


def counted_keys_of(queue: str, kind: str, tenant: str | None) -> list[Key]:
    keys: list[Key] = [(LimitScope.QUEUE, queue), (LimitScope.KIND, kind)]
    if tenant is not None:
        keys.append((LimitScope.TENANT, tenant))
    return keys


def _micros(value: int | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromtimestamp(0, UTC) + timedelta(microseconds=value)


def _spec_key(spec: JobSpec) -> tuple[str | None, str | None, datetime | None]:
    return (spec.unique_key, spec.schedule, spec.slot_at)


def _copy_line(job_id: int, spec: JobSpec, now: datetime, now_text: str) -> str:
    """One row of COPY text for a keyless spec. Names are [A-Za-z0-9_.:-] by validation and
    compact JSON never holds a raw tab or newline, so only the JSON's backslashes need escaping."""
    payload = spec.payload_json.replace("\\", "\\\\")
    tenant = spec.tenant if spec.tenant is not None else _COPY_NULL
    timeout = str(_us(spec.timeout)) if spec.timeout is not None else _COPY_NULL
    due = now_text if spec.run_at is None and spec.delay is None else spec.due_at(now).isoformat()
    fields = (
        str(job_id),
        spec.kind,
        spec.queue,
        payload,
        str(spec.priority),
        due,
        str(spec.max_attempts),
        tenant,
        timeout,
        now_text,
    )
    return "\t".join(fields) + "\n"


_COPY_NULL = "\\N"


def _row_matches_key(row: Row, spec: JobSpec) -> bool:
    """Whether an inserted row (id, run_at, created_at, unique_key, schedule, slot_at) is the
    one ``spec`` asked for."""
    if spec.schedule is not None and spec.slot_at is not None:
        return bool(row[4] == spec.schedule and row[5] == spec.slot_at)
    return bool(row[3] == spec.unique_key)


def _new_job(spec: JobSpec, job_id: int, run_at: datetime, created_at: datetime) -> Job:
    """The job just inserted for ``spec``: everything else is what the spec said."""
    return Job(
        id=job_id,
        kind=spec.kind,
        queue=spec.queue,
        payload=spec.payload,
        state=JobState.PENDING,
        priority=spec.priority,
        run_at=run_at,
        attempt=0,
        max_attempts=spec.max_attempts,
        created_at=created_at,
        tenant=spec.tenant,
        unique_key=spec.unique_key,
        timeout=spec.timeout,
        schedule=spec.schedule,
        slot_at=spec.slot_at,
    )


def _job_matches_key(job: Job, spec: JobSpec) -> bool:
    if spec.schedule is not None and spec.slot_at is not None:
        return job.schedule == spec.schedule and job.slot_at == spec.slot_at
    return job.unique_key == spec.unique_key


def _is_keyed(spec: JobSpec) -> bool:
    return spec.unique_key is not None or (spec.schedule is not None and spec.slot_at is not None)


def enqueue_flow(specs: Sequence[JobSpec], now: datetime | None) -> Flow:
    """The statements of an enqueue, independent of how they are executed.

    A spec not inserted because its key is taken resolves to the job holding the key; if that
    job finished between our insert and our lookup, the spec is inserted again (bounded).
    """
    results: list[EnqueueResult | None] = [None] * len(specs)
    todo = list(range(len(specs)))
    for _ in range(5):
        batch = [specs[i] for i in todo]
        rows = yield query("enqueue"), _enqueue_params(batch, now)
        # Rows come back in insertion order (ids ascending): walk them beside the specs; a
        # keyed spec whose key does not match the next row was a duplicate.
        inserted = iter(sorted(rows))
        row = next(inserted, None)
        duplicates: list[int] = []
        for index in todo:
            spec = specs[index]
            if row is not None and (not _is_keyed(spec) or _row_matches_key(row, spec)):
                job_id, run_at, created_at = row[0], row[1], row[2]
                results[index] = EnqueueResult(_new_job(spec, job_id, run_at, created_at))
                row = next(inserted, None)
            else:
                duplicates.append(index)
        if not duplicates:
            break
        keyed = [specs[i] for i in duplicates]
        rows = yield (
            query("existing_for_keys"),
            {
                "unique_keys": [s.unique_key for s in keyed if s.unique_key is not None],
                "schedules": [s.schedule for s in keyed if s.schedule and s.slot_at],
                "slots": [s.slot_at for s in keyed if s.schedule and s.slot_at],
            },
        )
        holders = [row_to_job(row) for row in rows]
        todo = []
        for index in duplicates:
            spec = specs[index]
            holder = next((job for job in holders if _job_matches_key(job, spec)), None)
            if holder is None:
                todo.append(index)  # the holder finished meanwhile: insert again
            else:
                results[index] = EnqueueResult(holder, duplicate=True)
        if not todo:
            break
    if any(result is None for result in results):
        raise StoreUnavailable("enqueue kept racing with jobs holding the same unique keys")
    return results


def _enqueue_params(specs: Sequence[JobSpec], now: datetime | None) -> dict[str, Any]:
    return {
        "now": now,
        "kind": [s.kind for s in specs],
        "queue": [s.queue for s in specs],
        "payload": [s.payload_json for s in specs],
        "priority": [s.priority for s in specs],
        "run_at": [s.run_at for s in specs],
        "delay_us": [_us(s.delay) if s.delay is not None else 0 for s in specs],
        "max_attempts": [s.max_attempts for s in specs],
        "tenant": [s.tenant for s in specs],
        "unique_key": [s.unique_key for s in specs],
        "timeout_us": [_us(s.timeout) if s.timeout is not None else None for s in specs],
        "schedule": [s.schedule for s in specs],
        "slot_at": [s.slot_at for s in specs],
    }


def _us(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


class PostgresStore:
    """The Store contract on PostgreSQL; see the module docstring."""

    def __init__(
        self,
        conninfo: str,
        *,
        clock: Clock | None = None,
        pool_min: int = 1,
        pool_max: int = 10,
        prepare: bool = True,
    ) -> None:
        self._conninfo = conninfo
        self._clock = clock
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            # None disables server-side prepared statements (PgBouncer in transaction mode).
            "prepare_threshold": 5 if prepare else None,
            **_tcp_defaults(conninfo),
        }
        self._pool = AsyncConnectionPool(
            conninfo,
            min_size=pool_min,
            max_size=pool_max,
            kwargs=self._connect_kwargs,
            open=False,
            # Callers wait this long for a connection during an outage, then get
            # StoreUnavailable (an API answers 503) instead of hanging.
            timeout=10,
            # Keep re-creating connections in the background, with backoff, through long
            # outages; the pool stays usable meanwhile.
            reconnect_timeout=3600,
        )
        self._opened = False
        self._open_lock = asyncio.Lock()
        #: The tenant this store's last fair claim served, where the next one's walk starts.
        self._after = ""

    @classmethod
    def from_url(cls, url: str, *, clock: Clock | None = None) -> PostgresStore:
        """A store for ``postgresql://...``; our own options (pool_min, pool_max, prepare) are
        read from the query string and the rest is passed to libpq."""
        parts = urlsplit(url)
        ours: dict[str, str] = {}
        theirs: list[tuple[str, str]] = []
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            (ours.__setitem__(key, value) if key in _OUR_PARAMS else theirs.append((key, value)))
        conninfo = parts._replace(scheme="postgresql", query=urlencode(theirs)).geturl()
        try:
            pool_min = int(ours.get("pool_min", "1"))
            pool_max = int(ours.get("pool_max", "10"))
        except ValueError:
            raise InvalidInput("pool_min and pool_max must be integers") from None
        if not 0 <= pool_min <= pool_max or pool_max < 1:
            raise InvalidInput("need 0 <= pool_min <= pool_max and pool_max >= 1")
        prepare = ours.get("prepare", "true").lower() not in ("0", "false", "no", "off")
        return cls(conninfo, clock=clock, pool_min=pool_min, pool_max=pool_max, prepare=prepare)

    # ------------------------------------------------------------------ plumbing

    def _now(self, now: datetime | None) -> datetime | None:
        if now is not None:
            return utc(now)
        return self._clock.now() if self._clock is not None else None

    async def _ensure_open(self) -> None:
        if self._opened:
            return
        async with self._open_lock:
            if not self._opened:
                await self._pool.open(wait=False)
                self._opened = True

    @contextlib.asynccontextmanager
    async def _connection(self) -> Any:
        await self._ensure_open()
        try:
            async with self._pool.connection() as conn:
                yield conn
        except psycopg.OperationalError as error:
            raise StoreUnavailable(f"PostgreSQL is unavailable: {error}") from error
        except TimeoutError as error:
            raise StoreUnavailable("no PostgreSQL connection became available") from error

    async def _fetch(self, name: str, params: dict[str, Any]) -> list[Row]:
        async with self._connection() as conn:
            cursor = await conn.execute(query(name), params)
            return await cursor.fetchall() if cursor.description else []

    async def _run_flow(self, flow: Flow) -> Any:
        async with self._connection() as conn, conn.transaction():
            return await _drive_async(conn, flow)

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
                await conn.execute(text)
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
        if self._opened:
            await self._pool.close()
            self._opened = False

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
        if any(_is_keyed(spec) for spec in specs):
            # Duplicates are looked up and raced inserts retried: one transaction for all.
            results: list[EnqueueResult] = await self._run_flow(enqueue_flow(specs, at))
            return results
        if len(specs) >= COPY_THRESHOLD:
            return await self._copy(specs, at)
        # Nothing can conflict: one INSERT statement is atomic on its own (one round trip).
        async with self._connection() as conn:
            plain: list[EnqueueResult] = await _drive_async(conn, enqueue_flow(specs, at))
        return plain

    async def _copy(self, specs: Sequence[JobSpec], now: datetime | None) -> list[EnqueueResult]:
        """A large keyless batch by COPY: ids are reserved first, so every job is known."""
        async with self._connection() as conn, conn.transaction():
            cursor = await conn.execute(query("reserve_ids"), {"now": now, "count": len(specs)})
            row = await cursor.fetchone()
            assert row is not None
            at, ids = row
            at_text = at.isoformat()
            async with cursor.copy(query("copy_jobs")) as copy:
                for start in range(0, len(specs), 5_000):
                    chunk = zip(
                        ids[start : start + 5_000], specs[start : start + 5_000], strict=True
                    )
                    lines = (_copy_line(i, spec, at, at_text) for i, spec in chunk)
                    await copy.write("".join(lines))
        return [
            EnqueueResult(_new_job(spec, job_id, spec.due_at(at), at))
            for job_id, spec in zip(ids, specs, strict=True)
        ]

    async def enqueue_on(
        self, connection: psycopg.AsyncConnection[Any], specs: Sequence[JobSpec]
    ) -> list[EnqueueResult]:
        """Enqueue on the caller's own connection, inside whatever transaction it has open:
        the jobs exist only if and when that transaction commits."""
        if not specs:
            return []
        flow = enqueue_flow(specs, self._now(None))
        if connection.autocommit:
            # No transaction of the caller's to join: the batch is atomic on its own.
            async with connection.transaction():
                results: list[EnqueueResult] = await _drive_async(connection, flow)
            return results
        # Join the caller's transaction. psycopg opens one implicitly on the first statement
        # if none is open; transaction() here would instead commit on exit.
        joined: list[EnqueueResult] = await _drive_async(connection, flow)
        return joined

    def enqueue_on_sync(
        self, connection: psycopg.Connection[Any], specs: Sequence[JobSpec]
    ) -> list[EnqueueResult]:
        """``enqueue_on`` for a synchronous psycopg connection (Django, Flask)."""
        if not specs:
            return []
        flow = enqueue_flow(specs, self._now(None))
        if connection.autocommit:
            with connection.transaction():
                results: list[EnqueueResult] = _drive_sync(connection, flow)
            return results
        joined: list[EnqueueResult] = _drive_sync(connection, flow)
        return joined

    # ------------------------------------------------------------------ claim and leases

    async def claim(
        self,
        worker: str,
        *,
        queues: Sequence[str],
        limit: int,
        lease: timedelta,
        fair: bool = True,
        now: datetime | None = None,
    ) -> list[Job]:
        if limit <= 0 or not queues:
            return []
        params = {
            "now": self._now(now),
            "queues": list(queues),
            "take": limit,
            "lease": lease,
            "worker": worker,
            "fair": fair,
            "after": self._after,
            "max_groups": MAX_CLAIM_GROUPS,
            "blocked_kinds": [],
            "blocked_tenants": [],
            "limited": False,
        }
        rows = await self._fetch("claim", params)
        if rows and rows[-1][0] is None:  # a limit exists: claim under its budget instead
            jobs = await self._claim_limited(params, limit)
        else:
            jobs = [row_to_job(row) for row in rows]
        if jobs and fair:
            # The next claim's walk over tenants starts after the last tenant served here.
            self._after = max(job.tenant or "" for job in jobs)
        jobs.sort(key=claim_order)
        return jobs

    async def _claim_limited(self, params: dict[str, Any], limit: int) -> list[Job]:
        """Claim under the limits' budget, in one transaction that holds every limit row's
        lock, so concurrent limited claims run one after another and none overshoots."""
        async with self._connection() as conn, conn.transaction():
            limits = {
                (LimitScope(scope), key): Limit(
                    LimitScope(scope),
                    key,
                    concurrency,
                    rate,
                    timedelta(microseconds=period_us) if period_us else None,
                )
                for scope, key, concurrency, rate, period_us in await (
                    await conn.execute(query("lock_limits"))
                ).fetchall()
            }
            [(at,)] = await (await conn.execute(query("now"), params)).fetchall()
            running: dict[Key, int] = {}
            for queue, kind, tenant, count in await (
                await conn.execute(query("running_counts"), params)
            ).fetchall():
                for key in counted_keys_of(queue, kind, tenant):
                    running[key] = running.get(key, 0) + count
            periods = [lim.period for lim in limits.values() if lim.period is not None]
            starts: dict[Key, list[datetime]] = {}
            if periods:
                rows = await (
                    await conn.execute(query("recent_starts"), {**params, "period": max(periods)})
                ).fetchall()
                starts = {(LimitScope(scope), key): list(at_) for scope, key, at_ in rows}
            budget = Budget(limits, running, starts, at)
            full = budget.exhausted()
            queues = [q for q in params["queues"] if (LimitScope.QUEUE, q) not in full]
            candidates = await (
                await conn.execute(
                    query("claim_candidates"),
                    {
                        **params,
                        "queues": queues,
                        "take": min(4 * limit, 1000),
                        "limited": True,
                        "blocked_kinds": [k for s, k in full if s is LimitScope.KIND],
                        "blocked_tenants": [k for s, k in full if s is LimitScope.TENANT],
                    },
                )
            ).fetchall()
            chosen = select(
                (_candidate(row) for row in candidates),
                limit=limit,
                budget=budget,
                fair=params["fair"],
            )
            if not chosen:
                return []
            rows = await (
                await conn.execute(
                    query("claim_ids"), {**params, "ids": [job.id for job in chosen]}
                )
            ).fetchall()
            if budget.started:
                tally = Counter(budget.started)
                await conn.execute(
                    query("record_starts"),
                    {
                        "now": params["now"],
                        "scopes": [scope.value for scope, _ in tally],
                        "keys": [key for _, key in tally],
                        "counts": list(tally.values()),
                    },
                )
        return [row_to_job(row) for row in rows]

    async def heartbeat(
        self, leases: Sequence[Lease], *, lease: timedelta, now: datetime | None = None
    ) -> list[Lease]:
        if not leases:
            return []
        rows = await self._fetch(
            "heartbeat",
            {
                "now": self._now(now),
                "lease": lease,
                "ids": [held.job_id for held in leases],
                "tokens": [held.token for held in leases],
            },
        )
        kept = {row[0] for row in rows}
        return [held for held in leases if held.job_id not in kept]

    async def complete(self, lease: Lease, *, now: datetime | None = None) -> None:
        if await self.complete_many([lease], now=now):
            raise LeaseLost(lease.job_id, lease.token)

    async def complete_many(
        self, leases: Sequence[Lease], *, now: datetime | None = None
    ) -> list[Lease]:
        if not leases:
            return []
        rows = await self._fetch(
            "complete",
            {
                "now": self._now(now),
                "ids": [held.job_id for held in leases],
                "tokens": [held.token for held in leases],
            },
        )
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
        rows = await self._fetch(
            "fail",
            {
                "now": self._now(now),
                "id": lease.job_id,
                "token": lease.token,
                "error": truncate(error, MAX_ERROR_LENGTH),
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
        raise await self._conflict(job_id, "only dead or cancelled jobs retry")

    async def cancel(self, job_id: int, *, now: datetime | None = None) -> Job:
        rows = await self._fetch("cancel", {"now": self._now(now), "ids": [job_id]})
        if rows:
            return row_to_job(rows[0])
        raise await self._conflict(job_id, "it is already finished")

    async def _conflict(self, job_id: int, why: str) -> Exception:
        rows = await self._fetch("state_of", {"id": job_id})
        if not rows:
            return JobNotFound(job_id)
        return StateConflict(f"job {job_id} is {rows[0][0]}; {why}")

    async def bulk_retry(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        ids = await self._matching_ids(filter, ("dead", "cancelled"), limit)
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
        ids = await self._matching_ids(filter, ("pending", "running"), limit)
        if not ids:
            return 0
        return len(await self._fetch("cancel", {"now": self._now(None), "ids": ids}))

    async def _matching_ids(
        self, filter: JobFilter, allowed: tuple[str, ...], limit: int
    ) -> list[int]:
        states = set(allowed)
        if filter.states is not None:
            states &= {state.value for state in filter.states}
        if not states:
            return []
        where, params = _where(filter, states_override=sorted(states))
        statement = sql.SQL("SELECT id FROM rota_jobs WHERE {} ORDER BY id LIMIT {}").format(
            where, sql.Literal(max(0, min(limit, MAX_BULK)))
        )
        async with self._connection() as conn:
            rows = await (await conn.execute(statement, params)).fetchall()
        return [row[0] for row in rows]

    # ------------------------------------------------------------------ queries

    async def get(self, job_id: int) -> Job:
        rows = await self._fetch("get", {"id": job_id})
        if not rows:
            raise JobNotFound(job_id)
        return row_to_job(rows[0])

    async def list_jobs(
        self, filter: JobFilter, *, cursor: str | None = None, limit: int = 50
    ) -> Page:
        limit = max(1, min(limit, MAX_PAGE_SIZE))
        where, params = _where(filter)
        if cursor is not None:
            params["after"] = decode_cursor(cursor)
            where = sql.SQL("{} AND id < %(after)s").format(where)
        statement = sql.SQL(
            "SELECT " + JOB_COLUMNS + " FROM rota_jobs WHERE {} ORDER BY id DESC LIMIT {}"
        ).format(where, sql.Literal(limit + 1))
        async with self._connection() as conn:
            rows = await (await conn.execute(statement, params)).fetchall()
        jobs = [row_to_job(row) for row in rows[:limit]]
        more = len(rows) > limit
        return Page(jobs, encode_cursor(jobs[-1].id) if more else None)

    async def counts(self, *, now: datetime | None = None) -> Counts:
        at = self._now(now)
        async with self._connection() as conn:
            size = (await (await conn.execute(query("table_size_estimate"))).fetchone() or (0,))[0]
            exact = size < EXACT_COUNT_LIMIT
            if exact:
                rows = await (await conn.execute(query("counts_exact"))).fetchall()
            else:
                rows = await (await conn.execute(query("counts_active"))).fetchall()
                # Sample about 50,000 rows' worth of blocks, then scale to the whole table.
                percent = min(100.0, 100.0 * 50_000 / size)
                sampled = await (
                    await conn.execute(query("counts_sampled"), {"percent": percent})
                ).fetchall()
                rows += [(q, s, round(n * 100.0 / percent)) for q, s, n in sampled]
            oldest_row = await (await conn.execute(query("oldest_due"), {"now": at})).fetchone()
        by_state = dict.fromkeys(JobState, 0)
        by_queue: dict[str, dict[JobState, int]] = {}
        for queue, state, count in rows:
            job_state = JobState(state)
            by_state[job_state] += count
            by_queue.setdefault(queue, dict.fromkeys(JobState, 0))[job_state] += count
        return Counts(
            by_state=by_state,
            by_queue=by_queue,
            oldest_due_at=oldest_row[0] if oldest_row else None,
            exact=exact,
        )

    async def count_jobs(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        where, params = _where(filter)
        params["limit"] = max(0, limit)
        statement = sql.SQL(query("count_jobs")).format(where=where)
        async with self._connection() as conn:
            row = await (await conn.execute(statement, params)).fetchone()
        return int(row[0]) if row else 0

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

    async def attempts(self, job_id: int) -> list[Attempt]:
        rows = await self._fetch("attempts", {"id": job_id})
        if not rows:
            raise JobNotFound(job_id)
        state, attempt, token, worker, started_at, finished_at, history = rows[0]
        records = [
            Attempt(
                attempt=entry["attempt"],
                token=entry["token"],
                worker=entry.get("worker"),
                started_at=_micros(entry.get("started_us")) or datetime.fromtimestamp(0, UTC),
                finished_at=_micros(entry.get("finished_us")),
                outcome=Outcome(entry["outcome"]),
                error=entry.get("error"),
                traceback=entry.get("traceback"),
            )
            for entry in (history or [])
        ]
        if state in ("running", "succeeded") and token is not None:
            outcome = Outcome.RUNNING if state == "running" else Outcome.SUCCEEDED
            end = finished_at if state == "succeeded" else None
            records.append(Attempt(attempt, token, worker, started_at, end, outcome))
        return records

    # ------------------------------------------------------------------ maintenance

    async def rescue(self, *, now: datetime | None = None, limit: int = 1000) -> RescueResult:
        rows = await self._fetch("rescue", {"now": self._now(now), "limit": limit})
        dead = sorted(job_id for job_id, state in rows if state == "dead")
        requeued = sorted(job_id for job_id, state in rows if state == "pending")
        return RescueResult(dead=dead, requeued=requeued)

    async def prune(self, *, older_than: datetime, limit: int = 10_000) -> int:
        async with self._connection() as conn:
            cursor = await conn.execute(
                query("prune"), {"older_than": utc(older_than), "limit": limit}
            )
            return int(cursor.rowcount)

    # ------------------------------------------------------------------ workers registry

    async def register_worker(self, info: WorkerInfo, *, now: datetime | None = None) -> None:
        await self._fetch(
            "register_worker",
            {
                "now": self._now(now),
                "name": info.name,
                "host": info.host,
                "pid": info.pid,
                "queues": list(info.queues),
                "concurrency": info.concurrency,
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
            )
            for name, host, pid, queues, concurrency, started_at, beat_at, running in rows
        ]

    async def prune_workers(self, *, older_than: datetime) -> int:
        async with self._connection() as conn:
            cursor = await conn.execute(query("prune_workers"), {"older_than": utc(older_than)})
            return int(cursor.rowcount)

    # ------------------------------------------------------------------ schedules

    async def create_schedule(self, spec: ScheduleSpec, *, now: datetime | None = None) -> Schedule:
        schedule: Schedule = await self._run_flow(
            schedules.upsert_flow(spec, self._now(now), create_only=True)
        )
        return schedule

    async def upsert_schedule(self, spec: ScheduleSpec, *, now: datetime | None = None) -> Schedule:
        schedule: Schedule = await self._run_flow(
            schedules.upsert_flow(spec, self._now(now), create_only=False)
        )
        return schedule

    async def get_schedule(self, name: str) -> Schedule:
        rows = await self._fetch("get_schedule", {"name": name})
        if not rows:
            raise ScheduleNotFound(name)
        return schedules.row_to_schedule(rows[0])

    async def list_schedules(self) -> list[Schedule]:
        return [schedules.row_to_schedule(row) for row in await self._fetch("list_schedules", {})]

    async def pause_schedule(self, name: str, *, now: datetime | None = None) -> Schedule:
        return await self._set_paused(name, True, now)

    async def resume_schedule(self, name: str, *, now: datetime | None = None) -> Schedule:
        return await self._set_paused(name, False, now)

    async def _set_paused(self, name: str, paused: bool, now: datetime | None) -> Schedule:
        rows = await self._fetch(
            "set_schedule_paused", {"name": name, "paused": paused, "now": self._now(now)}
        )
        if not rows:
            raise ScheduleNotFound(name)
        return schedules.row_to_schedule(rows[0])

    async def delete_schedule(self, name: str) -> None:
        if not await self._fetch("delete_schedule", {"name": name}):
            raise ScheduleNotFound(name)

    async def trigger_schedule(self, name: str, *, now: datetime | None = None) -> EnqueueResult:
        result: EnqueueResult = await self._run_flow(
            schedules.trigger_flow(name, self._now(now), enqueue_flow)
        )
        return result

    async def fire_due(self, *, now: datetime | None = None, limit: int = 100) -> list[Firing]:
        firings: list[Firing] = await self._run_flow(
            schedules.fire_flow(self._now(now), limit, enqueue_flow)
        )
        return firings

    async def next_fire_at(self) -> datetime | None:
        [(due,)] = await self._fetch("next_fire_at", {})
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
                "period_us": _us(limit.period) if limit.period is not None else None,
            },
        )

    async def delete_limit(self, scope: LimitScope, key: str) -> bool:
        rows = await self._fetch("delete_limit", {"scope": LimitScope(scope).value, "key": key})
        return bool(rows)

    async def list_limits(self, *, now: datetime | None = None) -> list[LimitInfo]:
        params = {"now": self._now(now)}
        async with self._connection() as conn:
            rows = await (await conn.execute(query("list_limits"))).fetchall()
            running_rows = await (await conn.execute(query("running_counts"), params)).fetchall()
            start_rows = await (await conn.execute(query("all_starts"))).fetchall()
            [(at,)] = await (await conn.execute(query("now"), params)).fetchall()
        running: dict[Key, int] = {}
        for queue, kind, tenant, count in running_rows:
            for scope, name in counted_keys_of(queue, kind, tenant):
                for key in ((scope, name), (scope, EVERY_TENANT)):
                    running[key] = running.get(key, 0) + count
        infos = []
        for scope, key, concurrency, rate, period_us in rows:
            period = timedelta(microseconds=period_us) if period_us else None
            limit = Limit(LimitScope(scope), key, concurrency, rate, period)
            recent = 0
            if period is not None:
                recent = sum(
                    1
                    for start_scope, start_key, starts in start_rows
                    if start_scope == scope and (start_key == key or key == EVERY_TENANT)
                    for instant in starts
                    if instant > at - period
                )
            infos.append(LimitInfo(limit, running.get(limit.ident, 0), recent))
        return infos

    async def running_by_tenant(self, *, now: datetime | None = None) -> dict[str, int]:
        rows = await self._fetch("running_by_tenant", {"now": self._now(now)})
        return {tenant: int(count) for tenant, count in rows}

    # ------------------------------------------------------------------ wake-ups

    async def watch(
        self, on_due: Callable[[datetime | None], None], *, check_every_s: float = 5.0
    ) -> None:
        """LISTEN for new jobs on a dedicated connection until cancelled.

        Calls ``on_due(run_at)`` for each notification (the earliest run_at of the jobs it
        announces), and ``on_due(None)`` after every (re)connect, since jobs may have arrived
        while nobody listened. A connection that stops answering a periodic
        probe is treated as dead (half-open TCP); reconnects back off up to 5 s with jitter.
        """
        delay = 0.1
        failures = 0
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._conninfo,
                    autocommit=True,
                    connect_timeout=10,
                    **_tcp_defaults(self._conninfo),
                )
            except (psycopg.Error, OSError) as error:
                # One warning per outage; the retries go to debug.
                failures += 1
                level = logging.WARNING if failures == 1 else logging.DEBUG
                log.log(level, "listener cannot connect, retrying: %s", error)
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 5.0)
                continue
            try:
                async with conn:
                    await conn.execute(f"LISTEN {_LISTEN_CHANNEL}")
                    if failures:
                        log.info("listener reconnected after %d failed attempt(s)", failures)
                    delay, failures = 0.1, 0
                    on_due(None)
                    while True:
                        async for notice in conn.notifies(timeout=check_every_s):
                            on_due(_due_at(notice.payload))
                        await _probe(conn, timeout_s=min(3.0, check_every_s))
            except (psycopg.Error, OSError, TimeoutError) as error:
                failures += 1
                log.warning("listener connection lost, reconnecting: %s", error)
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 5.0)


async def _probe(conn: psycopg.AsyncConnection[Any], *, timeout_s: float) -> None:
    """A round trip on the listener's connection, or TimeoutError. On a half-open socket the
    query never answers, and cancelling it would wait for the server again: stop waiting at
    once and let the connection be closed."""
    probe = asyncio.ensure_future(conn.execute("SELECT 1"))
    done, _ = await asyncio.wait({probe}, timeout=timeout_s)
    if not done:
        probe.cancel()
        probe.add_done_callback(lambda task: task.cancelled() or task.exception())
        raise TimeoutError(f"the listener's connection did not answer within {timeout_s:g}s")
    probe.result()


def _tcp_defaults(conninfo: str) -> dict[str, Any]:
    """TCP keepalives and a user timeout, unless the URL sets them: a peer that vanished
    (a partition, a half-open connection) is noticed in seconds, not TCP's minutes."""
    defaults = {
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 3,
        "keepalives_count": 3,
        "tcp_user_timeout": 20_000,
    }
    given = conninfo_to_dict(conninfo)
    return {key: value for key, value in defaults.items() if key not in given}


def _due_at(payload: str) -> datetime | None:
    """The run_at announced by a notification ("<queue> <epoch us>"); None if unreadable."""
    _, _, micros = payload.rpartition(" ")
    return _micros(int(micros)) if micros.isdigit() else None


def _where(
    filter: JobFilter, *, states_override: Iterable[str] | None = None
) -> tuple[sql.Composable, dict[str, Any]]:
    """A WHERE clause for ``filter``, from fixed fragments and parameters only."""
    clauses: list[sql.Composable] = [sql.SQL("TRUE")]
    params: dict[str, Any] = {}
    states = (
        list(states_override)
        if states_override is not None
        else (sorted(s.value for s in filter.states) if filter.states is not None else None)
    )
    if states is not None:
        clauses.append(sql.SQL("state = ANY(%(states)s::text[])"))
        params["states"] = states
    for column in ("kind", "queue", "tenant", "schedule"):
        value = getattr(filter, column)
        if value is not None:
            clauses.append(sql.SQL("{} = %({})s").format(sql.Identifier(column), sql.SQL(column)))
            params[column] = value
    if filter.search is not None:
        if filter.search_id is not None:
            clauses.append(sql.SQL("(id = %(search_id)s OR unique_key = %(search)s)"))
            params["search_id"] = filter.search_id
        else:
            clauses.append(sql.SQL("unique_key = %(search)s"))
        params["search"] = filter.search
    return sql.SQL(" AND ").join(clauses), params


async def _drive_async(conn: psycopg.AsyncConnection[TupleRow], flow: Flow) -> Any:
    try:
        statement, params = next(flow)
        while True:
            cursor = await conn.execute(statement, params)
            rows = await cursor.fetchall() if cursor.description else []
            statement, params = flow.send(rows)
    except StopIteration as done:
        return done.value


def _drive_sync(conn: psycopg.Connection[Any], flow: Flow) -> Any:
    try:
        statement, params = next(flow)
        while True:
            cursor = conn.execute(statement, params)
            rows = cursor.fetchall() if cursor.description else []
            statement, params = flow.send(rows)
    except StopIteration as done:
        return done.value
