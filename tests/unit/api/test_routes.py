"""Every route's happy path, against a MemoryStore on a FakeClock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from rota.domain.errors import InvalidInput
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.domain.payload import MAX_PAYLOAD_BYTES, PREVIEW_BYTES, preview
from rota.store.memory import MemoryStore
from rota.store.records import MAX_BULK, WorkerInfo
from rota.testing import FakeClock
from tests.unit.api.conftest import MakeApp, asgi_client, dead_job, total_jobs

JOB_FIELDS = {
    "id", "kind", "queue", "state", "priority", "run_at", "attempt", "max_attempts", "tenant",
    "unique_key", "worker", "lease_until", "lease_token", "created_at", "started_at",
    "finished_at", "last_error", "schedule", "slot_at", "timeout_seconds", "crashes",
    "quarantine", "payload", "result", "progress", "progress_message", "expires_at", "workflow",
    "waiting_on", "heartbeats", "last_heartbeat_at",
}  # fmt: skip


async def test_enqueue_returns_the_job_with_every_field(api: httpx.AsyncClient) -> None:
    response = await api.post(
        "/api/jobs",
        json={
            "kind": "email",
            "payload": {"to": "a@example.com", "n": [1, 2.5, None, True]},
            "priority": 5,
            "queue": "mail",
            "tenant": "acme",
            "unique_key": "welcome:1",
            "max_attempts": 4,
            "timeout_seconds": 30,
        },
    )
    assert response.status_code == 201
    job = response.json()
    assert set(job) == JOB_FIELDS | {"duplicate", "replaced"}
    assert job["duplicate"] is False
    assert job["state"] == "pending"
    assert job["queue"] == "mail" and job["tenant"] == "acme" and job["priority"] == 5
    assert job["max_attempts"] == 4 and job["timeout_seconds"] == 30.0
    assert job["payload"] == {"to": "a@example.com", "n": [1, 2.5, None, True]}
    assert job["run_at"] == "2026-01-01T12:00:00Z"


async def test_enqueue_with_delay_and_run_at(api: httpx.AsyncClient) -> None:
    delayed = (await api.post("/api/jobs", json={"kind": "email", "delay_seconds": 5})).json()
    assert delayed["run_at"] == "2026-01-01T12:00:05Z"
    at = (
        await api.post("/api/jobs", json={"kind": "email", "run_at": "2026-01-02T09:30:00+02:00"})
    ).json()
    assert at["run_at"] == "2026-01-02T07:30:00Z"


async def test_duplicate_unique_key_returns_the_active_job_with_200(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    first = await api.post("/api/jobs", json={"kind": "email", "unique_key": "k"})
    second = await api.post("/api/jobs", json={"kind": "email", "unique_key": "k"})
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json()["duplicate"] is True
    assert second.json()["id"] == first.json()["id"]
    assert await total_jobs(store) == 1


async def test_kind_allow_list(make_app: MakeApp, store: MemoryStore) -> None:
    async with asgi_client(make_app(kinds=["email"])) as api:
        assert (await api.post("/api/jobs", json={"kind": "email"})).status_code == 201
        refused = await api.post("/api/jobs", json={"kind": "nope"})
    assert refused.status_code == 400
    assert refused.json()["error"] == "kind: unknown kind 'nope' (known kind: email)"
    assert await total_jobs(store) == 1


async def test_list_filters_and_pages(api: httpx.AsyncClient, store: MemoryStore) -> None:
    await store.enqueue([JobSpec(kind="email", queue="mail") for _ in range(5)])
    await store.enqueue([JobSpec(kind="report", tenant="acme", unique_key="r1")])
    await dead_job(store, kind="sync")

    everything = (await api.get("/api/jobs")).json()
    assert everything["now"] == "2026-01-01T12:00:00Z"
    assert [job["id"] for job in everything["jobs"]] == [7, 6, 5, 4, 3, 2, 1]
    assert everything["next_cursor"] is None

    first = (await api.get("/api/jobs", params={"kind": "email", "limit": 2})).json()
    assert [job["id"] for job in first["jobs"]] == [5, 4]
    second = (
        await api.get(
            "/api/jobs", params={"kind": "email", "limit": 2, "cursor": first["next_cursor"]}
        )
    ).json()
    assert [job["id"] for job in second["jobs"]] == [3, 2]

    async def ids(**params: str) -> list[int]:
        return [job["id"] for job in (await api.get("/api/jobs", params=params)).json()["jobs"]]

    assert await ids(state="dead") == [7]
    assert await ids(state="dead,pending", queue="default") == [7, 6]
    assert await ids(tenant="acme") == [6]
    assert await ids(q="r1") == [6]
    assert await ids(q="3") == [3]
    repeated = await api.get("/api/jobs", params=[("state", "dead"), ("state", "pending")])
    assert len(repeated.json()["jobs"]) == 7


async def test_get_job_has_attempts(api: httpx.AsyncClient, store: MemoryStore) -> None:
    job = await dead_job(store)
    detail = (await api.get(f"/api/jobs/{job.id}")).json()
    assert detail["state"] == "dead"
    assert detail["last_error"] == "boom"
    assert detail["now"] == "2026-01-01T12:00:00Z"
    [attempt] = detail["attempts"]
    assert set(attempt) == {
        "attempt", "token", "worker", "started_at", "finished_at", "outcome", "error", "traceback",
        "heartbeats", "last_heartbeat_at", "lease_until",
    }  # fmt: skip
    assert attempt["worker"] == "w1" and attempt["outcome"] == "failed"
    assert "ValueError: boom" in attempt["traceback"]


async def test_a_job_and_its_attempts_show_their_heartbeats(
    api: httpx.AsyncClient, store: MemoryStore, clock: FakeClock
) -> None:
    [result] = await store.enqueue([JobSpec(kind="email")])
    lease = timedelta(seconds=5)
    [first] = await store.claim("w1", queues=["default"], limit=1, lease=lease)
    clock.advance(timedelta(seconds=2))
    await store.heartbeat([first.lease], lease=lease)  # the last beat before it went silent
    clock.advance(lease + timedelta(seconds=1))
    [second] = await store.claim("w2", queues=["default"], limit=1, lease=lease)
    clock.advance(timedelta(seconds=1))
    await store.heartbeat([second.lease], lease=lease)
    detail = (await api.get(f"/api/jobs/{result.job.id}")).json()
    assert (detail["heartbeats"], detail["last_heartbeat_at"]) == (1, "2026-01-01T12:00:09Z")
    beats = [
        (a["outcome"], a["heartbeats"], a["last_heartbeat_at"], a["lease_until"])
        for a in detail["attempts"]
    ]
    assert beats == [
        ("lease_expired", 1, "2026-01-01T12:00:02Z", "2026-01-01T12:00:07Z"),
        ("running", 1, "2026-01-01T12:00:09Z", None),
    ]
    listed = (await api.get("/api/jobs")).json()["jobs"][0]
    assert (listed["heartbeats"], listed["last_heartbeat_at"]) == (1, "2026-01-01T12:00:09Z")


async def test_a_crash_suspect_shows_why_it_runs_alone(
    api: httpx.AsyncClient, store: MemoryStore, clock: FakeClock
) -> None:
    [result] = await store.enqueue([JobSpec(kind="email")])
    await store.claim("w1", queues=["default"], limit=1, lease=timedelta(seconds=5))
    clock.advance(timedelta(seconds=6))  # its worker died: the lease expired
    await store.rescue()
    detail = (await api.get(f"/api/jobs/{result.job.id}")).json()
    listed = (await api.get("/api/jobs")).json()["jobs"][0]
    for shown in (detail, listed):
        assert shown["crashes"] == 1
        assert shown["quarantine"] == (
            "crash suspect: its lease ran out once while its handler ran (its worker died, hung or lost the store), so its last attempt runs alone"
        )
    fresh = (await api.post("/api/jobs", json={"kind": "email"})).json()
    assert (fresh["crashes"], fresh["quarantine"]) == (0, None)


async def test_retry_and_cancel(api: httpx.AsyncClient, store: MemoryStore) -> None:
    job = await dead_job(store)
    response = await api.post(f"/api/jobs/{job.id}/retry")
    assert response.status_code == 204
    assert (await store.get(job.id)).state is JobState.PENDING

    again = await api.post(f"/api/jobs/{job.id}/retry")
    assert again.status_code == 409
    assert "only dead or cancelled" in again.json()["error"]

    cancelled = await api.post(f"/api/jobs/{job.id}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["state"] == "cancelled"
    conflict = await api.post(f"/api/jobs/{job.id}/cancel")
    assert conflict.status_code == 409

    for verb in ("retry", "cancel"):
        missing = await api.post(f"/api/jobs/999/{verb}")
        assert missing.status_code == 404
        assert missing.json() == {"error": "job 999 not found"}


async def test_bulk_actions_and_count(api: httpx.AsyncClient, store: MemoryStore) -> None:
    for _ in range(3):
        await dead_job(store, kind="sync")
    await dead_job(store, kind="email")
    await store.enqueue([JobSpec(kind="sync") for _ in range(2)])

    count = await api.get("/api/jobs/count", params={"kind": "sync"})
    assert count.json() == {"count": 5, "capped": False}
    retryable = await api.get("/api/jobs/count", params={"kind": "sync", "action": "retry"})
    assert retryable.json() == {"count": 3, "capped": False}
    cancellable = await api.get("/api/jobs/count", params={"action": "cancel", "state": "dead"})
    assert cancellable.json() == {"count": 0, "capped": False}

    retried = await api.post("/api/jobs/bulk/retry", json={"kind": "sync"})
    assert retried.status_code == 200 and retried.json() == {"count": 3}
    pending_sync = await api.get("/api/jobs/count", params={"kind": "sync", "state": "pending"})
    assert pending_sync.json() == {"count": 5, "capped": False}
    cancelled = await api.post("/api/jobs/bulk/cancel", json={"state": ["pending"], "kind": "sync"})
    assert cancelled.json() == {"count": 5}
    email = await api.get("/api/jobs", params={"kind": "email"})
    assert email.json()["jobs"][0]["state"] == "dead"


async def test_count_reports_the_cap(api: httpx.AsyncClient, store: MemoryStore) -> None:
    await store.enqueue([JobSpec(kind="bulk") for _ in range(MAX_BULK + 5)])
    count = await api.get("/api/jobs/count")
    assert count.json() == {"count": MAX_BULK, "capped": True}


async def test_workers_route(api: httpx.AsyncClient, store: MemoryStore, clock: FakeClock) -> None:
    await store.register_worker(WorkerInfo("w-old", "host-a", 11, ("default",), 4))
    clock.advance(timedelta(seconds=45))
    await store.register_worker(WorkerInfo("w-new", "host-b", 12, ("default", "mail"), 8))
    await store.enqueue([JobSpec(kind="email")])
    await store.claim("w-new", queues=["default"], limit=1, lease=timedelta(seconds=30))
    clock.advance(timedelta(seconds=5))

    data = (await api.get("/api/workers")).json()
    by_name = {worker["name"]: worker for worker in data["workers"]}
    assert by_name["w-new"]["alive"] is True
    assert by_name["w-new"]["heartbeat_age_seconds"] == 5.0
    assert by_name["w-new"]["running"] == 1
    assert by_name["w-new"]["queues"] == ["default", "mail"]
    assert by_name["w-old"]["alive"] is False  # 50 s > 3 x 10 s
    assert by_name["w-old"]["heartbeat_age_seconds"] == 50.0


async def test_stats_route(api: httpx.AsyncClient, store: MemoryStore, clock: FakeClock) -> None:
    clock.set(datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC))
    await dead_job(store)
    [done] = await store.enqueue([JobSpec(kind="email", queue="mail")])
    [claimed] = await store.claim("w", queues=["mail"], limit=1, lease=timedelta(seconds=30))
    await store.complete(claimed.lease)
    await store.enqueue([JobSpec(kind="email", queue="mail")])
    clock.advance(timedelta(seconds=90))

    stats = (await api.get("/api/stats")).json()
    assert stats["counts"]["by_state"] == {
        "waiting": 0, "pending": 1, "running": 0, "succeeded": 1, "dead": 1, "cancelled": 0,
        "held": 0,
    }  # fmt: skip
    assert stats["counts"]["by_queue"]["mail"]["succeeded"] == 1
    assert stats["counts"]["exact"] is True
    assert stats["oldest_due_age_seconds"] == 90.0
    assert stats["workers_alive"] == 0
    buckets = stats["throughput"]["buckets"]
    assert stats["throughput"]["bucket_seconds"] == 60
    assert len(buckets) == 60
    assert buckets[-1]["start"] == "2026-01-01T12:02:00Z"
    finished = [b for b in buckets if b["succeeded"] or b["dead"]]
    assert finished == [
        {"start": "2026-01-01T12:00:00Z", "succeeded": 1, "dead": 1, "cancelled": 0}
    ]
    assert done.job.id == claimed.id


async def test_config_healthz_and_pages(make_app: MakeApp) -> None:
    async with asgi_client(make_app(kinds=["b", "a"], demo=True)) as api:
        assert (await api.get("/api/config")).json() == {
            "demo": True, "read_only": False, "kinds": ["a", "b"], "login": False,
            "identity": "anonymous", "role": "admin",
        }  # fmt: skip
        assert (await api.get("/healthz")).json() == {"ok": True}
        page = await api.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        script = await api.get("/static/app.js")
        assert script.headers["content-type"] == "text/javascript; charset=utf-8"
        style = await api.get("/static/style.css")
        assert style.headers["content-type"] == "text/css; charset=utf-8"
        assert (await api.get("/static/nope.js")).status_code == 404
        assert (await api.get("/static/..%2Fapp.py")).status_code == 404


async def test_openapi_documents_every_api_route(api: httpx.AsyncClient) -> None:
    document = (await api.get("/openapi.json")).json()
    paths = document["paths"]
    for path in (
        "/api/jobs", "/api/jobs/count", "/api/jobs/{job_id}", "/api/jobs/{job_id}/retry",
        "/api/jobs/{job_id}/cancel", "/api/jobs/bulk/retry", "/api/jobs/bulk/cancel",
        "/api/workers", "/api/stats", "/api/config", "/metrics", "/healthz",
    ):  # fmt: skip
        assert path in paths, path
    create = paths["/api/jobs"]["post"]
    assert create["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/JobCreate"
    }
    assert {"200", "201", "400", "415"} <= set(create["responses"])
    assert "JobCreate" in document["components"]["schemas"]
    assert all("422" not in op["responses"] for item in paths.values() for op in item.values())


def test_state_names_match_the_domain() -> None:
    from typing import get_args

    from rota.api.schemas import StateName

    assert set(get_args(StateName)) == {state.value for state in JobState}


@pytest.mark.parametrize("limit", [1, 500])
async def test_limit_bounds_are_accepted(api: httpx.AsyncClient, limit: int) -> None:
    assert (await api.get("/api/jobs", params={"limit": limit})).status_code == 200


async def test_lists_carry_bounded_previews_and_the_detail_a_large_payload_s_first_64_kib(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    big = {"blob": "é" * 450_000}  # 900 KB of JSON, two bytes a character
    small = {"to": "ada@example.com"}
    for payload in (big, small):
        created = await api.post("/api/jobs", json={"kind": "email", "payload": payload})
        assert created.status_code == 201
    [failing] = await store.claim("w", queues=["default"], limit=1, lease=timedelta(seconds=30))
    await store.fail(failing.lease, error="E" * 5000, retry_in=timedelta(0))

    response = await api.get("/api/jobs")
    assert len(response.content) < 5_000, "a page of 900 KB payloads stays small"
    by_id = {job["id"]: job for job in response.json()["jobs"]}
    listed_big, listed_small = by_id[1], by_id[2]
    assert "payload" not in listed_big and "last_error" not in listed_big
    assert listed_big["payload_truncated"] is True
    assert len(listed_big["payload_preview"].encode()) <= PREVIEW_BYTES
    assert listed_big["payload_preview"].startswith('{"blob":"éé')
    assert (listed_small["payload_preview"], listed_small["payload_truncated"]) == (
        '{"to":"ada@example.com"}',
        False,
    )
    assert (listed_small["last_error_preview"], listed_small["last_error_truncated"]) == (
        None,
        False,
    )
    assert listed_big["last_error_preview"] == "E" * PREVIEW_BYTES
    assert listed_big["last_error_truncated"] is True

    # The job's own answer: its first 64 KiB, and the whole payload on its own route.
    detail = (await api.get("/api/jobs/1")).json()
    assert detail["last_error"] == "E" * 5000
    assert detail["payload"] is None and detail["payload_truncated"] is True
    assert len(detail["payload_preview"].encode()) <= 64 * 1024
    assert detail["payload_preview"].startswith('{"blob":"éé')
    whole = await api.get("/api/jobs/1/payload")
    assert whole.headers["content-type"] == "application/json"
    assert whole.json() == big
    small_detail = (await api.get("/api/jobs/2")).json()
    assert small_detail["payload"] == small and small_detail["payload_truncated"] is False
    assert (await api.get("/api/jobs/2/result")).json() is None
    assert (await api.get("/api/jobs/77/payload")).status_code == 404


def test_previews_never_split_a_character() -> None:
    assert preview("€" * 200, 10) == ("€€€", True)  # three bytes each
    assert preview("short", 10) == ("short", False)
    assert preview(None) == (None, False)


async def test_payloads_over_the_cap_are_refused_with_400_or_413(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    over = {"blob": "x" * (MAX_PAYLOAD_BYTES - 10)}  # its JSON is one byte over the cap
    response = await api.post("/api/jobs", json={"kind": "email", "payload": over})
    assert response.status_code == 400
    assert response.json()["error"] == f"payload: is larger than {MAX_PAYLOAD_BYTES} bytes as JSON"
    far_over = {"blob": "x" * (2 * MAX_PAYLOAD_BYTES)}
    response = await api.post("/api/jobs", json={"kind": "email", "payload": far_over})
    assert response.status_code == 413
    with pytest.raises(InvalidInput, match="payload: is larger than"):
        JobSpec(kind="email", payload=over)
    assert await total_jobs(store) == 0
