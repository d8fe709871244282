"""The listener: one dedicated connection LISTENing for new jobs and schedule changes, kept
alive through faults."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from rota.store.postgres.rows import micros

log = logging.getLogger("rota.store.postgres")

LISTEN_CHANNEL = "rota_jobs"
#: Announced when a schedule is created, changed or resumed (not when one fires).
SCHEDULES_CHANNEL = "rota_schedules"


async def listen(
    conninfo: str,
    on_due: Callable[[datetime | None], None],
    *,
    on_schedules: Callable[[], None] | None = None,
    check_every_s: float = 5.0,
) -> None:
    """LISTEN for new jobs (and, with ``on_schedules``, schedule changes) on a dedicated
    connection until cancelled.

    Calls ``on_due(run_at)`` for each notification (the earliest run_at of the jobs it
    announces), ``on_schedules()`` for each schedule change, and both after every
    (re)connect, since anything may have happened while nobody listened. A connection that
    stops answering a periodic
    probe is treated as dead (half-open TCP); reconnects back off up to 5 s with jitter.
    """
    delay = 0.1
    failures = 0
    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(
                conninfo,
                autocommit=True,
                connect_timeout=10,
                **tcp_defaults(conninfo),
            )
        except (psycopg.Error, OSError) as error:
            # One warning per outage; the retries go to debug.
            failures += 1
            level = logging.WARNING if failures == 1 else logging.DEBUG
            log.log(level, "listener cannot connect, retrying: %s", error)
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 5.0)
            continue
        try:
            async with conn:
                await conn.execute(f"LISTEN {LISTEN_CHANNEL}")
                if on_schedules is not None:
                    await conn.execute(f"LISTEN {SCHEDULES_CHANNEL}")
                if failures:
                    log.info("listener reconnected after %d failed attempt(s)", failures)
                delay, failures = 0.1, 0
                on_due(None)
                if on_schedules is not None:
                    on_schedules()
                while True:
                    async for notice in conn.notifies(timeout=check_every_s):
                        if notice.channel == SCHEDULES_CHANNEL and on_schedules is not None:
                            on_schedules()
                        else:
                            on_due(due_at(notice.payload))
                    await probe(conn, timeout_s=min(3.0, check_every_s))
        except (psycopg.Error, OSError, TimeoutError) as error:
            failures += 1
            log.warning("listener connection lost, reconnecting: %s", error)
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 5.0)


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


def tcp_defaults(conninfo: str) -> dict[str, Any]:
    """TCP keepalives and a user timeout, unless the URL sets them: a peer that vanished
    (a partition, a half-open connection) is noticed in seconds, not TCP's minutes."""
    defaults = {
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 3,
        "keepalives_count": 3,
        "tcp_user_timeout": 20_000,
    }
    given = conninfo_to_dict(conninfo)
    return {key: value for key, value in defaults.items() if key not in given}


def due_at(payload: str) -> datetime | None:
    """The run_at announced by a notification ("<queue> <epoch us>"); None if unreadable."""
    _, _, digits = payload.rpartition(" ")
    return micros(int(digits)) if digits.isascii() and digits.isdigit() else None
