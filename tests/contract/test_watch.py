"""Watching: a worker asleep until told is woken by every way a job becomes pending."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import pytest

from rota.domain.job import JobSpec
from rota.store import Store
from rota.testing import FakeClock
from tests.contract.helpers import LEASE, add, claim_one


@pytest.fixture
async def woken(store: Store) -> AsyncIterator[asyncio.Queue[datetime | None]]:
    """Every wake-up the store sends, as they come (from any thread)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[datetime | None] = asyncio.Queue()
    subscribed = asyncio.Event()

    def on_due(run_at: datetime | None) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, run_at)

    async def watch() -> None:
        subscribed.set()
        await store.watch(on_due)

    task = asyncio.create_task(watch())
    await subscribed.wait()
    # The watcher is ready once a probe job's own notice gets through (a listener first says
    # hello with None once connected; a probe sent before it listened is never announced).
    for _ in range(20):
        await store.enqueue([JobSpec(kind="probe", delay=timedelta(days=1))])
        try:
            if await asyncio.wait_for(queue.get(), timeout=1.5) is not None:
                break
        except TimeoutError:
            continue
    else:
        pytest.fail("the watcher never announced a job")
    # Notices of earlier probes may still be on their way: a marker, announced in commit
    # order after them all, says when the last of them has been read.
    [marker] = await store.enqueue([JobSpec(kind="probe", delay=timedelta(days=2))])
    while await next_wake(queue) != marker.job.run_at:
        pass
    yield queue
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def next_wake(queue: asyncio.Queue[datetime | None]) -> datetime | None:
    return await asyncio.wait_for(queue.get(), timeout=30)


async def test_an_enqueue_wakes_watchers(
    store: Store, woken: asyncio.Queue[datetime | None]
) -> None:
    job = await add(store)
    assert await next_wake(woken) in (None, job.run_at)


async def test_a_bulk_enqueue_wakes_watchers_for_its_earliest_job(
    store: Store, woken: asyncio.Queue[datetime | None]
) -> None:
    # As many jobs as PostgreSQL writes by COPY, the earliest last.
    count = 2_000
    specs = [JobSpec(kind="bulk", delay=timedelta(hours=2, seconds=-i)) for i in range(count)]
    results = await store.enqueue(specs)
    assert await next_wake(woken) in (None, results[-1].job.run_at)


async def test_a_release_a_failure_and_a_retry_wake_watchers(
    store: Store, woken: asyncio.Queue[datetime | None]
) -> None:
    await add(store, max_attempts=1)
    await next_wake(woken)
    held = await claim_one(store)
    assert held is not None
    await store.release(held.lease)
    await next_wake(woken)
    held = await claim_one(store)
    assert held is not None
    await store.fail(held.lease, error="x", retry_in=timedelta(0), permanent=True)
    await store.retry(held.id)
    await next_wake(woken)


async def test_a_rescued_job_wakes_watchers(
    store: Store, clock: FakeClock, woken: asyncio.Queue[datetime | None]
) -> None:
    await add(store, max_attempts=3)
    await next_wake(woken)
    held = await claim_one(store, lease=timedelta(seconds=5))
    assert held is not None
    clock.advance(timedelta(seconds=6))
    assert (await store.rescue()).requeued == [held.id]
    await next_wake(woken)
    assert await claim_one(store, lease=LEASE) is not None
