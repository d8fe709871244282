"""Waiting for results from application code: app.result, results, as_completed, result_sync."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from rota import (
    App,
    InvalidInput,
    JobCancelled,
    JobContext,
    JobFailed,
    JobNotFound,
    JobState,
    Permanent,
    ResultTimeout,
)
from rota.domain.job import Job, JobSpec
from rota.domain.lease import Lease
from rota.results import ResultWaiter
from rota.store.memory import MemoryStore
from rota.testing import FakeClock, drain, drain_sync


class CountingStore(MemoryStore):
    """The memory store, counting the lookups of waits and the completion statements."""

    def __init__(self, *, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.lookups: list[list[int]] = []
        self.completions = 0

    async def get_many(self, job_ids: Sequence[int]) -> list[Job]:
        self.lookups.append(sorted(job_ids))
        return await super().get_many(job_ids)

    async def complete_many(self, leases: Sequence[Lease], **options: Any) -> list[Lease]:
        self.completions += 1
        return await super().complete_many(leases, **options)


def _define(app: App) -> None:
    @app.job("double")
    async def double(ctx: JobContext, payload: Any) -> Any:
        return {"answer": payload["n"] * 2}

    @app.job("broken", max_attempts=1)
    async def broken(ctx: JobContext, payload: Any) -> None:
        raise Permanent("the printer is on fire")

    @app.job("sync-double")
    def sync_double(ctx: JobContext, payload: Any) -> Any:
        return payload["n"] * 2


@pytest.fixture
async def app(clock: FakeClock) -> AsyncIterator[App]:
    app = App(store=CountingStore(clock=clock), clock=clock)
    _define(app)
    async with app:
        yield app


async def test_result_returns_what_the_handler_returned(app: App) -> None:
    job = (await app.enqueue("double", {"n": 21})).job
    waiting = asyncio.create_task(app.results.get(job.id, timeout=60))
    await drain(app)
    assert await waiting == {"answer": 42}


async def test_a_finished_job_s_result_is_returned_even_with_no_time_left(app: App) -> None:
    job = (await app.enqueue("double", {"n": 1})).job
    await drain(app)
    assert await app.results.get(job.id, timeout=0) == {"answer": 2}


async def test_a_dead_job_raises_job_failed_with_its_last_error(app: App) -> None:
    job = (await app.enqueue("broken")).job
    await drain(app)
    with pytest.raises(JobFailed) as failed:
        await app.results.get(job.id, timeout=5)
    assert failed.value.job_id == job.id
    assert failed.value.error == "Permanent: the printer is on fire"
    assert "the printer is on fire" in str(failed.value)


async def test_a_cancelled_job_raises_job_cancelled(app: App) -> None:
    job = (await app.enqueue("double", {"n": 1})).job
    waiting = asyncio.create_task(app.results.get(job.id))
    await app.jobs.cancel(job.id)
    with pytest.raises(JobCancelled) as cancelled:
        await waiting
    assert cancelled.value.job_id == job.id
    ended = cancelled.value.job
    assert isinstance(ended, Job) and ended.state is JobState.CANCELLED


async def test_a_wait_past_its_timeout_raises_result_timeout_and_the_job_carries_on(
    app: App,
) -> None:
    job = (await app.enqueue("double", {"n": 1})).job
    with pytest.raises(ResultTimeout) as timed_out:
        await app.results.get(job.id, timeout=0)
    assert isinstance(timed_out.value, TimeoutError)
    assert timed_out.value.job_ids == [job.id]
    assert (await app.jobs.get(job.id)).state is JobState.PENDING
    await drain(app)
    assert await app.results.get(job.id, timeout=0) == {"answer": 2}


async def test_waiting_on_an_unknown_job_raises_job_not_found(app: App) -> None:
    with pytest.raises(JobNotFound):
        await app.results.get(999_999, timeout=1)


async def test_a_negative_timeout_is_refused(app: App) -> None:
    with pytest.raises(InvalidInput):
        await app.results.get(1, timeout=-1)


async def test_results_come_in_the_order_asked_with_one_lookup_per_wake_up(app: App) -> None:
    store = app.store
    assert isinstance(store, CountingStore)
    ids = [(await app.enqueue("double", {"n": n})).job.id for n in range(20)]
    waiting = asyncio.create_task(app.results.gather(list(reversed(ids)), timeout=60))
    await drain(app)
    assert await waiting == [{"answer": 2 * n} for n in reversed(range(20))]
    # Each lookup asked about every job still outstanding at once, and lookups happen once
    # per wake-up (each completion statement wakes the wait once at most), never per job.
    assert store.lookups[0] == sorted(ids)
    assert len(store.lookups) <= 1 + store.completions < 1 + len(ids)


async def test_results_of_finished_jobs_take_a_single_lookup(app: App) -> None:
    store = app.store
    assert isinstance(store, CountingStore)
    ids = [(await app.enqueue("double", {"n": n})).job.id for n in range(50)]
    await drain(app)
    store.lookups.clear()
    assert await app.results.gather(ids, timeout=0) == [{"answer": 2 * n} for n in range(50)]
    assert store.lookups == [sorted(ids)]


async def test_results_raise_for_a_job_that_failed(app: App) -> None:
    good = (await app.enqueue("double", {"n": 1})).job
    bad = (await app.enqueue("broken")).job
    await drain(app)
    with pytest.raises(JobFailed) as failed:
        await app.results.gather([good.id, bad.id], timeout=5)
    assert failed.value.job_id == bad.id


async def test_as_completed_yields_each_job_as_it_finishes(app: App) -> None:
    first = (await app.enqueue("double", {"n": 1})).job
    second = (await app.enqueue("broken")).job
    third = (await app.enqueue("double", {"n": 3})).job
    await app.jobs.cancel(third.id)
    seen: list[tuple[int, JobState, Any]] = []
    async for job in app.results.as_completed([first.id, second.id, third.id], timeout=60):
        seen.append((job.id, job.state, job.result))
        if len(seen) == 1:
            await drain(app)  # the other two finish while the caller is busy
    assert seen[0] == (third.id, JobState.CANCELLED, None)
    assert sorted(seen[1:]) == [
        (first.id, JobState.SUCCEEDED, {"answer": 2}),
        (second.id, JobState.DEAD, None),
    ]


async def test_the_memory_store_wakes_a_wait_without_polling(clock: FakeClock) -> None:
    app = App("memory://", clock=clock)
    _define(app)
    async with app:
        # A poll interval far beyond the test's timeout: only the store's hook can wake it.
        waiter = ResultWaiter(app.store, pushed_poll_s=3600, poll_cap_s=3600)
        job = (await app.enqueue("double", {"n": 5})).job
        waiting = asyncio.create_task(waiter.result(job.id, timeout=3600))
        await drain(app)
        assert await waiting == {"answer": 10}
        await waiter.close()


async def test_sqlite_waits_poll_until_the_job_finishes(tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path / 'rota.db'}")
    _define(app)
    async with app:
        job = (await app.enqueue("sync-double", {"n": 4})).job
        waiting = asyncio.create_task(app.results.get(job.id, timeout=60))
        await drain(app)
        assert await waiting == 8


def test_result_sync_waits_from_synchronous_code(tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path / 'rota.db'}")
    _define(app)
    try:
        job = app.enqueue_sync("double", {"n": 7}).job
        with pytest.raises(ResultTimeout):
            app.results.get_sync(job.id, timeout=0)
        drain_sync(app)
        assert app.results.get_sync(job.id, timeout=5) == {"answer": 14}
        failing = app.enqueue_sync("broken").job
        drain_sync(app)
        with pytest.raises(JobFailed):
            app.results.get_sync(failing.id, timeout=5)
    finally:
        asyncio.run(app.close())


async def test_sqlite_migration_008_applies_to_a_database_already_at_009(tmp_path: Path) -> None:
    from rota.store.sqlite.store import SqliteStore

    store = SqliteStore(tmp_path / "rota.db")
    await store.migrate()

    def back_to_009(conn: sqlite3.Connection) -> None:
        for column in ("result", "progress", "progress_message"):
            conn.execute(f"ALTER TABLE rota_jobs DROP COLUMN {column}")
        conn.execute("DELETE FROM rota_migrations WHERE version = 8")

    try:
        await store._db.write(back_to_009)
        assert await store.pending_migrations() == ["008_results"]
        assert await store.migrate() == ["008_results"]
        [enqueued] = await store.enqueue([JobSpec(kind="k")])
        assert (await store.get(enqueued.job.id)).result is None
    finally:
        await store.close()
