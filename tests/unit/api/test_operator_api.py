"""The operator verbs through the API: delete, purge, reschedule, re-run, expiry."""

from __future__ import annotations

from datetime import timedelta

import httpx

from rota.domain.job import JobSpec, JobState
from rota.store.memory import MemoryStore
from tests.unit.api.conftest import dead_job, total_jobs


async def test_delete_removes_a_finished_job(api: httpx.AsyncClient, store: MemoryStore) -> None:
    job = await dead_job(store)
    deleted = await api.delete(f"/api/jobs/{job.id}")
    assert deleted.status_code == 204
    assert (await api.get(f"/api/jobs/{job.id}")).status_code == 404
    again = await api.delete(f"/api/jobs/{job.id}")
    assert again.status_code == 404 and again.json() == {"error": f"job {job.id} not found"}


async def test_delete_of_a_running_job_is_409_and_changes_nothing(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await store.enqueue([JobSpec(kind="email")])
    [running] = await store.claim("w", queues=["default"], limit=1, lease=timedelta(seconds=30))
    refused = await api.delete(f"/api/jobs/{running.id}")
    assert refused.status_code == 409
    assert refused.json() == {
        "error": f"job {running.id} is running: cannot delete it (cancel it first)"
    }
    assert await store.get(running.id) == running


async def test_purge_counts_then_deletes_the_finished_jobs_matching(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    for _ in range(2):
        await dead_job(store, "email")
    await dead_job(store, "sms")
    await store.enqueue([JobSpec(kind="email")])
    scope = await api.get("/api/jobs/count", params={"kind": "email", "action": "delete"})
    assert scope.json() == {"count": 2, "capped": False}
    purged = await api.post("/api/jobs/bulk/delete", json={"kind": "email"})
    assert purged.status_code == 200 and purged.json() == {"count": 2}
    assert await total_jobs(store) == 2
    left = (await api.get("/api/jobs", params={"kind": "email"})).json()["jobs"]
    assert [job["state"] for job in left] == ["pending"]


async def test_purge_refuses_a_bad_filter_and_deletes_nothing(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await dead_job(store)
    refused = await api.post("/api/jobs/bulk/delete", json={"state": ["gone"]})
    assert refused.status_code == 400
    assert await total_jobs(store) == 1
    assert (await store.counts()).total(JobState.DEAD) == 1
