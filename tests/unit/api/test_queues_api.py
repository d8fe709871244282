"""The flow-control routes (/api/queues, /api/limits, /api/tenants/running) against a
MemoryStore on a FakeClock: happy paths, bad input naming the field, unknown limits, read-only
mode and auth."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest

from rota.api import ApiSettings
from rota.domain.flow import Limit, LimitScope
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store.memory import MemoryStore
from rota.testing import FakeClock
from tests.unit.api.conftest import TOKEN, MakeApp, asgi_client

LEASE = timedelta(seconds=30)
QUEUE_FIELDS = {"name", "paused", "updated_at", "counts", "concurrency", "limit_running"}
LIMIT_FIELDS = {
    "scope", "key", "concurrency", "rate", "period_seconds", "running", "recent_starts",
}  # fmt: skip
NO_JOBS = {state.value: 0 for state in JobState}


async def set_limit(api: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await api.post("/api/limits", json=body)


async def test_queues_list_paused_state_counts_and_concurrency_limit(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await store.enqueue([JobSpec(kind="email", queue="mail") for _ in range(3)])
    await store.enqueue([JobSpec(kind="report")])
    await store.claim("w", queues=["mail"], limit=1, lease=LEASE)
    await store.set_limit(Limit(LimitScope.QUEUE, "mail", concurrency=2))

    assert (await api.post("/api/queues/mail/pause")).status_code == 204
    assert (await api.post("/api/queues/later/pause")).status_code == 204, "before any job"

    listed = (await api.get("/api/queues")).json()
    assert (listed["now"], listed["exact"]) == ("2026-01-01T12:00:00Z", True)
    assert [q["name"] for q in listed["queues"]] == ["default", "later", "mail"]
    default, later, mail = listed["queues"]
    assert set(mail) == QUEUE_FIELDS
    assert (mail["paused"], mail["updated_at"]) == (True, "2026-01-01T12:00:00Z")
    assert mail["counts"] == {**NO_JOBS, "pending": 2, "running": 1}
    assert (mail["concurrency"], mail["limit_running"]) == (2, 1)
    assert (later["paused"], later["counts"], later["concurrency"]) == (True, NO_JOBS, None)
    assert (default["paused"], default["counts"]["pending"], default["updated_at"]) == (
        False,
        1,
        None,
    )


async def test_a_paused_queue_gives_workers_nothing_until_resumed(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await store.enqueue([JobSpec(kind="email", queue="mail")])

    assert (await api.post("/api/queues/mail/pause")).status_code == 204
    assert await store.claim("w", queues=["mail"], limit=1, lease=LEASE) == []
    assert (await api.post("/api/queues/mail/resume")).status_code == 204

    assert len(await store.claim("w", queues=["mail"], limit=1, lease=LEASE)) == 1
    [mail] = (await api.get("/api/queues")).json()["queues"]
    assert mail["paused"] is False


async def test_set_limit_creates_and_replaces_and_the_list_shows_use(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    created = await set_limit(api, scope="kind", key="pdf", concurrency=3)
    assert created.status_code == 201, created.text
    assert created.json() == {
        "scope": "kind",
        "key": "pdf",
        "concurrency": 3,
        "rate": None,
        "period_seconds": None,
        "running": 0,
        "recent_starts": 0,
    }
    await store.enqueue([JobSpec(kind="pdf") for _ in range(5)])
    assert len(await store.claim("w", queues=["default"], limit=10, lease=LEASE)) == 3

    replaced = await set_limit(
        api, scope="kind", key="pdf", concurrency=4, rate=10, period_seconds=60
    )
    assert replaced.status_code == 201
    assert (replaced.json()["concurrency"], replaced.json()["running"]) == (4, 3)
    await store.claim("w", queues=["default"], limit=10, lease=LEASE)
    tenant = await set_limit(api, scope="tenant", key="*", concurrency=2)
    assert tenant.status_code == 201

    listed = (await api.get("/api/limits")).json()
    assert listed["now"] == "2026-01-01T12:00:00Z"
    assert [(lim["scope"], lim["key"]) for lim in listed["limits"]] == [
        ("kind", "pdf"),
        ("tenant", "*"),
    ]
    pdf = listed["limits"][0]
    assert set(pdf) == LIMIT_FIELDS
    assert (pdf["concurrency"], pdf["rate"], pdf["period_seconds"]) == (4, 10, 60.0)
    assert (pdf["running"], pdf["recent_starts"]) == (4, 1), "one start since the rate was set"


async def test_recent_starts_slide_out_of_the_period(
    api: httpx.AsyncClient, store: MemoryStore, clock: FakeClock
) -> None:
    await set_limit(api, scope="kind", key="api", rate=2, period_seconds=60)
    await store.enqueue([JobSpec(kind="api") for _ in range(3)])
    claimed = await store.claim("w", queues=["default"], limit=10, lease=LEASE)
    assert await store.complete_many([job.lease for job in claimed]) == []

    [api_limit] = (await api.get("/api/limits")).json()["limits"]
    assert (api_limit["running"], api_limit["recent_starts"]) == (0, 2)
    clock.advance(timedelta(seconds=61))
    [api_limit] = (await api.get("/api/limits")).json()["limits"]
    assert api_limit["recent_starts"] == 0


async def test_delete_removes_a_limit_and_an_absent_one_is_404(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await store.set_limit(Limit(LimitScope.TENANT, "*", concurrency=1))
    await store.set_limit(Limit(LimitScope.QUEUE, "mail", concurrency=1))

    assert (await api.post("/api/limits/tenant/*/delete")).status_code == 204
    again = await api.post("/api/limits/tenant/*/delete")
    assert again.status_code == 404
    assert again.json() == {"error": "limit on tenant '*' not found"}
    assert (await api.post("/api/limits/kind/mail/delete")).status_code == 404
    assert [info.limit.ident for info in await store.list_limits()] == [(LimitScope.QUEUE, "mail")]


async def test_running_jobs_per_tenant_most_first(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await store.enqueue(
        [JobSpec(kind="a", tenant="acme") for _ in range(2)]
        + [JobSpec(kind="a", tenant="globex"), JobSpec(kind="a"), JobSpec(kind="a", tenant="zed")]
    )
    assert len(await store.claim("w", queues=["default"], limit=10, lease=LEASE)) == 5

    running = (await api.get("/api/tenants/running")).json()

    assert running["now"] == "2026-01-01T12:00:00Z"
    assert running["tenants"] == [
        {"tenant": "acme", "running": 2},
        {"tenant": "globex", "running": 1},
        {"tenant": "zed", "running": 1},
    ], "jobs without a tenant are not counted"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"key": "pdf", "concurrency": 1}, "scope: is required"),
        ({"scope": "kind", "concurrency": 1}, "key: is required"),
        ({"scope": "worker", "key": "pdf", "concurrency": 1}, "scope:"),
        ({"scope": "kind", "key": "pdf"}, "concurrency: give concurrency, rate"),
        ({"scope": "kind", "key": "bad key", "concurrency": 1}, "key: may contain only"),
        ({"scope": "kind", "key": "*", "concurrency": 1}, "key:"),
        ({"scope": "queue", "key": "*", "concurrency": 1}, "key:"),
        ({"scope": "kind", "key": "", "concurrency": 1}, "key:"),
        ({"scope": "kind", "key": "k" * 129, "concurrency": 1}, "key:"),
        ({"scope": "kind", "key": "pdf", "concurrency": -1}, "concurrency: must be between"),
        ({"scope": "kind", "key": "pdf", "concurrency": 10**7}, "concurrency: must be between"),
        ({"scope": "kind", "key": "pdf", "concurrency": "3"}, "concurrency:"),
        ({"scope": "kind", "key": "pdf", "concurrency": True}, "concurrency:"),
        ({"scope": "kind", "key": "pdf", "concurrency": 1.5}, "concurrency:"),
        ({"scope": "kind", "key": "pdf", "rate": 5}, "period_seconds: a rate needs a period"),
        (
            {"scope": "kind", "key": "pdf", "concurrency": 1, "period_seconds": 60},
            "period_seconds: a period needs a rate",
        ),
        ({"scope": "kind", "key": "pdf", "rate": 0, "period_seconds": 60}, "rate: must be"),
        ({"scope": "kind", "key": "pdf", "rate": 10**6, "period_seconds": 60}, "rate: must be"),
        ({"scope": "kind", "key": "pdf", "rate": 5, "period_seconds": 0.5}, "period_seconds:"),
        ({"scope": "kind", "key": "pdf", "rate": 5, "period_seconds": 1e9}, "period_seconds:"),
        (
            {"scope": "queue", "key": "mail", "rate": 5, "period_seconds": 60},
            "rate: rates apply to kinds and tenants, not queues",
        ),
        ({"scope": "kind", "key": "pdf", "concurrency": 1, "burst": 2}, "burst: unknown field"),
    ],
)
async def test_bad_limits_are_400_naming_the_field_and_write_nothing(
    api: httpx.AsyncClient, store: MemoryStore, body: dict[str, Any], message: str
) -> None:
    response = await set_limit(api, **body)

    assert response.status_code == 400, response.text
    assert message in response.json()["error"]
    assert await store.list_limits() == []


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/api/queues/bad%20name/pause", "name:"),
        ("/api/queues/-dash/resume", "name:"),
        ("/api/queues/" + "q" * 129 + "/pause", "name:"),
        ("/api/limits/worker/pdf/delete", "scope:"),
        ("/api/limits/kind/bad%20key/delete", "key:"),
    ],
)
async def test_names_no_queue_or_limit_can_have_are_400(
    api: httpx.AsyncClient, store: MemoryStore, path: str, message: str
) -> None:
    response = await api.post(path)

    assert response.status_code == 400, response.text
    assert response.json()["error"].startswith(message)
    assert await store.list_queues() == []


async def test_read_only_mode_refuses_every_flow_control_mutation(
    make_app: MakeApp, store: MemoryStore
) -> None:
    await store.set_limit(Limit(LimitScope.KIND, "pdf", concurrency=3))
    await store.pause_queue("mail")
    async with asgi_client(make_app(ApiSettings(read_only=True))) as api:
        for path in (
            "/api/queues/mail/resume",
            "/api/queues/default/pause",
            "/api/limits/kind/pdf/delete",
        ):
            response = await api.post(path)
            assert response.status_code == 403, path
            assert response.json() == {"error": "read-only mode"}
        assert (await set_limit(api, scope="kind", key="pdf", concurrency=9)).status_code == 403
        for path in ("/api/queues", "/api/limits", "/api/tenants/running"):
            assert (await api.get(path)).status_code == 200, path

    assert [(q.name, q.paused) for q in await store.list_queues()] == [("mail", True)]
    [info] = await store.list_limits()
    assert info.limit.concurrency == 3


async def test_flow_control_needs_credentials_when_auth_is_on(
    make_app: MakeApp, store: MemoryStore
) -> None:
    async with asgi_client(make_app(ApiSettings(auth_token=TOKEN))) as api:
        assert (await api.get("/api/limits")).status_code == 401
        assert (await api.post("/api/queues/mail/pause")).status_code == 401
        assert (await set_limit(api, scope="kind", key="pdf", concurrency=1)).status_code == 401
        assert await store.list_queues() == [] and await store.list_limits() == []

        authorized = {"authorization": f"Bearer {TOKEN}"}
        response = await api.post("/api/queues/mail/pause", headers=authorized)
        assert response.status_code == 204
        assert (await api.get("/api/queues", headers=authorized)).json()["queues"][0]["paused"]


async def test_the_openapi_document_describes_the_flow_control_routes(
    api: httpx.AsyncClient,
) -> None:
    document = (await api.get("/openapi.json")).json()

    for path in (
        "/api/queues",
        "/api/queues/{name}/pause",
        "/api/queues/{name}/resume",
        "/api/limits",
        "/api/limits/{scope}/{key}/delete",
        "/api/tenants/running",
    ):
        assert path in document["paths"], path
    create = document["paths"]["/api/limits"]["post"]
    assert create["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/LimitCreate"
    }
    assert set(document["components"]["schemas"]["LimitCreate"]["properties"]) == {
        "scope", "key", "concurrency", "rate", "period_seconds",
    }  # fmt: skip


async def test_deleting_an_every_tenant_limit_of_a_kind_is_not_found(
    api: httpx.AsyncClient,
) -> None:
    """``*`` names every tenant: no kind or queue limit has that key."""
    response = await api.post("/api/limits/kind/*/delete")
    assert response.status_code == 404
