"""The worker's side of operator controls: the rescuer expires jobs; hooks and middleware."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

from rota import App, JobContext, JobState, WorkerSettings
from rota.testing import FakeClock


@pytest.fixture
async def app(clock: FakeClock) -> Any:
    app = App("memory://", clock=clock)
    async with app:
        yield app


def settings(**overrides: Any) -> WorkerSettings:
    values: dict[str, Any] = {
        "name": "w1",
        "concurrency": 4,
        "lease": timedelta(seconds=30),
        "heartbeat": timedelta(seconds=10),
        "shutdown_timeout": timedelta(seconds=5),
    }
    values.update(overrides)
    return WorkerSettings(**values)


async def test_the_rescuer_cancels_jobs_that_expired_before_they_started(
    app: App, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[int] = []

    @app.job("report")
    async def report(ctx: JobContext, payload: Any) -> None:
        ran.append(ctx.job_id)

    stale = (await app.enqueue("report", delay=120, expire_after=60)).job
    fresh = (await app.enqueue("report", delay=120)).job
    worker = app.worker(settings())
    clock.advance(timedelta(seconds=120))
    with caplog.at_level(logging.INFO, logger="rota.worker"):
        result = await worker.rescuer.tick()
    assert result.expired == [stale.id]
    assert "1 job(s) cancelled as expired" in caplog.text
    expired = await app.get(stale.id)
    assert (expired.state, expired.last_error) == (JobState.CANCELLED, "expired")
    await worker.run_until_idle()
    assert ran == [fresh.id]
