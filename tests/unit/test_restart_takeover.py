"""A worker started in place of one that was killed: it claims what is due at once, without
first sleeping a poll interval, and takes over the jobs its predecessor held as soon as their
leases have run out, not a poll or rescue interval later (bench/takeover.py measures how soon
on PostgreSQL)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from rota import App, JobContext, JobState
from rota.testing import FakeClock
from tests.unit.conftest import settings

#: Longer than any test runs: a wait of one of these would hang the test.
HOUR = timedelta(hours=1)
#: A bounded deadline on the event awaited, far above what the work takes.
DEADLINE_S = 30


async def test_a_starting_worker_claims_a_due_job_before_any_poll_interval(app: App) -> None:
    done = asyncio.Event()

    @app.job("due")
    async def handle(ctx: JobContext, payload: Any) -> None:
        done.set()

    job = (await app.enqueue("due")).job
    worker = app.worker(settings(poll=HOUR, rescue=HOUR))
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(done.wait(), timeout=DEADLINE_S)
    finally:
        worker.request_stop()
        await running
    assert (await app.jobs.get(job.id)).state is JobState.SUCCEEDED


async def test_a_starting_worker_takes_over_its_predecessors_expired_leases_at_once(
    app: App, clock: FakeClock
) -> None:
    ran = asyncio.Event()

    @app.job("held")
    async def handle(ctx: JobContext, payload: Any) -> None:
        ran.set()

    job = (await app.enqueue("held")).job
    # A worker claimed it and was killed: its lease ran out before the new worker started.
    [claimed] = await app.store.claim(
        "killed", queues=["default"], limit=1, lease=timedelta(seconds=5)
    )
    assert claimed.id == job.id
    clock.advance(timedelta(seconds=6))

    # Neither a poll nor a rescue interval passes while the test waits: the first claim (or a
    # rescue at start and the wake-up it gives) must take the job over.
    worker = app.worker(settings(name="restarted", poll=HOUR, rescue=HOUR))
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(ran.wait(), timeout=DEADLINE_S)
    finally:
        worker.request_stop()
        await running
    done = await app.jobs.get(job.id)
    assert (done.state, done.attempt) == (JobState.SUCCEEDED, 2)
    assert [attempt.worker for attempt in await app.store.attempts(job.id)] == [
        "killed",
        "restarted",
    ]
