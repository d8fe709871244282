"""Hold and release through the API: one job, or every job a filter matches with its count;
a running job is refused with 409 and a message; read-only identities change nothing."""

from __future__ import annotations

from datetime import timedelta

import httpx

from rota.api import ApiSettings
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store.memory import MemoryStore
from tests.unit.api.conftest import MakeApp, asgi_client

LEASE = timedelta(seconds=30)


async def test_a_job_is_held_then_released(api: httpx.AsyncClient, store: MemoryStore) -> None:
    [result] = await store.enqueue([JobSpec(kind="email")])
    held = await api.post(f"/api/jobs/{result.job.id}/hold")
    assert held.status_code == 200 and held.json()["state"] == "held"
    assert await store.claim("w", queues=["default"], limit=1, lease=LEASE) == []
    listed = (await api.get("/api/jobs", params={"state": "held"})).json()["jobs"]
    assert [job["id"] for job in listed] == [result.job.id]
    counts = (await api.get("/api/jobs/counts")).json()["counts"]
    assert counts["held"] == 1
    released = await api.post(f"/api/jobs/{result.job.id}/release")
    assert released.status_code == 200 and released.json()["state"] == "pending"
    [claimed] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
    assert claimed.id == result.job.id


async def test_holding_a_running_job_is_409_with_a_message_and_changes_nothing(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await store.enqueue([JobSpec(kind="email")])
    [running] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
    refused = await api.post(f"/api/jobs/{running.id}/hold")
    assert refused.status_code == 409
    assert refused.json() == {
        "error": f"job {running.id} is running; only waiting or pending jobs can be held "
        "(cancel a running one)"
    }
    assert await store.get(running.id) == running
    not_held = await api.post(f"/api/jobs/{running.id}/release")
    assert not_held.status_code == 409
    assert (await api.post("/api/jobs/424242/hold")).status_code == 404


async def test_bulk_hold_by_filter_reports_its_count_and_bulk_release_undoes_it(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await store.enqueue([JobSpec(kind="email") for _ in range(3)])
    await store.enqueue([JobSpec(kind="sms")])
    scope = await api.get("/api/jobs/count", params={"kind": "email", "action": "hold"})
    assert scope.json() == {"count": 3, "capped": False}
    held = await api.post("/api/jobs/bulk/hold", json={"kind": "email"})
    assert held.status_code == 200 and held.json() == {"count": 3}
    assert (await store.counts()).total(JobState.HELD) == 3
    again = await api.post("/api/jobs/bulk/hold", json={"kind": "email"})
    assert again.json() == {"count": 0}
    scope = await api.get("/api/jobs/count", params={"action": "release"})
    assert scope.json() == {"count": 3, "capped": False}
    released = await api.post("/api/jobs/bulk/release", json={"kind": "email"})
    assert released.json() == {"count": 3}
    assert (await store.counts()).total(JobState.PENDING) == 4


async def test_bulk_hold_refuses_a_bad_filter_and_holds_nothing(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await store.enqueue([JobSpec(kind="email")])
    refused = await api.post("/api/jobs/bulk/hold", json={"state": ["gone"]})
    assert refused.status_code == 400
    assert (await store.counts()).total(JobState.HELD) == 0


async def test_a_read_only_identity_cannot_hold(make_app: MakeApp, store: MemoryStore) -> None:
    [result] = await store.enqueue([JobSpec(kind="email")])
    settings = ApiSettings(auth_token="admin-token-0123456789", read_token="read-token-0123456789")
    reader = {"authorization": "Bearer read-token-0123456789"}
    async with asgi_client(make_app(settings), headers=reader) as api:
        refused = await api.post(f"/api/jobs/{result.job.id}/hold")
        assert refused.status_code == 403
        refused = await api.post("/api/jobs/bulk/hold", json={})
        assert refused.status_code == 403
    assert (await store.get(result.job.id)).state is JobState.PENDING
