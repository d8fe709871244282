"""Enqueue: one job per call, and one bulk call of 100,000 jobs (PostgreSQL)."""

from __future__ import annotations

import time

from bench.harness import Bench
from bench.systems import make

NAME = "enqueue"
TITLE = "Enqueue on PostgreSQL"


async def run(bench: Bench) -> None:
    single = bench.settings.size(5_000, 500)
    bulk = bench.settings.size(100_000, 10_000)
    for name in bench.settings.systems:
        system = make(name, bench.settings)
        await system.setup()
        try:
            for _ in range(bench.runs):
                await system.reset()
                started = time.perf_counter()
                for seq in range(single):
                    await system.enqueue_one("noop", seq)
                elapsed = time.perf_counter() - started
                bench.record(
                    NAME, "single enqueue, 1 job per call", name, single / elapsed, unit="jobs/s"
                )
                await system.reset()
                started = time.perf_counter()
                await system.enqueue_bulk("noop", bulk)
                elapsed = time.perf_counter() - started
                bench.record(
                    NAME,
                    "bulk enqueue, one call",
                    name,
                    bulk / elapsed,
                    unit="jobs/s",
                    note=f"{bulk:,} jobs",
                )
        finally:
            await system.close()
