"""Workflows in the HTTP API: enqueue after other jobs, read a workflow, cancel one."""

from __future__ import annotations

from datetime import timedelta

import httpx

from rota.api import ApiSettings
from rota.domain.job import Job, JobSpec
from rota.domain.job_state import JobState
from rota.domain.workflow import Node, Workflow, chain
from rota.store.memory import MemoryStore
from tests.unit.api.conftest import TOKEN, MakeApp, asgi_client, total_jobs

READ_TOKEN = "read-token-0123456789"

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


async def _kill(store: MemoryStore, job_id: int) -> None:
    [claimed] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
    assert claimed.id == job_id
    await store.fail(claimed.lease, error="boom", retry_in=timedelta(0), permanent=True)


async def _run(store: MemoryStore, job_id: int) -> None:
    [claimed] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
    assert claimed.id == job_id
    assert await store.complete_many([claimed.lease]) == []


async def test_a_workflow_graph_lists_its_nodes_and_edges_up_to_a_cap(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    graph = Workflow()
    root = graph.add(JobSpec("root"))
    graph.add(JobSpec("leaf"), after=[root], on_parent_failure="run")
    for _ in range(4):
        graph.add(JobSpec("leaf"), after=[root])
    jobs = await store.enqueue_workflow(graph)
    ids = [job.id for job in jobs]

    shown = (await api.get(f"/api/workflows/{ids[0]}/graph")).json()
    assert shown["nodes"][:2] == [
        {"id": ids[0], "kind": "root", "state": "pending", "waiting_on": 0},
        {"id": ids[1], "kind": "leaf", "state": "waiting", "waiting_on": 1},
    ]
    assert shown["edges"][0] == {"parent": ids[0], "child": ids[1], "on_parent_failure": "run"}
    assert (shown["total"], shown["shown"], shown["edges_truncated"]) == (6, 6, False)
    capped = (await api.get(f"/api/workflows/{ids[0]}/graph", params={"limit": 3})).json()
    assert [node["id"] for node in capped["nodes"]] == ids[:3]
    assert (capped["total"], capped["shown"], len(capped["edges"])) == (6, 3, 2)
    for bad in ({"limit": 0}, {"limit": 2001}, {"limit": "many"}):
        refused = await api.get(f"/api/workflows/{ids[0]}/graph", params=bad)
        assert refused.status_code == 400, bad
        assert "limit" in refused.json()["error"]
    assert (await api.get("/api/workflows/77/graph")).status_code == 404


async def test_a_graph_of_a_wide_fan_in_says_which_edges_it_left_out(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    graph = Workflow()
    parts = [graph.add(JobSpec("part")) for _ in range(1_200)]
    graph.add(JobSpec("join"), after=parts)
    graph.add(JobSpec("after"), after=[Node(len(parts))])
    jobs = await store.enqueue_workflow(graph)
    shown = (await api.get(f"/api/workflows/{jobs[0].id}/graph")).json()
    assert shown["shown"] == shown["total"] == 1_202
    assert shown["edges_truncated"] is True
    into = [edge for edge in shown["edges"] if edge["child"] == jobs[-2].id]
    assert len(into) == 1_000
    assert [edge["parent"] for edge in shown["edges"] if edge["child"] == jobs[-1].id] == [
        jobs[-2].id
    ]


async def _a_b_c_then_d(store: MemoryStore, *, d_after_c: bool) -> list[Job]:
    """a, then b, then c (which runs even if b fails), and d: after c, or on its own."""
    graph = Workflow()
    b = graph.add(JobSpec("b"), after=[graph.add(JobSpec("a"))])
    c = graph.add(JobSpec("c"), after=[b], on_parent_failure="run")
    graph.add(JobSpec("d"), after=[c] if d_after_c else [])
    return await store.enqueue_workflow(graph)


async def test_retrying_a_dead_node_with_what_follows_it_rearms_and_reruns_them(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    a, b, c, d = await _a_b_c_then_d(store, d_after_c=True)
    await _run(store, a.id)
    await _kill(store, b.id)  # c runs anyway, d after it
    await _kill(store, c.id)  # d is cancelled with c
    assert (await store.get(d.id)).state is JobState.CANCELLED

    alone = await api.post(f"/api/workflows/{a.id}/nodes/{c.id}/retry")
    assert alone.json() == {"count": 1}
    assert [(await store.get(j.id)).state for j in (c, d)] == [JobState.PENDING, JobState.WAITING]
    await _kill(store, c.id)

    retried = await api.post(f"/api/workflows/{a.id}/nodes/{b.id}/retry?downstream=true")
    assert retried.status_code == 200, retried.text
    assert retried.json() == {"count": 3}
    # c's edge to b, settled when b died ("run"), is re-opened: c waits for b's new run.
    states = [(await store.get(j.id)).state for j in (b, c, d)]
    assert states == [JobState.PENDING, JobState.WAITING, JobState.WAITING]
    await _run(store, b.id)
    await _run(store, c.id)
    await _run(store, d.id)
    again = await api.post(f"/api/workflows/{a.id}/nodes/{b.id}/retry", params={"downstream": 1})
    assert again.status_code == 409
    assert "nothing to retry" in again.json()["error"]


async def test_cancelling_a_node_with_what_follows_it_cancels_every_unfinished_one(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    a, b, c, o = await _a_b_c_then_d(store, d_after_c=False)
    await _run(store, a.id)  # b is pending now, c waits on it

    done = await api.post(f"/api/workflows/{a.id}/nodes/{a.id}/cancel?downstream=true")
    assert done.json() == {"count": 2}
    states = [(await store.get(j.id)).state for j in (a, b, c, o)]
    assert states == [JobState.SUCCEEDED, JobState.CANCELLED, JobState.CANCELLED, JobState.PENDING]
    refused = await api.post(f"/api/workflows/{a.id}/nodes/{b.id}/cancel")
    assert refused.status_code == 409
    assert "nothing to cancel" in refused.json()["error"]


async def test_node_verbs_refuse_bad_input_and_change_nothing(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    a, b = await store.enqueue_workflow(chain(JobSpec("a"), JobSpec("b")))
    [alone] = await store.enqueue([JobSpec("x")])
    cases = [
        (f"/api/workflows/{a.id}/nodes/{alone.job.id}/cancel", 404, "not a job of workflow"),
        (f"/api/workflows/{a.id}/nodes/999/cancel", 404, "job 999 not found"),
        ("/api/workflows/999/nodes/999/retry", 404, "workflow 999 not found"),
        (f"/api/workflows/{a.id}/nodes/0/cancel", 400, "job_id"),
        (f"/api/workflows/{a.id}/nodes/{b.id}/cancel?downstream=maybe", 400, "downstream"),
        (f"/api/workflows/{a.id}/nodes/{b.id}/retry", 409, "nothing to retry"),
    ]
    for path, status, message in cases:
        response = await api.post(path)
        assert response.status_code == status, (path, response.text)
        assert message in response.json()["error"], (path, response.json())
    states = [(await store.get(j)).state for j in (a.id, b.id, alone.job.id)]
    assert states == [JobState.PENDING, JobState.WAITING, JobState.PENDING]


async def test_a_read_only_identity_may_read_the_graph_but_not_act_on_it(
    make_app: MakeApp, store: MemoryStore
) -> None:
    a, b = await store.enqueue_workflow(chain(JobSpec("a"), JobSpec("b")))
    settings = ApiSettings(auth_token=TOKEN, read_token=READ_TOKEN)
    reader = {"authorization": f"Bearer {READ_TOKEN}"}
    async with asgi_client(make_app(settings), headers=reader) as api:
        assert (await api.get(f"/api/workflows/{a.id}/graph")).status_code == 200
        for verb in ("retry", "cancel"):
            refused = await api.post(f"/api/workflows/{a.id}/nodes/{b.id}/{verb}?downstream=true")
            assert refused.status_code == 403
            assert "read-only" in refused.json()["error"]
        assert (await api.get("/api/config")).json()["read_only"] is True
    assert [(await store.get(j.id)).state for j in (a, b)] == [JobState.PENDING, JobState.WAITING]
