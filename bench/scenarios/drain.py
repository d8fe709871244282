"""Drain: no-op jobs through 1 and 2 worker processes of each system (PostgreSQL)."""

from __future__ import annotations

from bench.drains import drain
from bench.harness import Bench
from bench.systems import make

NAME = "drain"
TITLE = "Drain no-op jobs on PostgreSQL"

#: Procrastinate finishes some hundreds of jobs a second: a twentieth of the batch keeps its runs
#: within a minute and measures the same rate.
FRACTION = {"procrastinate": 20}


async def run(bench: Bench) -> None:
    for name in bench.settings.systems:
        system = make(name, bench.settings)
        count = bench.settings.size(100_000, 5_000) // FRACTION.get(name, 1)
        await system.setup()
        try:
            for processes in (1, 2):
                metric = f"drain, {processes} process{'es' if processes > 1 else ''}"
                for _ in range(bench.runs):
                    await system.reset()
                    result = await drain(bench, system, processes=processes, count=count)
                    bench.record(
                        NAME, metric, name, result.jobs_per_s, unit="jobs/s", note=f"{count:,} jobs"
                    )
                    bench.record(
                        "drain-cpu",
                        f"worker CPU per job, {processes} proc",
                        name,
                        result.worker_cpu_ms_per_job * 1000,
                        unit="µs",
                        better="lower",
                    )
                    bench.record(
                        "drain-cpu",
                        f"PostgreSQL CPU per job, {processes} proc",
                        name,
                        result.postgres_cpu_ms_per_job * 1000,
                        unit="µs",
                        better="lower",
                    )
        finally:
            await system.close()
