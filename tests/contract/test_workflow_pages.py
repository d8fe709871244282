"""A workflow and a job's parents and children are read a page at a time: a job with
thousands of parents makes no answer thousands of entries long."""

from __future__ import annotations

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.domain.workflow import Workflow
from rota.store import JobFilter, Store
from rota.store.records import MAX_PAGE_EDGES

PARENTS = 1_500


async def test_a_workflow_with_a_job_of_many_parents_is_read_in_pages(store: Store) -> None:
    graph = Workflow()
    parents = [graph.add(JobSpec("part", payload={"n": n})) for n in range(PARENTS)]
    graph.add(JobSpec("join"), after=parents)
    jobs = await store.enqueue_workflow(graph)
    ids = sorted(job.id for job in jobs)
    workflow_id, join_id = ids[0], ids[-1]
    assert (await store.workflow_states(workflow_id)) == {
        JobState.PENDING: PARENTS,
        JobState.WAITING: 1,
    }

    # Pages of 400 jobs by id; the page holding the join carries at most MAX_PAGE_EDGES
    # edges into it, and one more says there are more.
    seen: list[int] = []
    after = None
    for _ in range(10):
        page, edges = await store.workflow(workflow_id, after=after, limit=400, previews=True)
        if not page:
            break
        assert len(page) <= 400
        seen += [job.id for job in page]
        assert all(child in {job.id for job in page} for _, child, _ in edges)
        if join_id in seen[-len(page) :]:
            assert len(edges) == MAX_PAGE_EDGES + 1
        else:
            assert edges == []
        after = page[-1].id
    assert seen == ids

    # The join's parents and a parent's children, a page at a time, by id.
    found: list[int] = []
    after = None
    for _ in range(20):
        related = await store.related(join_id, parents=True, after=after, limit=100)
        if not related:
            break
        assert len(related) <= 100
        assert {state for _, state, _ in related} == {JobState.PENDING}
        found += [other for other, _, _ in related]
        after = related[-1][0]
    assert found == ids[:-1]
    assert await store.related(ids[0], parents=False) == [(join_id, JobState.WAITING, "cancel")]
    assert await store.related(ids[0], parents=True) == []
    assert await store.related(10**12, parents=True) == []

    # Lists filter by workflow too.
    listed = await store.list_jobs(JobFilter(workflow=workflow_id), limit=5)
    assert [job.id for job in listed.jobs] == ids[::-1][:5]
    assert await store.count_jobs(JobFilter(workflow=workflow_id)) == PARENTS + 1
