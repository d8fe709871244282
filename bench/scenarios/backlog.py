"""Backlog: drain 10,000 due jobs beside 1,000,000 jobs not yet due (and, separately,
1,000,000 finished jobs), as a ratio to the same drain on an otherwise empty table.

The million rows are loaded with one ``INSERT ... SELECT generate_series`` into each system's
own table, then ``VACUUM ANALYZE`` (autovacuum may be off on the server: see the report). Every
run's due jobs are deleted and the table vacuumed again before the next run, so runs do not
pile dead rows on each other.
"""

from __future__ import annotations

import statistics

from bench.drains import drain
from bench.harness import Bench, execute
from bench.systems import System, make

NAME = "backlog"
TITLE = "Drain beside a large backlog (PostgreSQL, 1 worker process)"
FRACTION = {"procrastinate": 5}
#: The table each system keeps its jobs in, and the statement removing the drained batch.
_TABLE = {"rota": "rota_jobs", "pgqueuer": "pgqueuer", "procrastinate": "procrastinate_jobs"}


async def _clean(system: System, mark_id: int) -> None:
    table = _TABLE[system.name]
    statements = [f"DELETE FROM {table} WHERE id > {mark_id}"]
    if system.name == "rota":
        statements.append("TRUNCATE rota_finished_per_minute")
    if system.name == "pgqueuer":
        statements.append("DELETE FROM pgqueuer_log WHERE job_id > 0")
    if system.name == "procrastinate":
        statements.append("TRUNCATE procrastinate_events")
    await execute(system.dsn, *statements)
    await system.vacuum(table)


async def run(bench: Bench) -> None:
    background = bench.settings.size(1_000_000, 100_000)
    for name in bench.settings.systems:
        system = make(name, bench.settings)
        count = bench.settings.size(10_000, 2_000) // FRACTION.get(name, 1)
        await system.setup()
        try:
            empty: list[float] = []
            for variant in ("empty", "not yet due", "finished"):
                await system.reset()
                if variant == "not yet due":
                    await system.load_future(background)
                elif variant == "finished":
                    await system.load_finished(background)
                else:
                    await system.vacuum(_TABLE[name])
                last_id = int(
                    await _scalar(system, f"SELECT coalesce(max(id), 0) FROM {_TABLE[name]}")
                )
                label = "empty table" if variant == "empty" else f"{background:,} {variant}"
                for _ in range(bench.runs):
                    try:
                        result = await drain(bench, system, processes=1, count=count)
                    except TimeoutError:
                        bench.note(
                            NAME,
                            f"{name}: {count:,} jobs beside {label} did not drain within "
                            f"the time limit (below {count / max(120.0, count / 100):.0f} jobs/s)",
                        )
                        break
                    finally:
                        await _clean(system, last_id)
                    bench.record(
                        NAME,
                        f"drain: {label}",
                        name,
                        result.jobs_per_s,
                        unit="jobs/s",
                        note=f"{count:,} jobs",
                    )
                    if variant == "empty":
                        empty.append(result.jobs_per_s)
                    else:
                        if not empty:
                            continue  # the empty-table drain did not finish: nothing to compare
                        # Each run against the median empty-table drain: the runs are not
                        # paired, so dividing run i by empty run i would only add noise.
                        bench.record(
                            NAME,
                            f"ratio to empty: {variant}",
                            name,
                            result.jobs_per_s / statistics.median(empty),
                            unit="x",
                        )
        finally:
            await system.close()


async def _scalar(system: System, statement: str) -> object:
    from bench.harness import scalar

    return await scalar(system.dsn, statement)
