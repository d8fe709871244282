"""Worker memory: resident set of one worker process holding 1,000 sleeping async jobs."""

from __future__ import annotations

import asyncio
import time

from bench.harness import Bench, rss_kib, scalar, workers
from bench.systems import make

NAME = "memory"
TITLE = "Worker memory with 1,000 concurrent sleeping async jobs"
JOBS = 1_000

#: Each system's setting for 1,000 jobs at once. PgQueuer has no cap by default; its batch
#: stays at 100. Procrastinate shares a small pool between its 1,000 job slots.
_ENV = {
    "rota": {"BENCH_CONCURRENCY": "1000", "BENCH_CLAIM_BATCH": "250"},
    "pgqueuer": {"BENCH_BATCH_SIZE": "100"},
    "procrastinate": {"BENCH_CONCURRENCY": "1000", "BENCH_POOL_SIZE": "20"},
    # Oban's queue limit; DBOS's queue has no concurrency limit (its default).
    "oban": {"BENCH_CONCURRENCY": "1000"},
    "dbos": {"BENCH_POLL_S": "0.1"},
}


async def run(bench: Bench) -> None:
    systems = [make(name, bench.settings) for name in bench.settings.systems]
    for system in systems:
        await system.setup()
    try:
        for _ in range(bench.runs):
            for system in systems:
                name = system.name
                await system.reset()
                async with workers(
                    bench.settings,
                    name,
                    system.dsn,
                    processes=1,
                    concurrency=JOBS,
                    extra=_ENV[name] | {"BENCH_SLEEP_S": "60", "BENCH_SHUTDOWN_S": "0"},
                    argv=system.worker_argv,
                ) as group:
                    [pid] = group.pids
                    idle_kib, _ = rss_kib(pid)
                    await system.enqueue_bulk("sleep", JOBS)
                    deadline = time.monotonic() + 60
                    while int(await scalar(system.dsn, system.running_sql)) < JOBS:
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"{name}: fewer than {JOBS} jobs running after 60 s")
                        await asyncio.sleep(0.2)
                    await asyncio.sleep(1.0)  # let every handler reach its sleep
                    busy_kib, _ = rss_kib(pid)
                    group.kill()  # the sleeping jobs need not finish
                bench.record(
                    NAME, "RSS, idle worker", name, idle_kib / 1024, unit="MiB", better="lower"
                )
                bench.record(
                    NAME,
                    f"RSS, {JOBS:,} jobs running",
                    name,
                    busy_kib / 1024,
                    unit="MiB",
                    better="lower",
                )
    finally:
        for system in systems:
            await system.close()
