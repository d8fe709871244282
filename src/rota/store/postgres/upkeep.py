"""What every worker's rescuer keeps up on PostgreSQL besides its rescues: the tables of the
days finished jobs go into (019_finished_by_day), and the planner's statistics and the dead
rows of the active jobs' table.

Statistics: rota_jobs_active holds only active jobs, so it is empty whenever nothing is
queued, and a vacuum or analyze of it then records no rows. Until autovacuum analyses it
again (up to autovacuum_naptime, a minute by default, after a burst arrives) every plan made
meanwhile takes the table for one row, and a plan kept for a connection's life (the claim's)
keeps that belief. The rescuer compares the statistics with the active jobs the counts
(017_counts) hold and analyses the table itself when they are far apart, one rescuer at a
time.

Dead rows: every claim and every end of a job leaves a dead row version in rota_jobs_active.
Autovacuum visits a database at most once per autovacuum_naptime (a minute by default), and
at 10,000 jobs a second a minute leaves over a million dead rows: the table grew to 230 MB and
its indexes to 150 MB around 10,000 live jobs, every claim walked the dead entries, and the
server's dirty pages outgrew its buffers (bench/day.md). The rescuer vacuums the table itself
once its dead rows reach ``VACUUM_FLOOR`` and outnumber the live ones, skipping it when
another vacuum (autovacuum's, another rescuer's) holds it: it stays tens of MB. Rows an open
transaction still sees cannot be removed: the next vacuum waits for VACUUM_FLOOR more to die.
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
#: The active jobs' table is vacuumed once this many of its row versions are dead (a few
#: seconds of a busy queue) and they outnumber its live rows: a large backlog's table, whose
#: vacuum reads it all, is left to autovacuum (004_autovacuum).
VACUUM_FLOOR = 50_000


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


async def vacuum_active(conn: psycopg.AsyncConnection[Any], *, left: int = 0) -> int | None:
    """Vacuum rota_jobs_active if at least ``VACUUM_FLOOR`` of its row versions died since
    the last vacuum, which left ``left`` dead, and the dead outnumber the live (the server's
    statistics, up to a second behind), unless another vacuum of it is running. The dead rows
    this vacuum could not remove (an old snapshot still sees them), or None if it did not run:
    pass them as ``left`` next time, so that rows an open transaction holds back are not
    vacuumed again and again. Not within a transaction: ``conn`` autocommits."""
    dead, live = await _dead_and_live(conn)
    if dead - left < VACUUM_FLOOR or dead <= live:
        return None
    try:
        # Never prepared: VACUUM is not a statement a session keeps a plan of.
        await conn.execute("VACUUM (SKIP_LOCKED) rota_jobs_active", prepare=False)
    except (psycopg.errors.QueryCanceled, psycopg.errors.InsufficientPrivilege) as error:
        log.debug("could not vacuum the active jobs' table: %s", error)
        return None
    remaining, _ = await _dead_and_live(conn)
    log.debug(
        "vacuumed the active jobs' table: %d dead rows beside %d live, %d left",
        dead,
        live,
        remaining,
    )
    return remaining


async def _dead_and_live(conn: psycopg.AsyncConnection[Any]) -> tuple[int, int]:
    row = await (await conn.execute(query("active_dead_rows"))).fetchone()
    return (int(row[0]), int(row[1])) if row is not None else (0, 0)
