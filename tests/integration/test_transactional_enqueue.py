"""Transactional enqueue: a job written on the application's own psycopg connection exists
exactly when the application's transaction commits (PostgreSQL only).

Each test writes a row of the application's own (``signups``) next to the job, so "the job
exists" and "the application's write exists" can be seen to go together.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from rota import App, JobContext, JobNotFound, JobState, chain, chord
from rota.store import JobFilter
from tests.support.processes import eventually

pytestmark = pytest.mark.postgres

#: The run_at of a marker job: a notification carrying it proves the listener saw every
#: commit before the marker's (notifications arrive in commit order).
MARKER_AT = datetime(2100, 1, 1, tzinfo=UTC)


class Rollback(Exception):
    """Raised inside a transaction block to roll it back."""


@dataclass
class Harness:
    app: App
    url: str
    ran: list[int] = field(default_factory=list)

    async def job_exists(self, job_id: int) -> bool:
        try:
            await self.app.jobs.get(job_id)
        except JobNotFound:
            return False
        return True

    async def signups(self) -> list[str]:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            cursor = await conn.execute("SELECT email FROM signups ORDER BY email")
            return [row[0] for row in await cursor.fetchall()]

    async def run_worker_until_idle(self) -> int:
        return await self.app.worker(name="inline").run_until_idle()


@pytest.fixture
async def harness(pg_url: str) -> AsyncIterator[Harness]:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute("CREATE TABLE signups (email text PRIMARY KEY)")
    app = App(pg_url)
    harness = Harness(app, pg_url)

    @app.job("welcome_email")
    async def welcome_email(ctx: JobContext, payload: Any) -> None:
        harness.ran.append(ctx.job_id)

    await app.open()
    yield harness
    await app.close()


# ---------------------------------------------------------------------- async connection


async def signup(harness: Harness, email: str, *, commit: bool) -> int:
    """The application's own write and its job in one transaction; returns the job's id."""
    async with await psycopg.AsyncConnection.connect(harness.url, autocommit=True) as conn:
        try:
            async with conn.transaction():
                await conn.execute("INSERT INTO signups VALUES (%s)", [email])
                result = await harness.app.enqueue(
                    "welcome_email", {"email": email}, connection=conn
                )
                if not commit:
                    raise Rollback
        except Rollback:
            pass
    return result.job.id


async def test_a_rolled_back_transaction_leaves_no_job_and_wakes_no_worker(
    harness: Harness,
) -> None:
    app = harness.app
    woken: list[datetime | None] = []
    listener = asyncio.create_task(app.store.watch(woken.append))
    try:
        await eventually(lambda: None in woken, what="the listener to connect")
        rolled_back = await signup(harness, "ada@example.com", commit=False)
        await app.enqueue("welcome_email", {"marker": True}, run_at=MARKER_AT)
        await eventually(lambda: MARKER_AT in woken, what="the marker's notification")
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
    assert [at for at in woken if at is not None] == [MARKER_AT]
    assert not await harness.job_exists(rolled_back)
    assert await harness.signups() == []
    assert await harness.run_worker_until_idle() == 0
    assert harness.ran == []


async def test_a_committed_transaction_makes_the_job_claimable_and_it_runs(
    harness: Harness,
) -> None:
    app = harness.app
    async with await psycopg.AsyncConnection.connect(harness.url) as conn:
        async with conn.transaction():
            await conn.execute("INSERT INTO signups VALUES ('ada@example.com')")
            result = await app.enqueue(
                "welcome_email", {"email": "ada@example.com"}, connection=conn
            )
            # Invisible to everyone else until the application commits.
            assert not await harness.job_exists(result.job.id)
            assert await harness.run_worker_until_idle() == 0
        assert await harness.job_exists(result.job.id)
    assert await harness.signups() == ["ada@example.com"]
    assert await harness.run_worker_until_idle() == 1
    assert harness.ran == [result.job.id]
    assert (await app.jobs.get(result.job.id)).state is JobState.SUCCEEDED


async def test_a_transaction_begun_by_the_applications_own_write_rolls_back_the_job(
    harness: Harness,
) -> None:
    async with await psycopg.AsyncConnection.connect(harness.url) as conn:
        await conn.execute("INSERT INTO signups VALUES ('ada@example.com')")
        result = await harness.app.enqueue("welcome_email", connection=conn)
        await conn.rollback()
    assert not await harness.job_exists(result.job.id)
    assert await harness.signups() == []


async def test_an_enqueue_that_begins_the_implicit_transaction_is_rolled_back_with_it(
    harness: Harness,
) -> None:
    async with await psycopg.AsyncConnection.connect(harness.url) as conn:
        result = await harness.app.enqueue("welcome_email", connection=conn)
        await conn.execute("INSERT INTO signups VALUES ('ada@example.com')")
        await conn.rollback()
    assert await harness.signups() == []
    assert not await harness.job_exists(result.job.id)


async def test_a_duplicate_unique_key_in_the_callers_transaction_resolves_to_the_holder(
    harness: Harness,
) -> None:
    app = harness.app
    existing = await app.enqueue("welcome_email", {"n": 1}, unique_key="welcome:1")
    async with await psycopg.AsyncConnection.connect(harness.url) as conn, conn.transaction():
        duplicate = await app.enqueue(
            "welcome_email", {"n": 2}, unique_key="welcome:1", connection=conn
        )
        fresh = await app.enqueue(
            "welcome_email", {"n": 3}, unique_key="welcome:2", connection=conn
        )
        # The second enqueue finds the job this transaction has not committed yet.
        again = await app.enqueue(
            "welcome_email", {"n": 4}, unique_key="welcome:2", connection=conn
        )
        # Nothing failed inside the transaction: the application's own writes go on.
        await conn.execute("INSERT INTO signups VALUES ('ada@example.com')")
    assert (duplicate.duplicate, duplicate.job.id) == (True, existing.job.id)
    assert (fresh.duplicate, again.duplicate, again.job.id) == (False, True, fresh.job.id)
    assert await app.store.count_jobs(JobFilter()) == 2
    assert (await app.jobs.get(existing.job.id)).payload == {"n": 1}
    assert await harness.signups() == ["ada@example.com"]


# ---------------------------------------------------------------------- sync connection


def signup_sync(app: App, url: str, email: str, *, commit: bool, **options: Any) -> int:
    """What a Django or Flask view does: its own write and the job, in one transaction."""
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            with conn.transaction():
                conn.execute("INSERT INTO signups VALUES (%s)", [email])
                result = app.enqueue_sync(
                    "welcome_email", {"email": email}, connection=conn, **options
                )
                if not commit:
                    raise Rollback
        except Rollback:
            pass
    return result.job.id


async def test_enqueue_sync_on_a_rolled_back_connection_leaves_no_job(harness: Harness) -> None:
    job_id = await asyncio.to_thread(
        signup_sync, harness.app, harness.url, "ada@example.com", commit=False
    )
    assert not await harness.job_exists(job_id)
    assert await harness.signups() == []
    assert await harness.run_worker_until_idle() == 0


async def test_enqueue_sync_on_a_committed_connection_runs_the_job(harness: Harness) -> None:
    job_id = await asyncio.to_thread(
        signup_sync, harness.app, harness.url, "ada@example.com", commit=True
    )
    assert await harness.signups() == ["ada@example.com"]
    assert await harness.run_worker_until_idle() == 1
    assert harness.ran == [job_id]
    assert (await harness.app.jobs.get(job_id)).state is JobState.SUCCEEDED


async def test_enqueue_sync_resolves_a_duplicate_unique_key_in_the_transaction(
    harness: Harness,
) -> None:
    existing = await harness.app.enqueue("welcome_email", unique_key="welcome:ada")
    job_id = await asyncio.to_thread(
        signup_sync,
        harness.app,
        harness.url,
        "ada@example.com",
        commit=True,
        unique_key="welcome:ada",
    )
    assert job_id == existing.job.id
    assert await harness.signups() == ["ada@example.com"]
    assert await harness.app.store.count_jobs(JobFilter()) == 1


async def test_enqueue_sync_that_begins_the_implicit_transaction_is_rolled_back_with_it(
    harness: Harness,
) -> None:
    def enqueue_then_roll_back() -> int:
        with psycopg.connect(harness.url) as conn:
            result = harness.app.enqueue_sync("welcome_email", connection=conn)
            conn.execute("INSERT INTO signups VALUES ('ada@example.com')")
            conn.rollback()
        return result.job.id

    job_id = await asyncio.to_thread(enqueue_then_roll_back)
    assert await harness.signups() == []
    assert not await harness.job_exists(job_id)


# ---------------------------------------------------------------------- workflows


async def test_a_job_after_a_parent_joins_the_callers_transaction(harness: Harness) -> None:
    app = harness.app
    parent = await app.enqueue("welcome_email", {"n": 1})
    async with await psycopg.AsyncConnection.connect(harness.url) as conn:
        async with conn.transaction():
            await conn.execute("INSERT INTO signups VALUES ('ada@example.com')")
            child = await app.enqueue("welcome_email", depends_on=[parent.job.id], connection=conn)
            assert child.job.state is JobState.WAITING
            assert not await harness.job_exists(child.job.id)
        rolled_back = await app.enqueue(
            "welcome_email", depends_on=[parent.job.id], connection=conn
        )
        await conn.rollback()
    assert not await harness.job_exists(rolled_back.job.id)
    assert await harness.run_worker_until_idle() == 2  # the parent, then the child it released
    assert harness.ran == [parent.job.id, child.job.id]


async def test_a_whole_workflow_joins_the_callers_transaction_or_none_of_it(
    harness: Harness,
) -> None:
    app = harness.app
    graph = chain(app.spec("welcome_email", {"n": 1}), app.spec("welcome_email", {"n": 2}))
    async with await psycopg.AsyncConnection.connect(harness.url) as conn:
        async with conn.transaction():
            run = await app.workflows.enqueue(graph, connection=conn)
            assert not await harness.job_exists(run.job_ids[0])
        dropped = await app.workflows.enqueue(graph, connection=conn)
        await conn.rollback()
    assert [await harness.job_exists(job_id) for job_id in dropped.job_ids] == [False, False]
    assert await harness.run_worker_until_idle() == 2
    assert harness.ran == run.job_ids
    assert (await app.workflows.get(run.id)).is_finished


async def test_enqueue_sync_after_a_parent_on_the_callers_connection(harness: Harness) -> None:
    parent = await harness.app.enqueue("welcome_email")
    child_id = await asyncio.to_thread(
        signup_sync,
        harness.app,
        harness.url,
        "ada@example.com",
        commit=True,
        depends_on=[parent.job.id],
        on_parent_failure="run",
    )
    dropped_id = await asyncio.to_thread(
        signup_sync,
        harness.app,
        harness.url,
        "bob@example.com",
        commit=False,
        depends_on=[parent.job.id],
    )
    assert not await harness.job_exists(dropped_id)
    child = await harness.app.jobs.get(child_id)
    assert (child.state, child.waiting_on, child.workflow) == (
        JobState.WAITING,
        1,
        parent.job.id,
    )
    await harness.app.jobs.cancel(parent.job.id)
    assert (await harness.app.jobs.get(child_id)).state is JobState.PENDING  # "run" anyway


async def test_enqueue_workflow_sync_on_the_callers_connection(harness: Harness) -> None:
    app = harness.app

    def in_a_view(commit: bool) -> list[int]:
        with psycopg.connect(harness.url) as conn:
            run = app.workflows.enqueue_sync(
                chord(
                    [app.spec("welcome_email"), app.spec("welcome_email")],
                    app.spec("welcome_email"),
                ),
                connection=conn,
            )
            conn.execute("INSERT INTO signups VALUES (%s)", [f"{commit}@example.com"])
            if commit:
                conn.commit()
            else:
                conn.rollback()
        return run.job_ids

    kept = await asyncio.to_thread(in_a_view, True)
    dropped = await asyncio.to_thread(in_a_view, False)
    assert await harness.signups() == ["True@example.com"]
    assert not any([await harness.job_exists(job_id) for job_id in dropped])
    assert await harness.run_worker_until_idle() == 3
    assert sorted(harness.ran) == kept
