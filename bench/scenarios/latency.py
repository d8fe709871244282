"""Pickup latency: single enqueues at 50/s into an idle, warm worker, from commit to handler
start. Systems alternate run by run.

The enqueuer notes ``time.time()`` when its enqueue call has returned (the commit is done);
the handler notes ``time.time()`` when it starts. Same host, one clock. A start can precede
the enqueuer's note by the time the commit's answer takes to come back: such small negative
values are kept as they are. Before the timed enqueues, the worker runs 100 jobs (warm-up).
"""

from __future__ import annotations

import asyncio
import time

from bench.harness import Bench, Poller, Settings, percentile, progress, workers
from bench.systems import System, make

NAME = "latency"
TITLE = "Pickup latency on PostgreSQL (single enqueues at 50/s, idle worker)"
RATE_PER_S = 50
WARM_UP = 100


async def run(bench: Bench) -> None:
    count = bench.settings.size(1_000, 150)  # 20 s at 50/s (3 s quick)
    systems = [make(name, bench.settings) for name in bench.settings.systems]
    for system in systems:
        await system.setup()
    try:
        for index in range(bench.runs):
            progress(f"  -- run {index + 1} of {bench.runs}")
            for system in systems:
                await one(bench, system, count)
    finally:
        for system in systems:
            await system.close()


#: The one idle worker's settings (added to the system's drain settings).
WORKER_ENV = {"BENCH_CONCURRENCY": "10", "BENCH_CLAIM_BATCH": "10"}


async def pickups(system: System, count: int) -> dict[int, float]:
    """Into ``system``'s started worker: WARM_UP no-op jobs, a pause to idle, then ``count``
    ``record`` jobs at RATE_PER_S, one per call; returns once all have run, with the instant
    each enqueue call returned (its commit), by the job's ``seq``."""
    committed: dict[int, float] = {}
    mark = await system.watermark()
    async with Poller(system.dsn, system.done_sql(mark, WARM_UP)) as poller:
        await system.enqueue_bulk("noop", WARM_UP)
        await poller.until(bool, timeout_s=60)
    await asyncio.sleep(0.5)  # idle again
    mark = await system.watermark()
    begin = time.monotonic()
    for seq in range(count):
        delay = begin + seq / RATE_PER_S - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        committed[seq] = await system.enqueue_noted("record", seq)
    async with Poller(system.dsn, system.done_sql(mark, count)) as poller:
        await poller.until(bool, timeout_s=60)
    return committed


async def timed_pickups(
    settings: Settings, system: System, count: int, extra: dict[str, str] | None = None
) -> tuple[dict[int, float], dict[int, float]]:
    """``pickups`` into one fresh worker of ``system`` (its environment plus ``extra``): the
    instant each enqueue returned and the instant each handler started, by ``seq``."""
    await system.reset()
    async with workers(
        settings,
        system.name,
        system.dsn,
        processes=1,
        concurrency=10,
        handler="record",
        extra=system.drain_env | WORKER_ENV | (extra or {}),
        argv=system.worker_argv,
    ) as group:
        committed = await pickups(system, count)
    started = {int(seq): at for seq, at in group.records()}
    missing = set(committed) - set(started)
    if missing:
        raise RuntimeError(f"{system.name}: no start recorded for {len(missing)} jobs")
    return committed, started


async def one(bench: Bench, system: System, count: int) -> None:
    committed, started = await timed_pickups(bench.settings, system, count)
    waits = [1000 * (started[seq] - committed[seq]) for seq in committed]
    for label, fraction in (("p50", 0.5), ("p99", 0.99)):
        bench.record(
            NAME,
            f"pickup latency {label}",
            system.name,
            percentile(waits, fraction),
            unit="ms",
            better="lower",
        )
