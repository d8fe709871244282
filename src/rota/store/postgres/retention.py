"""Retention on PostgreSQL: finished jobs by day (019_finished_by_day), dropped whole.

Finished jobs live in one table per UTC day of their finish, made ahead by every worker's
rescuer (``add_days``). A day goes as a table once all of it is older than the cutoff: no
dead rows, no vacuum, almost no WAL, and the only exclusive lock is a brief one, given up
rather than waited for. Jobs kept outside the day tables (the default partition, where a day
made late left them, and a table upgraded from before 019) are deleted row by row, in
batches, as before. The days themselves are made ahead by the rescuers (upkeep.py).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from rota.domain.wording import counted
from rota.store.postgres.queries import query

log = logging.getLogger("rota.store.postgres")

_DAY = re.compile(r"^rota_jobs_(until_)?(\d{4})(\d{2})(\d{2})$")
_EARLIEST = datetime(1, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Leaf:
    """A table of finished jobs: a day, ``[lower, upper)``; an upgraded table (no lower
    bound); or the default partition (no bounds)."""

    name: str
    lower: datetime | None
    upper: datetime | None

    @property
    def is_day(self) -> bool:
        return self.lower is not None

    @classmethod
    def named(cls, name: str) -> Leaf:
        found = _DAY.match(name)
        if found is None:
            return cls(name, None, None)
        day = datetime(int(found[2]), int(found[3]), int(found[4]), tzinfo=UTC)
        if found[1]:
            return cls(name, None, day)
        return cls(name, day, day + timedelta(days=1))


async def leaves(conn: psycopg.AsyncConnection[Any]) -> list[Leaf]:
    rows = await (await conn.execute(query("finished_leaves"))).fetchall()
    return sorted((Leaf.named(name) for (name,) in rows), key=lambda leaf: leaf.name)


def _with_leaf(name: str, leaf: Leaf) -> sql.Composed:
    return sql.SQL(query(name)).format(leaf=sql.Identifier(leaf.name))


async def prune(conn: psycopg.AsyncConnection[Any], older_than: datetime, limit: int) -> int:
    """One pass: the oldest table of finished jobs that is wholly older than ``older_than``,
    if any, goes whole (however many jobs it holds); otherwise at most ``limit`` jobs kept
    outside day tables that finished before it. How many jobs went; the long results kept
    apart (025) of jobs gone go too."""
    gone = await _prune_jobs(conn, older_than, limit)
    if gone:
        await conn.execute(query("prune_results"))
    return gone


async def _prune_jobs(conn: psycopg.AsyncConnection[Any], older_than: datetime, limit: int) -> int:
    found = await leaves(conn)
    whole = [leaf for leaf in found if leaf.upper is not None and leaf.upper <= older_than]
    if whole:
        return await drop(conn, min(whole, key=lambda leaf: leaf.upper or _EARLIEST), older_than)
    gone = 0
    for leaf in found:
        if leaf.is_day or gone >= limit:
            continue
        cursor = await conn.execute(
            _with_leaf("prune_rows", leaf), {"older_than": older_than, "limit": limit - gone}
        )
        row = await cursor.fetchone()
        gone += int(row[0]) if row else 0
    if gone < limit:
        await conn.execute(query("prune_tally"), {"older_than": older_than})
    return gone


async def drop(conn: psycopg.AsyncConnection[Any], leaf: Leaf, older_than: datetime) -> int:
    """Drop ``leaf`` in one statement (019's rota_jobs_drop_day); how many jobs it held (0
    when another pruner was at it or a lock was not had in time: nothing changed, and the
    next pass tries again)."""
    params = {
        "leaf": leaf.name,
        "day_start": leaf.lower or _EARLIEST,
        "day_end": leaf.upper,
        "older_than": older_than,
    }
    [(gone,)] = await (await conn.execute(query("drop_day"), params)).fetchall()
    if gone is None:
        log.info("finished jobs of %s not dropped yet: their table is in use", leaf.name)
        return 0
    log.info("dropped %s: %s", leaf.name, counted(gone, "finished job"))
    return int(gone)
