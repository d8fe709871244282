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


async def refresh_statistics(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Analyse rota_jobs_active if its statistics fall far behind the active jobs the counts
    hold (at least ``STALE_FLOOR`` of them, and ``STALE_FACTOR`` times the estimate) and no
    other rescuer is at it: one statement (019's rota_jobs_analyze_active). Whether it did."""
    params = {"floor": STALE_FLOOR, "factor": STALE_FACTOR}
    [(analysed,)] = await (await conn.execute(query("analyze_active"), params)).fetchall()
    if analysed:
        log.info("analysed the active jobs' table: its statistics were far behind its jobs")
    return bool(analysed)
