"""What every worker's rescuer keeps up on PostgreSQL besides its rescues: the tables of the
days finished jobs go into (019_finished_by_day), and the planner's statistics of the active
jobs' table.

Statistics: rota_jobs_active holds only active jobs, so it is empty whenever nothing is
queued, and a vacuum or analyze of it then records no rows. Until autovacuum analyses it
again (up to autovacuum_naptime, a minute by default, after a burst arrives) every plan made
meanwhile takes the table for one row, and a plan kept for a connection's life (the claim's)
keeps that belief. The rescuer compares the statistics with the active jobs the counts
(017_counts) hold and analyses the table itself when they are far apart, one rescuer at a
time.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from rota.store.postgres.queries import query

log = logging.getLogger("rota.store.postgres")

#: Days made ahead of today: a worker fleet that stops rescuing for this long (all workers
#: down) still finishes into day tables when it comes back.
DAYS_AHEAD = 3
#: The statistics are refreshed once the active jobs number at least this many...
STALE_FLOOR = 1_000
#: ... and this many times what the statistics say.
STALE_FACTOR = 4


async def add_days(conn: psycopg.AsyncConnection[Any]) -> None:
    """Make today's table and the next ``DAYS_AHEAD`` days' where missing."""
    await conn.execute(query("add_days"), {"ahead": DAYS_AHEAD})


def stale(estimated: int, counted: int) -> bool:
    """Whether statistics that estimate ``estimated`` rows (negative: never analysed) are
    too far below the ``counted`` active jobs."""
    return counted >= STALE_FLOOR and counted > STALE_FACTOR * max(estimated, 0)


async def refresh_statistics(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Analyse rota_jobs_active if its statistics are stale (see ``stale``) and no other
    rescuer is doing it; whether it did."""
    [(estimated, counted)] = await (await conn.execute(query("active_statistics"))).fetchall()
    if not stale(int(estimated), int(counted)):
        return False
    async with conn.transaction():
        [(mine,)] = await (await conn.execute(query("analyze_turn"))).fetchall()
        if not mine:
            return False
        await conn.execute("ANALYZE rota_jobs_active")
    log.info(
        "analysed the active jobs' table: its statistics said %d row(s), the counts %d",
        estimated,
        counted,
    )
    return True
