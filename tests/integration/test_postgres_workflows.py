"""Workflows on a real PostgreSQL: two parents completing at the same instant on two
connections release their child exactly once, and it is claimed once; a parent deleted while
another parent completes, or while a new child is being written after it, leaves no child
waiting for it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.domain.workflow import Workflow, chord
from rota.store.postgres.store import PostgresStore
from tests.support.processes import eventually

pytestmark = pytest.mark.postgres

LEASE = timedelta(seconds=30)
#: A run_at no claim reaches during a test: the job stays pending.
_LATER = datetime(2999, 1, 1, tzinfo=UTC)


async def _waiting(conn: psycopg.AsyncConnection[tuple[int]], count: int) -> bool:
    """Whether ``count`` statements of this database wait for a lock."""
    cursor = await conn.execute(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    return await cursor.fetchone() == (count,)


async def _both_waiting(conn: psycopg.AsyncConnection[tuple[int]]) -> bool:
    return await _waiting(conn, 2)


async def test_two_parents_completing_at_once_release_the_child_exactly_once(
    pg_url: str,
) -> None:
    """Both completions are held on the child's row lock (taken by a third connection), so
    they are in flight together, then let go at once: the child's counter reaches 0 in one
    of them, it becomes pending once, and of two claimers only one gets it."""
    a, b = PostgresStore.from_url(pg_url), PostgresStore.from_url(pg_url)
    blocker = await psycopg.AsyncConnection.connect(pg_url)
    watcher = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        first, second, child = await a.enqueue_workflow(
            chord([JobSpec("part"), JobSpec("part")], JobSpec("sum"))
        )
        [held_a] = await a.claim("A", queues=["default"], limit=1, lease=LEASE)
        [held_b] = await b.claim("B", queues=["default"], limit=1, lease=LEASE)
        assert {held_a.id, held_b.id} == {first.id, second.id}

        await blocker.execute("SELECT 1 FROM rota_jobs WHERE id = %s FOR UPDATE", [child.id])
        completing = [
            asyncio.create_task(a.complete_many([held_a.lease])),
            asyncio.create_task(b.complete_many([held_b.lease])),
        ]
        await eventually(
            lambda: _both_waiting(watcher),
            what="both completions waiting on the child's row",
        )
        assert not any(task.done() for task in completing)
        await blocker.commit()
        assert await asyncio.gather(*completing) == [[], []]

        released = await a.get(child.id)
        assert (released.state, released.waiting_on) == (JobState.PENDING, 0)
        claims = await asyncio.gather(
            a.claim("A", queues=["default"], limit=10, lease=LEASE),
            b.claim("B", queues=["default"], limit=10, lease=LEASE),
        )
        assert sorted(job.id for jobs in claims for job in jobs) == [child.id]
        cursor = await watcher.execute(
            "SELECT count(*) FROM rota_job_deps WHERE child_id = %s AND satisfied", [child.id]
        )
        assert await cursor.fetchone() == (2,)
    finally:
        await blocker.close()
        await watcher.close()
        await a.close()
        await b.close()


async def test_many_fan_ins_completed_from_two_stores_release_each_child_once(
    pg_url: str,
) -> None:
    """Forty chords of two parents, each parent completed by a different store at once."""
    a, b = PostgresStore.from_url(pg_url), PostgresStore.from_url(pg_url)
    try:
        children = []
        for _ in range(40):
            jobs = await a.enqueue_workflow(chord([JobSpec("x"), JobSpec("y")], JobSpec("z")))
            children.append(jobs[2].id)
        parents = await a.claim("A", queues=["default"], limit=80, lease=LEASE)
        assert len(parents) == 80
        by_workflow: dict[int | None, list[int]] = {}
        for job in parents:
            by_workflow.setdefault(job.workflow, []).append(job.id)
        firsts = [job.lease for job in parents if job.id == min(by_workflow[job.workflow])]
        seconds = [job.lease for job in parents if job.id != min(by_workflow[job.workflow])]
        assert await asyncio.gather(a.complete_many(firsts), b.complete_many(seconds)) == [[], []]
        claimed = await asyncio.gather(
            a.claim("A", queues=["default"], limit=100, lease=LEASE),
            b.claim("B", queues=["default"], limit=100, lease=LEASE),
        )
        assert sorted(job.id for jobs in claimed for job in jobs) == sorted(children)
    finally:
        await a.close()
        await b.close()


async def test_crossing_completions_of_two_fan_ins_both_succeed(pg_url: str) -> None:
    """Two batches whose parents release the same two children in opposite orders, both
    parked on the children's rows (a third connection holds them) and let go at once: both
    batches succeed, and each child is released once."""
    a, b = PostgresStore.from_url(pg_url), PostgresStore.from_url(pg_url)
    blocker = await psycopg.AsyncConnection.connect(pg_url)
    watcher = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        graph = Workflow()
        parents = [graph.add(JobSpec("p")) for _ in range(4)]
        graph.add(JobSpec("c1"), after=[parents[0], parents[3]])
        graph.add(JobSpec("c2"), after=[parents[1], parents[2]])
        jobs = await a.enqueue_workflow(graph)
        held = {
            job.id: job.lease
            for job in await a.claim("A", queues=["default"], limit=4, lease=LEASE)
        }
        first = [held[jobs[0].id], held[jobs[1].id]]  # releases c1, then c2
        second = [held[jobs[2].id], held[jobs[3].id]]  # releases c2, then c1
        await blocker.execute(
            "SELECT 1 FROM rota_jobs WHERE id = ANY(%s) FOR UPDATE", [[jobs[4].id, jobs[5].id]]
        )
        completing = [
            asyncio.create_task(a.complete_many(first)),
            asyncio.create_task(b.complete_many(second)),
        ]
        await eventually(lambda: _both_waiting(watcher), what="both batches parked on a child")
        await blocker.commit()
        assert await asyncio.gather(*completing) == [[], []]
        children = await a.claim("A", queues=["default"], limit=10, lease=LEASE)
        assert sorted(job.id for job in children) == [jobs[4].id, jobs[5].id]
    finally:
        await blocker.close()
        await watcher.close()
        await a.close()
        await b.close()


async def test_a_parent_deleted_while_another_completes_releases_the_child_once(
    pg_url: str,
) -> None:
    """A child on "run" edges to two parents: one is deleted and the other completes at
    once, both parked on the child's row: whichever goes second sees the counter the first
    left, so the child ends pending with nothing left to wait for, and is claimed once."""
    a, b = PostgresStore.from_url(pg_url), PostgresStore.from_url(pg_url)
    blocker = await psycopg.AsyncConnection.connect(pg_url)
    watcher = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        graph = Workflow()
        doomed, running = graph.add(JobSpec("p", run_at=_LATER)), graph.add(JobSpec("p"))
        graph.add(JobSpec("c"), after=[doomed, running], on_parent_failure="run")
        first, second, child = await a.enqueue_workflow(graph)
        [held] = await a.claim("A", queues=["default"], limit=1, lease=LEASE)
        assert held.id == second.id
        await blocker.execute("SELECT 1 FROM rota_jobs WHERE id = %s FOR UPDATE", [child.id])
        racing = [
            asyncio.create_task(a.complete_many([held.lease])),
            asyncio.create_task(b.delete(first.id)),
        ]
        await eventually(lambda: _both_waiting(watcher), what="both parked on the child")
        await blocker.commit()
        completed, deleted = await asyncio.gather(*racing)
        assert (completed, deleted.id) == ([], first.id)
        released = await a.get(child.id)
        assert (released.state, released.waiting_on) == (JobState.PENDING, 0)
        claims = await asyncio.gather(
            a.claim("A", queues=["default"], limit=10, lease=LEASE),
            b.claim("B", queues=["default"], limit=10, lease=LEASE),
        )
        assert sorted(job.id for jobs in claims for job in jobs) == [child.id]
    finally:
        await blocker.close()
        await watcher.close()
        await a.close()
        await b.close()


async def test_a_parent_deleted_behind_a_new_child_being_written_cancels_that_child(
    pg_url: str,
) -> None:
    """A workflow naming an existing job as parent locks it; a delete of that job queued
    behind it sees, once the workflow committed, the edge it wrote (the trigger's statements
    take a new snapshot), and cancels the new child instead of leaving it waiting."""
    a, b = PostgresStore.from_url(pg_url), PostgresStore.from_url(pg_url)
    blocker = await psycopg.AsyncConnection.connect(pg_url)
    watcher = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        [parent] = [result.job for result in await a.enqueue([JobSpec("p", run_at=_LATER)])]
        await blocker.execute("SELECT 1 FROM rota_jobs WHERE id = %s FOR UPDATE", [parent.id])
        graph = Workflow()
        graph.add(JobSpec("c"), after=[parent.id])
        writing = asyncio.create_task(a.enqueue_workflow(graph))
        await eventually(lambda: _waiting(watcher, 1), what="the workflow waiting on its parent")
        deleting = asyncio.create_task(b.delete(parent.id))
        await eventually(lambda: _both_waiting(watcher), what="the delete queued behind it")
        await blocker.commit()
        [child] = await writing
        assert (await deleting).id == parent.id
        cancelled = await a.get(child.id)
        assert (cancelled.state, cancelled.waiting_on) == (JobState.CANCELLED, 0)
        assert cancelled.last_error == f"cancelled: parent job {parent.id} was deleted"
    finally:
        await blocker.close()
        await watcher.close()
        await a.close()
        await b.close()
