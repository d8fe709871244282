"""Drain: no-op jobs through 1 and 2 worker processes of each system (PostgreSQL), by both
methods of ``bench.drains`` (a burst into idle workers, a steady backlog), systems alternating
run by run (rota, PgQueuer, Procrastinate, Oban for Python, DBOS, rota, ...) so drift on the machine hits each alike.

Procrastinate takes one job per fetch, and Oban for Python fetches as many jobs as its queue's
limit leaves free, so the best concurrency of each depends on the machine: a short calibration
drains the same batch at each of its ``CONCURRENCY`` first, and the best is used for every
figure of that system in the run (the report says which).
"""

from __future__ import annotations

import statistics

from bench.drains import METHODS, drain, label
from bench.harness import Bench, progress
from bench.report import NAMES
from bench.systems import System, make

NAME = "drain"
TITLE = "Drain no-op jobs on PostgreSQL"

#: Procrastinate finishes some hundreds of jobs a second, DBOS and Oban for Python some
#: thousands: a part of the batch keeps their runs within seconds and measures the same rate
#: (the report's cells say how many jobs).
FRACTION = {"procrastinate": 20, "oban": 5, "dbos": 20}
#: The concurrencies a calibration tries, by system (Oban for Python's: its queue's limit).
CONCURRENCY = {"procrastinate": (10, 25, 50, 100), "oban": (20, 100, 500)}


async def tune(bench: Bench, system: System) -> None:
    """Set the run's concurrency of ``system`` to the best of a few (burst, 1 process)."""
    if "BENCH_CONCURRENCY" in bench.settings.tuned.get(system.name, {}):
        return
    # Ten fetches at the largest concurrency tried, at least: one fetch of the whole batch
    # would measure no steady drain.
    candidates = CONCURRENCY[system.name]
    count = max(bench.settings.size(2_000, 500), 10 * max(candidates))
    rates: dict[int, float] = {}
    for concurrency in candidates:
        await system.reset()
        result = await drain(
            bench,
            system,
            method="burst",
            processes=1,
            count=count,
            env={"BENCH_CONCURRENCY": str(concurrency)},
        )
        rates[concurrency] = result.jobs_per_s
        progress(f"  {system.name} concurrency {concurrency}: {result.jobs_per_s:,.0f} jobs/s")
    best = max(rates, key=lambda c: rates[c])
    tried = ", ".join(str(c) for c in candidates)
    bench.settings.tuned[system.name] = {
        "BENCH_CONCURRENCY": str(best),
        "BENCH_TUNED_FROM": tried,
    }
    system.drain_env["BENCH_CONCURRENCY"] = str(best)
    bench.note(
        NAME,
        f"{NAMES[system.name]}'s concurrency: {best}, the fastest of {tried} on a {count:,}-job "
        "burst drain with 1 process ("
        + ", ".join(f"{c}: {rates[c]:,.0f} jobs/s" for c in candidates)
        + ")",
    )


async def run(bench: Bench) -> None:
    systems = [make(name, bench.settings) for name in bench.settings.systems]
    for system in systems:
        await system.setup()
    try:
        for system in systems:
            if system.name in CONCURRENCY:
                await tune(bench, system)
        for processes in (1, 2):
            for method in METHODS:
                for index in range(bench.runs):
                    progress(f"  -- {label(method, processes)}, run {index + 1} of {bench.runs}")
                    for system in systems:
                        await one(bench, system, method, processes)
        for processes in (1, 2):
            for method in METHODS:
                _ratio(bench, label(method, processes))
    finally:
        for system in systems:
            await system.close()


async def one(bench: Bench, system: System, method: str, processes: int) -> None:
    count = bench.settings.size(100_000, 5_000) // FRACTION.get(system.name, 1)
    await system.reset()
    result = await drain(bench, system, method=method, processes=processes, count=count)
    # Leave nothing for autovacuum to clean up during the next system's run: the server's CPU
    # in that run's window would otherwise count this system's leftovers.
    await system.reset()
    bench.record(
        NAME,
        label(method, processes),
        system.name,
        result.jobs_per_s,
        unit="jobs/s",
        note=f"{count:,} jobs",
    )
    short = f"{method}, {processes} proc"
    bench.record(
        "drain-cpu",
        f"worker CPU per job, {short}",
        system.name,
        result.worker_cpu_us,
        unit="µs",
        better="lower",
    )
    if result.postgres_cpu_us is not None:
        bench.record(
            "drain-cpu",
            f"PostgreSQL CPU per job, {short}",
            system.name,
            result.postgres_cpu_us,
            unit="µs",
            better="lower",
        )


def _ratio(bench: Bench, metric: str) -> None:
    """rota / PgQueuer of each run pair (the runs alternate, so run i of each is paired)."""
    ours = bench.find(NAME, metric, "rota")
    theirs = bench.find(NAME, metric, "pgqueuer")
    if ours is None or theirs is None:
        return
    for a, b in zip(ours.values, theirs.values, strict=False):
        bench.record(NAME, f"{metric}: rota / PgQueuer", "rota", a / b, unit="x")
    if ours.values and theirs.values:
        progress(
            f"  {metric}: rota / PgQueuer median "
            f"{statistics.median(ours.values) / statistics.median(theirs.values):.2f}x"
        )
