"""The /api/schedules routes and POST /api/jobs with every_seconds, against a MemoryStore on a
FakeClock: happy paths, bad input naming the field, unknown names, read-only mode and auth."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest

from rota.api import ApiSettings
from rota.domain.schedule import Rule, ScheduleSpec
from rota.store import JobFilter
from rota.store.memory import MemoryStore
from rota.testing import FakeClock
from tests.unit.api.conftest import TOKEN, MakeApp, asgi_client, total_jobs

SCHEDULE_FIELDS = {
    "name", "kind", "queue", "priority", "tenant", "max_attempts", "payload", "every_seconds",
    "cron", "timezone", "description", "jitter_seconds", "misfire", "misfire_limit",
    "grace_seconds", "overlap", "workflow", "paused", "next_run_at", "due_at", "next_runs", "last_run_at",
    "last_job_id", "last_outcome", "created_at", "updated_at", "missed",
}  # fmt: skip
NIGHTLY = {"name": "nightly", "kind": "backup", "cron": "30 2 * * *", "timezone": "Europe/Berlin"}


async def create(api: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await api.post("/api/schedules", json=body)


async def test_create_returns_the_schedule_with_its_next_runs(api: httpx.AsyncClient) -> None:
    response = await create(
        api, **NIGHTLY, payload={"full": True}, priority=3, jitter_seconds=60, misfire="all"
    )

    assert response.status_code == 201, response.text
    schedule = response.json()
    assert set(schedule) == SCHEDULE_FIELDS
    assert schedule["description"] == "every day at 02:30 (Europe/Berlin)"
    assert schedule["next_runs"] == [f"2026-01-0{day}T01:30:00Z" for day in range(2, 7)]
    assert schedule["next_run_at"] == "2026-01-02T01:30:00Z"
    assert schedule["due_at"] > schedule["next_run_at"], "a 60 s jitter delays it a little"
    assert (schedule["payload"], schedule["priority"], schedule["misfire"]) == (
        {"full": True},
        3,
        "all",
    )
    assert (schedule["paused"], schedule["last_outcome"], schedule["last_job_id"]) == (
        False,
        None,
        None,
    )
    assert (await api.get("/api/schedules/nightly")).json() == schedule


async def test_list_pages_by_name_and_gives_the_soonest_due_first(
    api: httpx.AsyncClient,
) -> None:
    for index in range(7):
        await create(api, name=f"s{index}", kind="ping", cron=f"{index} 9 * * *")
    await create(api, name="paused", kind="ping", cron="* * * * *")
    await api.post("/api/schedules/paused/pause")

    names: list[str] = []
    cursor = None
    while True:
        params = {"limit": "3", **({"cursor": cursor} if cursor else {})}
        page = (await api.get("/api/schedules", params=params)).json()
        assert len(page["schedules"]) <= 3
        names += [s["name"] for s in page["schedules"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert names == sorted(["paused", *(f"s{i}" for i in range(7))])

    due = (await api.get("/api/schedules", params={"order": "due", "limit": "2"})).json()
    assert [s["name"] for s in due["schedules"]] == ["s0", "s1"]
    assert due["next_cursor"] is None


@pytest.mark.parametrize(
    "params",
    [
        {"cursor": "garbage!"},
        {"cursor": "-x"},
        {"cursor": ""},
        {"limit": "0"},
        {"limit": "501"},
        {"order": "soon"},
    ],
)
async def test_bad_list_parameters_are_400(api: httpx.AsyncClient, params: dict[str, str]) -> None:
    response = await api.get("/api/schedules", params=params)
    assert response.status_code == 400, response.text


async def test_list_shows_every_schedule_and_the_store_clock(api: httpx.AsyncClient) -> None:
    await create(api, **NIGHTLY)
    await create(api, name="pulse", kind="ping", every_seconds=30)

    listed = (await api.get("/api/schedules")).json()

    assert listed["now"] == "2026-01-01T12:00:00Z"
    assert [s["name"] for s in listed["schedules"]] == ["nightly", "pulse"]
    pulse = listed["schedules"][1]
    assert pulse["every_seconds"] == 30 and pulse["cron"] is None
    assert pulse["next_runs"][:2] == ["2026-01-01T12:00:00Z", "2026-01-01T12:00:30Z"]


async def test_pause_resume_run_now_and_the_last_outcome(
    api: httpx.AsyncClient, store: MemoryStore, clock: FakeClock
) -> None:
    await create(api, **NIGHTLY)

    assert (await api.post("/api/schedules/nightly/pause")).status_code == 204
    assert (await api.get("/api/schedules/nightly")).json()["paused"] is True
    clock.advance(timedelta(seconds=5))
    run = await api.post("/api/schedules/nightly/run")
    assert run.status_code == 200
    job = run.json()
    assert (job["schedule"], job["slot_at"], job["kind"], job["duplicate"]) == (
        "nightly",
        "2026-01-01T12:00:05Z",
        "backup",
        False,
    )
    shown = (await api.get("/api/schedules/nightly")).json()
    assert (shown["last_job_id"], shown["last_outcome"]) == (job["id"], "pending")
    assert shown["next_run_at"] == "2026-01-02T01:30:00Z", "a run now does not move the grid"

    await store.cancel(job["id"])
    assert (await api.get("/api/schedules/nightly")).json()["last_outcome"] == "cancelled"
    assert (await api.post("/api/schedules/nightly/resume")).status_code == 204
    assert (await api.get("/api/schedules/nightly")).json()["paused"] is False


async def test_a_pause_says_whether_the_runs_it_misses_are_queued_or_dropped(
    api: httpx.AsyncClient, store: MemoryStore, clock: FakeClock
) -> None:
    await create(api, name="pulse", kind="ping", every_seconds=60)
    await store.fire_due()
    refused = await api.post("/api/schedules/pulse/pause", params={"missed": "later"})
    assert refused.status_code == 400
    assert (await api.get("/api/schedules/pulse")).json()["paused"] is False
    paused = await api.post("/api/schedules/pulse/pause", params={"missed": "drop"})
    assert paused.status_code == 204
    shown = (await api.get("/api/schedules/pulse")).json()
    assert (shown["paused"], shown["missed"]) == (True, "drop")
    clock.advance(timedelta(minutes=10, seconds=1))
    assert (await api.post("/api/schedules/pulse/resume")).status_code == 204
    assert (await api.get("/api/schedules/pulse")).json()["next_run_at"] == "2026-01-01T12:11:00Z"
    assert await store.fire_due() == []
    entries = (await api.get("/api/audit")).json()["entries"]
    assert entries[1]["action"] == "schedule.pause"
    assert entries[1]["detail"] == {"missed": "drop"}


async def test_delete_removes_the_schedule_and_keeps_its_jobs(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await create(api, name="pulse", kind="ping", every_seconds=30)
    await store.fire_due()

    assert (await api.post("/api/schedules/pulse/delete")).status_code == 204

    assert (await api.get("/api/schedules/pulse")).status_code == 404
    assert (await api.get("/api/schedules")).json()["schedules"] == []
    assert len((await store.list_jobs(JobFilter(schedule="pulse"))).jobs) == 1


async def test_creating_a_taken_name_is_409_and_changes_nothing(api: httpx.AsyncClient) -> None:
    first = (await create(api, **NIGHTLY)).json()

    again = await create(api, name="nightly", kind="other", every_seconds=60)

    assert again.status_code == 409
    assert again.json() == {"error": "schedule 'nightly' already exists"}
    assert (await api.get("/api/schedules/nightly")).json() == first


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"kind": "k", "cron": "@daily"}, "name: is required"),
        ({"name": "s", "cron": "@daily"}, "kind: is required"),
        ({"name": "bad name", "kind": "k", "cron": "@daily"}, "name:"),
        ({"name": "s", "kind": "bad kind", "cron": "@daily"}, "kind:"),
        ({"name": "s", "kind": "k"}, "cron: give cron or every_seconds"),
        ({"name": "s", "kind": "k", "cron": "@daily", "every_seconds": 60}, "cron: give cron"),
        ({"name": "s", "kind": "k", "cron": "61 * * * *"}, "cron: '61 * * * *': bad minute"),
        ({"name": "s", "kind": "k", "cron": "0 0 30 2 *"}, "cron: '0 0 30 2 *' never fires"),
        ({"name": "s", "kind": "k", "cron": "x" * 300}, "cron: must be at most 200"),
        ({"name": "s", "kind": "k", "cron": "@daily", "timezone": "Mars/Olympus"}, "timezone:"),
        ({"name": "s", "kind": "k", "cron": "@daily", "timezone": "localtime"}, "timezone:"),
        ({"name": "s", "kind": "k", "cron": "@daily", "timezone": ""}, "timezone:"),
        ({"name": "s", "kind": "k", "cron": "@daily", "timezone": " "}, "timezone:"),
        ({"name": "s", "kind": "k", "every_seconds": 60, "timezone": "UTC"}, "timezone:"),
        ({"name": "s", "kind": "k", "every_seconds": 0.5}, "every_seconds: must be at least"),
        ({"name": "s", "kind": "k", "every_seconds": -1}, "every_seconds:"),
        ({"name": "s", "kind": "k", "every_seconds": 1e300}, "every_seconds:"),
        ({"name": "s", "kind": "k", "every_seconds": "60"}, "every_seconds:"),
        ({"name": "s", "kind": "k", "every_seconds": 60, "jitter_seconds": -1}, "jitter_seconds:"),
        # Below the documented minimum by less than a microsecond: refused, not rounded to 0.
        (
            {"name": "s", "kind": "k", "every_seconds": 60, "jitter_seconds": -1.7e-83},
            "jitter_seconds:",
        ),
        ({"name": "s", "kind": "k", "every_seconds": 0.9999999}, "every_seconds:"),
        (
            {"name": "s", "kind": "k", "every_seconds": 60, "grace_seconds": 86400.0000004},
            "grace_seconds: must be at most 86400",
        ),
        (
            {"name": "s", "kind": "k", "every_seconds": 60, "grace_seconds": 1e9},
            "grace_seconds:",
        ),
        ({"name": "s", "kind": "k", "every_seconds": 60, "misfire": "never"}, "misfire:"),
        ({"name": "s", "kind": "k", "every_seconds": 60, "overlap": "queue"}, "overlap:"),
        ({"name": "s", "kind": "k", "every_seconds": 60, "misfire_limit": 0}, "misfire_limit:"),
        ({"name": "s", "kind": "k", "every_seconds": 60, "priority": 101}, "priority:"),
        ({"name": "s", "kind": "k", "every_seconds": 60, "max_attempts": 0}, "max_attempts:"),
        ({"name": "s", "kind": "k", "every_seconds": 60, "queue": "a b"}, "queue:"),
        ({"name": "s", "kind": "k", "every_seconds": 60, "payload": "a\u0000b"}, "payload:"),
        ({"name": "s", "kind": "k", "every_seconds": 60, "colour": "red"}, "colour: unknown"),
    ],
)
async def test_bad_input_is_400_naming_the_field_and_writes_nothing(
    api: httpx.AsyncClient, store: MemoryStore, body: dict[str, Any], message: str
) -> None:
    response = await api.post("/api/schedules", json=body)

    assert response.status_code == 400, response.text
    assert message in response.json()["error"]
    assert await store.list_schedules() == []


async def test_the_kind_allow_list_applies_to_schedules(
    make_app: MakeApp, store: MemoryStore
) -> None:
    async with asgi_client(make_app(kinds=["email"])) as api:
        refused = await create(api, name="s", kind="nope", every_seconds=60)
        accepted = await create(api, name="s", kind="email", every_seconds=60)

    assert refused.status_code == 400 and refused.json()["error"].startswith("kind: unknown kind")
    assert accepted.status_code == 201


async def test_an_unknown_kind_and_a_bad_cron_are_refused_together(
    make_app: MakeApp, store: MemoryStore
) -> None:
    async with asgi_client(make_app(kinds=["email"])) as api:
        created = await create(api, name="s", kind="nope", cron="61 2 * * *")
        await create(api, name="kept", kind="email", every_seconds=60)
        edited = await api.post("/api/schedules/kept/edit", json={"kind": "nope", "cron": "x"})

    for refused in (created, edited):
        assert refused.status_code == 400
        kind, cron = refused.json()["error"].split("; ")
        assert kind.startswith("kind: unknown kind 'nope'")
        assert cron.startswith("cron: ")
    assert [s.spec.kind for s in await store.list_schedules()] == ["email"]


@pytest.mark.parametrize(
    ("method", "suffix"),
    [("GET", ""), ("POST", "/pause"), ("POST", "/resume"), ("POST", "/run"), ("POST", "/delete")],
)
async def test_an_unknown_schedule_is_404(
    api: httpx.AsyncClient, store: MemoryStore, method: str, suffix: str
) -> None:
    response = await api.request(method, f"/api/schedules/nope{suffix}")

    assert response.status_code == 404
    assert response.json() == {"error": "schedule 'nope' not found"}
    assert await total_jobs(store) == 0


async def test_a_name_no_schedule_can_have_is_400(api: httpx.AsyncClient) -> None:
    for name in ("bad%20name", "-dash", "x" * 129):
        response = await api.get(f"/api/schedules/{name}")
        assert response.status_code == 400, name
        assert response.json()["error"].startswith("name:")


async def test_read_only_mode_refuses_every_schedule_mutation(
    make_app: MakeApp, store: MemoryStore
) -> None:
    await store.upsert_schedule(ScheduleSpec(name="pulse", kind="ping", rule=Rule.cron("@daily")))
    async with asgi_client(make_app(ApiSettings(read_only=True))) as api:
        for path in ("pause", "resume", "run", "delete"):
            response = await api.post(f"/api/schedules/pulse/{path}")
            assert response.status_code == 403, path
            assert response.json() == {"error": "read-only mode"}
        assert (await create(api, **NIGHTLY)).status_code == 403
        assert (await api.get("/api/schedules")).status_code == 200

    [schedule] = await store.list_schedules()
    assert (schedule.name, schedule.paused) == ("pulse", False)
    assert await total_jobs(store) == 0


async def test_schedules_need_credentials_when_auth_is_on(
    make_app: MakeApp, store: MemoryStore
) -> None:
    async with asgi_client(make_app(ApiSettings(auth_token=TOKEN))) as api:
        assert (await api.get("/api/schedules")).status_code == 401
        assert (await create(api, **NIGHTLY)).status_code == 401
        assert await store.list_schedules() == []
        authorized = {"authorization": f"Bearer {TOKEN}"}
        assert (
            await api.post("/api/schedules", json=NIGHTLY, headers=authorized)
        ).status_code == 201
        assert (await api.get("/api/schedules", headers=authorized)).status_code == 200


async def test_a_cross_origin_schedule_mutation_is_refused(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await store.upsert_schedule(ScheduleSpec(name="pulse", kind="ping", rule=Rule.cron("@daily")))

    response = await api.post(
        "/api/schedules/pulse/run", headers={"origin": "https://evil.example"}
    )

    assert response.status_code == 403
    assert await total_jobs(store) == 0


# ---------------------------------------------------------------------- POST /api/jobs every_seconds


async def test_every_seconds_on_post_jobs_creates_a_schedule_named_after_kind_and_interval(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    first = await api.post(
        "/api/jobs", json={"kind": "email", "every_seconds": 10, "payload": {"to": "ops"}}
    )
    second = await api.post("/api/jobs", json={"kind": "email", "every_seconds": 10})
    fractional = await api.post("/api/jobs", json={"kind": "email", "every_seconds": 2.5})

    assert (first.status_code, second.status_code, fractional.status_code) == (201, 201, 201)
    schedule = first.json()
    assert set(schedule) == SCHEDULE_FIELDS
    assert (schedule["name"], schedule["every_seconds"], schedule["payload"]) == (
        "email-every-10s",
        10,
        {"to": "ops"},
    )
    assert schedule["next_run_at"] == "2026-01-01T12:00:00Z", "the first run is now"
    assert second.json()["name"] == "email-every-10s-2"
    assert fractional.json()["name"] == "email-every-2.5s"
    [firing, *_] = await store.fire_due()
    assert firing.jobs[0].job.payload == {"to": "ops"}


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"delay_seconds": 5}, "delay_seconds"),
        ({"run_at": "2026-01-02T00:00:00Z"}, "run_at"),
        ({"unique_key": "k"}, "unique_key"),
        ({"timeout_seconds": 5}, "timeout_seconds"),
        ({"expires_at": "2030-01-02T00:00:00Z"}, "expires_at"),
        ({"expire_after_seconds": 2}, "expire_after_seconds"),
    ],
)
async def test_every_seconds_refuses_options_that_only_a_single_job_has(
    api: httpx.AsyncClient, store: MemoryStore, extra: dict[str, Any], field: str
) -> None:
    response = await api.post("/api/jobs", json={"kind": "email", "every_seconds": 10, **extra})

    assert response.status_code == 400
    assert response.json() == {"error": f"{field}: cannot be combined with every_seconds"}
    assert await store.list_schedules() == [] and await total_jobs(store) == 0


@pytest.mark.parametrize(
    ("every", "message"),
    [(0.5, "every_seconds: must be at least 1 second"), (1e12, "every_seconds:")],
)
async def test_a_bad_every_seconds_is_400(
    api: httpx.AsyncClient, store: MemoryStore, every: float, message: str
) -> None:
    response = await api.post("/api/jobs", json={"kind": "email", "every_seconds": every})

    assert response.status_code == 400
    assert response.json()["error"].startswith(message)
    assert await store.list_schedules() == []


async def test_a_workflow_schedule_is_shown_as_one_and_run_now_says_where_it_can_run(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await store.upsert_schedule(
        ScheduleSpec(
            name="nightly", kind="nightly", rule=Rule.every(timedelta(hours=1)), workflow=True
        )
    )
    shown = (await api.get("/api/schedules/nightly")).json()
    assert (shown["workflow"], shown["kind"]) == (True, "nightly")
    run = await api.post("/api/schedules/nightly/run")
    assert run.status_code == 409
    assert "builder this process does not define" in run.json()["error"]
    assert await total_jobs(store) == 0


async def test_run_now_on_a_workflow_schedule_writes_its_graph_where_the_app_defines_it(
    make_app: MakeApp, store: MemoryStore
) -> None:
    """``rota serve --app`` and the ASGI mount pass the App's builders to the API."""
    import rota

    app = rota.App("memory://")

    @app.job("part")
    async def part(ctx: rota.JobContext, payload: Any) -> None:
        pass

    @app.workflow_schedule("nightly", every=3600)
    def nightly(run: rota.ScheduledRun) -> rota.Workflow:
        return rota.chain(app.spec("part", {"n": 1}), app.spec("part", {"n": 2}))

    await store.upsert_schedule(next(iter(app.schedules)))
    served = make_app(workflows=app.schedules.workflow_builders())
    async with asgi_client(served) as api:
        run = await api.post("/api/schedules/nightly/run")
    assert run.status_code == 200, run.text
    assert run.json()["duplicate"] is False
    assert await total_jobs(store) == 2  # the whole chain, its second job waiting
