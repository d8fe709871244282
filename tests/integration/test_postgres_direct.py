"""The store's one-statement calls go straight through libpq (PoolConnection.run, direct.py):
the same rows and the same errors as a cursor, prepared once per connection (and never behind
a transaction pooler or inside a transaction), prepared again after psycopg drops every
prepared statement, and never handed back to the pool with a statement in flight."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from rota.store.postgres.connect import ADAPTERS, PoolConnection

pytestmark = pytest.mark.postgres

#: A statement of every kind of value the store's statements pass and read, each placeholder
#: form included (a name used twice, binary, text, a literal percent sign).
STATEMENT = """
SELECT %(n)s::int + %(n)s::int AS twice, %(big)s::bigint AS big, %(text)s::text AS text,
       %(at)s::timestamptz AS at, %(ids)b::bigint[] AS ids, %(raw)t::text AS raw,
       %(none)s::text AS none, '{"a": [1, 2]}'::json AS doc, 1.5::numeric AS num,
       '100%%' AS percent, true AS flag
"""
VALUES = {
    "n": 21,
    "big": 2**40,
    "text": "héllo",
    "at": datetime(2026, 12, 5, 10, 30, tzinfo=UTC),
    "ids": [1, 2, 3],
    "raw": "7",
    "none": None,
}


async def _connect(url: str, *, prepare: bool = True) -> PoolConnection:
    return await PoolConnection.connect(
        url, autocommit=True, prepare_threshold=0 if prepare else None, context=ADAPTERS
    )


@pytest.fixture
async def conn(pg_url: str) -> AsyncIterator[PoolConnection]:
    made = await _connect(pg_url)
    try:
        yield made
    finally:
        await made.close()


async def _prepared(conn: psycopg.AsyncConnection[Any]) -> list[str]:
    async with conn.cursor() as cursor:
        await cursor.execute(
            "SELECT name FROM pg_prepared_statements WHERE name LIKE 'rota%%' ORDER BY name",
            prepare=False,
        )
        return [row[0] for row in await cursor.fetchall()]


async def test_rows_are_what_a_cursor_returns(conn: PoolConnection) -> None:
    rows = await conn.run(STATEMENT, VALUES)

    by_cursor = await (await conn.execute(STATEMENT, VALUES)).fetchall()
    assert rows == by_cursor
    assert [type(value) for value in rows[0]] == [type(value) for value in by_cursor[0]]
    assert rows == [
        (
            42,
            2**40,
            "héllo",
            datetime(2026, 12, 5, 10, 30, tzinfo=UTC),
            [1, 2, 3],
            "7",
            None,
            {"a": [1, 2]},
            Decimal("1.5"),
            "100%",
            True,
        )
    ]


async def test_a_statement_without_rows_returns_none_and_commits(conn: PoolConnection) -> None:
    await conn.execute("CREATE TEMP TABLE t (v int)")
    assert await conn.run("INSERT INTO t VALUES (%(v)s)", {"v": 1}) == []
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert await conn.run("SELECT v FROM t", {}) == [(1,)]


async def test_a_statement_is_prepared_once_per_list_of_parameter_types(
    conn: PoolConnection,
) -> None:
    for n in range(3):
        assert await conn.run("SELECT %(n)s::bigint", {"n": n}) == [(n,)]
    assert await _prepared(conn) == ["rota_1"]
    # psycopg types an int by its size: another list of parameter types, another statement.
    assert await conn.run("SELECT %(n)s::bigint", {"n": 2**40}) == [(2**40,)]
    assert await conn.run("SELECT %(n)s::bigint", {"n": 4}) == [(4,)]
    assert await _prepared(conn) == ["rota_1", "rota_2"]


async def test_errors_are_psycopgs_own_and_leave_the_connection_usable(
    conn: PoolConnection,
) -> None:
    with pytest.raises(psycopg.errors.DivisionByZero):
        await conn.run("SELECT 1 / %(zero)s::int", {"zero": 0})
    with pytest.raises(psycopg.errors.UndefinedTable):
        await conn.run("SELECT * FROM no_such_table WHERE x = %(x)s", {"x": 1})
    await conn.execute("CREATE TEMP TABLE u (v int PRIMARY KEY)")
    await conn.run("INSERT INTO u VALUES (%(v)s)", {"v": 1})
    with pytest.raises(psycopg.errors.UniqueViolation):
        await conn.run("INSERT INTO u VALUES (%(v)s)", {"v": 1})
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert await conn.run("SELECT count(*) FROM u WHERE v = %(v)s", {"v": 1}) == [(1,)]


async def test_a_placeholder_without_a_value_or_a_lone_percent_is_refused(
    conn: PoolConnection,
) -> None:
    with pytest.raises(KeyError):
        await conn.run("SELECT %(missing)s::int", {})
    with pytest.raises(ValueError, match="lone"):
        await conn.run("SELECT 5 % 2", {})
    assert await conn.run("SELECT 5 %% 2 AS r", {}) == [(1,)]


async def test_a_rollback_that_drops_every_prepared_statement_is_survived(
    conn: PoolConnection,
) -> None:
    assert await conn.run("SELECT %(x)s::int", {"x": 1}) == [(1,)]

    # psycopg prepares its own statement in a transaction, then deallocates every prepared
    # statement of the connection (ours too) after the rollback.
    async def fail_in_a_transaction() -> None:
        async with conn.transaction():
            await conn.execute("SELECT %s::int", [1])
            await conn.execute("SELECT 1 / 0")

    with pytest.raises(psycopg.errors.DivisionByZero):
        await fail_in_a_transaction()
    assert await _prepared(conn) == []

    assert await conn.run("SELECT %(x)s::int", {"x": 2}) == [(2,)]
    assert await _prepared(conn) == ["rota_2"]


async def test_nothing_is_prepared_in_a_transaction_or_behind_a_pooler(pg_url: str) -> None:
    unprepared = await _connect(pg_url, prepare=False)
    try:
        assert await unprepared.run("SELECT %(x)s::int", {"x": 1}) == [(1,)]
        assert await _prepared(unprepared) == []
    finally:
        await unprepared.close()

    conn = await _connect(pg_url)
    try:
        async with conn.transaction():
            assert await conn.run("SELECT %(x)s::int", {"x": 1}) == [(1,)]
        assert await _prepared(conn) == []
    finally:
        await conn.close()


async def test_an_interrupted_statement_is_cancelled_before_the_connection_is_used_again(
    conn: PoolConnection,
) -> None:
    running = asyncio.create_task(conn.run("SELECT pg_sleep(%(s)s::float)", {"s": 60}))
    async with Watcher(conn) as watch:
        await watch.until_sleeping()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    # Cancelled on the server and its results read: the connection is ready at once.
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert await conn.run("SELECT %(x)s::int", {"x": 3}) == [(3,)]


class Watcher:
    """Another connection that waits until ``conn``'s backend runs pg_sleep."""

    def __init__(self, conn: PoolConnection) -> None:
        self._conn = conn
        self._watch: psycopg.AsyncConnection[Any] | None = None

    async def __aenter__(self) -> Watcher:
        self._watch = await psycopg.AsyncConnection.connect(self._conn.info.dsn, autocommit=True)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._watch is not None
        await self._watch.close()

    async def until_sleeping(self) -> None:
        assert self._watch is not None
        pid = self._conn.info.backend_pid
        # One round trip a look, no sleep: bounded, as the statement was sent before this.
        for _ in range(20_000):
            cursor = await self._watch.execute(
                "SELECT wait_event FROM pg_stat_activity WHERE pid = %s", [pid]
            )
            row = await cursor.fetchone()
            if row is not None and row[0] == "PgSleep":
                return
        raise AssertionError("the statement never started")
