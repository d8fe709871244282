"""Helpers for testing code that uses rota: a fake clock and inline job draining.

Shipped to users: ``from rota.testing import FakeClock``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rota.app import App

__all__ = ["FakeClock", "drain"]


class FakeClock:
    """A Clock that moves only when told to.

    ``now()`` and ``monotonic()`` read the fake time; ``await sleep(s)`` returns once
    ``advance()`` has moved the clock at least ``s`` forward, so code that waits can be driven
    step by step without real delays. ``set()`` may move time backwards (to test clock steps).
    """

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware start")
        self._now = start.astimezone(UTC)
        self._mono = 0.0
        self._lock = threading.Lock()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, delta: timedelta | float) -> datetime:
        """Move time forward by ``delta`` and wake every sleeper whose time has come."""
        seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
        if seconds < 0:
            raise ValueError("advance() moves forward; use set() to move backwards")
        with self._lock:
            self._now += timedelta(seconds=seconds)
            self._mono += seconds
            woken: list[asyncio.Future[None]] = []
            while self._sleepers and self._sleepers[0][0] <= self._mono:
                woken.append(heapq.heappop(self._sleepers)[2])
            now = self._now
        for future in woken:
            _resolve(future)
        return now

    def set(self, instant: datetime) -> None:
        """Jump the wall clock to ``instant`` (forwards or backwards); monotonic time stays."""
        if instant.tzinfo is None:
            raise ValueError("FakeClock.set needs a timezone-aware instant")
        with self._lock:
            self._now = instant.astimezone(UTC)

    async def sleep(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if seconds <= 0:
                future.set_result(None)
            else:
                heapq.heappush(self._sleepers, (self._mono + seconds, next(self._order), future))
        await future


def _resolve(future: asyncio.Future[None]) -> None:
    loop = future.get_loop()

    def settle() -> None:
        if not future.done():
            future.set_result(None)

    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        settle()
    else:
        loop.call_soon_threadsafe(settle)


async def drain(app: App, *, max_jobs: int | None = None, concurrency: int = 10) -> int:
    """Run every due job of ``app`` inline, through the real worker, until none is due.

    Returns how many jobs were started. Jobs that fail and come due again at once (zero
    backoff) run again; jobs due later wait until a FakeClock is advanced and ``drain`` is
    called again. Use with ``App("memory://", clock=FakeClock())`` in your own tests.
    """
    from rota.runtime.worker import WorkerSettings

    await app.open()
    worker = app.worker(WorkerSettings(name="rota-testing", concurrency=concurrency))
    return await worker.run_until_idle(max_jobs=max_jobs)
