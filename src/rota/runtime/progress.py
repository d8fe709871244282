"""Progress writes: a handler's ``ctx.progress`` reaches the store within a second, coalesced.

A report costs the handler nothing but a flag: the first report since the last write wakes this
service (one ``call_soon_threadsafe``, from whichever thread reported), later ones only replace
the report. The service then writes the latest report of every job that has one, in one
fenced statement (``Store.heartbeat`` with ``progress``: only onto a job still held by its
lease), at most once per ``every_s`` however often handlers report. The heartbeat still carries
any report this service has not written (a failed write, a stop), so none is lost for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Mapping
from datetime import timedelta

from rota.domain.clock import Clock
from rota.domain.payload import Progress
from rota.runtime.execution import Execution
from rota.runtime.services import bounded
from rota.store.base import Store

#: At most one progress write per this many seconds, and a report waits no longer.
EVERY_S = 1.0


class ProgressWriter:
    """Writes the progress handlers report, at most once per ``every_s``; ``tick`` writes
    whatever is unsent, unless the last write was under ``every_s`` ago (then
    ``interval_s`` is the time left)."""

    name = "progress"

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        lease: timedelta,
        held: Mapping[int, Execution],
        idle: timedelta,
        every_s: float = EVERY_S,
    ) -> None:
        """``held`` is the worker's live map of the jobs it holds; ``idle`` how long the
        service sleeps with nothing reported (a report wakes it)."""
        self._store = store
        self._clock = clock
        self._lease = lease
        self._held = held
        self._idle_s = idle.total_seconds()
        self._every_s = every_s
        self._written_at = -math.inf
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Set by the first report since the service last looked: later ones need no wake-up.
        self._woken = False
        #: Set by ``reported``: the service loop ticks at once instead of waiting out its
        #: interval (rota.runtime.services.run_service).
        self.nudged = asyncio.Event()

    def reported(self) -> None:
        """A handler reported progress (from any thread): wake the service, once per write."""
        if self._woken:
            return
        self._woken = True
        loop = self._loop
        if loop is None:  # before the first tick: known if reported on the loop's thread
            with contextlib.suppress(RuntimeError):
                loop = self._loop = asyncio.get_running_loop()
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(self.nudged.set)

    def interval_s(self) -> float:
        if not self._unsent():
            return self._idle_s
        return max(0.0, self._written_at + self._every_s - self._clock.monotonic())

    async def tick(self) -> int:
        """Write every unsent report now, unless the last write was under ``every_s`` ago;
        the number of jobs written (0 when too soon or nothing to say)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        now = self._clock.monotonic()
        if now - self._written_at < self._every_s:
            return 0  # too soon: interval_s is the wait, and reports meanwhile need no wake-up
        self._woken = False  # before the look: a report after it wakes the next tick
        unsent = self._unsent()
        if not unsent:
            return 0
        self._written_at = now
        reports = {execution.job.id: report for execution, report in unsent}
        beat = await bounded(
            self._store.heartbeat(
                [execution.lease for execution, _ in unsent], lease=self._lease, progress=reports
            ),
            self._lease.total_seconds(),
            "writing progress",
        )
        lost = {lease.job_id for lease in beat.lost}
        for execution, report in unsent:
            if execution.job.id not in lost:
                execution.ctx.progress_sent(report)
        return len(unsent) - len(lost)

    def _unsent(self) -> list[tuple[Execution, Progress]]:
        return [
            (execution, report)
            for execution in list(self._held.values())
            if execution.stop is None
            and not execution.reporting
            and (report := execution.ctx.unsent_progress()) is not None
        ]
