"""Schedules: lag from slot time to handler start, 100 schedules firing every second (rota).

Needs ``App.schedule``: the scenario skips, saying so, until it exists. The worker
process defines the schedules in code (``bench.apps.define_schedules``), upserts them when it
starts and fires them as one of its services. The first 2 seconds of slots are left out
(the firer's first pass). PgQueuer's and Procrastinate's schedules are cron-based with
minute resolution, so no peer can fire every second: rota only.
"""

from __future__ import annotations

import asyncio

from bench.harness import Bench, Skip, percentile, workers
from bench.systems import make
from rota import App

NAME = "schedules"
TITLE = "Schedule lag, 100 schedules every second (PostgreSQL)"
SCHEDULES = 100


async def run(bench: Bench) -> None:
    if not hasattr(App, "schedule"):
        raise Skip("App.schedule does not exist: no schedules to fire")
    seconds = bench.settings.size(20, 6)
    system = make("rota", bench.settings)
    await system.setup()
    try:
        for _ in range(bench.runs):
            await system.reset()
            async with workers(
                bench.settings,
                "rota",
                system.dsn,
                processes=1,
                concurrency=200,
                extra={"BENCH_SCHEDULES": str(SCHEDULES)},
            ) as group:
                await asyncio.sleep(seconds)
            rows = group.records()
            if not rows:
                raise RuntimeError("no schedule run was recorded")
            first = min(slot for _, slot, _ in rows if slot is not None)
            lags = [
                1000 * (started - slot)
                for _, slot, started in rows
                if slot is not None and slot >= first + 2
            ]
            pairs = [(name, slot) for name, slot, _ in rows]
            duplicates = len(pairs) - len(set(pairs))
            bench.record(
                NAME, "schedule lag p50", "rota", percentile(lags, 0.5), unit="ms", better="lower"
            )
            bench.record(
                NAME, "schedule lag p99", "rota", percentile(lags, 0.99), unit="ms", better="lower"
            )
            bench.record(
                NAME,
                "runs of one slot beyond the first",
                "rota",
                duplicates,
                unit="",
                better="lower",
            )
            bench.note(NAME, f"{len(lags)} runs measured in one run of {seconds} s")
    finally:
        await system.close()
