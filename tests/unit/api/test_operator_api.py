"""The operator verbs through the API: delete, purge, reschedule, re-run, expiry."""

from __future__ import annotations

from datetime import timedelta

import httpx

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store.memory import MemoryStore
from rota.testing import FakeClock
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


async def test_reschedule_runs_a_delayed_job_now_or_moves_it(
    api: httpx.AsyncClient, store: MemoryStore, clock: FakeClock
) -> None:
    [result] = await store.enqueue([JobSpec(kind="email", delay=timedelta(hours=2))])
    job_id = result.job.id
    now = await api.post(f"/api/jobs/{job_id}/reschedule", json={"run_at": "now"})
    assert now.status_code == 200
    assert now.json()["run_at"] == clock.now().isoformat().replace("+00:00", "Z")
    moved = await api.post(
        f"/api/jobs/{job_id}/reschedule",
        json={"run_at": "2030-01-01T09:00:00+02:00", "priority": 5, "queue": "urgent"},
    )
    body = moved.json()
    assert (body["run_at"], body["priority"], body["queue"]) == (
        "2030-01-01T07:00:00Z",
        5,
        "urgent",
    )


async def test_reschedule_refuses_bad_input_and_running_jobs(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    [result] = await store.enqueue([JobSpec(kind="email")])
    before = await store.get(result.job.id)
    for body, message in (
        ({}, "run_at: give at least one of run_at (or now), priority, queue"),
        ({"run_at": "tomorrow"}, "run_at: must be an ISO 8601 date and time"),
        ({"priority": 101}, "priority: must be between -100 and 100"),
        ({"queue": "a b"}, "queue: may contain only"),
        ({"priority": None}, "priority:"),
        ({"colour": "red"}, "colour: unknown field"),
    ):
        refused = await api.post(f"/api/jobs/{result.job.id}/reschedule", json=body)
        assert refused.status_code == 400, body
        assert refused.json()["error"].startswith(message), refused.json()
    assert await store.get(result.job.id) == before
    [running] = await store.claim("w", queues=["default"], limit=1, lease=timedelta(seconds=30))
    conflict = await api.post(f"/api/jobs/{running.id}/reschedule", json={"priority": 3})
    assert conflict.status_code == 409
    assert conflict.json() == {
        "error": f"job {running.id} is running: cannot edit it (cancel it first)"
    }
    assert await store.get(running.id) == running


async def test_rerun_runs_a_succeeded_job_again(api: httpx.AsyncClient, store: MemoryStore) -> None:
    [result] = await store.enqueue([JobSpec(kind="email")])
    [claimed] = await store.claim("w", queues=["default"], limit=1, lease=timedelta(seconds=30))
    refused = await api.post(f"/api/jobs/{claimed.id}/rerun")
    assert refused.status_code == 409
    assert refused.json() == {"error": f"job {claimed.id} is running; only succeeded jobs re-run"}
    await store.complete(claimed.lease)
    rerun = await api.post(f"/api/jobs/{result.job.id}/rerun")
    assert rerun.status_code == 200
    assert (rerun.json()["state"], rerun.json()["attempt"]) == ("pending", 0)
    detail = (await api.get(f"/api/jobs/{result.job.id}")).json()
    assert [a["outcome"] for a in detail["attempts"]] == ["succeeded"]


async def test_enqueue_with_an_expiry_shows_it_and_refuses_both_forms(
    api: httpx.AsyncClient, store: MemoryStore, clock: FakeClock
) -> None:
    created = await api.post("/api/jobs", json={"kind": "email", "expire_after_seconds": 60})
    assert created.status_code == 201
    expected = (clock.now() + timedelta(seconds=60)).isoformat().replace("+00:00", "Z")
    assert created.json()["expires_at"] == expected
    fixed = await api.post(
        "/api/jobs", json={"kind": "email", "expires_at": "2030-01-01T00:00:00Z"}
    )
    assert fixed.json()["expires_at"] == "2030-01-01T00:00:00Z"
    both = await api.post(
        "/api/jobs",
        json={"kind": "email", "expires_at": "2030-01-01T00:00:00Z", "expire_after_seconds": 5},
    )
    assert both.status_code == 400
    assert both.json() == {"error": "expires_at: give expires_at or expire_after, not both"}
    negative = await api.post("/api/jobs", json={"kind": "email", "expire_after_seconds": -1})
    assert negative.status_code == 400
    assert negative.json()["error"].startswith("expire_after_seconds: must be positive")
    assert await total_jobs(store) == 2


async def test_enqueue_holds_a_key_for_a_period_and_replaces_a_waiting_job(
    api: httpx.AsyncClient, store: MemoryStore, clock: FakeClock
) -> None:
    hook = {"kind": "hook", "unique_key": "delivery:9", "unique_for_seconds": 86400}
    first = await api.post("/api/jobs", json=hook)
    assert first.status_code == 201
    [claimed] = await store.claim("w", queues=["default"], limit=1, lease=timedelta(seconds=30))
    await store.complete(claimed.lease)
    again = await api.post("/api/jobs", json=hook)
    assert again.status_code == 200
    assert (again.json()["duplicate"], again.json()["state"]) == (True, "succeeded")

    debounce = {"kind": "sync", "unique_key": "acct:1", "delay_seconds": 30}
    await api.post("/api/jobs", json={**debounce, "payload": {"v": 1}})
    clock.advance(10)
    replaced = await api.post(
        "/api/jobs", json={**debounce, "payload": {"v": 2}, "on_conflict": "replace"}
    )
    assert replaced.status_code == 200
    body = replaced.json()
    assert (body["duplicate"], body["replaced"], body["payload"]) == (True, True, {"v": 2})
    assert body["run_at"] == (clock.now() + timedelta(seconds=30)).isoformat().replace(
        "+00:00", "Z"
    )


async def test_holding_or_replacing_without_a_unique_key_is_refused(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    for body, field in (
        ({"kind": "a", "unique_for_seconds": 60}, "unique_for_seconds"),
        ({"kind": "a", "unique_states": ["succeeded"]}, "unique_states: needs a unique_key"),
        ({"kind": "a", "on_conflict": "replace"}, "on_conflict"),
        ({"kind": "a", "unique_key": "k", "unique_states": ["gone"]}, "unique_states"),
    ):
        refused = await api.post("/api/jobs", json=body)
        assert refused.status_code == 400, body
        assert refused.json()["error"].startswith(field), refused.json()
    assert await total_jobs(store) == 0
