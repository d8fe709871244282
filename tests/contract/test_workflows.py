"""Workflows: a job with parents waits until they succeeded, then becomes claimable exactly
once; a parent's failure cancels (or, with on_parent_failure="run", releases) its children;
retrying the parent re-arms them; a graph is checked before anything is written."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from rota import workflows
from rota.domain.errors import InvalidJob, NotFound, StateConflict
from rota.domain.job import Job, JobSpec
from rota.domain.job_state import JobState
from rota.domain.workflow import MAX_WORKFLOW_JOBS, Workflow, chain, chord, group
from rota.runtime.context import JobContext
from rota.runtime.registry import Registry
from rota.runtime.worker import Worker
from rota.runtime.worker_settings import WorkerSettings
from rota.store import JobFilter, Store
from rota.testing import FakeClock
from tests.contract.helpers import LEASE, add, claim_one


async def after(
    store: Store, parents: list[int], *, policy: str = "cancel", kind: str = "c"
) -> Job:
    graph = Workflow()
    graph.add(JobSpec(kind=kind), after=parents, on_parent_failure=policy)
    [job] = await store.enqueue_workflow(graph)
    return job


async def run(store: Store, job_id: int, *, result: str | None = None) -> None:
    """Claim ``job_id`` (the only claimable job) and complete it with ``result``."""
    claimed = await claim_one(store)
    assert claimed is not None and claimed.id == job_id
    assert await store.complete_many([claimed.lease], results=[result]) == []


async def kill(store: Store, job_id: int) -> None:
    """Claim ``job_id`` and fail it permanently: it ends dead."""
    claimed = await claim_one(store)
    assert claimed is not None and claimed.id == job_id
    state = await store.fail(claimed.lease, error="boom", retry_in=timedelta(0), permanent=True)
    assert state is JobState.DEAD


async def state_of(store: Store, job_id: int) -> JobState:
    return (await store.get(job_id)).state


# ------------------------------------------------------------------ enqueue with parents


async def test_a_job_with_unfinished_parents_waits_and_is_never_claimed(store: Store) -> None:
    parent = await add(store)
    child = await after(store, [parent.id])
    assert child.state is JobState.WAITING
    assert child.waiting_on == 1
    assert child.workflow == parent.id
    claimed = await store.claim("w", queues=["default"], limit=10, lease=LEASE)
    assert [job.id for job in claimed] == [parent.id]
    assert await claim_one(store) is None
    assert (await store.get(parent.id)).workflow == parent.id


async def test_a_waiting_job_becomes_pending_when_its_last_parent_succeeds(store: Store) -> None:
    first, second = await add(store), await add(store)
    child = await after(store, [first.id, second.id])
    await run(store, first.id)
    waiting = await store.get(child.id)
    assert (waiting.state, waiting.waiting_on) == (JobState.WAITING, 1)
    await run(store, second.id)
    released = await store.get(child.id)
    assert (released.state, released.waiting_on) == (JobState.PENDING, 0)
    await run(store, child.id)


async def test_unknown_parents_are_refused_and_nothing_is_written(store: Store) -> None:
    parent = await add(store)
    with pytest.raises(InvalidJob, match="unknown parent job 999999"):
        await after(store, [parent.id, 999999])
    page = await store.list_jobs(JobFilter())
    assert [job.id for job in page.jobs] == [parent.id]
    assert (await store.get(parent.id)).workflow is None


async def test_a_parent_that_already_succeeded_counts_as_done(store: Store) -> None:
    parent = await add(store)
    await run(store, parent.id)
    child = await after(store, [parent.id])
    assert (child.state, child.waiting_on) == (JobState.PENDING, 0)
    await run(store, child.id)


async def test_a_parent_already_dead_cancels_the_child_at_enqueue(store: Store) -> None:
    parent = await add(store)
    await kill(store, parent.id)
    child = await after(store, [parent.id])
    assert child.state is JobState.CANCELLED
    assert child.last_error == f"cancelled: parent job {parent.id} ended dead"
    run_anyway = await after(store, [parent.id], policy="run")
    assert run_anyway.state is JobState.PENDING


# ------------------------------------------------------------------ failure policy


async def test_a_dead_parent_cancels_its_dependents_recursively(store: Store) -> None:
    parent = await add(store)
    child = await after(store, [parent.id])
    grandchild = await after(store, [child.id])
    await kill(store, parent.id)
    cancelled = await store.get(child.id)
    assert cancelled.state is JobState.CANCELLED
    assert cancelled.last_error == f"cancelled: parent job {parent.id} ended dead"
    below = await store.get(grandchild.id)
    assert below.state is JobState.CANCELLED
    assert below.last_error == f"cancelled: parent job {child.id} ended cancelled"


async def test_run_anyway_edges_release_the_child_when_the_parent_fails(store: Store) -> None:
    parent = await add(store)
    child = await after(store, [parent.id], policy="run")
    await kill(store, parent.id)
    assert await state_of(store, child.id) is JobState.PENDING


async def test_cancelling_a_parent_cancels_its_waiting_children(store: Store) -> None:
    parent = await add(store)
    child = await after(store, [parent.id])
    await store.cancel(parent.id)
    cancelled = await store.get(child.id)
    assert cancelled.state is JobState.CANCELLED
    assert cancelled.last_error == f"cancelled: parent job {parent.id} ended cancelled"


async def test_an_expired_parent_cancels_its_waiting_children(
    store: Store, clock: FakeClock
) -> None:
    parent = await add(store, expire_after=timedelta(minutes=1))
    child = await after(store, [parent.id])
    clock.advance(timedelta(minutes=1))
    assert await store.expire() == [parent.id]
    cancelled = await store.get(child.id)
    assert cancelled.state is JobState.CANCELLED
    assert cancelled.last_error == f"cancelled: parent job {parent.id} ended cancelled"


async def test_deleting_a_pending_parent_cancels_its_waiting_children(store: Store) -> None:
    parent = await add(store)
    child = await after(store, [parent.id])
    grandchild = await after(store, [child.id])
    await store.delete(parent.id)
    cancelled = await store.get(child.id)
    assert (cancelled.state, cancelled.waiting_on) == (JobState.CANCELLED, 0)
    assert cancelled.last_error == f"cancelled: parent job {parent.id} was deleted"
    assert cancelled.finished_at is not None
    below = await store.get(grandchild.id)
    assert below.state is JobState.CANCELLED
    assert below.last_error == f"cancelled: parent job {child.id} ended cancelled"
    # Nothing can re-arm it now; retried, it runs without the parent that is gone, and its
    # own child waits for it again.
    assert (await store.retry(child.id)).state is JobState.PENDING
    assert await state_of(store, grandchild.id) is JobState.WAITING
    await run(store, child.id)
    assert await state_of(store, grandchild.id) is JobState.PENDING


async def test_deleting_a_waiting_parent_cancels_its_children_too(store: Store) -> None:
    jobs = await store.enqueue_workflow(chain(JobSpec("a"), JobSpec("b"), JobSpec("c")))
    await store.delete(jobs[1].id)
    last = await store.get(jobs[2].id)
    assert last.state is JobState.CANCELLED
    assert last.last_error == f"cancelled: parent job {jobs[1].id} was deleted"
    await run(store, jobs[0].id)
    assert await state_of(store, jobs[2].id) is JobState.CANCELLED


async def test_deleting_a_parent_releases_run_anyway_children_once_nothing_else_holds_them(
    store: Store,
) -> None:
    first, second = await add(store), await add(store)
    child = await after(store, [first.id, second.id], policy="run")
    await store.delete(first.id)
    held = await store.get(child.id)
    assert (held.state, held.waiting_on) == (JobState.WAITING, 1)
    await store.delete(second.id)
    released = await store.get(child.id)
    assert (released.state, released.waiting_on) == (JobState.PENDING, 0)
    await run(store, child.id)


async def test_purging_a_finished_parent_leaves_no_child_waiting_on_it(store: Store) -> None:
    parent = await add(store)
    child = await after(store, [parent.id])
    await kill(store, parent.id)
    assert (await store.retry(child.id)).state is JobState.WAITING  # waits for the parent
    assert await store.purge(JobFilter(states=frozenset({JobState.DEAD}))) == 1
    cancelled = await store.get(child.id)
    assert (cancelled.state, cancelled.waiting_on) == (JobState.CANCELLED, 0)
    assert cancelled.last_error == f"cancelled: parent job {parent.id} was deleted"


async def test_purging_a_whole_finished_workflow_at_once_deletes_every_job(
    store: Store,
) -> None:
    jobs = await store.enqueue_workflow(chain(JobSpec("a"), JobSpec("b"), JobSpec("c")))
    await kill(store, jobs[0].id)
    assert await store.purge(JobFilter()) == 3
    assert await store.count_jobs(JobFilter()) == 0


async def test_retrying_a_dead_parent_rearms_the_dependents_it_cancelled(store: Store) -> None:
    parent = await add(store)
    child = await after(store, [parent.id])
    grandchild = await after(store, [child.id])
    await kill(store, parent.id)
    retried = await store.retry(parent.id)
    assert retried.state is JobState.PENDING
    rearmed = await store.get(child.id)
    assert (rearmed.state, rearmed.last_error, rearmed.finished_at) == (
        JobState.WAITING,
        None,
        None,
    )
    assert await state_of(store, grandchild.id) is JobState.WAITING
    await run(store, parent.id)
    await run(store, child.id)
    await run(store, grandchild.id)


async def test_a_rearmed_child_stays_cancelled_while_another_parent_is_dead(
    store: Store,
) -> None:
    first, second = await add(store), await add(store)
    child = await after(store, [first.id, second.id])
    await kill(store, first.id)
    await kill(store, second.id)
    await store.retry(first.id)
    blocked = await store.get(child.id)
    assert blocked.state is JobState.CANCELLED
    await store.retry(second.id)
    assert await state_of(store, child.id) is JobState.WAITING


async def test_cancelling_a_waiting_job_is_allowed_and_retrying_it_waits_again(
    store: Store,
) -> None:
    parent = await add(store)
    child = await after(store, [parent.id])
    assert (await store.cancel(child.id)).state is JobState.CANCELLED
    assert (await store.retry(child.id)).state is JobState.WAITING
    await run(store, parent.id)
    assert await state_of(store, child.id) is JobState.PENDING


async def test_the_child_reads_its_parents_results(store: Store) -> None:
    first, second = await add(store), await add(store)
    child = await after(store, [first.id, second.id])
    await run(store, first.id, result='{"n":1}')
    await run(store, second.id)
    assert await store.parent_results(child.id) == {first.id: {"n": 1}, second.id: None}
    assert await store.parent_results(first.id) == {}


async def test_the_child_reads_a_parent_s_result_kept_apart(store: Store) -> None:
    parent = await add(store)
    child = await after(store, [parent.id])
    long = {"text": "é" * 40_000}  # 80 KB of JSON: longer than a row keeps
    await run(store, parent.id, result=json.dumps(long, ensure_ascii=False))
    assert await store.parent_results(child.id) == {parent.id: long}


# ------------------------------------------------------------------ graphs


async def test_a_chain_runs_one_job_after_another(store: Store) -> None:
    jobs = await store.enqueue_workflow(chain(JobSpec("a"), JobSpec("b"), JobSpec("c")))
    assert [job.state for job in jobs] == [JobState.PENDING, JobState.WAITING, JobState.WAITING]
    assert {job.workflow for job in jobs} == {jobs[0].id}
    for job in jobs:
        await run(store, job.id)
    assert [await state_of(store, job.id) for job in jobs] == [JobState.SUCCEEDED] * 3


async def test_a_chord_runs_its_callback_after_the_whole_group(store: Store) -> None:
    header = [JobSpec("part", payload={"i": i}) for i in range(3)]
    jobs = await store.enqueue_workflow(chord(header, JobSpec("sum")))
    callback = jobs[-1]
    assert callback.waiting_on == 3
    claimed = await store.claim("w", queues=["default"], limit=10, lease=LEASE)
    assert sorted(job.id for job in claimed) == [job.id for job in jobs[:3]]
    assert await store.complete_many([job.lease for job in claimed]) == []
    assert await state_of(store, callback.id) is JobState.PENDING
    jobs_of, edges = await store.workflow(callback.workflow or 0)
    assert [job.id for job in jobs_of] == [job.id for job in jobs]
    assert sorted(edges) == sorted((job.id, callback.id, "cancel") for job in jobs[:3])


async def test_a_group_is_independent_jobs_of_one_workflow(store: Store) -> None:
    jobs = await store.enqueue_workflow(group(JobSpec("a"), JobSpec("b")))
    assert [job.state for job in jobs] == [JobState.PENDING, JobState.PENDING]
    assert {job.workflow for job in jobs} == {jobs[0].id}


async def test_a_graph_is_checked_before_anything_is_written(store: Store) -> None:
    keyed = Workflow()
    keyed.add(JobSpec("a", unique_key="k"))
    with pytest.raises(InvalidJob, match="unique key"):
        await store.enqueue_workflow(keyed)
    with pytest.raises(InvalidJob, match="no jobs"):
        await store.enqueue_workflow(Workflow())
    too_big = Workflow(specs=[JobSpec("a")] * (MAX_WORKFLOW_JOBS + 1))
    with pytest.raises(InvalidJob, match="at most"):
        await store.enqueue_workflow(too_big)
    assert (await store.count_jobs(JobFilter())) == 0


async def test_cancelling_a_workflow_cancels_every_unfinished_job(store: Store) -> None:
    jobs = await store.enqueue_workflow(chain(JobSpec("a"), JobSpec("b"), JobSpec("c")))
    await run(store, jobs[0].id)
    running = await claim_one(store)
    assert running is not None and running.id == jobs[1].id
    assert await store.cancel_workflow(jobs[0].id) == 2
    states = [await state_of(store, job.id) for job in jobs]
    assert states == [JobState.SUCCEEDED, JobState.CANCELLED, JobState.CANCELLED]
    assert await store.complete_many([running.lease]) == [running.lease]


# ------------------------------------------------------------------ with a worker


async def test_a_worker_runs_a_chord_and_the_callback_reads_its_parents_results(
    store: Store, clock: FakeClock
) -> None:
    registry = Registry()
    seen: list[dict[int, Any]] = []

    async def part(ctx: JobContext, payload: Any) -> Any:
        return payload["n"] * 10

    async def total(ctx: JobContext, payload: Any) -> Any:
        seen.append(dict(ctx.parent_results))
        return sum(ctx.parent_results.values())

    registry.register("part", part)
    registry.register("total", total)
    header = [JobSpec("part", payload={"n": n}) for n in (1, 2, 3)]
    jobs = await store.enqueue_workflow(chord(header, JobSpec("total")))
    worker = Worker(store, registry, WorkerSettings(name="w", concurrency=4), clock=clock)
    done = 0
    while done < 4:  # the callback becomes claimable only after the parts' completions
        ran = await worker.run_until_idle()
        assert ran > 0
        done += ran
    callback = await store.get(jobs[-1].id)
    assert (callback.state, callback.result) == (JobState.SUCCEEDED, 60)
    assert seen == [{jobs[0].id: 10, jobs[1].id: 20, jobs[2].id: 30}]


async def test_retention_prunes_a_job_with_its_edges(store: Store, clock: FakeClock) -> None:
    parent = await add(store)
    child = await after(store, [parent.id])
    await run(store, parent.id, result='"kept?"')
    clock.advance(timedelta(days=2))
    assert await store.prune(older_than=clock.now() - timedelta(days=1)) == 1
    assert await store.parent_results(child.id) == {}
    jobs, edges = await store.workflow(parent.id)
    assert ([job.id for job in jobs], edges) == ([child.id], [])
    await run(store, child.id)


# ------------------------------------------------------------------ a node and what follows it


async def test_retrying_a_node_with_what_follows_it_runs_them_again_in_order(
    store: Store,
) -> None:
    jobs = await store.enqueue_workflow(chain(JobSpec("a"), JobSpec("b"), JobSpec("c")))
    a, b, c = (job.id for job in jobs)
    await run(store, a)
    await kill(store, b)  # c is cancelled with it
    assert await workflows.retry_downstream(store, a, b) == 2
    assert [await state_of(store, job) for job in (b, c)] == [JobState.PENDING, JobState.WAITING]
    await run(store, b)
    await run(store, c)
    with pytest.raises(StateConflict, match="nothing to retry"):
        await workflows.retry_downstream(store, a, b)


async def both_dead_on_a_run_anyway_edge(store: Store) -> tuple[Job, Job]:
    """A parent that ended dead and its child on a "run" edge, which ran anyway and died."""
    parent = await add(store)
    child = await after(store, [parent.id], policy="run")
    await kill(store, parent.id)
    await kill(store, child.id)
    return parent, child


async def test_a_run_anyway_child_retried_with_its_dead_parent_waits_for_its_new_run(
    store: Store,
) -> None:
    parent, child = await both_dead_on_a_run_anyway_edge(store)
    assert await workflows.retry_downstream(store, parent.id, parent.id) == 2
    waiting = await store.get(child.id)
    assert (waiting.state, waiting.waiting_on) == (JobState.WAITING, 1)
    await run(store, parent.id)  # the only claimable job: the child waits for it
    released = await store.get(child.id)
    assert (released.state, released.waiting_on) == (JobState.PENDING, 0)
    await run(store, child.id)


async def test_a_bulk_retry_of_a_dead_parent_and_its_run_anyway_child_makes_the_child_wait(
    store: Store,
) -> None:
    parent, child = await both_dead_on_a_run_anyway_edge(store)
    # Both in one call (on PostgreSQL, one statement): whichever is written first.
    assert await store.bulk_retry(JobFilter(workflow=parent.id)) == 2
    assert [await state_of(store, job) for job in (parent.id, child.id)] == [
        JobState.PENDING,
        JobState.WAITING,
    ]
    await kill(store, parent.id)  # ends dead again: the child runs anyway, once
    await run(store, child.id)


async def test_a_retried_parent_holds_back_a_run_anyway_child_that_has_not_started(
    store: Store,
) -> None:
    parent = await add(store)
    child = await after(store, [parent.id], policy="run")
    await kill(store, parent.id)
    assert await state_of(store, child.id) is JobState.PENDING
    await store.retry(parent.id)
    held = await store.get(child.id)
    assert (held.state, held.waiting_on) == (JobState.WAITING, 1)
    await run(store, parent.id)
    await run(store, child.id)


async def test_a_retried_parent_leaves_a_running_or_succeeded_child_its_run(
    store: Store,
) -> None:
    parent = await add(store)
    running = await after(store, [parent.id], policy="run", kind="r")
    done = await after(store, [parent.id], policy="run", kind="s")
    await kill(store, parent.id)
    claimed = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
    assert [job.id for job in claimed] == [running.id]
    await run(store, done.id)
    await store.retry(parent.id)
    assert [(await store.get(job.id)).waiting_on for job in (running, done)] == [0, 0]
    assert await store.complete_many([claimed[0].lease]) == []
    await run(store, parent.id)
    assert await state_of(store, done.id) is JobState.SUCCEEDED


def a_b_then_c_anyway() -> Workflow:
    """a, then b, then c, which runs even if b ends dead or cancelled."""
    graph = Workflow()
    first = graph.add(JobSpec("a"))
    second = graph.add(JobSpec("b"), after=[first])
    graph.add(JobSpec("c"), after=[second], on_parent_failure="run")
    return graph


async def test_a_rearmed_job_makes_its_own_run_anyway_child_wait_for_it_again(
    store: Store,
) -> None:
    a, b, c = (job.id for job in await store.enqueue_workflow(a_b_then_c_anyway()))
    await kill(store, a)  # b is cancelled with it, and c runs anyway: it dies too
    assert await state_of(store, b) is JobState.CANCELLED
    await kill(store, c)
    assert await workflows.retry_downstream(store, a, a) == 3
    assert [await state_of(store, job) for job in (a, b, c)] == [
        JobState.PENDING,
        JobState.WAITING,
        JobState.WAITING,
    ]
    await run(store, a)
    await run(store, b)
    await run(store, c)


async def test_cancelling_a_node_with_what_follows_it_leaves_the_rest_alone(
    store: Store,
) -> None:
    graph = a_b_then_c_anyway()
    graph.add(JobSpec("d"))
    a, b, c, d = (job.id for job in await store.enqueue_workflow(graph))
    [other] = await store.enqueue([JobSpec("x")])
    with pytest.raises(NotFound, match="not a job of workflow"):
        await workflows.cancel_downstream(store, a, other.job.id)
    assert await workflows.cancel_downstream(store, a, b) == 2
    states = [await state_of(store, job) for job in (a, b, c, d)]
    assert states == [JobState.PENDING, JobState.CANCELLED, JobState.CANCELLED, JobState.PENDING]
