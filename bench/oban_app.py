"""Oban for Python's side of the suite: the jobs every system runs (``bench.apps``), as Oban's
documentation writes them (``@worker`` classes with ``async def process``), on one queue.

Imported by ``bench.peers312`` only, in the Python 3.12 venv (``make setup-bench312``): Oban
for Python needs Python 3.12 or later.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from oban import worker

QUEUE = "bench"
#: Starts noted by the handlers of this process, as ``bench.apps.RECORDS``.
RECORDS: list[list[Any]] = []


@worker(queue=QUEUE)
class Noop:
    async def process(self, job: Any) -> None:
        return None


@worker(queue=QUEUE)
class Record:
    async def process(self, job: Any) -> None:
        RECORDS.append([job.args["seq"], time.time()])


@worker(queue=QUEUE)
class Sleep:
    async def process(self, job: Any) -> None:
        await asyncio.sleep(float(os.environ.get("BENCH_SLEEP_S", "30")))


KINDS: dict[str, Any] = {"noop": Noop, "record": Record, "sleep": Sleep}


def job(kind: str, seq: int) -> Any:
    """A job of ``kind`` (``Worker.new``), not yet enqueued."""
    return KINDS[kind].new({"seq": seq})
