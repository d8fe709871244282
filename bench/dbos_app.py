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
