"""Enqueue on PostgreSQL: one job per call, and one bulk call of 100,000 jobs, each system by
its own fastest documented path (rota's ``App.enqueue_many`` goes through COPY from 2,000 jobs;
PgQueuer's list ``Queries.enqueue`` is one INSERT of arrays; Procrastinate's
``batch_defer_async`` one call; Oban for Python's ``enqueue_many`` one INSERT; DBOS, which has
no bulk enqueue, ``DBOSClient.enqueue_in_transaction`` once per workflow in one transaction).
The Python 3.12 peers (``bench.peers312``) time their loops in their own process. Systems alternate run by run; each run starts on an emptied
table after a warm-up (a few single calls and one bulk call of 2,000 jobs, not timed), and
empties it again when done.
"""

from __future__ import annotations

from bench.harness import Bench, progress
from bench.systems import System, make

NAME = "enqueue"
#: DBOS has no bulk enqueue: its bulk is one call per workflow in one transaction, over a tenth
#: of the batch (a rate, so it compares).
FRACTION = {"dbos": 10}
TITLE = "Enqueue on PostgreSQL"


async def run(bench: Bench) -> None:
    single = bench.settings.size(5_000, 500)
    bulk = bench.settings.size(100_000, 10_000)
    systems = [make(name, bench.settings) for name in bench.settings.systems]
    for system in systems:
        await system.setup()
    try:
        for index in range(bench.runs):
            progress(f"  -- run {index + 1} of {bench.runs}")
            for system in systems:
                await one(bench, system, single, bulk)
    finally:
        for system in systems:
            await system.close()


async def one(bench: Bench, system: System, single: int, bulk: int) -> None:
    await _warm(system)
    await system.reset()
    elapsed = await system.timed_singles("noop", single)
    bench.record(
        NAME, "single enqueue, 1 job per call", system.name, single / elapsed, unit="jobs/s"
    )
    await system.reset()
    bulk //= FRACTION.get(system.name, 1)
    elapsed = await system.timed_bulk("noop", bulk)
    bench.record(
        NAME,
        "bulk enqueue, one call",
        system.name,
        bulk / elapsed,
        unit="jobs/s",
        note=f"{bulk:,} jobs",
    )
    # Leave nothing for autovacuum to analyse or clean during the next system's run.
    await system.reset()


async def _warm(system: System) -> None:
    for seq in range(50):
        await system.enqueue_one("noop", seq)
    await system.enqueue_bulk("noop", 2_000)
