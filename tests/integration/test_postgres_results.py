"""Results on a real PostgreSQL: a wait is woken by NOTIFY from another process's completion,
not by polling; and migration 008 applies to a database already at 009."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta

import psycopg
import pytest

from rota.domain.errors import JobCancelled, JobFailed
from rota.domain.job import Job, JobSpec
from rota.results import ResultWaiter
from rota.store.postgres.store import PostgresStore

pytestmark = pytest.mark.postgres

LEASE = timedelta(seconds=30)


class WatchedStore(PostgresStore):
    """A PostgreSQL store that says when a wait has looked ``looks_before`` times."""

    def __init__(self, conninfo: str, *, looks_before: int) -> None:
        super().__init__(conninfo)
        self.looks = 0
        self.ready = asyncio.Event()
        self._looks_before = looks_before

    async def get_many(self, job_ids: Sequence[int]) -> list[Job]:
        found = await super().get_many(job_ids)
        self.looks += 1
        if self.looks >= self._looks_before:
            self.ready.set()
        return found


def _listening_wait(url: str) -> tuple[WatchedStore, ResultWaiter]:
    """A waiter whose listener is connected: its first look, then the look the
    listener asks for once it is LISTENing. From then on it polls only after an hour."""
    store = WatchedStore(url, looks_before=2)
    return store, ResultWaiter(store, pushed_poll_s=3600, poll_cap_s=3600)


async def test_a_wait_is_woken_by_the_notification_of_another_process_s_completion(
    pg_url: str,
) -> None:
    other = PostgresStore.from_url(pg_url)  # another process: the worker's own store
    [enqueued] = await other.enqueue([JobSpec(kind="k")])
    job_id = enqueued.job.id
    store, waiter = _listening_wait(pg_url)
    try:
        waiting = asyncio.create_task(waiter.result(job_id, timeout=3600))
        await store.ready.wait()
        looks = store.looks
        [claimed] = await other.claim("w", queues=["default"], limit=1, lease=LEASE)
        assert await other.complete_many([claimed.lease], results=['{"answer":42}']) == []
        # With a poll an hour away, only the NOTIFY of the completion can end this wait.
        assert await waiting == {"answer": 42}
        assert store.looks == looks + 1, "one look, when the notification came"
    finally:
        await waiter.close()
        await store.close()
        await other.close()


@pytest.mark.parametrize("ending", ["dead", "cancelled"])
async def test_dead_and_cancelled_jobs_notify_their_waiters(pg_url: str, ending: str) -> None:
    other = PostgresStore.from_url(pg_url)
    [enqueued] = await other.enqueue([JobSpec(kind="k")])
    job_id = enqueued.job.id
    store, waiter = _listening_wait(pg_url)
    try:
        waiting = asyncio.create_task(waiter.result(job_id, timeout=3600))
        await store.ready.wait()
        if ending == "dead":
            [claimed] = await other.claim("w", queues=["default"], limit=1, lease=LEASE)
            await other.fail(claimed.lease, error="boom", retry_in=timedelta(0), permanent=True)
            with pytest.raises(JobFailed, match="boom"):
                await waiting
        else:
            await other.cancel(job_id)
            with pytest.raises(JobCancelled):
                await waiting
    finally:
        await waiter.close()
        await store.close()
        await other.close()


async def test_finishing_jobs_nobody_waits_for_notifies_no_one(pg_url: str) -> None:
    store = PostgresStore.from_url(pg_url)
    listener = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        await listener.execute("LISTEN rota_finished")
        await store.enqueue([JobSpec(kind="k"), JobSpec(kind="k"), JobSpec(kind="k")])
        first, second, third = await store.claim(
            "w", queues=["default"], limit=3, lease=LEASE, fair=False
        )
        await store.complete_many([first.lease], results=['"nobody waits"'])
        await store.fail(second.lease, error="boom", retry_in=timedelta(0), permanent=True)
        await store.cancel(third.id)
        # Notifications arrive in commit order: had a write above notified, it would come
        # before this marker.
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as other:
            await other.execute("NOTIFY rota_finished, 'marker'")
        async for notice in listener.notifies():
            assert notice.payload == "marker"
            break
    finally:
        await listener.close()
        await store.close()


async def test_migration_008_applies_to_a_database_already_at_009(pg_url: str) -> None:
    store = PostgresStore.from_url(pg_url)
    try:
        async with store._connection() as conn:
            await conn.execute(
                "ALTER TABLE rota_jobs DROP COLUMN result, DROP COLUMN progress, "
                "DROP COLUMN progress_message"
            )
            await conn.execute("DROP TABLE rota_result_waits")
            await conn.execute("DELETE FROM rota_migrations WHERE version = '008_results'")
        assert await store.pending_migrations() == ["008_results"]
        assert await store.migrate() == ["008_results"]
        assert await store.pending_migrations() == []
        [enqueued] = await store.enqueue([JobSpec(kind="k")])
        assert (await store.get(enqueued.job.id)).result is None
    finally:
        await store.close()


def test_result_sync_waits_on_postgresql_from_synchronous_code(pg_url: str) -> None:
    from rota import App

    app = App(pg_url)
    try:
        job = app.enqueue_sync("k").job

        async def finish() -> None:
            other = PostgresStore.from_url(pg_url)
            try:
                [claimed] = await other.claim("w", queues=["default"], limit=1, lease=LEASE)
                await other.complete_many([claimed.lease], results=['{"sync":true}'])
            finally:
                await other.close()

        asyncio.run(finish())
        assert app.results.get_sync(job.id, timeout=60) == {"sync": True}
    finally:
        asyncio.run(app.close())


async def test_a_long_result_is_kept_out_of_its_job_s_row_and_pruned_with_it(
    pg_url: str,
) -> None:
    store = PostgresStore.from_url(pg_url)
    try:
        [enqueued] = await store.enqueue([JobSpec(kind="report")])
        [job] = await store.claim("w", queues=["default"], limit=1, lease=timedelta(seconds=30))
        text = '"' + "x" * 100_000 + '"'
        assert await store.complete_many([job.lease], results=[text]) == []
        assert (await store.get(job.id)).result == "x" * 100_000
        with psycopg.connect(pg_url, autocommit=True) as conn:
            row = conn.execute("SELECT result FROM rota_jobs WHERE id = %s", (job.id,)).fetchone()
            assert row == (None,), "the row stays small"
            kept = conn.execute("SELECT count(*) FROM rota_results WHERE job_id = %s", (job.id,))
            assert kept.fetchone() == (1,)
            assert enqueued.job.id == job.id
        await store.prune(older_than=job.created_at + timedelta(days=1))
        with psycopg.connect(pg_url, autocommit=True) as conn:
            left = conn.execute("SELECT count(*) FROM rota_results WHERE job_id = %s", (job.id,))
            assert left.fetchone() == (0,), "gone with its job"
    finally:
        await store.close()
