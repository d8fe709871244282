"""The worker's side of blame (C9): an attempt that runs alone (a crash suspect's last) waits
until the worker holds nothing else, its start is recorded before its handler runs, and
nothing is claimed while it is held."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from rota import App, JobContext, JobState, WorkerSettings
from rota.domain.lease import Lease
from rota.testing import FakeClock


async def make_suspect(app: App, clock: FakeClock, kind: str) -> int:
    """A job of ``kind`` whose first worker died holding it (lease expired, rescued), with
    only its last attempt left: that attempt runs alone."""
    job = (await app.enqueue(kind, max_attempts=2)).job
    await app.store.claim("died", queues=["default"], limit=1, lease=timedelta(seconds=5))
    clock.advance(timedelta(seconds=6))
    assert (await app.store.rescue()).requeued == [job.id]
    assert (await app.jobs.get(job.id)).is_suspect
    return job.id


async def test_a_suspect_waits_for_the_worker_to_empty_then_runs_alone(
    app: App, clock: FakeClock
) -> None:
    release = asyncio.Event()
    slow_started = asyncio.Event()
    held_while_running: list[int] = []
    begun: list[Lease] = []

    @app.job("slow")
    async def slow(ctx: JobContext, payload: Any) -> None:
        slow_started.set()
        await release.wait()

    @app.job("suspect")
    async def suspect(ctx: JobContext, payload: Any) -> None:
        held_while_running.append(len(worker.held))

    suspect_id = await make_suspect(app, clock, "suspect")
    await app.enqueue("slow", priority=10)  # claimed first, in a batch of its own
    await app.enqueue("slow")  # behind the suspect: must wait until the suspect is done
    original = app.store.begin

    async def spying(lease: Lease, **kwargs: Any) -> None:
        begun.append(lease)
        await original(lease, **kwargs)

    app.store.begin = spying  # type: ignore[method-assign]
    worker = app.worker(WorkerSettings(name="w", concurrency=4))
    [first] = await worker.claim_tick()
    assert first.kind == "slow" and first.priority == 10
    await slow_started.wait()
    [taken] = await worker.claim_tick()
    assert taken.id == suspect_id
    assert worker.free_slots() == 0 and await worker.claim_tick() == []
    await asyncio.sleep(0)  # the suspect's task runs: it must not start beside "slow"
    assert held_while_running == [] and begun == []
    release.set()
    await worker.wait_for_running()
    assert held_while_running == [1]
    assert [lease.job_id for lease in begun] == [suspect_id]
    assert (await app.jobs.get(suspect_id)).state is JobState.SUCCEEDED
    [last] = await worker.claim_tick()  # claims resume once the suspect is done
    assert last.kind == "slow"
    release.set()
    await worker.wait_for_running()


async def test_a_suspect_released_before_it_started_gets_its_attempt_back(
    app: App, clock: FakeClock
) -> None:
    @app.job("slow")
    async def slow(ctx: JobContext, payload: Any) -> None:
        await asyncio.Event().wait()

    @app.job("suspect")
    async def suspect(ctx: JobContext, payload: Any) -> None:
        raise AssertionError("must not start beside another job")

    suspect_id = await make_suspect(app, clock, "suspect")
    await app.enqueue("slow", priority=10)
    claimed = asyncio.Event()
    original = app.store.claim

    async def spying(*args: Any, **kwargs: Any) -> Any:
        jobs = await original(*args, **kwargs)
        if any(job.id == suspect_id for job in jobs):
            claimed.set()
        return jobs

    app.store.claim = spying  # type: ignore[method-assign]
    worker = app.worker(WorkerSettings(name="w", shutdown_timeout=timedelta(0)))
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(claimed.wait(), timeout=10)
    assert len(worker.held) == 2
    worker.request_stop()
    await running
    released = await app.jobs.get(suspect_id)
    assert (released.state, released.attempt, released.crashes) == (JobState.PENDING, 1, 1)
