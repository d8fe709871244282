"""The child's end of a supervised worker fleet (``rota worker --processes N``).

A child is an ordinary ``rota worker`` started by the supervisor (``rota.runtime.supervisor``)
with a status pipe: one JSON object a line, ``ready`` once it registered (its pid, worker name
and the port its metrics are on) and ``recycle`` when it stops to be replaced.

Recycling happens between jobs: once the child has finished ``max_jobs`` attempts, or its
resident memory passes ``max_memory_mb`` after a job, it stops claiming and stops gracefully,
as on SIGTERM: its running jobs finish (or are released, fenced on their lease, after the
shutdown timeout) and it exits 0; the supervisor starts a fresh one in its place.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import sys
from typing import TYPE_CHECKING, Any

from rota.domain.wording import counted

if TYPE_CHECKING:
    from rota.runtime.hooks import Hooks, JobResult
    from rota.runtime.worker import Worker

log = logging.getLogger("rota.worker")


class Link:
    """Status to the supervisor over ``fd``, and the recycling limits of this child."""

    def __init__(
        self, fd: int, *, max_jobs: int | None = None, max_memory_mb: int | None = None
    ) -> None:
        self._fd = fd
        self.max_jobs = max_jobs
        self.max_memory_mb = max_memory_mb
        self.jobs = 0
        self._worker: Worker | None = None
        self._recycling = False

    def attach(self, hooks: Hooks) -> None:
        """Count each attempt that ends (succeeded, failed or dead) after its outcome is
        written: the point between jobs where a recycle may begin."""
        if self.max_jobs is None and self.max_memory_mb is None:
            return
        for event in ("success", "failure", "dead"):
            hooks.add(event, self._after_job)

    def ready(self, worker: Worker, *, metrics_port: int | None) -> None:
        self._worker = worker
        name_process(worker.name)
        self.send("ready", pid=os.getpid(), name=worker.name, metrics_port=metrics_port)

    def send(self, event: str, **fields: Any) -> None:
        """One status line; a supervisor gone away is not this child's failure."""
        line = json.dumps({"event": event, **fields}) + "\n"
        with contextlib.suppress(OSError):
            os.write(self._fd, line.encode())

    async def _after_job(self, ctx: object, result: JobResult) -> None:
        self.jobs += 1
        reason = self.recycle_reason()
        if reason is None or self._recycling or self._worker is None:
            return
        self._recycling = True
        log.info("recycling this worker process: %s", reason)
        self.send("recycle", reason=reason)
        self._worker.request_stop()

    def recycle_reason(self) -> str | None:
        if self.max_jobs is not None and self.jobs >= self.max_jobs:
            return f"ran {counted(self.jobs, 'job')}, the most a process runs"
        if self.max_memory_mb is not None:
            rss = resident_mb()
            if rss >= self.max_memory_mb:
                return f"resident memory {rss:.0f} MiB passed {self.max_memory_mb} MiB"
        return None


def resident_mb() -> float:
    """This process's resident memory now (Linux), else its peak (getrusage)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (2**20 if sys.platform == "darwin" else 2**10)


def name_process(name: str) -> None:
    """Show the worker's slot in ``ps -o comm`` and ``top`` (Linux; 15 characters at most)."""
    slot = name.rsplit("-", 1)[-1]
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
        comm.write(f"rota-worker-{slot}"[:15])
