"""DBOS's side of ``bench.durable``: a workflow of ten no-op steps on a queue, as its
documentation writes them (``@DBOS.workflow``, ``@DBOS.step``, ``DBOS.register_queue``), in an
async workflow as rota's handler is. Imported by the DBOS worker process only."""

from __future__ import annotations

import os

from dbos import DBOS

QUEUE = "bench"
WORKFLOW = "ten_steps"


@DBOS.step()
async def noop_step(number: int) -> int:
    return number


@DBOS.workflow(name=WORKFLOW)
async def ten_steps() -> int:
    total = 0
    for number in range(10):
        total += await noop_step(number)
    return total


def launch(dsn: str) -> None:
    """Configure and launch DBOS on ``dsn`` with its documented defaults, and declare the
    queue with its defaults (no concurrency limit, the 1 s polling interval)."""
    DBOS(config={"name": "rota-bench", "system_database_url": dsn, "executor_id": str(os.getpid())})
    DBOS.launch()
    DBOS.register_queue(QUEUE)


# ------------------------------------------------------------ the suite's jobs (bench.peers312)

#: The queue the suite's jobs go through (``make bench``), beside the durable jobs' own.
JOBS_QUEUE = "bench_jobs"
#: Starts noted by the handlers of this process, as ``bench.apps.RECORDS``.
RECORDS: list[list[float]] = []


@DBOS.workflow(name="noop")
async def noop(seq: int) -> None:
    return None


@DBOS.workflow(name="record")
async def record(seq: int) -> None:
    import time

    RECORDS.append([seq, time.time()])


@DBOS.workflow(name="sleep")
async def sleep(seq: int) -> None:
    import asyncio

    await asyncio.sleep(float(os.environ.get("BENCH_SLEEP_S", "30")))


def launch_jobs(dsn: str, worker_concurrency: int | None, polling_interval_s: float | None) -> None:
    """Launch DBOS on ``dsn`` (an executor id of this process's own, as its documentation asks
    where ``worker_concurrency`` is set) and declare the jobs' queue, unless
    ``polling_interval_s`` is None (a launch that only makes the schema). It logs warnings only."""
    DBOS(
        config={
            "name": "rota-bench",
            "system_database_url": dsn,
            "executor_id": str(os.getpid()),
            "log_level": "WARNING",
        }
    )
    DBOS.launch()
    if polling_interval_s is None:
        return
    DBOS.register_queue(
        JOBS_QUEUE,
        worker_concurrency=worker_concurrency,
        polling_interval_sec=polling_interval_s,
        on_conflict="always_update",
    )
