"""One SQLite connection on one thread: its pragmas, its transactions, and busy retries.

Every call of a store runs on a single dedicated thread that owns the connection, so the event
loop never blocks on disk or on another process's lock, and one store's calls run one at a time
in the order they were made. Coordination with other connections (other stores in this process,
other processes) is SQLite's file locking: WAL lets readers run beside the one writer, and every
write transaction starts with ``BEGIN IMMEDIATE`` so it queues for the write lock up front
(governed by ``busy_timeout``) instead of upgrading a read lock later, which SQLite refuses at
once with SQLITE_BUSY. What still comes back busy is retried here, a bounded number of times, so
"database is locked" never reaches a caller; a lock held past the retries is StoreUnavailable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NoReturn, TypeVar

from rota.domain.errors import MigrationsPending, StoreUnavailable
from rota.domain.wording import counted
from rota.store.sqlite.url import SqliteOptions

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: RETURNING arrived in SQLite 3.35 (UPDATE ... FROM in 3.33).
MIN_SQLITE_VERSION = (3, 35, 0)
#: Attempts of one transaction that found the database busy, and the backoff between them.
#: Each attempt may itself wait up to busy_timeout for the lock, so the retries also stop
#: once RETRY_BUDGET_S has passed: a caller learns of a stuck lock within about that time.
MAX_TRIES = 25
RETRY_BUDGET_S = 30.0
FIRST_BACKOFF_S = 0.002
MAX_BACKOFF_S = 0.1

_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
#: Failures of the file or the disk rather than of a statement: reported as StoreUnavailable,
#: and the connection is reopened on the next call.
_UNAVAILABLE_CODES = frozenset(
    {
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_NOTADB,
        sqlite3.SQLITE_CORRUPT,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_PERM,
        sqlite3.SQLITE_NOLFS,
        sqlite3.SQLITE_PROTOCOL,
    }
)

Body = Callable[[sqlite3.Connection], T]


class Database:
    """The connection of one store, its thread, and transactions that retry while busy."""

    def __init__(self, options: SqliteOptions) -> None:
        self.options = options
        # No thread and no connection exist until the first call, so a store built before a
        # fork (a pre-forking server) is usable in the children.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rota-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._pid = os.getpid()
        self._inherited: list[sqlite3.Connection] = []

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------ called from the loop

    async def write(self, body: Body[T]) -> T:
        """``body(conn)`` inside ``BEGIN IMMEDIATE ... COMMIT``, on the store's thread.

        The whole body runs again after a rollback if SQLite reports the database busy, so it
        must keep no state outside its own frame. An exception from the body rolls back and
        propagates unchanged. Cancelling the awaiting task does not stop a transaction that
        has started: it commits (or not) on the store's thread regardless, as a request sent
        to a server would.
        """
        return await self._submit(self._transaction, body, "BEGIN IMMEDIATE")

    async def read(self, body: Body[T]) -> T:
        """``body(conn)`` inside a read transaction: one consistent snapshot for its queries."""
        return await self._submit(self._transaction, body, "BEGIN")

    async def close(self) -> None:
        """Close the connection and stop the thread; later calls raise StoreUnavailable."""
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._disconnect)
        finally:
            self._executor.shutdown(wait=False)

    async def _submit(self, fn: Callable[[Body[T], str], T], body: Body[T], begin: str) -> T:
        if self._closed:
            raise StoreUnavailable("the SQLite store is closed")
        if self._pid != os.getpid():
            self._after_fork()
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn, body, begin)
        except RuntimeError as exc:
            if "shutdown" in str(exc):  # the executor refused work: closed meanwhile
                raise StoreUnavailable("the SQLite store is closed") from None
            raise

    def _after_fork(self) -> None:
        """In a forked child: a thread and a connection of our own.

        The parent's thread does not exist here, and SQLite forbids using a connection across
        a fork; closing it could even disturb the parent's locks. So it is kept, never touched.
        """
        self._pid = os.getpid()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rota-sqlite")
        if self._conn is not None:
            self._inherited.append(self._conn)
            self._conn = None

    # ------------------------------------------------------------------ on the store's thread

    def _transaction(self, body: Body[T], begin: str) -> T:
        backoff = FIRST_BACKOFF_S
        # A local deadline for giving up, not a decision about jobs: monotonic time is right.
        deadline = time.monotonic() + RETRY_BUDGET_S
        for attempt in range(1, MAX_TRIES + 1):
            try:
                conn = self._connection()
                conn.execute(begin)
                try:
                    result = body(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    self._rollback(conn)
                    raise
                return result
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    self._reraise(exc)
                if attempt == MAX_TRIES or time.monotonic() >= deadline:
                    raise StoreUnavailable(
                        f"SQLite database {self.options.path} stayed locked by another "
                        f"connection through {counted(attempt, 'attempt')}"
                    ) from exc
                logger.debug("SQLite busy (attempt %d of %d): %s", attempt, MAX_TRIES, exc)
            except sqlite3.DatabaseError as exc:
                self._reraise(exc)
            # A randomised, growing pause so processes that collided do not collide again.
            time.sleep(backoff * (0.5 + random.random()))
            backoff = min(backoff * 2, MAX_BACKOFF_S)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _rollback(self, conn: sqlite3.Connection) -> None:
        if not conn.in_transaction:
            return  # SQLite already rolled back (some errors end the transaction themselves)
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            # A connection stuck inside a transaction would hold the write lock for everyone:
            # drop it; the next call reconnects.
            self._disconnect()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def open_connection(self) -> sqlite3.Connection:
        """A new connection of its own with this store's pragmas, for a caller that keeps a
        transaction open across awaits on a thread of its own (``ctx.transaction()``)."""
        return self._connect()

    def _connect(self) -> sqlite3.Connection:
        """A new connection with every pragma this store relies on (also after a reconnect)."""
        if sqlite3.sqlite_version_info < MIN_SQLITE_VERSION:
            raise StoreUnavailable(
                f"rota needs SQLite {'.'.join(map(str, MIN_SQLITE_VERSION))} or newer; "
                f"this Python links SQLite {sqlite3.sqlite_version}"
            )
        path = self.options.path
        parent = os.path.dirname(path)
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(f"cannot create the directory of {path}: {exc}") from exc
        # isolation_level=None: the sqlite3 module issues no BEGIN of its own; every
        # transaction here is explicit, so writes can all be BEGIN IMMEDIATE.
        conn = sqlite3.connect(path, isolation_level=None, cached_statements=512)
        try:
            # busy_timeout first: the pragmas below may themselves wait for a lock.
            conn.execute(f"PRAGMA busy_timeout = {int(self.options.busy_timeout_ms)}")
            (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if str(mode).lower() != "wal":
                raise StoreUnavailable(
                    f"SQLite could not put {path} in WAL mode (it reports {mode!r}); "
                    "is it on a network file system?"
                )
            # In WAL mode NORMAL survives any process crash; only an OS crash or power loss
            # can undo the last commits (synchronous=full in the URL prevents that too).
            synchronous = "FULL" if self.options.synchronous == "full" else "NORMAL"
            conn.execute(f"PRAGMA synchronous = {synchronous}")
            conn.execute("PRAGMA foreign_keys = ON")
            # A workflow job cancelled by its parent's end cancels its own children: the
            # triggers of 012_workflows fire for the rows they update themselves.
            conn.execute("PRAGMA recursive_triggers = ON")
        except BaseException:
            conn.close()
            raise
        return conn

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def _reraise(self, exc: sqlite3.DatabaseError) -> NoReturn:
        """Raise ``exc`` as the RotaError it means, or unchanged when it means a bug."""
        message = str(exc)
        if message.startswith("no such table: rota_"):
            raise MigrationsPending(
                f"the SQLite database {self.options.path} has no rota schema yet: "
                "run `rota migrate` (or `await store.migrate()`)"
            ) from exc
        if _code(exc) in _UNAVAILABLE_CODES:
            self._disconnect()
            raise StoreUnavailable(f"SQLite database {self.options.path}: {message}") from exc
        raise exc


def _code(exc: sqlite3.Error) -> int:
    """The primary SQLite result code of ``exc`` (extended codes carry it in the low byte)."""
    return int(getattr(exc, "sqlite_errorcode", -1)) & 0xFF


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    if _code(exc) in _BUSY_CODES:
        return True
    message = str(exc).lower()
    return "database is locked" in message or "database table is locked" in message
