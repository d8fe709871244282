"""T25 / T26: the LISTEN connection killed or half-open, with a 60 s poll so that only a
notification or the listener's own resync can wake an idle worker.

(a) ``pg_terminate_backend`` on the listener, (b) the listener's connection alone blackholed
by the chaos proxy (statement-matched: the worker's other connections pass). A job enqueued
during the gap must start soon after the listener is back (its reconnect triggers a full
claim), the listener must be back within 15 s, the worker must not spin while disconnected,
and the listener's session is never left ``idle in transaction``.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from rota.domain.job import JobSpec
from rota.store import Store
from tests.chaos.conftest import CHAOS_OPTIONS, proxied, through
from tests.support.chaosfleet import ChaosFleet
from tests.support.history import START, read_events
from tests.support.processes import WorkerProcess, eventually
from tests.support.proxy import ChaosProxy

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

POLL = replace(CHAOS_OPTIONS, poll_s=60.0)
BACK_WITHIN_S = 15.0


@pytest.fixture
def database_url(pg_url: str) -> str:
    return pg_url


async def listener_rows(url: str) -> list[tuple[int, str, str]]:
    """(pid, state, application) of every LISTEN session on this database."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT pid, state, backend_start::text FROM pg_stat_activity "
            "WHERE query LIKE 'LISTEN %%' AND datname = current_database()"
        )
        return [tuple(row) for row in await cursor.fetchall()]  # type: ignore[misc]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def started(fleet: ChaosFleet, job_id: int) -> float | None:
    return next(
        (e.wall for e in read_events(fleet.history) if e.job == job_id and e.event == START),
        None,
    )


async def idle_worker(fleet: ChaosFleet, store: Store, url: str) -> WorkerProcess:
    worker = await fleet.start_ready("w", poll_s=60.0)
    await eventually(lambda: listener_rows(url), what="the LISTEN session")
    [warm] = await store.enqueue([JobSpec(kind="work", payload={"s": 0})])
    await eventually(lambda: started(fleet, warm.job.id), within_s=5, what="a notified pickup")
    return worker


async def test_a_terminated_listener_reconnects_and_picks_up_what_was_enqueued_meanwhile(
    fleet: ChaosFleet, store: Store, pg_url: str
) -> None:
    await idle_worker(fleet, store, pg_url)
    [(pid, _, _)] = await listener_rows(pg_url)
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute("SELECT pg_terminate_backend(%s)", [pid])
    killed = time.time()
    [gap] = await store.enqueue([JobSpec(kind="work", payload={"s": 0})])
    start = await eventually(
        lambda: started(fleet, gap.job.id), within_s=BACK_WITHIN_S, what="the gap job to start"
    )
    rows = await eventually(
        lambda: listener_rows(pg_url), within_s=BACK_WITHIN_S, what="a new LISTEN session"
    )
    assert [row[0] for row in rows] != [pid]
    assert all(state != "idle in transaction" for _, state, _ in rows)
    print(f"gap job started {start - killed:.2f}s after the listener was killed")


@pytest.mark.timeout(120)
async def test_a_half_open_listener_is_replaced_within_fifteen_seconds_without_spinning(
    fleet: ChaosFleet, store: Store, pg_url: str, proxies: list[ChaosProxy]
) -> None:
    proxy = proxied(pg_url, proxies)
    worker = await fleet.start_ready("w", database_url=through(proxy, pg_url), poll_s=60.0)
    await eventually(lambda: listener_rows(pg_url), what="the LISTEN session")
    [warm] = await store.enqueue([JobSpec(kind="work", payload={"s": 0})])
    await eventually(lambda: started(fleet, warm.job.id), within_s=5, what="a notified pickup")
    [(pid, _, _)] = await listener_rows(pg_url)
    assert proxy.cut(lambda link: link.sent(b"LISTEN ")) == 1  # only the listener goes dark
    cut = time.time()
    cpu_before = cpu_seconds(worker.pid)
    [gap] = await store.enqueue([JobSpec(kind="work", payload={"s": 0})])
    states: set[str] = set()

    async def back() -> float | None:
        rows = await listener_rows(pg_url)
        states.update(state for _, state, _ in rows)
        if any(row[0] != pid for row in rows):
            return await started(fleet, gap.job.id)
        return None

    start = await eventually(back, within_s=60, every_s=0.5, what="the listener to come back")
    elapsed = time.time() - cut
    cpu = (cpu_seconds(worker.pid) - cpu_before) / elapsed
    print(f"gap job started {start - cut:.1f}s after the cut; worker CPU {cpu:.1%} of a core")
    assert "idle in transaction" not in states
    assert cpu < 0.10, "the worker spins while its listener is cut off"
    assert start - cut <= BACK_WITHIN_S, f"listener back only after {start - cut:.1f}s"
    _ = asyncio
