"""Backlog: drain 10,000 due jobs beside 1,000,000 jobs not yet due (and, separately,
1,000,000 finished jobs), as a ratio to the same drain on an otherwise empty table.

The million rows are loaded with one ``INSERT ... SELECT generate_series`` into each system's
own table, then ``VACUUM ANALYZE``. Every run's due jobs are deleted and the table vacuumed
again before the next run, so runs do not pile dead rows on each other. Each drain is a burst
into idle, warm workers (``bench.drains``), one process; systems alternate run by run.
"""

from __future__ import annotations

import statistics

from bench.drains import drain
from bench.harness import Bench, progress
from bench.systems import System, make

NAME = "backlog"
TITLE = "Drain beside a large backlog (PostgreSQL, 1 worker process)"
FRACTION = {"procrastinate": 5, "dbos": 5}
VARIANTS = ("empty", "not yet due", "finished")


async def run(bench: Bench) -> None:
    background = bench.settings.size(1_000_000, 100_000)
    systems = [make(name, bench.settings) for name in bench.settings.systems]
    for system in systems:
        await system.setup()
    empty: dict[str, list[float]] = {system.name: [] for system in systems}
    try:
        for variant in VARIANTS:
            label = "empty table" if variant == "empty" else f"{background:,} {variant}"
            progress(f"  -- {label}")
            last_ids: dict[str, int] = {}
            for system in systems:
                await system.reset()
                if variant == "not yet due":
                    await system.load_future(background)
                elif variant == "finished":
                    await system.load_finished(background)
                else:
                    await system.vacuum(system.table)
                last_ids[system.name] = await system.last_row()
            timed_out: set[str] = set()
            for _ in range(bench.runs):
                for system in systems:
                    if system.name in timed_out:
                        continue
                    if not await one(bench, system, variant, label, last_ids[system.name], empty):
                        timed_out.add(system.name)
    finally:
        for system in systems:
            await system.close()


async def one(
    bench: Bench,
    system: System,
    variant: str,
    label: str,
    last_id: int,
    empty: dict[str, list[float]],
) -> bool:
    """One drain, recorded; False if it did not finish in time (noted)."""
    count = bench.settings.size(10_000, 2_000) // FRACTION.get(system.name, 1)
    try:
        result = await drain(bench, system, method="burst", processes=1, count=count)
    except TimeoutError:
        bench.note(
            NAME,
            f"{system.name}: {count:,} jobs beside {label} did not drain within the time limit",
        )
        return False
    finally:
        await system.clean_after(last_id)
    bench.record(
        NAME,
        f"drain: {label}",
        system.name,
        result.jobs_per_s,
        unit="jobs/s",
        note=f"{count:,} jobs",
    )
    if variant == "empty":
        empty[system.name].append(result.jobs_per_s)
    elif empty[system.name]:
        # Each run against the median empty-table drain: the runs are not paired, so dividing
        # run i by empty run i would only add noise.
        bench.record(
            NAME,
            f"ratio to empty: {variant}",
            system.name,
            result.jobs_per_s / statistics.median(empty[system.name]),
            unit="x",
        )
    return True
