"""The durable verbs on PostgreSQL (store/durable.py), from durable.sql.

A checkpoint is one statement (one round trip, one commit) that locks the job's row under its
token and inserts the record. Sleeps and waits are one short transaction each, starting with
that lock (a wait with the key's advisory lock before it, as a signal takes it: key, then
job, in both). ``effects`` hands the handler a pooled connection in a transaction of its
own; its commit locks the job's row under the token inside that transaction, so a stale
worker's whole transaction rolls back with LeaseLost.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.pq import TransactionStatus

from rota.domain.durable import SignalResult, Step, StepKind, StepState, WaitOutcome
from rota.domain.errors import LeaseLost, StoreUnavailable
from rota.domain.job import MAX_ERROR_LENGTH, MAX_TRACEBACK_LENGTH
from rota.domain.job_state import Outcome
from rota.domain.lease import Lease
from rota.domain.payload import decode_json, truncate
from rota.store.durable import Effects
from rota.store.postgres.connect import Borrowed, PoolConnection
from rota.store.postgres.moved import again_if_moved
from rota.store.postgres.queries import query
from rota.store.postgres.rows import Row, completion

#: How many waits a signal tries in turn when the first it found stopped waiting meanwhile.
_DELIVERY_TRIES = 3


def _step(row: Row) -> Step:
    job_id, name, kind, state, seq, attempts, result, error, started, finished, wake, key, token = (
        row
    )
    return Step(
        job_id,
        name,
        StepKind(kind),
        StepState(state),
        seq,
        attempts=attempts,
        result=result,
        error=error,
        started_at=started,
        finished_at=finished,
        wake_at=wake,
        key=key,
        token=token,
    )


def _text(value: str | None) -> Any:
    return None if value is None else decode_json(value)


class PostgresDurable:
    """The durable verbs of ``PostgresStore`` (which provides what is declared here)."""

    if TYPE_CHECKING:

        def _now(self, now: datetime | None) -> datetime | None: ...
        def _connection(self, prefer: PoolConnection | None = None) -> Borrowed: ...
        async def _fetch(self, name: str, params: dict[str, Any]) -> list[Row]: ...

    async def steps(self, job_id: int) -> list[Step]:
        return [_step(row) for row in await self._fetch("steps", {"id": job_id})]

    async def checkpoint(
        self,
        lease: Lease,
        name: str,
        *,
        result: str | None,
        duration: timedelta = timedelta(0),
        now: datetime | None = None,
    ) -> None:
        [(held,)] = await self._fetch(
            "checkpoint",
            {
                "now": self._now(now),
                "id": lease.job_id,
                "token": lease.token,
                "name": name,
                "result": result,
                "duration": duration,
            },
        )
        if not held:
            raise LeaseLost(lease.job_id, lease.token)

    async def fail_step(
        self,
        lease: Lease,
        name: str,
        *,
        error: str,
        traceback: str | None = None,
        duration: timedelta = timedelta(0),
        retry_in: timedelta | None = None,
        now: datetime | None = None,
    ) -> None:
        [(held,)] = await self._fetch(
            "fail_step",
            {
                "now": self._now(now),
                "id": lease.job_id,
                "token": lease.token,
                "name": name,
                "error": truncate(error, MAX_ERROR_LENGTH),
                "traceback": truncate(traceback, MAX_TRACEBACK_LENGTH),
                "duration": duration,
                "retry_in": retry_in,
            },
        )
        if not held:
            raise LeaseLost(lease.job_id, lease.token)

    async def _in_transaction(self, body: Callable[[PoolConnection], Awaitable[Any]]) -> Any:
        """``body(conn)`` in one transaction, run again if it met a job moved meanwhile."""
        async with self._connection() as conn:

            async def run() -> Any:
                async with conn.transaction():
                    return await body(conn)

            return await again_if_moved(run)

    async def _hold(
        self, conn: PoolConnection, lease: Lease, name: str, now: datetime | None
    ) -> tuple[datetime, str | None, datetime | None, str | None]:
        """Lock the job's row under the token: the store's now, and the record's state, wake
        time and result (JSON text) so far. LeaseLost when the lease is lost."""
        rows = await conn.run(
            query("hold_step"),
            {"now": self._now(now), "id": lease.job_id, "token": lease.token, "name": name},
        )
        if not rows:
            raise LeaseLost(lease.job_id, lease.token)
        at, state, wake, result = rows[0]
        return at, state, wake, result

    async def _record(
        self,
        conn: PoolConnection,
        lease: Lease,
        name: str,
        kind: StepKind,
        state: StepState,
        at: datetime,
        *,
        wake: datetime | None,
        result: str | None = None,
        finished: bool = False,
        key: str | None = None,
    ) -> None:
        await conn.run(
            query("record_step"),
            {
                "id": lease.job_id,
                "name": name,
                "kind": kind.value,
                "state": state.value,
                "result": result,
                "token": lease.token,
                "at": at,
                "finished": at if finished else None,
                "wake": wake,
                "key": key,
            },
        )

    async def _suspend(
        self, conn: PoolConnection, lease: Lease, at: datetime, until: datetime, outcome: Outcome
    ) -> None:
        rows = await conn.run(
            query("give_back"),
            {
                "now": at,
                "id": lease.job_id,
                "token": lease.token,
                "delay": until - at,
                "outcome": outcome.value,
            },
        )
        if not rows:
            raise LeaseLost(lease.job_id, lease.token)

    async def sleep(
        self,
        lease: Lease,
        name: str,
        *,
        until: datetime | None = None,
        delay: timedelta | None = None,
        now: datetime | None = None,
    ) -> datetime | None:
        async def body(conn: PoolConnection) -> datetime | None:
            at, state, wake, _ = await self._hold(conn, lease, name, now)
            if state == StepState.SLEPT:
                return None
            if wake is None:
                wake = until if until is not None else at + (delay or timedelta(0))
            if wake <= at:
                await self._record(
                    conn, lease, name, StepKind.SLEEP, StepState.SLEPT, at, wake=wake, finished=True
                )
                return None
            await self._record(conn, lease, name, StepKind.SLEEP, StepState.SLEEPING, at, wake=wake)
            await self._suspend(conn, lease, at, wake, Outcome.SLEPT)
            return wake

        wake: datetime | None = await self._in_transaction(body)
        return wake

    async def wait_for(
        self,
        lease: Lease,
        name: str,
        key: str,
        *,
        timeout: timedelta,  # noqa: ASYNC109 (the wait's deadline, not ours)
        now: datetime | None = None,
    ) -> WaitOutcome:
        async def body(conn: PoolConnection) -> WaitOutcome:
            await conn.run(query("lock_signal_key"), {"key": key})
            at, state, deadline, result = await self._hold(conn, lease, name, now)
            if state == StepState.RECEIVED:
                return WaitOutcome(StepState.RECEIVED, _text(result))
            if state == StepState.TIMED_OUT:
                return WaitOutcome(StepState.TIMED_OUT)
            if deadline is None:
                deadline = at + timeout
            wait: dict[str, Any] = {"wake": deadline, "key": key}
            taken = await conn.run(query("take_signal"), {"key": key, "at": at})
            if taken:
                [(data,)] = taken
                await self._record(
                    conn,
                    lease,
                    name,
                    StepKind.WAIT,
                    StepState.RECEIVED,
                    at,
                    result=data,
                    finished=True,
                    **wait,
                )
                return WaitOutcome(StepState.RECEIVED, _text(data))
            if deadline <= at:
                await self._record(
                    conn, lease, name, StepKind.WAIT, StepState.TIMED_OUT, at, finished=True, **wait
                )
                return WaitOutcome(StepState.TIMED_OUT)
            await self._record(conn, lease, name, StepKind.WAIT, StepState.WAITING, at, **wait)
            await self._suspend(conn, lease, at, deadline, Outcome.WAITED)
            return WaitOutcome(StepState.WAITING, deadline=deadline)

        outcome: WaitOutcome = await self._in_transaction(body)
        return outcome

    async def signal(
        self,
        key: str,
        data: str | None,
        *,
        expire_after: timedelta,
        now: datetime | None = None,
    ) -> SignalResult:
        at = self._now(now)

        async def body(conn: PoolConnection) -> SignalResult:
            await conn.run(query("lock_signal_key"), {"key": key})
            for _ in range(_DELIVERY_TRIES):
                found = await conn.run(query("first_wait"), {"key": key})
                if not found:
                    break
                [(job_id, name)] = found
                delivered = await conn.run(
                    query("deliver_signal"),
                    {"now": at, "id": job_id, "name": name, "data": data},
                )
                if delivered:
                    await conn.run(query("wake_waiting"), {"now": at, "id": job_id})
                    return SignalResult(key, delivered_to=job_id)
            [(expires_at,)] = await conn.run(
                query("keep_signal"),
                {"now": at, "key": key, "data": data, "expire_after": expire_after},
            )
            return SignalResult(key, expires_at=expires_at)

        result: SignalResult = await self._in_transaction(body)
        return result

    async def prune_durable(self, *, older_than: datetime, now: datetime | None = None) -> int:
        [(gone,)] = await self._fetch(
            "prune_durable", {"now": self._now(now), "older_than": older_than, "limit": 10_000}
        )
        return int(gone)

    def effects(
        self, lease: Lease, *, idle_timeout: timedelta | None = None
    ) -> AbstractAsyncContextManager[Effects]:
        return self._effects(lease, idle_timeout)

    @asynccontextmanager
    async def _effects(
        self, lease: Lease, idle_timeout: timedelta | None
    ) -> AsyncIterator[Effects]:
        async with self._connection() as conn:
            await conn.execute("BEGIN")
            opened = PostgresEffects(conn, lease, self)
            try:
                if idle_timeout is not None:
                    # A worker stopped inside the transaction (a pause, a partition) holds
                    # its locks no longer than its lease: the server ends it then.
                    millis = max(1, int(idle_timeout.total_seconds() * 1000))
                    await conn.execute(
                        "SELECT set_config('idle_in_transaction_session_timeout', %s, true)",
                        [f"{millis}ms"],
                    )
                yield opened
            finally:
                if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
                    with contextlib.suppress(psycopg.Error):
                        await conn.rollback()


class PostgresEffects:
    """An effects transaction on PostgreSQL (store/durable.py ``Effects``)."""

    def __init__(self, conn: PoolConnection, lease: Lease, store: PostgresDurable) -> None:
        self._conn = conn
        self._lease = lease
        self._store = store

    @property
    def connection(self) -> psycopg.AsyncConnection[Any]:
        return self._conn

    async def _commit(self, name: str, params: dict[str, Any], held: Callable[[Row], bool]) -> None:
        conn = self._conn
        lease = self._lease
        if conn.info.transaction_status != TransactionStatus.INTRANS:
            raise StoreUnavailable(
                "the handler ended ctx.transaction()'s transaction itself: nothing was "
                "checkpointed (do not commit or roll it back inside the block)"
            )
        try:
            rows = await conn.run(query(name), params)
            if not rows or not held(rows[0]):
                await conn.rollback()
                raise LeaseLost(lease.job_id, lease.token)
            await conn.commit()
        except psycopg.errors.SerializationFailure:
            # The job's row moved to a finished table while we waited for it: not ours.
            with contextlib.suppress(psycopg.Error):
                await conn.rollback()
            raise LeaseLost(lease.job_id, lease.token) from None
        except psycopg.OperationalError as error:
            # The connection went (the server ended an idle transaction past the lease, or
            # the network): nothing of it committed unless the answer alone was lost. Say
            # LeaseLost when another holds the job now, StoreUnavailable otherwise.
            if not await self._still_held():
                raise LeaseLost(lease.job_id, lease.token) from error
            raise StoreUnavailable(f"PostgreSQL is unavailable: {error}") from error

    async def _still_held(self) -> bool:
        try:
            rows = await self._store._fetch(
                "held", {"id": self._lease.job_id, "token": self._lease.token}
            )
        except StoreUnavailable:
            return True  # cannot tell: say what we know, the store is unavailable
        return bool(rows)

    async def commit_step(
        self, name: str, *, result: str | None, duration: timedelta, now: datetime | None = None
    ) -> None:
        await self._commit(
            "checkpoint",
            {
                "now": self._store._now(now),
                "id": self._lease.job_id,
                "token": self._lease.token,
                "name": name,
                "result": result,
                "duration": duration,
            },
            lambda row: bool(row[0]),
        )

    async def commit_completion(self, *, result: str | None, now: datetime | None = None) -> None:
        name, params = completion(
            [self._lease.job_id], [self._lease.token], [result], self._store._now(now)
        )
        await self._commit(name, params, lambda row: row[0] == self._lease.job_id)
