"""Hold and release on every store: a held job is never claimed until released, keeps its
time, unique key and parents, can be cancelled or deleted, and is never purged or pruned."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from rota.domain.errors import JobNotFound, StateConflict
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.domain.workflow import Workflow
from rota.runtime.context import JobContext
from rota.runtime.registry import Registry
from rota.runtime.worker import Worker, WorkerSettings
from rota.store import JobFilter, Store
from rota.testing import FakeClock
from tests.contract.helpers import add, claim_one

HELD = frozenset({JobState.HELD})


def _worker(store: Store, clock: FakeClock, ran: list[int]) -> Worker:
    registry = Registry()

    async def handler(ctx: JobContext, payload: Any) -> None:
        ran.append(ctx.job.id)

    registry.register("a", handler)
    return Worker(store, registry, WorkerSettings(name="w", concurrency=4), clock=clock)


async def test_a_held_job_is_never_claimed_until_released(store: Store, clock: FakeClock) -> None:
    held = await add(store)
    other = await add(store)
    assert (await store.hold(held.id)).state is JobState.HELD
    ran: list[int] = []
    worker = _worker(store, clock, ran)
    for _ in range(3):  # ticks over an hour: the held job stays put, the other runs
        await worker.run_until_idle()
        clock.advance(timedelta(minutes=30))
    assert ran == [other.id]
    assert (await store.get(held.id)).state is JobState.HELD
    assert await claim_one(store) is None

    released = await store.release_held(held.id)
    assert (released.state, released.run_at) == (JobState.PENDING, held.run_at)
    await worker.run_until_idle()
    assert ran == [other.id, held.id]
    assert (await store.get(held.id)).state is JobState.SUCCEEDED


async def test_a_released_job_is_due_at_its_own_time(store: Store, clock: FakeClock) -> None:
    later = await add(store, delay=timedelta(hours=1))
    await store.hold(later.id)
    released = await store.release_held(later.id)
    assert (released.state, released.run_at) == (JobState.PENDING, later.run_at)
    assert await claim_one(store) is None
    clock.advance(timedelta(hours=1))
    claimed = await claim_one(store)
    assert claimed is not None and claimed.id == later.id


async def test_only_waiting_and_pending_jobs_can_be_held(store: Store) -> None:
    await add(store)
    running = await claim_one(store)
    assert running is not None
    with pytest.raises(StateConflict, match="is running; only waiting or pending jobs"):
        await store.hold(running.id)
    assert (await store.get(running.id)).state is JobState.RUNNING
    await store.complete(running.lease)  # the hold changed nothing: its lease still holds
    with pytest.raises(StateConflict, match="is succeeded"):
        await store.hold(running.id)
    pending = await add(store)
    await store.hold(pending.id)
    with pytest.raises(StateConflict, match="is held"):
        await store.hold(pending.id)
    with pytest.raises(StateConflict, match="only held jobs can be released"):
        await store.release_held(running.id)
    with pytest.raises(JobNotFound):
        await store.hold(424242)
    with pytest.raises(JobNotFound):
        await store.release_held(424242)


async def test_a_held_job_keeps_its_unique_key(store: Store) -> None:
    job = await add(store, unique_key="k")
    await store.hold(job.id)
    [again] = await store.enqueue([JobSpec(kind="a", unique_key="k")])
    assert again.duplicate and again.job.id == job.id
    await store.release_held(job.id)
    assert (await store.get(job.id)).state is JobState.PENDING


async def test_a_held_job_can_be_cancelled_or_deleted_and_is_never_purged(
    store: Store, clock: FakeClock
) -> None:
    cancelled = await add(store)
    kept = await add(store)
    deleted = await add(store)
    assert await store.bulk_hold(JobFilter()) == 3
    assert (await store.cancel(cancelled.id)).state is JobState.CANCELLED
    assert (await store.delete(deleted.id)).state is JobState.HELD
    with pytest.raises(JobNotFound):
        await store.get(deleted.id)
    assert await store.purge(JobFilter()) == 1  # the cancelled job only
    clock.advance(timedelta(days=30))
    await store.prune(older_than=clock.now())
    assert (await store.get(kept.id)).state is JobState.HELD


async def test_bulk_hold_counts_what_it_held_and_bulk_release_puts_them_back(
    store: Store,
) -> None:
    a1 = await add(store, "a", queue="q1")
    a2 = await add(store, "a", queue="q1")
    b = await add(store, "b", queue="q1")
    await store.enqueue([JobSpec(kind="a", queue="q2")])
    await add(store, "a", queue="q1")
    done = await claim_one(store, queues=("q1",))  # a1 runs: not holdable
    assert done is not None and done.id == a1.id

    matching = JobFilter(kind="a", queue="q1")
    assert await store.bulk_hold(matching, limit=1) == 1
    assert await store.bulk_hold(matching) == 1  # the rest: the held one is not met again
    assert await store.bulk_hold(matching) == 0
    assert (await store.get(a2.id)).state is JobState.HELD
    assert (await store.get(b.id)).state is JobState.PENDING
    counts = await store.counts()
    assert counts.total(JobState.HELD) == 2
    assert counts.by_queue["q1"][JobState.HELD] == 2
    assert await store.count_jobs(JobFilter(states=HELD)) == 2
    listed = await store.list_jobs(JobFilter(states=HELD))
    assert sorted(job.kind for job in listed.jobs) == ["a", "a"]

    assert await store.bulk_release_held(JobFilter(states=HELD)) == 2
    assert await store.bulk_release_held(JobFilter()) == 0
    assert (await store.get(a2.id)).state is JobState.PENDING
    assert (await store.counts()).total(JobState.HELD) == 0


async def test_a_held_workflow_job_waits_for_its_parents_again_when_released(
    store: Store,
) -> None:
    graph = Workflow()
    parent = graph.add(JobSpec(kind="a"))
    child = graph.add(JobSpec(kind="a"), after=[parent])
    grandchild = graph.add(JobSpec(kind="a"), after=[child])
    jobs = await store.enqueue_workflow(graph)
    ids = {key: job.id for key, job in zip((parent, child, grandchild), jobs, strict=True)}
    held = await store.hold(ids[child])
    assert held.state is JobState.HELD
    released = await store.release_held(ids[child])
    assert released.state is JobState.WAITING  # its parent has not run
    await store.hold(ids[child])

    running = await claim_one(store)
    assert running is not None and running.id == ids[parent]
    await store.complete(running.lease)
    # The parent's end counted the held child down, but left it held; its own child waits.
    assert (await store.get(ids[child])).state is JobState.HELD
    assert (await store.get(ids[grandchild])).state is JobState.WAITING
    assert await claim_one(store) is None
    assert (await store.release_held(ids[child])).state is JobState.PENDING
    nxt = await claim_one(store)
    assert nxt is not None and nxt.id == ids[child]


async def test_a_held_child_is_cancelled_by_its_parents_failure(store: Store) -> None:
    graph = Workflow()
    parent = graph.add(JobSpec(kind="a", max_attempts=1))
    graph.add(JobSpec(kind="a"), after=[parent])
    jobs = await store.enqueue_workflow(graph)
    parent_id, child_id = jobs[0].id, jobs[1].id
    await store.hold(child_id)
    running = await claim_one(store)
    assert running is not None and running.id == parent_id
    await store.fail(running.lease, error="boom", retry_in=timedelta(0))
    cancelled = await store.get(child_id)
    assert cancelled.state is JobState.CANCELLED
    assert cancelled.last_error is not None and f"parent job {parent_id}" in cancelled.last_error


async def test_a_held_child_is_cancelled_when_its_parent_is_deleted(store: Store) -> None:
    graph = Workflow()
    parent = graph.add(JobSpec(kind="a"))
    graph.add(JobSpec(kind="a"), after=[parent])
    graph.add(JobSpec(kind="a"), after=[parent], on_parent_failure="run")
    parent_job, cancel_child, run_child = await store.enqueue_workflow(graph)
    assert await store.bulk_hold(JobFilter(workflow=parent_job.workflow)) == 3
    await store.delete(parent_job.id)
    cancelled = await store.get(cancel_child.id)
    assert cancelled.state is JobState.CANCELLED
    assert cancelled.last_error == f"cancelled: parent job {parent_job.id} was deleted"
    kept = await store.get(run_child.id)
    assert (kept.state, kept.waiting_on) == (JobState.HELD, 0)
    assert (await store.release_held(run_child.id)).state is JobState.PENDING


async def test_a_held_job_is_not_expired_while_held_and_never_starts_past_its_expiry(
    store: Store, clock: FakeClock
) -> None:
    job = await add(store, expire_after=timedelta(minutes=1))
    await store.hold(job.id)
    clock.advance(timedelta(minutes=2))
    assert await store.expire() == []
    assert (await store.get(job.id)).state is JobState.HELD
    await store.release_held(job.id)
    assert await claim_one(store) is None
    assert await store.expire() == [job.id]
    assert (await store.get(job.id)).last_error == "expired"


async def test_bulk_cancel_reaches_held_and_waiting_jobs_named_by_state(store: Store) -> None:
    graph = Workflow()
    parent = graph.add(JobSpec(kind="a"))
    graph.add(JobSpec(kind="a"), after=[parent])
    held, waiting = await store.enqueue_workflow(graph)
    await store.hold(held.id)
    pending = await add(store)

    assert await store.bulk_cancel(JobFilter(states=frozenset({JobState.WAITING}))) == 1
    assert await store.bulk_cancel(JobFilter(states=HELD)) == 1
    assert (await store.get(waiting.id)).state is JobState.CANCELLED
    assert (await store.get(held.id)).state is JobState.CANCELLED
    assert (await store.get(pending.id)).state is JobState.PENDING
