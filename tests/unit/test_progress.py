"""ctx.progress: validated in the handler, written within a second (coalesced), fenced."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest

from rota import App, JobContext, JobState, WorkerSettings
from rota.domain.errors import StoreUnavailable
from rota.domain.payload import MAX_PROGRESS_MESSAGE_LENGTH, Progress
from rota.testing import FakeClock, drain


def settings() -> WorkerSettings:
    return WorkerSettings(
        name="w1", concurrency=2, lease=timedelta(seconds=30), heartbeat=timedelta(seconds=10)
    )


@pytest.mark.parametrize(
    ("fraction", "message"),
    [
        (-0.01, None),
        (1.01, None),
        (float("nan"), None),
        (float("inf"), None),
        ("0.5", None),
        (True, None),
        (0.5, "x" * (MAX_PROGRESS_MESSAGE_LENGTH + 1)),
        (0.5, "line\nbreak"),
        (0.5, 42),
    ],
)
def test_bad_progress_is_refused_with_a_value_error(fraction: Any, message: Any) -> None:
    with pytest.raises(ValueError, match="progress"):
        Progress(fraction, message)


def test_good_progress_is_kept_as_given() -> None:
    assert Progress(0, None) == Progress(0.0)
    assert Progress(1, "x" * MAX_PROGRESS_MESSAGE_LENGTH).fraction == 1.0


async def test_a_bad_report_raises_in_the_handler_and_fails_the_attempt(app: App) -> None:
    @app.job("bad", max_attempts=1)
    async def bad(ctx: JobContext, payload: Any) -> None:
        await ctx.progress(2)

    job = (await app.enqueue("bad")).job
    await drain(app)
    failed = await app.jobs.get(job.id)
    assert failed.state is JobState.DEAD
    assert failed.last_error == "InvalidInput: progress must be between 0 and 1"


async def test_a_sync_handler_reports_from_its_thread(app: App) -> None:
    reported = threading.Event()
    finish = threading.Event()

    @app.job("sync")
    def sync(ctx: JobContext, payload: Any) -> None:
        ctx.progress_sync(0.25, message="a quarter")
        reported.set()
        finish.wait(timeout=60)

    job = (await app.enqueue("sync")).job
    worker = app.worker(settings())
    await worker.claim_tick()
    await asyncio.to_thread(reported.wait, 60)
    await worker.heartbeater.tick()
    running = await app.jobs.get(job.id)
    assert (running.progress, running.progress_message) == (0.25, "a quarter")
    finish.set()
    await worker.wait_for_running()


async def test_a_report_a_failed_heartbeat_did_not_carry_rides_the_next_one(
    app: App, clock: FakeClock
) -> None:
    reported = asyncio.Event()
    finish = asyncio.Event()
    beats: list[Any] = []

    @app.job("slow")
    async def slow(ctx: JobContext, payload: Any) -> None:
        await ctx.progress(0.5, message="half")
        reported.set()
        await finish.wait()

    job = (await app.enqueue("slow")).job
    worker = app.worker(settings())
    original = app.store.heartbeat

    async def flaky(*args: Any, **kwargs: Any) -> Any:
        beats.append(kwargs.get("progress"))
        if len(beats) == 1:
            raise StoreUnavailable("connection refused")
        return await original(*args, **kwargs)

    app.store.heartbeat = flaky  # type: ignore[method-assign]
    try:
        await worker.claim_tick()
        await reported.wait()
        with pytest.raises(StoreUnavailable):
            await worker.heartbeater.tick()
        assert (await app.jobs.get(job.id)).progress is None
        await worker.heartbeater.tick()
        assert (await app.jobs.get(job.id)).progress == 0.5
        await worker.heartbeater.tick()  # nothing new to say: a plain renewal
        assert [beat is not None for beat in beats] == [True, True, False]
        finish.set()
        await worker.wait_for_running()
    finally:
        app.store.heartbeat = original  # type: ignore[method-assign]
