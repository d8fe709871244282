"""The durable verbs on SQLite (store/durable.py): step records, sleeps, waits, signals, and
``ctx.transaction()``'s effects on a connection of their own.

Each verb but ``effects`` is the body of one write transaction (``BEGIN IMMEDIATE``): the only
writer on the file while it runs, so its fencing check (the job running under the token)
holds until it commits, and a signal and a wait on one key never miss each other. An effects
transaction also begins with ``BEGIN IMMEDIATE``, on its own connection and thread: it holds
the database's write lock from its first statement to its commit, so its fencing check at
the commit is as good as a row lock; every other writer (in every process) waits meanwhile.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from rota.domain.durable import SignalResult, Step, StepKind, StepState, WaitOutcome
from rota.domain.errors import LeaseLost, StoreUnavailable
from rota.domain.job import MAX_ERROR_LENGTH, MAX_TRACEBACK_LENGTH
from rota.domain.job_state import Outcome
from rota.domain.lease import Lease
from rota.domain.payload import decode_json, truncate
from rota.store.durable import Effects
from rota.store.sqlite import claims
from rota.store.sqlite.rows import chunks, fits, from_us, marks, to_us

if TYPE_CHECKING:
    from rota.store.sqlite.connection import Database

T = TypeVar("T")

_STEP_COLUMNS = (
    "job_id, name, kind, state, seq, attempts, result, error, started_at, finished_at, "
    "wake_at, key, token"
)

# One record written: a new one takes the next seq of its job; an existing one keeps its seq
# (and a sleep's or wait's first start, wake time and key), and a step that succeeded is never
# overwritten.
_RECORD = """
INSERT INTO rota_steps (job_id, name, seq, kind, state, attempts, result, error, token,
                        started_at, finished_at, wake_at, key)
VALUES (:job, :name, (SELECT coalesce(max(seq), 0) + 1 FROM rota_steps WHERE job_id = :job),
        :kind, :state, :attempts, :result, :error, :token, :started, :finished, :wake, :key)
ON CONFLICT (job_id, name) DO UPDATE SET
    state = excluded.state, attempts = attempts + excluded.attempts,
    result = excluded.result, error = coalesce(excluded.error, error), token = excluded.token,
    started_at = CASE WHEN excluded.kind = 'step' THEN excluded.started_at ELSE started_at END,
    finished_at = excluded.finished_at, wake_at = coalesce(wake_at, excluded.wake_at),
    key = coalesce(key, excluded.key)
WHERE rota_steps.state <> 'succeeded'
"""

_HELD = "SELECT 1 FROM rota_jobs WHERE id = ? AND state = 'running' AND lease_token = ?"


def _held(conn: sqlite3.Connection, lease: Lease) -> None:
    """LeaseLost unless the job is running under the lease's token (the fencing check)."""
    if not (fits(lease.job_id) and fits(lease.token)):
        raise LeaseLost(lease.job_id, lease.token)
    if conn.execute(_HELD, (lease.job_id, lease.token)).fetchone() is None:
        raise LeaseLost(lease.job_id, lease.token)


def _record(
    conn: sqlite3.Connection,
    lease: Lease,
    name: str,
    kind: StepKind,
    state: StepState,
    at: datetime,
    *,
    attempts: int = 0,
    result: str | None = None,
    error: str | None = None,
    started: datetime | None = None,
    finished: datetime | None = None,
    wake: datetime | None = None,
    key: str | None = None,
) -> None:
    conn.execute(
        _RECORD,
        {
            "job": lease.job_id,
            "name": name,
            "kind": kind.value,
            "state": state.value,
            "attempts": attempts,
            "result": result,
            "error": error,
            "token": lease.token,
            "started": to_us(started or at),
            "finished": None if finished is None else to_us(finished),
            "wake": None if wake is None else to_us(wake),
            "key": key,
        },
    )


def _existing(conn: sqlite3.Connection, job_id: int, name: str) -> Step | None:
    row = conn.execute(
        f"SELECT {_STEP_COLUMNS} FROM rota_steps WHERE job_id = ? AND name = ?", (job_id, name)
    ).fetchone()
    return None if row is None else _step(row)


def _step(row: Sequence[Any]) -> Step:
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
        result=None if result is None else decode_json(result),
        error=error,
        started_at=None if started is None else from_us(started),
        finished_at=None if finished is None else from_us(finished),
        wake_at=None if wake is None else from_us(wake),
        key=key,
        token=token,
    )


def steps(conn: sqlite3.Connection, job_id: int) -> list[Step]:
    if not fits(job_id):
        return []
    rows = conn.execute(
        f"SELECT {_STEP_COLUMNS} FROM rota_steps WHERE job_id = ? ORDER BY seq", (job_id,)
    ).fetchall()
    return [_step(row) for row in rows]


def checkpoint(
    conn: sqlite3.Connection,
    lease: Lease,
    name: str,
    result: str | None,
    duration: timedelta,
    at: datetime,
) -> None:
    _held(conn, lease)
    _record(
        conn,
        lease,
        name,
        StepKind.STEP,
        StepState.SUCCEEDED,
        at,
        attempts=1,
        result=result,
        started=at - duration,
        finished=at,
    )


def fail_step(
    conn: sqlite3.Connection,
    lease: Lease,
    name: str,
    error: str,
    traceback: str | None,
    duration: timedelta,
    retry_in: timedelta | None,
    at: datetime,
) -> bool:
    """Record the failure; with ``retry_in``, end the attempt failed and give it back.
    Whether the job became pending."""
    _held(conn, lease)
    text = truncate(error, MAX_ERROR_LENGTH)
    _record(
        conn,
        lease,
        name,
        StepKind.STEP,
        StepState.FAILED,
        at,
        attempts=1,
        error=text,
        started=at - duration,
        finished=at,
    )
    if retry_in is None:
        return False
    conn.execute(
        "UPDATE rota_jobs SET state = 'pending', run_at = ?, attempt = attempt - 1, "
        "lease_until = NULL, last_error = ? "
        "WHERE id = ? AND state = 'running' AND lease_token = ?",
        (to_us(at + retry_in), text, lease.job_id, lease.token),
    )
    claims.end_attempts(
        conn,
        [lease.token],
        to_us(at),
        Outcome.FAILED,
        text,
        truncate(traceback, MAX_TRACEBACK_LENGTH),
    )
    return True


def sleep(
    conn: sqlite3.Connection,
    lease: Lease,
    name: str,
    until: datetime | None,
    delay: timedelta | None,
    at: datetime,
) -> datetime | None:
    _held(conn, lease)
    earlier = _existing(conn, lease.job_id, name)
    if earlier is not None and earlier.state is StepState.SLEPT:
        return None
    if earlier is not None and earlier.wake_at is not None:
        wake = earlier.wake_at
    else:
        wake = until if until is not None else at + (delay or timedelta(0))
    if wake <= at:
        _record(conn, lease, name, StepKind.SLEEP, StepState.SLEPT, at, finished=at, wake=wake)
        return None
    _record(conn, lease, name, StepKind.SLEEP, StepState.SLEEPING, at, wake=wake)
    claims.give_back(conn, lease, wake, Outcome.SLEPT, at)
    return wake


def wait_for(
    conn: sqlite3.Connection,
    lease: Lease,
    name: str,
    key: str,
    timeout: timedelta,
    at: datetime,
) -> WaitOutcome:
    _held(conn, lease)
    earlier = _existing(conn, lease.job_id, name)
    if earlier is not None and earlier.state is StepState.RECEIVED:
        return WaitOutcome(StepState.RECEIVED, earlier.result)
    if earlier is not None and earlier.state is StepState.TIMED_OUT:
        return WaitOutcome(StepState.TIMED_OUT)
    deadline = earlier.wake_at if earlier is not None and earlier.wake_at else at + timeout
    kept = conn.execute(
        "DELETE FROM rota_signals WHERE id = (SELECT id FROM rota_signals "
        "WHERE key = ? AND expires_at > ? ORDER BY id LIMIT 1) RETURNING data",
        (key, to_us(at)),
    ).fetchone()
    if kept is not None:
        _record(
            conn,
            lease,
            name,
            StepKind.WAIT,
            StepState.RECEIVED,
            at,
            result=kept[0],
            finished=at,
            wake=deadline,
            key=key,
        )
        return WaitOutcome(StepState.RECEIVED, None if kept[0] is None else decode_json(kept[0]))
    if deadline <= at:
        _record(
            conn,
            lease,
            name,
            StepKind.WAIT,
            StepState.TIMED_OUT,
            at,
            finished=at,
            wake=deadline,
            key=key,
        )
        return WaitOutcome(StepState.TIMED_OUT)
    _record(conn, lease, name, StepKind.WAIT, StepState.WAITING, at, wake=deadline, key=key)
    claims.give_back(conn, lease, deadline, Outcome.WAITED, at)
    return WaitOutcome(StepState.WAITING, deadline=deadline)


_FIRST_WAIT = """
SELECT s.job_id, s.name, j.state FROM rota_steps s INDEXED BY rota_steps_waiting
JOIN rota_jobs j ON j.id = s.job_id
WHERE s.key = ? AND s.state = 'waiting' AND j.state IN ('pending', 'running', 'held')
ORDER BY s.started_at, s.job_id LIMIT 1
"""


def signal(
    conn: sqlite3.Connection, key: str, data: str | None, expire_after: timedelta, at: datetime
) -> SignalResult:
    at_us = to_us(at)
    found = conn.execute(_FIRST_WAIT, (key,)).fetchone()
    if found is None:
        expires_at = at + expire_after
        conn.execute(
            "INSERT INTO rota_signals (key, data, sent_at, expires_at) VALUES (?, ?, ?, ?)",
            (key, data, at_us, to_us(expires_at)),
        )
        return SignalResult(key, expires_at=expires_at)
    job_id, name, _ = found
    conn.execute(
        "UPDATE rota_steps SET state = 'received', result = ?, finished_at = ? "
        "WHERE job_id = ? AND name = ?",
        (data, at_us, job_id, name),
    )
    conn.execute(
        "UPDATE rota_jobs SET run_at = min(run_at, ?) WHERE id = ? AND state IN ('pending', 'held')",
        (at_us, job_id),
    )
    return SignalResult(key, delivered_to=job_id)


def end_open_waits(conn: sqlite3.Connection, job_ids: Sequence[int]) -> None:
    """Forget the waits the earlier runs of ``job_ids`` left waiting: the jobs are made to run
    again (retry, rerun), and each new run waits afresh for whatever it waits for."""
    for part in chunks(job_ids):
        conn.execute(
            f"DELETE FROM rota_steps WHERE job_id IN ({marks(len(part))}) AND state = 'waiting'",
            part,
        )


def prune(conn: sqlite3.Connection, at: datetime) -> int:
    """Kept signals past their expiry (a job's records go with it: ON DELETE CASCADE)."""
    return conn.execute("DELETE FROM rota_signals WHERE expires_at <= ?", (to_us(at),)).rowcount


class EffectsConnection:
    """``ctx.transaction()``'s connection on SQLite: statements run on the transaction's own
    connection and thread, so the event loop never waits on the disk."""

    def __init__(self, effects: SqliteEffects) -> None:
        self._effects = effects

    async def execute(self, sql: str, parameters: Any = ()) -> list[tuple[Any, ...]]:
        """Run one statement with ``parameters`` (a sequence or a mapping); its rows."""

        def run(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return conn.execute(sql, parameters).fetchall()

        return await self._effects.call(run)

    async def executemany(self, sql: str, rows: Any) -> None:
        """Run one statement once per item of ``rows``."""

        def run(conn: sqlite3.Connection) -> None:
            conn.executemany(sql, rows)

        await self._effects.call(run)


class SqliteEffects:
    """An effects transaction on SQLite (store/durable.py ``Effects``)."""

    def __init__(
        self, conn: sqlite3.Connection, thread: ThreadPoolExecutor, lease: Lease, at: Any
    ) -> None:
        self._conn = conn
        self._thread = thread
        self._lease = lease
        self._at: Callable[[datetime | None], datetime] = at
        self.done = False
        self.connection = EffectsConnection(self)

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self.done:
            raise StoreUnavailable("this ctx.transaction() is over")
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, self._conn)

    async def _commit(self, body: Callable[[sqlite3.Connection], None]) -> None:
        def run(conn: sqlite3.Connection) -> None:
            body(conn)
            conn.execute("COMMIT")

        await self.call(run)
        self.done = True

    async def commit_step(
        self, name: str, *, result: str | None, duration: timedelta, now: datetime | None = None
    ) -> None:
        await self._commit(
            lambda conn: checkpoint(conn, self._lease, name, result, duration, self._at(now))
        )

    async def commit_completion(self, *, result: str | None, now: datetime | None = None) -> None:
        def body(conn: sqlite3.Connection) -> None:
            if claims.complete(conn, [self._lease], self._at(now), [result]):
                raise LeaseLost(self._lease.job_id, self._lease.token)

        await self._commit(body)


@asynccontextmanager
async def effects(db: Database, lease: Lease, at: Any) -> AsyncIterator[Effects]:
    """An effects transaction: its own connection and thread, ``BEGIN IMMEDIATE`` at once."""
    thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rota-sqlite-effects")
    loop = asyncio.get_running_loop()

    def begin() -> sqlite3.Connection:
        conn = db.open_connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            conn.close()
            raise StoreUnavailable(f"SQLite database {db.options.path}: {error}") from error
        return conn

    def end(conn: sqlite3.Connection) -> None:
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        finally:
            conn.close()

    try:
        conn = await loop.run_in_executor(thread, begin)
        opened = SqliteEffects(conn, thread, lease, at)
        try:
            yield opened
        finally:
            opened.done = True
            await loop.run_in_executor(thread, end, conn)
    finally:
        thread.shutdown(wait=False)


class SqliteDurable:
    """The durable verbs of ``SqliteStore`` (which provides what is declared here)."""

    _db: Database

    if TYPE_CHECKING:

        def _at(self, now: datetime | None) -> datetime: ...
        def _woken(self, earliest: datetime | None) -> None: ...

    async def steps(self, job_id: int) -> list[Step]:
        return await self._db.read(lambda conn: steps(conn, job_id))

    async def checkpoint(
        self,
        lease: Lease,
        name: str,
        *,
        result: str | None,
        duration: timedelta = timedelta(0),
        now: datetime | None = None,
    ) -> None:
        await self._db.write(
            lambda conn: checkpoint(conn, lease, name, result, duration, self._at(now))
        )

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
        at = self._at(now)
        pending = await self._db.write(
            lambda conn: fail_step(conn, lease, name, error, traceback, duration, retry_in, at)
        )
        if pending and retry_in is not None:
            self._woken(at + retry_in)

    async def sleep(
        self,
        lease: Lease,
        name: str,
        *,
        until: datetime | None = None,
        delay: timedelta | None = None,
        now: datetime | None = None,
    ) -> datetime | None:
        wake = await self._db.write(
            lambda conn: sleep(conn, lease, name, until, delay, self._at(now))
        )
        self._woken(wake)
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
        outcome = await self._db.write(
            lambda conn: wait_for(conn, lease, name, key, timeout, self._at(now))
        )
        self._woken(outcome.deadline)
        return outcome

    async def signal(
        self,
        key: str,
        data: str | None,
        *,
        expire_after: timedelta,
        now: datetime | None = None,
    ) -> SignalResult:
        at = self._at(now)
        result = await self._db.write(lambda conn: signal(conn, key, data, expire_after, at))
        if result.delivered:
            self._woken(at)
        return result

    async def prune_durable(self, *, older_than: datetime, now: datetime | None = None) -> int:
        return await self._db.write(lambda conn: prune(conn, self._at(now)))

    def effects(
        self, lease: Lease, *, idle_timeout: timedelta | None = None
    ) -> AbstractAsyncContextManager[Effects]:
        return effects(self._db, lease, self._at)
