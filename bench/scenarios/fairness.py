"""Fairness: tenant A has 200,000 due jobs; tenant B then enqueues 100. With 8 slots
and 10 ms jobs on PostgreSQL: the time until all of B's jobs have started, and the drain rate
with fair claiming on and off.

Skips, saying so, until the worker has a fairness setting (a ``WorkerSettings`` field whose
name contains ``fair``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from bench.harness import Bench, Skip, scalar, workers
from bench.systems import Rota
from rota.runtime.worker_settings import WorkerSettings

NAME = "fairness"
#: How long to wait for all of B's jobs to start: with fair claims off they queue behind A's
#: whole backlog (minutes), and the note saying so is the result.
WAIT_S = 30
TITLE = "Fair claiming across tenants"


def fairness_setting() -> str | None:
    for field in dataclasses.fields(WorkerSettings):
        if "fair" in field.name:
            return field.name
    return None


async def run(bench: Bench) -> None:
    setting = fairness_setting()
    if setting is None:
        raise Skip("no fair-claiming setting on WorkerSettings")
    backlog = bench.settings.size(200_000, 20_000)
    window_s = bench.settings.size(10, 3)
    system = Rota(bench.settings)
    await system.setup()
    try:
        for fair in (True, False):
            label = "on" if fair else "off"
            for _ in range(bench.runs):
                await system.reset()
                await system.enqueue_bulk("ten_ms", backlog, tenant="A")
                async with workers(
                    bench.settings,
                    "rota",
                    system.dsn,
                    processes=1,
                    concurrency=8,
                    extra={
                        "BENCH_CONCURRENCY": "8",
                        "BENCH_CLAIM_BATCH": "8",
                        "BENCH_FAIR": "1" if fair else "0",
                    },
                ):
                    await asyncio.sleep(1.0)
                    before = int(await scalar(system.dsn, _FINISHED))
                    began = time.monotonic()
                    await system.enqueue_bulk("ten_ms", 100, tenant="B")
                    committed = time.monotonic()
                    waited = None
                    while time.monotonic() - committed < WAIT_S:
                        started = int(await scalar(system.dsn, _B_STARTED))
                        if started >= 100 and waited is None:
                            waited = time.monotonic() - committed
                            break
                        await asyncio.sleep(0.05)
                    await asyncio.sleep(max(0.0, window_s - (time.monotonic() - began)))
                    rate = (int(await scalar(system.dsn, _FINISHED)) - before) / (
                        time.monotonic() - began
                    )
                if waited is not None:
                    bench.record(
                        NAME,
                        f"all of B started, fairness {label}",
                        "rota",
                        waited,
                        unit="s",
                        better="lower",
                    )
                else:
                    bench.note(
                        NAME, f"fairness {label}: B's jobs had not all started after {WAIT_S} s"
                    )
                bench.record(NAME, f"drain rate, fairness {label}", "rota", rate, unit="jobs/s")
    finally:
        await system.close()


_FINISHED = "SELECT coalesce(sum(n), 0) FROM rota_finished_per_minute WHERE state = 'succeeded'"
_B_STARTED = "SELECT count(*) FROM rota_jobs WHERE tenant = 'B' AND started_at IS NOT NULL"
