"""The routes the dashboard's views lean on: state counts for the job list's tabs, a
schedule's own jobs, and editing a schedule; bad input is a 400 naming the field and
changes nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.domain.schedule import Rule, ScheduleSpec
from rota.store.memory import MemoryStore
from rota.testing import FakeClock
from tests.unit.api.conftest import dead_job

NO_JOBS = {state.value: 0 for state in JobState}


async def test_state_counts_overall_by_queue_and_by_kind(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await store.enqueue([JobSpec(kind="email", queue="mail") for _ in range(3)])
    await store.enqueue([JobSpec(kind="report")])
    await dead_job(store, kind="report")

    overall = (await api.get("/api/jobs/counts")).json()
    assert overall == {
        "counts": {**NO_JOBS, "pending": 4, "dead": 1},
        "exact": True,
        "estimated": [],
    }
    mail = (await api.get("/api/jobs/counts?queue=mail")).json()
    assert mail["counts"] == {**NO_JOBS, "pending": 3}
    assert (await api.get("/api/jobs/counts?queue=nowhere")).json()["counts"] == NO_JOBS
    report = (await api.get("/api/jobs/counts?kind=report")).json()
    assert report == {
        "counts": {**NO_JOBS, "pending": 1, "dead": 1},
        "exact": True,
        "estimated": [],
    }


async def test_state_counts_under_a_kind_filter_are_exact_in_memory_past_the_threshold(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await store.enqueue([JobSpec(kind="email") for _ in range(1001)])
    counted = (await api.get("/api/jobs/counts?kind=email")).json()
    assert counted["counts"]["pending"] == 1001 and counted["estimated"] == []


async def test_state_counts_refuse_a_malformed_filter(api: httpx.AsyncClient) -> None:
    for query in ("kind=a%20b", "queue=" + "q" * 300, "state=dead"):
        response = await api.get(f"/api/jobs/counts?{query}")
        if query == "state=dead":  # not a parameter of this route: ignored, like any other
            assert response.status_code == 200
        else:
            assert response.status_code == 400, query
    assert (await api.delete("/api/jobs/counts")).status_code == 405


async def test_a_schedules_jobs_are_listed_by_its_name(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await store.upsert_schedule(
        ScheduleSpec(name="nightly", kind="backup", rule=Rule.cron("@daily"))
    )
    runs = [await store.trigger_schedule("nightly") for _ in range(2)]
    await store.enqueue([JobSpec(kind="backup")])
    listed = (await api.get("/api/jobs?schedule=nightly")).json()["jobs"]
    assert {job["id"] for job in listed} == {run.job.id for run in runs}
    assert all(job["schedule"] == "nightly" for job in listed)
    assert (await api.get("/api/jobs?schedule=bad%20name")).status_code == 400


async def edit(api: httpx.AsyncClient, schedule: str, **body: Any) -> httpx.Response:
    return await api.post(f"/api/schedules/{schedule}/edit", json=body)


async def test_an_edit_replaces_the_definition_and_keeps_pause_and_history(
    api: httpx.AsyncClient, store: MemoryStore, clock: FakeClock
) -> None:
    created = await api.post(
        "/api/schedules", json={"name": "sync", "kind": "sync", "every_seconds": 60}
    )
    assert created.status_code == 201, created.text
    run = await store.trigger_schedule("sync")
    await store.pause_schedule("sync")

    edited = await edit(
        api, "sync", kind="sync", cron="0 9 * * 1", timezone="Europe/Berlin", priority=4,
        payload={"full": True},
    )  # fmt: skip
    assert edited.status_code == 200, edited.text
    body = edited.json()
    assert body["description"] == "at 09:00 on Monday (Europe/Berlin)"
    assert (body["priority"], body["payload"], body["every_seconds"]) == (4, {"full": True}, None)
    assert (body["paused"], body["last_job_id"]) == (True, run.job.id)
    assert body["next_run_at"] == "2026-01-05T08:00:00Z"
    assert (await api.get("/api/schedules/sync")).json() == body


async def test_an_edit_of_a_missing_schedule_is_404_and_creates_nothing(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    response = await edit(api, "ghost", kind="sync", every_seconds=60)
    assert response.status_code == 404, response.text
    assert await store.list_schedules() == []


async def test_a_bad_edit_is_400_naming_the_field_and_changes_nothing(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    spec = ScheduleSpec(name="sync", kind="sync", rule=Rule.every(timedelta(minutes=1)))
    before = await store.upsert_schedule(spec)
    bad = [
        ({"kind": "sync"}, "cron"),
        ({"kind": "sync", "cron": "61 * * * *"}, "cron"),
        ({"kind": "sync", "every_seconds": 0}, "every_seconds"),
        # Outside a bound by less than a microsecond, which rounding would carry inside.
        ({"kind": "sync", "every_seconds": 60, "jitter_seconds": -1e-83}, "jitter_seconds"),
        ({"kind": "sync", "every_seconds": 60, "grace_seconds": 86400.0000004}, "grace_seconds"),
        ({"kind": "sync", "every_seconds": 60, "timezone": "UTC"}, "timezone"),
        ({"kind": "sync", "cron": "@daily", "timezone": "Mars/Olympus"}, "timezone"),
        ({"kind": "bad kind", "every_seconds": 60}, "kind"),
        ({"kind": "sync", "every_seconds": 60, "name": "other"}, "name"),
        ({"kind": "sync", "every_seconds": 60, "priority": "high"}, "priority"),
    ]
    for body, field in bad:
        response = await edit(api, "sync", **body)
        assert response.status_code == 400, (body, response.text)
        assert field in response.json()["error"], (body, response.json())
    not_json = await api.post(
        "/api/schedules/sync/edit", content=b"[1]", headers={"content-type": "application/json"}
    )
    assert not_json.status_code == 400
    assert await store.get_schedule("sync") == before
