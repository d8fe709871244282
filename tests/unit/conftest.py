"""Shared by the unit tests: an App on a fresh in-memory store driven by the test's FakeClock,
and the settings of a worker that tests drive by ticks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from rota import App, WorkerSettings
from rota.testing import FakeClock


@pytest.fixture
async def app(clock: FakeClock) -> AsyncIterator[App]:
    """An open App on ``memory://`` and the test's clock, closed after the test."""
    async with App("memory://", clock=clock) as opened:
        yield opened


def settings(**overrides: Any) -> WorkerSettings:
    """A worker's settings: worker w1, 4 slots, a 30 s lease renewed every 10 s, 5 s to stop;
    ``overrides`` replace any of them."""
    values: dict[str, Any] = {
        "name": "w1",
        "concurrency": 4,
        "lease": timedelta(seconds=30),
        "heartbeat": timedelta(seconds=10),
        "shutdown_timeout": timedelta(seconds=5),
    }
    values.update(overrides)
    return WorkerSettings(**values)
