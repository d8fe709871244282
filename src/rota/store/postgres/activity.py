"""The activity tallies on PostgreSQL (029_activity), read for the kind and queue pages: the
rows of one queue's or kind's minutes, through the index of that filter."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from rota.domain.activity import ActivityBucket, ActivityRow, ErrorGroup, assemble, check_window
from rota.store.postgres.queries import query

#: The filter of "activity" and "top_errors" for each of (queue given, kind given): constant
#: SQL, the values sent as parameters.
_FILTERS = {
    (False, False): "",
    (True, False): "AND queue = %(queue)s",
    (False, True): "AND kind = %(kind)s",
    (True, True): "AND queue = %(queue)s AND kind = %(kind)s",
}


def _statement(name: str, queue: str | None, kind: str | None) -> sql.Composed:
    text = _FILTERS[queue is not None, kind is not None]
    return sql.SQL(query(name).rstrip(";")).format(filter=sql.SQL(text))


async def _now(conn: psycopg.AsyncConnection[Any], now: datetime | None) -> datetime:
    if now is not None:
        return now
    row = await (await conn.execute("SELECT now()")).fetchone()
    assert row is not None
    at: datetime = row[0]
    return at


async def buckets(
    conn: psycopg.AsyncConnection[Any],
    since: datetime,
    width: timedelta,
    now: datetime | None,
    queue: str | None,
    kind: str | None,
) -> list[ActivityBucket]:
    at = await _now(conn, now)
    check_window(since, width, at)  # InvalidInput before the query
    cursor = await conn.execute(
        _statement("activity", queue, kind),
        {
            "since": since,
            "width_s": int(width.total_seconds()),
            "now": at,
            "queue": queue,
            "kind": kind,
        },
    )
    rows = [ActivityRow(*row) for row in await cursor.fetchall()]
    return assemble(rows, since, width, at)


async def top_errors(
    conn: psycopg.AsyncConnection[Any],
    since: datetime,
    now: datetime | None,
    queue: str | None,
    kind: str | None,
    limit: int,
) -> list[ErrorGroup]:
    at = await _now(conn, now)
    cursor = await conn.execute(
        _statement("top_errors", queue, kind),
        {"since": since, "now": at, "queue": queue, "kind": kind, "limit": max(0, limit)},
    )
    return [
        ErrorGroup(fingerprint, int(total), last_at, sample)
        for fingerprint, total, last_at, sample in await cursor.fetchall()
    ]
