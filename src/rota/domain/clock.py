"""The clock: the only module in rota that reads real time.

Everything else asks a ``Clock``. In production the store's own clock decides leases and due
times (PostgreSQL ``now()``); the worker uses a Clock only for local deadlines and waiting.
Tests pass a ``rota.testing.FakeClock`` through the same code.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """A source of time: wall-clock instants, a monotonic reading, and a way to wait."""

    def now(self) -> datetime:
        """The current instant, timezone-aware in UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (for local deadlines)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""
        ...


class SystemClock:
    """Real time."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


def utc(instant: datetime) -> datetime:
    """``instant`` converted to UTC; naive datetimes are refused, never guessed."""
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError("naive datetime: pass a timezone-aware instant")
    return instant.astimezone(UTC)
