"""Worker CPU per no-op job, in one process: ``python -m bench.cpu_per_job``.

A small, reproducible measure of the worker's own cost, for comparing one change with the
next in the same sitting. One rota worker runs in this process with the drain settings
``make bench`` had until 2026-12-06 (concurrency 500, claim_batch 250, fair claims on); it
is started and warmed up with ``--warm`` jobs first. Then ``--jobs`` no-op jobs are enqueued
in one bulk call into the idle worker, and the clock (this process's CPU time, every thread,
user + system) runs from the enqueue's return to the last completion, as the worker's metrics
count it (polled 50 times a second). The figure is the median of ``--rounds`` rounds, with the range.

CPU time is far less sensitive to a busy machine than wall time, but not immune: compare
figures taken in the same sitting, and to compare two versions alternate their runs (A B A B:
``PYTHONPATH=<the other checkout>/src python -m bench.cpu_per_job`` runs the other). For PostgreSQL the server's own CPU is not counted (it is
another process); ``--dsn`` names the server, and a database of its own is created for the run
and dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from rota import App

T = TypeVar("T")

BACKENDS = ("memory", "sqlite", "postgres")
DRAIN = {"concurrency": 500, "claim_batch": 250}


async def _finished(app: App) -> float:
    # Collected from this one family, not the whole registry: the poll stays off the figure.
    for family in app.metrics.jobs_finished.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels.get("outcome") == "succeeded":
                return sample.value
    return 0.0


async def _until_finished(app: App, count: float) -> None:
    # Completions are counted by the metrics alone, which have no event to await; a poll 50
    # times a second costs next to nothing beside thousands of jobs a second.
    while await _finished(app) < count:  # noqa: ASYNC110 (see above)
        await asyncio.sleep(0.02)


async def one_round(url: str, jobs: int, warm: int) -> float:
    """CPU microseconds per job of one drain of ``jobs`` no-op jobs."""
    app = App(url, auto_migrate=True)

    @app.job("noop")
    async def noop(ctx: object, payload: object) -> None:
        return None

    await app.open()
    worker = app.worker(**DRAIN)
    task = asyncio.create_task(worker.run())
    try:
        await app.enqueue_many(app.spec("noop", {"seq": i}) for i in range(warm))
        await _until_finished(app, warm)
        await worker.idle.wait()
        specs = [app.spec("noop", {"seq": i}) for i in range(jobs)]
        await app.enqueue_many(specs)
        started = time.process_time()
        await _until_finished(app, warm + jobs)
        spent = time.process_time() - started
    finally:
        worker.request_stop()
        await task
        await app.close()
    return spent / jobs * 1e6


def _with_database(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{name}"))


async def _admin(dsn: str, sql: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(sql)


async def measure(backend: str, *, jobs: int, warm: int, rounds: int, dsn: str) -> list[float]:
    results: list[float] = []
    for _ in range(rounds):
        if backend == "memory":
            results.append(await one_round("memory://", jobs, warm))
        elif backend == "sqlite":
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "cpu.db"
                results.append(await one_round(f"sqlite:///{path}", jobs, warm))
        else:
            name = f"rota_cpu_{uuid.uuid4().hex[:8]}"
            await _admin(dsn, f'CREATE DATABASE "{name}"')
            try:
                results.append(await one_round(_with_database(dsn, name), jobs, warm))
            finally:
                await _admin(dsn, f'DROP DATABASE "{name}" WITH (FORCE)')
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--warm", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument(
        "--loop",
        choices=("asyncio", "auto"),
        default="asyncio",
        help="asyncio's loop, or the one `rota worker` picks (uvloop when installed)",
    )
    args = parser.parse_args()
    run = asyncio.run if args.loop == "asyncio" else _auto_loop_run()
    loop = run(_loop_name())
    print(f"worker CPU per no-op job, {args.jobs} jobs, median of {args.rounds} ({loop} loop)")
    for backend in args.backends.split(","):
        values = run(
            measure(backend, jobs=args.jobs, warm=args.warm, rounds=args.rounds, dsn=args.dsn)
        )
        print(
            f"{backend:<9} {statistics.median(values):7.1f} us/job  "
            f"(min {min(values):.1f}, max {max(values):.1f})"
        )


async def _loop_name() -> str:
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def _auto_loop_run() -> Callable[[Coroutine[Any, Any, T]], T]:
    from rota.runtime import loops

    return loops.run


if __name__ == "__main__":
    main()
