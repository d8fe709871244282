"""Draining a batch of jobs with running worker processes: the timed core of several scenarios.

Workers are started and warmed up (a few jobs run end to end) before the clock starts, so
process start-up and imports are not measured. The clock starts when the bulk enqueue has
returned (its commit is then done) and stops at the first poll, 20 times a second, that sees
every job of the batch finished.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench.harness import Bench, Poller, cpu_seconds, postgres_pids, workers
from bench.systems import System

WARM_UP_JOBS = 20


@dataclass
class Drain:
    jobs_per_s: float
    seconds: float
    #: CPU seconds per 1,000 jobs in the worker processes and in PostgreSQL.
    worker_cpu_ms_per_job: float
    postgres_cpu_ms_per_job: float


async def drain(
    bench: Bench,
    system: System,
    *,
    processes: int,
    count: int,
    env: dict[str, str] | None = None,
    kind: str = "noop",
) -> Drain:
    settings = bench.settings
    options = {**system.drain_env, **(env or {})}
    concurrency = int(options.get("BENCH_CONCURRENCY", "100"))
    async with workers(
        settings,
        system.name,
        system.dsn,
        processes=processes,
        concurrency=concurrency,
        extra=options,
    ) as group:
        mark = await system.watermark()
        async with Poller(system.dsn, system.done_sql(mark, WARM_UP_JOBS)) as warm:
            await system.enqueue_bulk(kind, WARM_UP_JOBS)
            await warm.until(bool, timeout_s=60)
        mark = await system.watermark()
        pg_before = {pid: cpu_seconds([pid]) for pid in postgres_pids()}
        worker_cpu = cpu_seconds(group.pids)
        async with Poller(system.dsn, system.done_sql(mark, count)) as poller:
            await system.enqueue_bulk(kind, count)
            started = time.time()
            ended = await poller.until(bool, timeout_s=max(120.0, count / 100), every_s=0.05)
        worker_cpu = cpu_seconds(group.pids) - worker_cpu
        # Backends that started during the drain count whole.
        pg_cpu = sum(cpu_seconds([pid]) - pg_before.get(pid, 0.0) for pid in postgres_pids())
    done = await system.succeeded(mark)
    if done != count:
        raise RuntimeError(f"{system.name}: {done} of {count} jobs succeeded")
    seconds = ended - started
    return Drain(
        jobs_per_s=count / seconds,
        seconds=seconds,
        worker_cpu_ms_per_job=1000 * worker_cpu / count,
        postgres_cpu_ms_per_job=1000 * pg_cpu / count,
    )
