"""Workflows in the HTTP API: enqueue after other jobs, read a workflow, cancel one."""

from __future__ import annotations

from datetime import timedelta

import httpx

from rota.domain.job import JobSpec, JobState
from rota.domain.workflow import Workflow, chain
from rota.store.memory import MemoryStore
from tests.unit.api.conftest import total_jobs

LEASE = timedelta(seconds=30)


async def test_a_job_created_with_depends_on_waits_for_its_parents(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    [parent] = await store.enqueue([JobSpec(kind="fetch")])
    response = await api.post(
        "/api/jobs",
        json={"kind": "report", "depends_on": [parent.job.id], "on_parent_failure": "run"},
    )
    assert response.status_code == 201
    body = response.json()
    assert (body["state"], body["waiting_on"], body["workflow"]) == ("waiting", 1, parent.job.id)
    listed = (await api.get("/api/jobs", params={"state": "waiting"})).json()["jobs"]
    assert [job["id"] for job in listed] == [body["id"]]


async def test_unknown_parents_are_refused_and_nothing_is_written(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    unknown = await api.post("/api/jobs", json={"kind": "report", "depends_on": [424242]})
    assert unknown.status_code == 404
    assert unknown.json()["error"] == "depends_on: unknown parent job 424242"
    for body, message in [
        ({"kind": "report", "depends_on": []}, "depends_on"),
        ({"kind": "report", "depends_on": ["1"]}, "depends_on"),
        ({"kind": "report", "on_parent_failure": "run"}, "only meaningful with depends_on"),
        ({"kind": "report", "depends_on": [1], "on_parent_failure": "skip"}, "on_parent_failure"),
        ({"kind": "report", "depends_on": [1], "every_seconds": 60}, "schedule"),
    ]:
        response = await api.post("/api/jobs", json=body)
        assert response.status_code == 400, body
        assert message in response.json()["error"], response.json()
    assert await total_jobs(store) == 0


async def test_a_workflow_shows_its_jobs_states_and_edges_and_can_be_cancelled(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    first, second, third = await store.enqueue_workflow(
        chain(JobSpec("a"), JobSpec("b"), JobSpec("c"))
    )
    [claimed] = await store.claim("w", queues=["default"], limit=5, lease=LEASE)
    assert await store.complete_many([claimed.lease]) == []

    shown = (await api.get(f"/api/workflows/{first.id}")).json()
    assert [(job["id"], job["state"]) for job in shown["jobs"]] == [
        (first.id, "succeeded"),
        (second.id, "pending"),
        (third.id, "waiting"),
    ]
    assert shown["edges"] == [
        {"parent": first.id, "child": second.id, "on_parent_failure": "cancel"},
        {"parent": second.id, "child": third.id, "on_parent_failure": "cancel"},
    ]
    assert shown["by_state"]["waiting"] == 1
    assert shown["finished"] is False

    cancelled = await api.post(f"/api/workflows/{first.id}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json() == {"count": 2}
    assert (await store.get(third.id)).state is JobState.CANCELLED
    assert (await api.get(f"/api/workflows/{first.id}")).json()["finished"] is True


async def test_an_unknown_workflow_is_a_404(api: httpx.AsyncClient) -> None:
    assert (await api.get("/api/workflows/77")).status_code == 404
    assert (await api.post("/api/workflows/77/cancel")).status_code == 404
    assert (await api.get("/api/workflows/0")).status_code == 400


async def test_a_workflow_and_its_jobs_parents_are_answered_a_page_at_a_time(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    """A join of 3,000 parents: no answer lists them all at once (it was one 7.6 MB answer
    at 10,000 parents)."""
    graph = Workflow()
    parts = [graph.add(JobSpec("part", payload={"n": n})) for n in range(3_000)]
    graph.add(JobSpec("join"), after=parts)
    jobs = await store.enqueue_workflow(graph)
    ids = sorted(job.id for job in jobs)
    workflow_id, join_id = ids[0], ids[-1]

    first = await api.get(f"/api/workflows/{workflow_id}")
    assert first.status_code == 200
    shown = first.json()
    assert len(shown["jobs"]) == 100 and shown["next_cursor"] is not None
    assert shown["total"] == 3_001 and shown["by_state"]["pending"] == 3_000
    assert shown["edges"] == [] and shown["edges_truncated"] is False
    assert len(first.content) < 100_000

    seen, cursor, last = [], None, shown
    for _ in range(10):
        params = {"limit": 500} | ({"cursor": cursor} if cursor else {})
        page = await api.get(f"/api/workflows/{workflow_id}", params=params)
        last = page.json()
        seen += [job["id"] for job in last["jobs"]]
        cursor = last["next_cursor"]
        if cursor is None:
            break
    assert seen == ids
    assert len(last["edges"]) == 1_000 and last["edges_truncated"] is True
    assert {edge["child"] for edge in last["edges"]} == {join_id}

    parents, cursor = [], None
    for _ in range(20):
        params = {"limit": 500} | ({"cursor": cursor} if cursor else {})
        page = await api.get(f"/api/jobs/{join_id}/parents", params=params)
        assert page.status_code == 200
        parents += [job["id"] for job in page.json()["jobs"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert parents == ids[:-1]
    children = (await api.get(f"/api/jobs/{ids[0]}/children")).json()
    assert children == {
        "jobs": [{"id": join_id, "state": "waiting", "on_parent_failure": "cancel"}],
        "next_cursor": None,
    }
    assert (await api.get("/api/jobs/999999/parents")).status_code == 404
    listed = (await api.get("/api/jobs", params={"workflow": workflow_id, "limit": 3})).json()
    assert [job["id"] for job in listed["jobs"]] == ids[::-1][:3]
