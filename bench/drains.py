"""Draining a batch of jobs with running worker processes: the timed core of several scenarios.

Two methods, both with workers started and warmed up first (``WARM_UP`` jobs run end to end:
imports, connections, prepared statements and the code paths are hot before the clock starts):

- ``burst``: the batch is enqueued in one bulk call into idle workers; the clock starts when
  the enqueue call has returned (its commit is done) and the workers learn of the jobs as they
  would in production (LISTEN/NOTIFY, or their poll).
- ``backlog``: the workers are held (SIGSTOP: connected, warm, claiming nothing), the batch is
  enqueued and the table ``ANALYZE``d, then the clock starts when the workers are let go
  (SIGCONT): a steady backlog, with no enqueue racing the claims.

The clock stops at the last job's completion as the store recorded it (its finish timestamp;
the server and the harness read the same host clock); a poll (10 a second) only says when
to look. CPU per job: the worker processes' user + system time over the drain, and the
whole PostgreSQL server's (postmaster, every backend, autovacuum, checkpointer, WAL writer;
backends that exit are counted through the postmaster's children time), less the harness's
own polling backend.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench.harness import Bench, Poller, cpu_seconds, workers
from bench.systems import System

#: Jobs each system runs before the measured batch (fewer for a small batch).
WARM_UP = 1_000
METHODS = ("burst", "backlog")


@dataclass
class Drain:
    jobs_per_s: float
    seconds: float
    #: CPU microseconds per job in the worker processes and in PostgreSQL (None: not visible).
    worker_cpu_us: float
    postgres_cpu_us: float | None


async def drain(
    bench: Bench,
    system: System,
    *,
    method: str,
    processes: int,
    count: int,
    env: dict[str, str] | None = None,
    kind: str = "noop",
) -> Drain:
    if method not in METHODS:
        raise ValueError(f"method is one of {METHODS}")
    settings = bench.settings
    options = {**system.drain_env, **(env or {})}
    concurrency = int(options.get("BENCH_CONCURRENCY", "100"))
    timeout_s = max(120.0, count / 100)
    async with workers(
        settings,
        system.name,
        system.dsn,
        processes=processes,
        concurrency=concurrency,
        extra=options,
        argv=system.worker_argv,
    ) as group:
        warm = min(WARM_UP, max(20, count // 5))
        mark = await system.watermark()
        async with Poller(system.dsn, system.done_sql(mark, warm)) as poller:
            await system.enqueue_bulk(kind, warm)
            await poller.until(bool, timeout_s=120)
        mark = await system.watermark()
        async with Poller(system.dsn, system.done_sql(mark, count)) as poller:
            exclude = (poller.backend_pid,)
            if method == "backlog":
                group.pause()
                try:
                    await system.enqueue_bulk(kind, count)
                    await system.analyze()
                    pg_before = settings.server_cpu(exclude)
                    worker_before = cpu_seconds(group.pids)
                    started = time.time()
                finally:
                    group.resume()
            else:
                await system.enqueue_bulk(kind, count)
                started = time.time()
                pg_before = settings.server_cpu(exclude)
                worker_before = cpu_seconds(group.pids)
            seen = await poller.until(bool, timeout_s=timeout_s, every_s=0.1)
            worker_cpu = cpu_seconds(group.pids) - worker_before
            pg_after = settings.server_cpu(exclude)
    done = await system.succeeded(mark)
    if done != count:
        raise RuntimeError(f"{system.name}: {done} of {count} jobs succeeded")
    finished = await system.last_finished()
    ended = finished if finished is not None and started < finished <= seen else seen
    seconds = ended - started
    pg_cpu = None if pg_before is None or pg_after is None else pg_after - pg_before
    return Drain(
        jobs_per_s=count / seconds,
        seconds=seconds,
        worker_cpu_us=1e6 * worker_cpu / count,
        postgres_cpu_us=None if pg_cpu is None else 1e6 * pg_cpu / count,
    )


def label(method: str, processes: int) -> str:
    """The metric name of a drain: 'burst drain, 1 process'."""
    return f"{method} drain, {processes} process{'es' if processes > 1 else ''}"
