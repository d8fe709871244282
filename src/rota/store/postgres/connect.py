"""Connections to PostgreSQL: dialing on the short capped reconnect backoff, the pool built on
it, and telling whether a connection goes through a transaction pooler such as PgBouncer."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Self, TypeVar

import psycopg
from psycopg.adapt import AdaptersMap
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from rota.domain.clock import Clock, SystemClock
from rota.domain.errors import ConnectionFailed, InvalidInput, StoreUnavailable
from rota.domain.payload import decode_json
from rota.domain.retry import RECONNECT_BACKOFF
from rota.domain.wording import counted
from rota.store.postgres.direct import Direct, Row
from rota.store.postgres.failures import address_of, again, connection_failed
from rota.store.postgres.urls import POOLER_MODES

log = logging.getLogger("rota.store.postgres")

IDLE = psycopg.pq.TransactionStatus.IDLE

C = TypeVar("C", bound=psycopg.AsyncConnection[Any])

#: How long opening a store keeps trying a refused (or otherwise transient) connection before
#: saying why it failed; also how long a caller waits for a pooled connection in an outage.
CONNECT_WAIT_S = 10.0
#: libpq's least ``connect_timeout``: a smaller one counts as 2 s (psycopg follows it).
LEAST_CONNECT_TIMEOUT_S = 2

#: psycopg's adapters with JSON read by ``decode_json`` (a claim decodes a payload per job:
#: json.loads of the bytes took ~2.6 µs of a no-op job's worker CPU, this ~0.2 µs). Every
#: connection of a store copies them; the process's other psycopg connections keep theirs.
ADAPTERS = AdaptersMap(psycopg.adapters)
set_json_loads(decode_json, ADAPTERS)


def attempt_timeout_s(configured_s: int | None, left_s: float) -> int:
    """The ``connect_timeout`` of one attempt made with ``left_s`` of a wait left: half of
    it, so that an address that does not answer (a host that drops packets) is tried again
    before the wait ends, rather than one attempt spending the whole wait; at least libpq's
    least, at most the configured one (None: no limit)."""
    share = max(LEAST_CONNECT_TIMEOUT_S, int(left_s / 2))
    return share if configured_s is None else min(configured_s, share)


def configured_timeout_s(conninfo: str, kwargs: Mapping[str, Any]) -> int | None:
    """The ``connect_timeout`` connections are made with (the keyword arguments' over the
    URL's, as psycopg reads them); None where there is none or it means "wait forever"."""
    value = kwargs.get("connect_timeout", conninfo_to_dict(conninfo).get("connect_timeout"))
    try:
        seconds = int(float(value)) if value is not None else 0
    except (TypeError, ValueError):
        return None  # psycopg refuses it on the attempt, saying why
    return seconds if seconds > 0 else None


def connection_defaults(conninfo: str) -> dict[str, Any]:
    """TCP keepalives, a user timeout and a connect timeout, unless the URL sets them: a peer
    that vanished (a partition, a half-open connection) is noticed in seconds, not TCP's
    minutes, and one connection attempt cannot hang for longer than the wait it serves."""
    defaults = {
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 3,
        "keepalives_count": 3,
        "tcp_user_timeout": 20_000,
        "connect_timeout": 10,
    }
    given = conninfo_to_dict(conninfo)
    return {key: value for key, value in defaults.items() if key not in given}


class Dialer:
    """Makes connections to one server, retrying failed attempts after RECONNECT_BACKOFF
    delays (never longer than its cap), and remembers the failure of the outage in progress so
    that a caller who waited in vain learns its real cause."""

    def __init__(
        self, conninfo: str, kwargs: dict[str, Any], *, what: str, clock: Clock | None = None
    ) -> None:
        self.conninfo = conninfo
        self.kwargs = kwargs
        self.what = what
        #: The failure of the outage in progress; None while connections succeed.
        self.last_failure: ConnectionFailed | None = None
        self._closed = asyncio.Event()
        #: Real time, never a store's test clock: a fake one would stall every reconnect.
        self._clock: Clock = clock or SystemClock()
        self._timeout_s = configured_timeout_s(conninfo, kwargs)

    def close(self) -> None:
        """Stop retrying: attempts in progress give up at their next pause."""
        self._closed.set()

    async def dial(
        self, *, give_up_after_s: float | None = None, fail_fast: bool = False
    ) -> psycopg.AsyncConnection[Any]:
        """A new plain connection with this dialer's options (see ``connect``)."""
        return await self.connect(self._plain, give_up_after_s=give_up_after_s, fail_fast=fail_fast)

    async def connect(
        self,
        attempt: Callable[[int | None], Awaitable[C]],
        *,
        give_up_after_s: float | None = None,
        fail_fast: bool = False,
    ) -> C:
        """A new connection, made by ``attempt`` (given a ``connect_timeout`` for it, or None
        for the configured one).

        Failures are retried until one attempt succeeds; ConnectionFailed says why once
        ``give_up_after_s`` has passed or, with ``fail_fast``, at once for a failure that
        waiting cannot heal. Within such a wait each attempt may take half of what is left
        of it (``attempt_timeout_s``) and is cut off at its end, so an address that does not
        answer is tried several times, and the wait is never overrun; an attempt cut off
        says the cause of the failure before it. A wait of 0 makes one attempt, on the
        configured timeout. Without ``give_up_after_s`` (a background reconnect), an outage
        is logged once as a warning and its recovery once; each attempt at debug level.
        """
        clock = self._clock
        deadline = None if give_up_after_s is None else clock.monotonic() + give_up_after_s
        bounded = give_up_after_s is not None and give_up_after_s > 0
        failures = 0
        while True:
            if self._closed.is_set():
                raise StoreUnavailable(f"{self.what}: closed while connecting")
            try:
                if deadline is not None and bounded:
                    left = deadline - clock.monotonic()
                    conn = await self._within(
                        attempt(attempt_timeout_s(self._timeout_s, left)), left
                    )
                else:
                    conn = await attempt(None)
            except (psycopg.Error, OSError, _CutOff) as error:
                if isinstance(error, _CutOff):
                    failure = self.last_failure or connection_failed(_NO_ANSWER, self.conninfo)
                else:
                    failure = connection_failed(error, self.conninfo)
                failures += 1
                giving_up = (fail_fast and failure.permanent) or (
                    deadline is not None and clock.monotonic() >= deadline
                )
                self._note_failure(failure, failures, background=deadline is None)
                if giving_up:
                    raise failure from error
                delay = RECONNECT_BACKOFF.delay(failures).total_seconds()
                if deadline is not None:
                    delay = min(delay, max(0.0, deadline - clock.monotonic()))
                await self._pause(delay)
                continue
            if self.last_failure is not None:
                log.info(
                    "%s: connected again after %s", self.what, counted(failures, "failed attempt")
                )
            self.last_failure = None
            return conn

    async def _within(self, attempt: Awaitable[C], left_s: float) -> C:
        """``attempt``'s connection, or _CutOff once ``left_s`` has passed (the attempt is
        cancelled then, and awaited: nothing is left connecting in the background)."""
        task = asyncio.ensure_future(attempt)
        timer = asyncio.ensure_future(self._clock.sleep(left_s))
        try:
            await asyncio.wait((task, timer), return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if not task.done():
                task.cancel()
                await asyncio.wait((task,))
        if task.cancelled():
            raise _CutOff
        return task.result()

    async def _pause(self, delay_s: float) -> None:
        """Wait ``delay_s``, or until the dialer is closed."""
        closed = asyncio.ensure_future(self._closed.wait())
        timer = asyncio.ensure_future(self._clock.sleep(delay_s))
        try:
            await asyncio.wait((closed, timer), return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            timer.cancel()

    async def _plain(self, connect_timeout: int | None) -> psycopg.AsyncConnection[Any]:
        kwargs = self.kwargs
        if connect_timeout is not None:
            kwargs = {**kwargs, "connect_timeout": connect_timeout}
        return await psycopg.AsyncConnection.connect(self.conninfo, **kwargs)

    def _note_failure(self, failure: ConnectionFailed, failures: int, *, background: bool) -> None:
        first = self.last_failure is None
        changed = first or str(self.last_failure) != str(failure)
        self.last_failure = failure
        if background and first:  # one warning per outage
            log.warning("%s: cannot connect, retrying: %s", self.what, failure)
        elif background and changed:  # a server going down says three things in a second
            log.info("%s: still cannot connect, now: %s", self.what, failure)
        else:
            log.debug("%s: connection attempt %d failed: %s", self.what, failures, failure)


class _CutOff(Exception):
    """An attempt still connecting when its wait ended."""


#: What an attempt cut off at the end of its wait says when no failure came before it.
_NO_ANSWER = psycopg.errors.ConnectionTimeout("connection timeout expired")


class PoolConnection(psycopg.AsyncConnection[Any]):
    """A connection of a store's pool. The store's one-statement calls go through ``run``
    (direct.py): straight through libpq, prepared once per connection. Each step of a flow
    (a transaction of several statements) runs on the connection's kept cursor: a new cursor
    per statement would build its adaptation cache again (the dumpers of its parameters, the
    loaders of its columns), about a sixth of psycopg's client time for a one-job enqueue,
    measured on a cluster started as the benchmark starts it."""

    _direct: Direct | None = None
    _kept: psycopg.AsyncCursor[Any] | None = None
    #: Whether ``Connections.warm_with``'s function ran on this connection.
    warmed = False

    async def run(self, sql: str, params: Mapping[str, Any]) -> list[Row]:
        """``sql`` (one statement) with ``params``: its rows, as tuples (none for a statement
        that returns none). Errors are psycopg's, as a cursor raises them. Outside a
        transaction it commits by itself; inside one it is sent unnamed (nothing prepared)."""
        direct = self._direct
        if direct is None:
            direct = self._direct = Direct(self)
        return await direct.run(sql, params)

    def kept_cursor(self) -> psycopg.AsyncCursor[Any]:
        """The kept cursor. Its next ``execute`` replaces the rows of its last, so a caller
        reads them before the connection runs anything else on it."""
        kept = self._kept
        if kept is None or kept.closed:
            kept = self._kept = self.cursor()
        return kept


def pool_connection_class(dialer: Dialer, *, own_sessions: bool) -> type[PoolConnection]:
    """The connection class of a pool whose new connections come through ``dialer``;
    ``own_sessions``: each is a server session of its own (no transaction pooler between),
    which ``set_up_session`` may configure."""

    class DialedConnection(PoolConnection):
        """A pool connection made through a Dialer: the pool's own retries double their delay
        without a cap (1, 2, 4, 8 s...), so after a long outage it would wait seconds past
        the server's return; the dialer keeps retrying within the reconnect cap instead."""

        @classmethod
        async def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
            parent = super().connect

            async def attempt(connect_timeout: int | None) -> Self:
                given = (
                    kwargs
                    if connect_timeout is None
                    else {**kwargs, "connect_timeout": connect_timeout}
                )
                conn = await parent(conninfo, **given)
                try:
                    await set_up_session(conn, own_session=own_sessions)
                except BaseException:
                    await conn.close()
                    raise
                return conn

            return await dialer.connect(attempt)

    return DialedConnection


async def set_up_session(conn: psycopg.AsyncConnection[Any], *, own_session: bool) -> None:
    """Settings of a new connection, in one round trip at most.

    The time zone ``UTC``, unless it is already: psycopg reads a timestamptz in the session's
    zone, and for any other name than ``UTC`` (Debian's servers say ``Etc/UTC``) converts each
    value through a ZoneInfo, about half a µs a value where ``UTC`` is datetime's own (a
    claimed job has four). Nothing rota stores or compares depends on the zone; PgBouncer
    keeps a client's TimeZone across transaction pooling.

    JIT off, in a session of its own (``own_session``; behind a transaction pooler the setting
    would go to whichever server session ran it, another client's next). rota's statements run
    for microseconds to milliseconds, but a planner's estimate over large tables passes
    ``jit_above_cost`` easily, and compiling then costs about 0.1 s of the server's CPU per
    execution: at 11,500 jobs a second the firer's statement was compiled on every call,
    100-160 ms each for 0.1 ms of work (bench/day.md). Behind a transaction pooler, turn it off
    for rota's role (docs/guides/pgbouncer.md)."""
    settings = []
    if conn.info.parameter_status("TimeZone") != "UTC":
        settings.append("SET TIME ZONE 'UTC'")
    if own_session:
        settings.append("SET jit = off")
    if settings:
        await conn.execute("; ".join(settings), prepare=False)


def open_pool(
    conninfo: str,
    kwargs: dict[str, Any],
    dialer: Dialer,
    *,
    min_size: int,
    max_size: int,
    own_sessions: bool,
    configure: Callable[[Any], Awaitable[None]] | None = None,
) -> AsyncConnectionPool[Any]:
    """An unopened pool for ``conninfo`` that connects through ``dialer``, runs ``configure``
    on each new connection before anyone borrows it, and never hands out a connection the
    server already closed. ``own_sessions``: see ``pool_connection_class``."""
    pool: AsyncConnectionPool[Any]

    async def check(conn: psycopg.AsyncConnection[Any]) -> None:
        if not _heard_while_idle(conn):
            return
        try:
            await AsyncConnectionPool.check_connection(conn)
        except Exception:
            # One connection closed while idle means a restart closed them all: check the
            # rest now, or each would cost the next caller a failed check and a pause.
            await pool.check()
            raise

    pool = HotFirstPool(
        conninfo,
        connection_class=pool_connection_class(dialer, own_sessions=own_sessions),
        min_size=min_size,
        max_size=max_size,
        kwargs=kwargs,
        open=False,
        configure=configure,
        check=check,
        # Callers wait this long for a connection during an outage, then get StoreUnavailable
        # (ConnectionFailed with the cause; an API answers 503) instead of hanging.
        timeout=CONNECT_WAIT_S,
        # The dialer retries for as long as the outage lasts; this only bounds the pool's own
        # retries of a connection class that gave up.
        reconnect_timeout=3600,
    )
    return pool


class _Stack(deque[Any]):
    """The idle connections of a pool, handed out most recently returned first."""

    def popleft(self) -> Any:
        return self.pop()


class HotFirstPool(AsyncConnectionPool[Any]):
    """psycopg's pool, handing out the connection returned last (as PgBouncer does by default)
    instead of the one idle longest: a caller making one call after another keeps one warm
    connection and its backend (one enqueue per call took ~290 µs this way, ~340 µs
    round-robin over two connections on the benchmark cluster), and connections beyond what
    the load needs stay unused, which is what the pool's shrinking after ``max_idle`` looks
    for. psycopg_pool has no setting for the order: its idle connections live in a deque taken
    from the left, which this one takes from the right."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        idle = getattr(self, "_pool", None)
        if isinstance(idle, deque) and not idle:
            self._pool = _Stack()

    def prefer(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Hand out ``conn`` next if it is idle: one kind of call keeps to one connection
        while it is free, however the calls in between took and gave back others. Nothing
        happens while the pool's own work holds its lock, nor with psycopg's stock order."""
        idle = getattr(self, "_pool", None)
        lock = getattr(self, "_lock", None)
        if not isinstance(idle, _Stack) or not idle or idle[-1] is conn:
            return
        if not isinstance(lock, asyncio.Lock) or lock.locked():
            return
        with contextlib.suppress(ValueError):  # not idle: in use, or gone
            idle.remove(conn)
            idle.append(conn)


def _heard_while_idle(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether the server sent anything to an idle connection (a shutdown's goodbye, or end of
    file): a look at the socket, no round trip, so a healthy connection costs nothing."""
    if conn.closed:
        return True
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


async def behind_pooler(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether ``conn`` reaches PostgreSQL through a pooler such as PgBouncer: a pooler gives
    its clients backend keys of its own, so the backend pid the connection was told at start-up
    is not the one the server reports. Never prepared: a prepared statement is session state,
    which a transaction pooler would hand to another client."""
    cursor = await conn.execute("SELECT pg_backend_pid()", prepare=False)
    row = await cursor.fetchone()
    return row is not None and row[0] != conn.info.backend_pid


class Connections:
    """A store's connections, opened on first use: one dial that says at once what is wrong
    (waiting out a refused connection for CONNECT_WAIT_S first), then a pool on the reconnect
    backoff.

    Behind a transaction pooler (``pooler="transaction"``, or ``"auto"`` and detected) no
    statement is prepared on the server and LISTEN goes only to ``listen_conninfo``: a
    transaction pooler hands each transaction to any server session, so session state would
    leak between clients or be lost. ``prepare`` (None: decided by the pooler) forces
    server-side prepared statements on or off.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        pool_min: int,
        pool_max: int,
        prepare: bool | None,
        pooler: str,
        listen_conninfo: str | None,
    ) -> None:
        if pooler not in POOLER_MODES:
            raise InvalidInput(f"pooler must be one of {', '.join(POOLER_MODES)}")
        self.conninfo = conninfo
        self.address = address_of(conninfo)
        self._pool_min = pool_min
        self._pool_max = pool_max
        self._prepare = prepare
        self._pooler = pooler
        self._listen_conninfo = listen_conninfo
        self._lock = asyncio.Lock()
        self._pool: AsyncConnectionPool[Any] | None = None
        self._dialer: Dialer | None = None
        #: Whether connections go through a transaction pooler; None until opened.
        self.pooled: bool | None = None
        self._warm: Callable[[PoolConnection], Awaitable[None]] | None = None
        #: How long the first connection keeps trying a refused (or otherwise transient)
        #: connection before saying why; 0 says it at the first failure (a one-shot command,
        #: whose user is waiting). Settable until the store opens.
        self.connect_wait_s = CONNECT_WAIT_S

    @property
    def is_open(self) -> bool:
        return self._pool is not None

    @property
    def listen_conninfo(self) -> str | None:
        """Where the listener connects (once open): the listen URL if one was given, else the
        store's own, unless that goes through a transaction pooler (then None: poll)."""
        if self._listen_conninfo is not None:
            return self._listen_conninfo
        return None if self.pooled else self.conninfo

    def kwargs(self, *, prepare: bool) -> dict[str, Any]:
        return {
            "autocommit": True,
            # Prepared at first use: rota runs a small fixed set of statements. None keeps
            # every statement unnamed, which any pooler passes through.
            "prepare_threshold": 0 if prepare else None,
            "context": ADAPTERS,
            **connection_defaults(self.conninfo),
        }

    async def open(self) -> None:
        if self.is_open:
            return
        async with self._lock:
            if not self.is_open:
                await self._open()

    async def _open(self) -> None:
        first = Dialer(self.conninfo, self.kwargs(prepare=False), what="PostgreSQL")
        conn = await first.dial(give_up_after_s=self.connect_wait_s, fail_fast=True)
        try:
            async with conn:
                detected = self._pooler == "auto" and await behind_pooler(conn)
        except psycopg.Error as error:
            raise StoreUnavailable(f"PostgreSQL is unavailable: {error}") from error
        self.pooled = self._pooler == "transaction" or detected
        prepare = self._prepare if self._prepare is not None else not self.pooled
        if self.pooled:
            log.debug("%s is reached through a transaction pooler", self.address)
        kwargs = self.kwargs(prepare=prepare)
        self._dialer = Dialer(self.conninfo, kwargs, what="PostgreSQL")
        pool = open_pool(
            self.conninfo,
            kwargs,
            self._dialer,
            min_size=self._pool_min,
            max_size=self._pool_max,
            own_sessions=not self.pooled,
            configure=self._configure,
        )
        await pool.open(wait=False)
        self._pool = pool

    def warm_with(self, warm: Callable[[PoolConnection], Awaitable[None]]) -> None:
        """Run ``warm`` on every connection the pool opens from now on, before it is handed
        out: the pool opens connections in the background as the load asks for more and as it
        replaces old ones, so what a session does once (compiling a function, planning its
        statement) is then done there rather than in the first call that needs it. Not
        behind a transaction pooler, whose server sessions are not the client's."""
        self._warm = warm

    async def warm_idle(self) -> None:
        """Run ``warm_with``'s function now on the connections the pool holds idle (those it
        opened before, unless warmed since), all at once."""
        pool = self._pool
        if pool is None or self._warm is None or self.pooled:
            return
        idle = pool.get_stats().get("pool_available", 0)
        async with contextlib.AsyncExitStack() as held:
            conns = [await held.enter_async_context(self.connection()) for _ in range(idle)]
            await asyncio.gather(*(self._configure(conn) for conn in conns))

    async def _configure(self, conn: PoolConnection) -> None:
        warm = self._warm
        if warm is None or self.pooled or conn.warmed:
            return
        try:
            await warm(conn)
            conn.warmed = True
        except psycopg.Error as error:
            # Only a head start: the call it prepares for meets the same error, if any, and
            # says so; a connection broken meanwhile is never handed out (the pool's check).
            log.debug("could not warm a new connection: %s", error)

    async def open_patiently(self) -> None:
        """Open, however long the database takes to answer: for a watcher, which giving up
        would leave deaf for good."""
        failures = 0
        while True:
            try:
                await self.open()
                return
            except StoreUnavailable as error:
                failures += 1
                log.debug("waiting for the store to open: %s", error)
                await asyncio.sleep(RECONNECT_BACKOFF.delay(failures).total_seconds())

    def connection(
        self,
        on_error: Callable[[Exception], Awaitable[Exception | None]] | None = None,
        opener: Callable[[], Awaitable[None]] | None = None,
        prefer: psycopg.AsyncConnection[Any] | None = None,
    ) -> Borrowed:
        """A pooled connection for one ``async with``; StoreUnavailable (ConnectionFailed with
        the cause, when no connection can be made) instead of psycopg's errors. ``on_error``
        may name another exception to raise for one raised inside the block; ``opener``
        replaces ``open`` when the pool is not open yet; ``prefer`` is the connection to
        take if it is idle (``HotFirstPool.prefer``)."""
        return Borrowed(self, on_error, opener, prefer)

    def _pool_timeout(self, error: PoolTimeout) -> StoreUnavailable:
        assert self._dialer is not None
        if self._dialer.last_failure is not None:
            return again(self._dialer.last_failure)
        return StoreUnavailable(
            f"no PostgreSQL connection became free within {CONNECT_WAIT_S:g}s "
            f"(all {self._pool_max} of the pool in use)"
        )

    async def close(self) -> None:
        if self._pool is None:
            return
        assert self._dialer is not None
        self._dialer.close()
        await self._pool.close()
        self._pool = None


class Borrowed:
    """``Connections.connection()``: takes a connection from the pool on entry, gives it back
    on exit, and says what went wrong in rota's terms. A class rather than a generator-based
    context manager: every store call goes through one, and this costs half as much."""

    __slots__ = ("_conn", "_connections", "_on_error", "_opener", "_pool", "_prefer")

    def __init__(
        self,
        connections: Connections,
        on_error: Callable[[Exception], Awaitable[Exception | None]] | None,
        opener: Callable[[], Awaitable[None]] | None,
        prefer: psycopg.AsyncConnection[Any] | None = None,
    ) -> None:
        self._connections = connections
        self._on_error = on_error
        self._opener = opener
        self._prefer = prefer
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._pool: AsyncConnectionPool[Any] | None = None

    async def __aenter__(self) -> Any:  # Any: callers pass sql.Composable to execute
        connections = self._connections
        if not connections.is_open:
            await (self._opener or connections.open)()
        pool = self._pool = connections._pool
        assert pool is not None
        if self._prefer is not None and isinstance(pool, HotFirstPool):
            pool.prefer(self._prefer)
        try:
            self._conn = await pool.getconn()
        except PoolTimeout as error:
            raise connections._pool_timeout(error) from error
        except psycopg.OperationalError as error:
            raise StoreUnavailable(f"PostgreSQL is unavailable: {error}") from error
        return self._conn

    async def __aexit__(self, kind: Any, error: BaseException | None, trace: Any) -> None:
        conn, self._conn = self._conn, None
        pool, self._pool = self._pool, None
        assert conn is not None
        assert pool is not None
        try:
            # What psycopg's own pool.connection() does on the way out (the connection's
            # __aexit__): end a transaction left open (none is, on these autocommit
            # connections, unless a caller began one by hand); after an error, a failed
            # rollback must not hide it (the pool resets or replaces the connection).
            if not conn.closed and conn.pgconn.transaction_status != IDLE:
                if error is None:
                    await conn.commit()
                else:
                    with contextlib.suppress(Exception):
                        await conn.rollback()
        except psycopg.OperationalError as failure:
            raise StoreUnavailable(f"PostgreSQL is unavailable: {failure}") from failure
        finally:
            await pool.putconn(conn)  # a pool closed meanwhile closes it
        if not isinstance(error, Exception):
            return
        if self._on_error is not None:
            instead = await self._on_error(error)
            if instead is not None and instead is not error:
                raise instead from error
        if isinstance(error, psycopg.OperationalError):
            raise StoreUnavailable(f"PostgreSQL is unavailable: {error}") from error
