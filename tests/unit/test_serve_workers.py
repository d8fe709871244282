"""`rota serve`'s workers run on a loop of their own (docs/decisions/0004): nothing that blocks
the API's loop can hold up their heartbeats (C10)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from rota.app import App
from rota.domain.job_state import JobState
from rota.runtime.context import JobContext
from rota.runtime.crew import WorkerThread

LEASE = timedelta(seconds=1.5)


async def test_a_blocked_api_loop_does_not_cost_a_lease(tmp_path: Any) -> None:
    app = App(f"sqlite:///{tmp_path / 'rota.db'}")
    started = asyncio.Event()
    api_loop = asyncio.get_running_loop()

    @app.job("hold", max_attempts=3)
    async def hold(ctx: JobContext, payload: Any) -> None:
        api_loop.call_soon_threadsafe(started.set)
        await asyncio.sleep(3 * LEASE.total_seconds())

    await app.open()
    crew = WorkerThread(
        app.workers,
        names=["serve-test-1", "serve-test-2"],
        options={"lease": LEASE, "heartbeat": LEASE / 6, "rescue": LEASE / 6, "poll": 0.05},
    )
    crew.start()
    try:
        job = (await app.enqueue("hold", {})).job
        await asyncio.wait_for(started.wait(), timeout=30)
        # A request handler computing on the API's loop, twice as long as the lease.
        time.sleep(2 * LEASE.total_seconds())  # noqa: ASYNC251  # blocking the loop is the point

        async def finished() -> None:
            # The job finishes on another thread: poll the store, bounded by wait_for below.
            while (await app.jobs.get(job.id)).state is not JobState.SUCCEEDED:  # noqa: ASYNC110
                await asyncio.sleep(0.05)

        await asyncio.wait_for(finished(), timeout=30)
        attempts = await app.jobs.attempts(job.id)
        assert [(a.attempt, a.outcome.value) for a in attempts] == [(1, "succeeded")]
    finally:
        crew.request_stop()
        assert await asyncio.wait_for(crew.wait(), timeout=30) is False
        await app.close()


async def test_a_stop_requested_before_the_workers_exist_still_stops_them(tmp_path: Any) -> None:
    app = App("memory://")
    await app.open()
    crew = WorkerThread(app.workers, names=["early-1", "early-2"], options={"poll": 0.05})
    crew.request_stop()
    crew.start()
    assert await asyncio.wait_for(crew.wait(), timeout=30) is False
    assert crew.finished
    await app.close()
