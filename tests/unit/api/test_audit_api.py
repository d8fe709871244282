"""The audit log through the API: every operator route records who did what, refusals record
nothing, GET /api/audit filters and pages, and read-only identities change nothing."""

from __future__ import annotations

import base64
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from importlib import resources
from typing import Any

import pytest
from fastapi.routing import iter_route_contexts

from rota.api import ApiSettings
from rota.domain.audit import AuditAction, AuditFilter
from rota.domain.flow import Limit, LimitScope
from rota.domain.job import JobSpec
from rota.domain.schedule import Rule, ScheduleSpec
from rota.domain.workflow import chain
from rota.store.memory import MemoryStore
from rota.testing import FakeClock
from tests.unit.api.conftest import TOKEN, MakeApp, asgi_client, dead_job

READ_TOKEN = "read-token-0123456789"
ADMIN = {"authorization": f"Bearer {TOKEN}"}
READER = {"authorization": f"Bearer {READ_TOKEN}"}
SETTINGS = ApiSettings(auth_token=TOKEN, read_token=READ_TOKEN)
LEASE = timedelta(seconds=30)


def basic(user: str, password: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


async def _pending(store: MemoryStore) -> int:
    [result] = await store.enqueue([JobSpec(kind="email")])
    return result.job.id


async def _succeeded(store: MemoryStore) -> int:
    job_id = await _pending(store)
    [claimed] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
    await store.complete(claimed.lease)
    return job_id


async def _schedule(store: MemoryStore) -> str:
    spec = ScheduleSpec(name="nightly", kind="report", rule=Rule.cron("0 3 * * *"))
    await store.create_schedule(spec)
    return spec.name


@dataclass(frozen=True)
class Case:
    """One operator route: how to prepare the store, the request, and what it records."""

    method: str
    path: str
    prepare: Callable[[MemoryStore], Awaitable[Any]]
    action: str
    target: str | None = None
    body: dict[str, Any] | None = None
    count: int | None = None
    filter: dict[str, Any] | None = None


async def _held(store: MemoryStore) -> int:
    job_id = await _pending(store)
    await store.hold(job_id)
    return job_id


async def _nothing(store: MemoryStore) -> None:
    return None


async def _dead(store: MemoryStore) -> int:
    return (await dead_job(store)).id


async def _workflow(store: MemoryStore) -> int:
    first, _, _ = await store.enqueue_workflow(chain(JobSpec("a"), JobSpec("b"), JobSpec("c")))
    return first.id


async def _dead_workflow(store: MemoryStore) -> int:
    """A chain whose first job ended dead: the two after it were cancelled with it."""
    first, _, _ = await store.enqueue_workflow(chain(JobSpec("a"), JobSpec("b"), JobSpec("c")))
    [claimed] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
    await store.fail(claimed.lease, error="boom", retry_in=timedelta(0), permanent=True)
    return first.id


async def _limit(store: MemoryStore) -> None:
    await store.set_limit(Limit(LimitScope.KIND, "email", concurrency=2))


#: Every route that changes something, by "METHOD template"; "{id}" is what prepare returned.
CASES: dict[str, Case] = {
    "POST /api/jobs": Case(
        "POST",
        "/api/jobs",
        _nothing,
        "schedule.create",
        "schedule:email-every-60s",
        body={"kind": "email", "every_seconds": 60},
    ),
    "POST /api/jobs/{job_id}/retry": Case(
        "POST", "/api/jobs/{id}/retry", _dead, "job.retry", "job:{id}", count=1
    ),
    "POST /api/jobs/{job_id}/cancel": Case(
        "POST", "/api/jobs/{id}/cancel", _pending, "job.cancel", "job:{id}", count=1
    ),
    "POST /api/jobs/{job_id}/hold": Case(
        "POST", "/api/jobs/{id}/hold", _pending, "job.hold", "job:{id}", count=1
    ),
    "POST /api/jobs/{job_id}/release": Case(
        "POST", "/api/jobs/{id}/release", _held, "job.release", "job:{id}", count=1
    ),
    "POST /api/jobs/bulk/hold": Case(
        "POST",
        "/api/jobs/bulk/hold",
        _pending,
        "jobs.hold",
        body={"kind": "email"},
        count=1,
        filter={"kind": "email"},
    ),
    "POST /api/jobs/bulk/release": Case(
        "POST",
        "/api/jobs/bulk/release",
        _held,
        "jobs.release",
        body={"state": ["held"]},
        count=1,
        filter={"states": ["held"]},
    ),
    "POST /api/jobs/{job_id}/rerun": Case(
        "POST", "/api/jobs/{id}/rerun", _succeeded, "job.rerun", "job:{id}", count=1
    ),
    "POST /api/jobs/{job_id}/reschedule": Case(
        "POST",
        "/api/jobs/{id}/reschedule",
        _pending,
        "job.reschedule",
        "job:{id}",
        body={"priority": 7},
        count=1,
    ),
    "DELETE /api/jobs/{job_id}": Case(
        "DELETE", "/api/jobs/{id}", _dead, "job.delete", "job:{id}", count=1
    ),
    "POST /api/jobs/bulk/retry": Case(
        "POST",
        "/api/jobs/bulk/retry",
        _dead,
        "jobs.retry",
        body={"kind": "email"},
        count=1,
        filter={"kind": "email"},
    ),
    "POST /api/jobs/bulk/cancel": Case(
        "POST",
        "/api/jobs/bulk/cancel",
        _pending,
        "jobs.cancel",
        body={"state": ["pending"]},
        count=1,
        filter={"states": ["pending"]},
    ),
    "POST /api/jobs/bulk/delete": Case(
        "POST",
        "/api/jobs/bulk/delete",
        _dead,
        "jobs.purge",
        body={"state": ["dead"], "kind": "email"},
        count=1,
        filter={"states": ["dead"], "kind": "email"},
    ),
    "POST /api/schedules": Case(
        "POST",
        "/api/schedules",
        _nothing,
        "schedule.create",
        "schedule:hourly",
        body={"name": "hourly", "kind": "report", "cron": "@hourly"},
    ),
    "POST /api/schedules/{name}/edit": Case(
        "POST",
        "/api/schedules/{id}/edit",
        _schedule,
        "schedule.replace",
        "schedule:{id}",
        body={"kind": "email", "every_seconds": 120},
    ),
    "POST /api/schedules/{name}/pause": Case(
        "POST", "/api/schedules/{id}/pause", _schedule, "schedule.pause", "schedule:{id}"
    ),
    "POST /api/schedules/{name}/resume": Case(
        "POST", "/api/schedules/{id}/resume", _schedule, "schedule.resume", "schedule:{id}"
    ),
    "POST /api/schedules/{name}/run": Case(
        "POST", "/api/schedules/{id}/run", _schedule, "schedule.run", "schedule:{id}", count=1
    ),
    "POST /api/schedules/{name}/delete": Case(
        "POST", "/api/schedules/{id}/delete", _schedule, "schedule.delete", "schedule:{id}"
    ),
    "POST /api/queues/{name}/pause": Case(
        "POST", "/api/queues/emails/pause", _nothing, "queue.pause", "queue:emails"
    ),
    "POST /api/queues/{name}/resume": Case(
        "POST", "/api/queues/emails/resume", _nothing, "queue.resume", "queue:emails"
    ),
    "POST /api/limits": Case(
        "POST",
        "/api/limits",
        _nothing,
        "limit.set",
        "limit:kind:email",
        body={"scope": "kind", "key": "email", "concurrency": 3},
    ),
    "POST /api/limits/{scope}/{key}/delete": Case(
        "POST", "/api/limits/kind/email/delete", _limit, "limit.delete", "limit:kind:email"
    ),
    "POST /api/workflows/{workflow_id}/cancel": Case(
        "POST",
        "/api/workflows/{id}/cancel",
        _workflow,
        "workflow.cancel",
        "workflow:{id}",
        count=3,
    ),
    "POST /api/workflows/{workflow_id}/nodes/{job_id}/retry": Case(
        "POST",
        "/api/workflows/{id}/nodes/{id}/retry?downstream=true",
        _dead_workflow,
        "workflow.node.retry",
        "job:{id}",
        count=3,
    ),
    "POST /api/workflows/{workflow_id}/nodes/{job_id}/cancel": Case(
        "POST",
        "/api/workflows/{id}/nodes/{id}/cancel",
        _workflow,
        "workflow.node.cancel",
        "job:{id}",
        count=1,
    ),
    "POST /api/signals": Case(
        "POST",
        "/api/signals",
        _nothing,
        "signal.send",
        "signal:paid:1",
        body={"key": "paid:1", "data": {"ok": True}},
        count=0,
    ),
}
#: Routes that change nothing an operator did: answered 405 before any verb runs.
NOT_ACTIONS = {"DELETE /api/jobs/count", "DELETE /api/jobs/counts"}


def test_every_route_that_changes_something_is_a_recorded_case(make_app: MakeApp) -> None:
    app = make_app(SETTINGS)
    mutating = {
        f"{method} {route.path}"
        for route in iter_route_contexts(app.routes)
        if route.path and route.path.startswith("/api/")
        for method in route.methods or ()
        if method not in ("GET", "HEAD")
    }
    assert mutating - NOT_ACTIONS == set(CASES), (
        "every route that changes something goes through rota.operator.Operator and has a case here"
    )


@pytest.mark.parametrize("route", sorted(CASES))
async def test_an_operator_route_records_who_did_what_and_how_many_jobs(
    route: str, make_app: MakeApp, store: MemoryStore, clock: FakeClock
) -> None:
    case = CASES[route]
    made = str(await case.prepare(store))
    clock.advance(5)
    async with asgi_client(make_app(SETTINGS), headers=ADMIN) as api:
        path = case.path.replace("{id}", made)
        options: dict[str, Any] = {} if case.body is None else {"json": case.body}
        response = await api.request(case.method, path, **options)
        assert response.status_code < 300, response.text
        listed = (await api.get("/api/audit")).json()
    [entry] = listed["entries"]
    assert entry["identity"] == "token:admin"
    assert entry["action"] == case.action
    assert entry["target"] == (None if case.target is None else case.target.replace("{id}", made))
    assert entry["count"] == case.count
    assert entry["filter"] == case.filter
    assert entry["at"] == clock.now().isoformat().replace("+00:00", "Z")


async def test_a_job_enqueued_over_the_api_is_recorded_with_its_identity(
    make_app: MakeApp, store: MemoryStore
) -> None:
    body = {"kind": "email", "queue": "mail", "unique_key": "k-1"}
    async with asgi_client(make_app(SETTINGS), headers=ADMIN) as api:
        created = (await api.post("/api/jobs", json=body)).json()
        again = await api.post("/api/jobs", json=body)  # the key is held: nothing new
        refused = await api.post("/api/jobs", json={"kind": "email"}, headers=READER)
        listed = (await api.get("/api/audit")).json()["entries"]

    assert (again.status_code, refused.status_code) == (200, 403)
    target = f"job:{created['id']}"
    assert [(e["identity"], e["action"], e["target"], e["count"]) for e in listed] == [
        ("token:admin", "job.create", target, 0),
        ("token:admin", "job.create", target, 1),
    ]
    assert listed[1]["detail"] == {"kind": "email", "queue": "mail", "duplicate": False}


async def test_refused_requests_record_nothing(make_app: MakeApp, store: MemoryStore) -> None:
    pending = await _pending(store)
    async with asgi_client(make_app(SETTINGS), headers=ADMIN) as api:
        refusals = [
            await api.post(f"/api/jobs/{pending}/retry"),  # 409: not dead or cancelled
            await api.post("/api/jobs/999/cancel"),  # 404
            await api.post(f"/api/jobs/{pending}/reschedule", json={"priority": 1000}),  # 400
            await api.post("/api/schedules/missing/pause"),  # 404
            await api.post("/api/limits/kind/email/delete"),  # 404: no such limit
            await api.post("/api/jobs/bulk/retry", json={"state": ["bogus"]}),  # 400
            await api.post("/api/queues/emails/pause", headers=READER),  # 403: read-only
        ]
        assert [r.status_code for r in refusals] == [409, 404, 400, 404, 404, 400, 403]
        assert (await api.get("/api/audit")).json()["entries"] == []
    assert (await store.list_audit(AuditFilter())).entries == []


async def test_each_identity_is_recorded_by_its_own_name(
    make_app: MakeApp, store: MemoryStore
) -> None:
    settings = ApiSettings(
        auth_token=TOKEN, basic_auth=("alice", "alice-password"), read_token=READ_TOKEN
    )
    async with asgi_client(make_app(settings)) as api:
        assert (await api.post("/api/queues/a/pause", headers=ADMIN)).status_code == 204
        alice = basic("alice", "alice-password")
        assert (await api.post("/api/queues/b/pause", headers=alice)).status_code == 204
        login = await api.post("/login", data={"token": TOKEN})
        assert login.status_code == 303
        assert (await api.post("/api/queues/c/pause")).status_code == 204  # the session
        listed = (await api.get("/api/audit", headers=READER)).json()["entries"]
    assert [(e["identity"], e["target"]) for e in listed] == [
        ("token:admin", "queue:c"),
        ("basic:alice", "queue:b"),
        ("token:admin", "queue:a"),
    ]
    async with asgi_client(make_app()) as api:  # no auth configured: on loopback only
        assert (await api.post("/api/queues/d/pause")).status_code == 204
        [latest, *_] = (await api.get("/api/audit")).json()["entries"]
    assert (latest["identity"], latest["target"]) == ("anonymous", "queue:d")


async def test_a_read_token_sees_everything_and_every_change_is_refused(
    make_app: MakeApp, store: MemoryStore
) -> None:
    dead = await dead_job(store)
    async with asgi_client(make_app(SETTINGS), headers=READER) as api:
        config = (await api.get("/api/config")).json()
        assert (config["read_only"], config["identity"]) == (True, "token:read")
        assert (await api.get(f"/api/jobs/{dead.id}")).status_code == 200
        assert (await api.get("/api/audit")).status_code == 200
        refused = await api.post(f"/api/jobs/{dead.id}/retry")
        assert refused.status_code == 403
        assert refused.json() == {
            "error": "read-only identity: token:read may read but change nothing"
        }
        assert (await api.delete(f"/api/jobs/{dead.id}")).status_code == 403
    assert (await store.get(dead.id)).state == dead.state
    async with asgi_client(make_app(SETTINGS), headers=ADMIN) as api:
        config = (await api.get("/api/config")).json()
        assert (config["read_only"], config["identity"]) == (False, "token:admin")


async def test_a_dashboard_login_with_the_read_token_is_a_read_only_session(
    make_app: MakeApp, store: MemoryStore
) -> None:
    dead = await dead_job(store)
    async with asgi_client(make_app(SETTINGS)) as api:
        login = await api.post("/login", data={"token": READ_TOKEN})
        assert login.status_code == 303
        assert (await api.get("/api/config")).json()["identity"] == "token:read"
        assert (await api.post(f"/api/jobs/{dead.id}/retry")).status_code == 403
        assert (await api.post("/logout")).status_code == 303
        assert (await api.get("/api/config")).status_code == 401


async def test_a_read_only_basic_user_beside_the_admin_user(
    make_app: MakeApp, store: MemoryStore
) -> None:
    settings = ApiSettings(
        basic_auth=("admin", "admin-password"), read_basic_auth=("viewer", "viewer-password")
    )
    async with asgi_client(make_app(settings)) as api:
        viewer = basic("viewer", "viewer-password")
        assert (await api.get("/api/jobs", headers=viewer)).status_code == 200
        refused = await api.post("/api/queues/a/pause", headers=viewer)
        assert refused.status_code == 403 and "basic:viewer" in refused.json()["error"]
        wrong = basic("viewer", "admin-password")
        assert (await api.get("/api/jobs", headers=wrong)).status_code == 401
        admin = basic("admin", "admin-password")
        assert (await api.post("/api/queues/a/pause", headers=admin)).status_code == 204
        [entry] = (await api.get("/api/audit", headers=viewer)).json()["entries"]
    assert entry["identity"] == "basic:admin"


async def test_the_audit_list_filters_and_pages_newest_first(
    make_app: MakeApp, store: MemoryStore, clock: FakeClock
) -> None:
    start = clock.now()
    async with asgi_client(make_app(SETTINGS), headers=ADMIN) as api:
        for name in ("a", "b", "c"):
            assert (await api.post(f"/api/queues/{name}/pause")).status_code == 204
            clock.advance(60)
        assert (await api.post("/api/queues/a/resume")).status_code == 204

        async def targets(**params: Any) -> list[str]:
            response = await api.get("/api/audit", params=params)
            assert response.status_code == 200, response.text
            return [entry["target"] for entry in response.json()["entries"]]

        assert await targets() == ["queue:a", "queue:c", "queue:b", "queue:a"]
        assert await targets(action="queue.resume") == ["queue:a"]
        assert await targets(target="queue:b") == ["queue:b"]
        assert await targets(identity="token:read") == []
        assert await targets(identity="bad\x01identity") == []
        since = (start + timedelta(seconds=60)).isoformat()
        until = (start + timedelta(seconds=120)).isoformat()
        assert await targets(since=since) == ["queue:a", "queue:c", "queue:b"]
        assert await targets(since=since, until=until) == ["queue:b"]
        assert await targets(since=until, until=since) == []
        first = (await api.get("/api/audit", params={"limit": 3})).json()
        assert [e["target"] for e in first["entries"]] == ["queue:a", "queue:c", "queue:b"]
        rest = (await api.get("/api/audit", params={"cursor": first["next_cursor"]})).json()
        assert ([e["target"] for e in rest["entries"]], rest["next_cursor"]) == (["queue:a"], None)


@pytest.mark.parametrize(
    "params",
    [
        {"action": "job.explode"},
        {"since": "yesterday"},
        {"until": "2026-01-01T00:00:00"},  # no UTC offset
        {"since": "2026-02-30T00:00:00Z"},
        {"limit": "0"},
        {"limit": "501"},
        {"cursor": "abc"},
        {"identity": "x" * 201},
    ],
)
async def test_bad_audit_queries_are_400(make_app: MakeApp, params: dict[str, str]) -> None:
    async with asgi_client(make_app(SETTINGS), headers=ADMIN) as api:
        response = await api.get("/api/audit", params=params)
    assert response.status_code == 400, response.text
    assert "error" in response.json()


async def test_an_anonymous_request_cannot_read_the_audit_log(make_app: MakeApp) -> None:
    async with asgi_client(make_app(SETTINGS)) as api:
        assert (await api.get("/api/audit")).status_code == 401


def test_read_credentials_must_not_shadow_the_admin_ones() -> None:
    with pytest.raises(ValueError, match="differ"):
        ApiSettings(auth_token=TOKEN, read_token=TOKEN)
    with pytest.raises(ValueError, match="differ"):
        ApiSettings(basic_auth=("ann", "one-password"), read_basic_auth=("ann", "other-pass"))
    with pytest.raises(ValueError, match="at least 8"):
        ApiSettings(read_token="short")
    assert ApiSettings(read_token=READ_TOKEN).has_auth


def test_the_audit_view_offers_every_action_to_filter_by() -> None:
    script = resources.files("rota.api").joinpath("static", "audit.js").read_text("utf-8")
    listed = re.search(r"const ACTIONS = \[(.*?)\];", script, re.DOTALL)
    assert listed is not None
    assert re.findall(r'"([a-z.]+)"', listed.group(1)) == [action.value for action in AuditAction]
