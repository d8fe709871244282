"""One statement straight through libpq: the store's hottest statements (claims, completions,
heartbeats, the plain enqueue) without psycopg's cursor machinery around them.

A cursor's ``execute`` and ``fetchall`` cost client CPU per statement beyond what the protocol
needs (query conversion and bookkeeping per call, a future and callbacks per socket wait):
one-job ``App.enqueue`` took 130 µs of client CPU through the kept cursor and 90 sent this
way, on a cluster started as the benchmark starts it (docs/benchmarks.md, its reading). These
statements are a small fixed set, one statement each, so what a
cursor offers beyond that is not needed here: ``Statement`` converts a statement's
``%(name)s`` placeholders once, psycopg's own ``Transformer`` dumps the values and loads the
rows (the same adapters, so the same Python values a cursor would return), and ``run`` sends
it prepared (unnamed when the connection prepares nothing, as behind a transaction pooler, or
when a transaction is open) and waits on the socket itself. Errors are psycopg's own
exceptions, raised from the result as a cursor raises them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import pq
from psycopg.adapt import PyFormat, Transformer
from psycopg.errors import error_from_result  # how a cursor raises a result's error

if TYPE_CHECKING:
    from psycopg.abc import Buffer
    from psycopg.pq.abc import PGconn, PGresult

log = logging.getLogger("rota.store.postgres")

Row = tuple[Any, ...]

_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_COMMAND_OK = pq.ExecStatus.COMMAND_OK
_FATAL_ERROR = pq.ExecStatus.FATAL_ERROR
_ACTIVE = pq.TransactionStatus.ACTIVE
_IDLE = pq.TransactionStatus.IDLE

#: The most prepared statements one connection keeps (one per statement and list of parameter
#: types: psycopg types an int by its size); past it a statement is sent unnamed.
MAX_PREPARED = 256

#: How long an interrupted statement's cancellation may take before the connection is closed.
CANCEL_WAIT_S = 5.0

_PLACEHOLDER = re.compile(r"%\((\w+)\)([sbt])|%%|%")
_FORMATS = {"s": PyFormat.AUTO, "b": PyFormat.BINARY, "t": PyFormat.TEXT}


@dataclass(frozen=True, slots=True)
class Statement:
    """A statement with ``%(name)s`` (``%(name)b``, ``%(name)t``) placeholders, as PostgreSQL
    takes it: ``$n`` in their place, a name used twice the same ``$n``."""

    text: bytes
    names: tuple[str, ...]
    formats: tuple[PyFormat, ...]

    @staticmethod
    @functools.cache
    def of(sql: str) -> Statement:
        names: list[str] = []
        formats: list[PyFormat] = []

        def number(match: re.Match[str]) -> str:
            name, kind = match.group(1), match.group(2)
            if name is None:
                if match.group(0) == "%%":
                    return "%"
                raise ValueError(f"a lone % in a statement: {sql[:60]!r}")
            if name in names:
                index = names.index(name)
                if formats[index] is not _FORMATS[kind]:
                    raise ValueError(f"%({name}) is used with two formats")
                return f"${index + 1}"
            names.append(name)
            formats.append(_FORMATS[kind])
            return f"${len(names)}"

        text = _PLACEHOLDER.sub(number, sql)
        return Statement(text.encode(), tuple(names), tuple(formats))


class Direct:
    """A connection's state for ``run``: its transformer (the dumpers and loaders it has
    looked up) and the names of the statements it prepared on the server."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn
        self._transformer = Transformer(conn)
        self._prepared: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        self._serial = 0  # names are never reused on one connection

    async def run(self, sql: str, params: Mapping[str, Any]) -> list[Row]:
        """Run ``sql``, one statement, with ``params``; its rows (none for a statement that
        returns none). In autocommit the statement commits by itself."""
        statement = Statement.of(sql)
        tx = self._transformer
        conn = self._conn
        pgconn = conn.pgconn
        async with conn.lock:  # the transformer's state too, from the dump to the rows
            values = tx.dump_sequence([params[name] for name in statement.names], statement.formats)
            types = tx.types or ()
            formats = tx.formats
            if (
                conn.prepare_threshold is None
                or pgconn.transaction_status != _IDLE
                or len(self._prepared) >= MAX_PREPARED
            ):
                pgconn.send_query_params(
                    statement.text, values, param_types=types, param_formats=formats
                )
                result = self._raise_for(await self._results(pgconn))
            else:
                try:
                    result = await self._run_prepared(
                        pgconn, statement.text, values, types, formats
                    )
                except psycopg.errors.InvalidSqlStatementName:
                    # psycopg deallocates every statement prepared on its connection after a
                    # rollback (or a DROP, an ALTER): prepare again. The statement never ran
                    # (the name is looked up first) and, outside a transaction, aborted none.
                    if pgconn.transaction_status != _IDLE:
                        raise
                    self._prepared.clear()
                    result = await self._run_prepared(
                        pgconn, statement.text, values, types, formats
                    )
            if result.status != _TUPLES_OK:
                return []
            tx.set_pgresult(result)
            return tx.load_rows(0, result.ntuples, tuple)

    async def _run_prepared(
        self,
        pgconn: PGconn,
        text: bytes,
        values: Sequence[Buffer | None],
        types: tuple[int, ...],
        formats: Sequence[pq.Format] | None,
    ) -> PGresult:
        key = (text, types)
        name = self._prepared.get(key)
        if name is None:
            self._serial += 1
            name = b"rota_%d" % self._serial
            pgconn.send_prepare(name, text, param_types=types)
            self._raise_for(await self._results(pgconn))
            self._prepared[key] = name
        pgconn.send_query_prepared(name, values, param_formats=formats)
        return self._raise_for(await self._results(pgconn))

    def _raise_for(self, results: list[PGresult]) -> PGresult:
        if not results:
            raise psycopg.InternalError("got no result from the statement")
        for result in results:
            status = result.status
            if status == _FATAL_ERROR:
                raise error_from_result(result, encoding=self._conn.info.encoding)
            if status != _TUPLES_OK and status != _COMMAND_OK:
                raise psycopg.InternalError(
                    f"unexpected result status: {pq.ExecStatus(status).name}"
                )
        return results[-1]

    async def _results(self, pgconn: PGconn) -> list[PGresult]:
        """The results of what was just sent, waiting on the socket without blocking. When
        interrupted (cancelled) mid-statement, the statement is cancelled on the server and its
        results read, within CANCEL_WAIT_S, or the connection closed: it is never handed back
        with a statement in flight."""
        try:
            return await _results(pgconn)
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            if pgconn.transaction_status == _ACTIVE:
                await self._cancel(pgconn)
            raise

    async def _cancel(self, pgconn: PGconn) -> None:
        try:
            async with asyncio.timeout(CANCEL_WAIT_S):
                await self._conn.cancel_safe(timeout=CANCEL_WAIT_S)
                await _results(pgconn)
        except BaseException as error:  # the interruption is re-raised by the caller
            log.debug("closing a connection whose statement was interrupted: %r", error)
            pgconn.finish()


async def _results(pgconn: PGconn) -> list[PGresult]:
    loop = asyncio.get_running_loop()
    fileno = pgconn.socket
    while pgconn.flush():
        if await _ready(loop, fileno, write=True):
            pgconn.consume_input()
    results: list[PGresult] = []
    while True:
        while pgconn.is_busy():
            await _ready(loop, fileno, write=False)
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:
            return results
        results.append(result)


async def _ready(loop: asyncio.AbstractEventLoop, fileno: int, *, write: bool) -> bool:
    """Wait until ``fileno`` is readable (or, with ``write``, writable or readable); whether
    it is readable."""
    ready: asyncio.Future[bool] = loop.create_future()
    loop.add_reader(fileno, _settle, ready, True)
    if write:
        loop.add_writer(fileno, _settle, ready, False)
    try:
        return await ready
    finally:
        loop.remove_reader(fileno)
        if write:
            loop.remove_writer(fileno)


def _settle(ready: asyncio.Future[bool], readable: bool) -> None:
    if not ready.done():
        ready.set_result(readable)
