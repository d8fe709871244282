"""Pickup latency: single enqueues at 50/s into an idle worker, from commit to handler start.

The enqueuer notes ``time.time()`` when its enqueue call has returned (the commit is done);
the handler notes ``time.time()`` when it starts. Same host, one clock. A start can precede
the enqueuer's note by the time the commit's answer takes to come back: such small negative
values are kept as they are.
"""

from __future__ import annotations

import asyncio
import time

from bench.harness import Bench, Poller, percentile, workers
from bench.systems import make

NAME = "latency"
TITLE = "Pickup latency on PostgreSQL (single enqueues at 50/s, idle worker)"
RATE_PER_S = 50


async def run(bench: Bench) -> None:
    count = bench.settings.size(1_000, 150)  # 20 s at 50/s (3 s quick)
    for name in bench.settings.systems:
        system = make(name, bench.settings)
        await system.setup()
        try:
            for _ in range(bench.runs):
                await system.reset()
                committed: dict[int, float] = {}
                async with workers(
                    bench.settings,
                    name,
                    system.dsn,
                    processes=1,
                    concurrency=10,
                    handler="record",
                    extra=system.drain_env | {"BENCH_CONCURRENCY": "10", "BENCH_CLAIM_BATCH": "10"},
                ) as group:
                    mark = await system.watermark()
                    begin = time.monotonic()
                    for seq in range(count):
                        delay = begin + seq / RATE_PER_S - time.monotonic()
                        if delay > 0:
                            await asyncio.sleep(delay)
                        await system.enqueue_one("record", seq)
                        committed[seq] = time.time()
                    async with Poller(system.dsn, system.done_sql(mark, count)) as poller:
                        await poller.until(bool, timeout_s=60)
                started = {int(seq): at for seq, at in group.records()}
                missing = set(committed) - set(started)
                if missing:
                    raise RuntimeError(f"{name}: no start recorded for {len(missing)} jobs")
                waits = [1000 * (started[seq] - committed[seq]) for seq in committed]
                bench.record(
                    NAME,
                    "pickup latency p50",
                    name,
                    percentile(waits, 0.5),
                    unit="ms",
                    better="lower",
                )
                bench.record(
                    NAME,
                    "pickup latency p99",
                    name,
                    percentile(waits, 0.99),
                    unit="ms",
                    better="lower",
                )
        finally:
            await system.close()
