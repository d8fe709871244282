"""The listener: one dedicated connection LISTENing for new jobs and schedule changes, kept
alive through faults."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg

from rota.domain.retry import RECONNECT_BACKOFF
from rota.store.postgres.connect import Dialer, behind_pooler, connection_defaults
from rota.store.postgres.rows import micros

log = logging.getLogger("rota.store.postgres")

LISTEN_CHANNEL = "rota_jobs"
#: Announced when a schedule is created, changed or resumed (not when one fires).
SCHEDULES_CHANNEL = "rota_schedules"
#: Announced by the statements that make jobs terminal (rota.store.postgres.queries).
FINISHED_CHANNEL = "rota_finished"


async def listen(
    conninfo: str,
    on_due: Callable[[datetime | None], None] | None,
    *,
    on_schedules: Callable[[], None] | None = None,
    on_finished: Callable[[], None] | None = None,
    check_every_s: float = 5.0,
) -> None:
    """LISTEN for new jobs (with ``on_due``), schedule changes (with ``on_schedules``) and
    terminal transitions (with ``on_finished``) on a dedicated connection until cancelled.

    Calls ``on_due(run_at)`` for each notification (the earliest run_at of the jobs it
    announces), ``on_schedules()`` for each schedule change, ``on_finished()`` for each
    statement that finished jobs, and each of them after every (re)connect, since anything
    may have happened while nobody listened. A connection that
    stops answering a periodic probe is treated as dead (half-open TCP). A lost connection
    is replaced at once; failed attempts are retried on the reconnect backoff (capped at
    RECONNECT_BACKOFF.cap), so the listener is back within that cap of the server accepting
    connections again.
    """
    dialer = Dialer(
        conninfo,
        {"autocommit": True, "prepare_threshold": None, **connection_defaults(conninfo)},
        what="listener",
    )
    warned_pooler = False
    losses = 0
    while True:
        conn = await dialer.dial()
        try:
            async with conn:
                if await behind_pooler(conn) and not warned_pooler:
                    # Session pooling keeps LISTEN; transaction pooling silently loses it.
                    log.warning(
                        "the listener's connection goes through a pooler: LISTEN needs a "
                        "direct connection (or session pooling) to hear notifications"
                    )
                    warned_pooler = True
                if on_due is not None:
                    await conn.execute(f"LISTEN {LISTEN_CHANNEL}")
                if on_schedules is not None:
                    await conn.execute(f"LISTEN {SCHEDULES_CHANNEL}")
                if on_finished is not None:
                    await conn.execute(f"LISTEN {FINISHED_CHANNEL}")
                if on_due is not None:
                    on_due(None)
                if on_schedules is not None:
                    on_schedules()
                if on_finished is not None:
                    on_finished()
                while True:
                    async for notice in conn.notifies(timeout=check_every_s):
                        if notice.channel == SCHEDULES_CHANNEL and on_schedules is not None:
                            on_schedules()
                        elif notice.channel == FINISHED_CHANNEL and on_finished is not None:
                            on_finished()
                        elif on_due is not None:
                            on_due(due_at(notice.payload))
                    await probe(conn, timeout_s=min(3.0, check_every_s))
                    losses = 0  # the session proved itself: the next loss reconnects at once
        except (psycopg.Error, OSError, TimeoutError) as error:
            log.warning("listener connection lost, reconnecting: %s", error)
            # A session that dies as soon as it is made (again and again) must not spin.
            if losses:
                await asyncio.sleep(RECONNECT_BACKOFF.delay(losses).total_seconds())
            losses += 1


async def probe(conn: psycopg.AsyncConnection[Any], *, timeout_s: float) -> None:
    """A round trip on the listener's connection, or TimeoutError. On a half-open socket the
    query never answers, and cancelling it would wait for the server again: stop waiting at
    once and let the connection be closed."""
    probe = asyncio.ensure_future(conn.execute("SELECT 1"))
    done, _ = await asyncio.wait({probe}, timeout=timeout_s)
    if not done:
        probe.cancel()
        probe.add_done_callback(lambda task: task.cancelled() or task.exception())
        raise TimeoutError(f"the listener's connection did not answer within {timeout_s:g}s")
    probe.result()


def due_at(payload: str) -> datetime | None:
    """The run_at announced by a notification ("<queue> <epoch us>"); None if unreadable."""
    _, _, digits = payload.rpartition(" ")
    return micros(int(digits)) if digits.isascii() and digits.isdigit() else None
