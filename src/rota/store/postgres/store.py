"""PostgresStore: the Store contract on PostgreSQL with psycopg 3 and an async pool.

Each verb is one statement (or one short transaction) from queries.sql. Connections are
autocommit and carry no session state (advisory locks are transaction-level only; behind a
transaction pooler no statement is prepared and LISTEN goes to a direct connection or is
replaced by polling), so PgBouncer in transaction mode works. Connections: connect.py.

This module holds the plumbing, enqueue, claim and wake-ups; the other verbs are mixed in
by concept from leases.py, operate.py, reads.py, maintain.py, registry.py and control.py
(part.py), and the durable verbs from durable.py.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg

from rota.domain.clock import Clock, utc
from rota.domain.errors import (
    StoreUnavailable,
)
from rota.domain.flow import (
    claim_order,
)
from rota.domain.job import (
    EnqueueResult,
    Job,
    JobSpec,
)
from rota.domain.workflow import Workflow
from rota.store.postgres.connect import Borrowed, Connections, PoolConnection
from rota.store.postgres.control import PostgresControl
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
from rota.store.postgres.leases import PostgresLeases
from rota.store.postgres.limits import claim_limited
from rota.store.postgres.listen import SCHEDULES_CHANNEL, listen
from rota.store.postgres.maintain import PostgresMaintenance
from rota.store.postgres.moved import again_if_moved
from rota.store.postgres.operate import PostgresOperate
from rota.store.postgres.queries import CROWDED_MARKER, EXPIRED_MARKER, ROUTINES, migrations, query
from rota.store.postgres.reads import PostgresReads
from rota.store.postgres.registry import PostgresRegistry
from rota.store.postgres.rows import Row, row_to_job
from rota.store.postgres.urls import url_settings
from rota.store.postgres.workflows import enqueue_workflow_flow

log = logging.getLogger("rota.store.postgres")

_PLAIN = query("enqueue_plain")


#: How many (tenant, priority) groups one claim walks per queue at least; a claim of more jobs
#: walks as many groups as it asks for jobs, so a batch fills one job per tenant where each
#: tenant holds few. More tenants than that are reached over successive claims, each starting
#: after the last tenant served.
MAX_CLAIM_GROUPS = 64
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


class PostgresStore(
    PostgresLeases,
    PostgresOperate,
    PostgresReads,
    PostgresMaintenance,
    PostgresRegistry,
    PostgresControl,
    PostgresDurable,
):
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

    # ------------------------------------------------------------------ claim

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


def _marked(rows: Sequence[Row], state: str) -> bool:
    """Whether a claim function's rows hold its marker row of ``state`` (queries.EXPIRED_MARKER,
    queries.CROWDED_MARKER): NULLs but for the state."""
    return any(row[0] is None and row[4] == state for row in rows)
