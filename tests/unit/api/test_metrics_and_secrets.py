"""/metrics hygiene (T42) and secrets hygiene (T39): bounded series, no job data in labels,
no token or database password in any response."""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rota.api import ApiSettings
from rota.client import Client
from rota.domain.errors import StoreUnavailable
from rota.domain.job import JobSpec
from rota.observability.metrics import Metrics
from rota.store.memory import MemoryStore
from rota.store.records import JobFilter, Page, WorkerInfo
from rota.testing import FakeClock
from tests.unit.api.conftest import TOKEN, MakeApp, asgi_client, dead_job

ALLOWED_LABELS = {"kind", "outcome", "queue", "state", "result", "schedule_outcome", "le"}


def series(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (sample.name, sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


async def test_metrics_reflect_the_store(
    make_app: MakeApp, store: MemoryStore, metrics: Metrics, clock: FakeClock
) -> None:
    await store.enqueue([JobSpec(kind="email", queue="mail") for _ in range(3)])
    await dead_job(store)
    await store.register_worker(WorkerInfo("w1", "host", 1, ("mail",), 2))
    clock.advance(timedelta(seconds=12))
    async with asgi_client(make_app(metrics=metrics)) as api:
        response = await api.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    values = {
        (name, tuple(sorted(labels.items()))): value
        for name, labels, value in series(response.text)
    }
    assert values[("rota_queue_jobs", (("queue", "mail"), ("state", "pending")))] == 3
    assert values[("rota_dead_jobs", ())] == 1
    assert values[("rota_oldest_due_job_age_seconds", ())] == 12
    assert values[("rota_workers_alive", ())] == 1


async def test_metrics_are_cached_briefly(
    make_app: MakeApp, store: MemoryStore, metrics: Metrics, clock: FakeClock
) -> None:
    async with asgi_client(make_app(metrics=metrics)) as api:
        await api.get("/metrics")
        await dead_job(store)
        clock.advance(timedelta(seconds=1))
        assert "rota_dead_jobs 0.0" in (await api.get("/metrics")).text
        clock.advance(timedelta(seconds=1.5))
        assert "rota_dead_jobs 1.0" in (await api.get("/metrics")).text


async def test_metrics_have_no_job_data_and_a_bounded_series_count(
    make_app: MakeApp, store: MemoryStore, metrics: Metrics, clock: FakeClock
) -> None:
    settings = ApiSettings(max_metric_queues=20)
    async with asgi_client(make_app(settings, metrics=metrics)) as api:
        await api.get("/metrics")
        for i in range(300):
            response = await api.post(
                "/api/jobs",
                json={"kind": f"kind-{i}", "queue": f"queue-{i}", "tenant": f"tenant-{i}",
                      "unique_key": f"secret-key-{i}", "payload": {"card": f"4111-{i:04d}"}},
            )  # fmt: skip
            assert response.status_code == 201
        clock.advance(timedelta(seconds=5))
        text = (await api.get("/metrics")).text
    samples = series(text)
    assert {label for _, labels, _ in samples for label in labels} <= ALLOWED_LABELS
    assert "4111-" not in text and "secret-key" not in text and "tenant-" not in text
    queues = {labels["queue"] for name, labels, _ in samples if name == "rota_queue_jobs"}
    assert len(queues) == 21 and "_other" in queues
    depth = [
        value
        for name, labels, value in samples
        if name == "rota_queue_jobs" and labels["state"] == "pending"
    ]
    assert sum(depth) == 300
    assert len(samples) < 200


class BrokenStore(MemoryStore):
    """A store whose reads fail the way a dropped PostgreSQL connection does."""

    message = "connection to postgresql://rota:hunter2-db-password@db.internal:5432/rota failed"

    async def list_jobs(
        self,
        filter: JobFilter,
        *,
        cursor: str | None = None,
        limit: int = 50,
        previews: bool = False,
    ) -> Page:
        raise StoreUnavailable(self.message)

    async def get(self, job_id: int) -> Any:
        raise StoreUnavailable(self.message)

    async def counts(self, *, now: datetime | None = None) -> Any:
        raise StoreUnavailable(self.message)

    async def enqueue(self, specs: Any, *, now: datetime | None = None) -> Any:
        raise StoreUnavailable(self.message)


async def test_secrets_never_appear_in_responses_or_logs(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    from rota.api import create_app

    caplog.set_level(logging.DEBUG)
    store = BrokenStore(clock=clock)
    app = create_app(Client(store), settings=ApiSettings(auth_token=TOKEN))
    secrets = (TOKEN, "hunter2-db-password")
    auth = {"authorization": f"Bearer {TOKEN}"}
    bodies: list[str] = []
    async with asgi_client(app) as api:
        for method, path in [
            ("GET", "/api/jobs"), ("GET", "/api/jobs/1"), ("GET", "/api/stats"), ("GET", "/metrics"),
            ("POST", "/api/jobs"), ("GET", "/api/config"), ("GET", "/"), ("GET", "/static/app.js"),
            ("GET", "/openapi.json"), ("GET", "/healthz"), ("GET", "/nothing"),
        ]:  # fmt: skip
            for headers in (auth, {}, {"authorization": "Bearer wrong-token-xyz"}):
                kwargs: dict[str, Any] = {"headers": headers}
                if method == "POST":
                    kwargs["json"] = {"kind": "email"}
                response = await api.request(method, path, **kwargs)
                assert response.status_code < 500 or response.status_code == 503
                if response.status_code == 503:
                    assert response.headers["retry-after"].isdigit()
                    assert response.json() == {"error": "the job store is unavailable; retry later"}
                bodies.append(response.text + str(response.headers))
        login = await api.post("/login", data={"token": TOKEN})
        bodies.append(login.text + str(login.headers))
    everything = "\n".join(bodies) + caplog.text
    for secret in secrets:
        assert secret not in everything
    assert re.search(r"hunter2", everything) is None


async def test_healthz_needs_no_store(clock: FakeClock) -> None:
    from rota.api import create_app

    app = create_app(Client(BrokenStore(clock=clock)), settings=ApiSettings())
    async with asgi_client(app) as api:
        assert (await api.get("/healthz")).json() == {"ok": True}
        assert (await api.get("/api/jobs")).status_code == 503


async def test_metrics_object_is_created_when_not_given(make_app: MakeApp) -> None:
    async with asgi_client(make_app()) as api:
        text = (await api.get("/metrics")).text
    assert "rota_queue_jobs" in text and "rota_claims_total" in text


async def test_store_unavailable_on_write_is_503_and_nothing_leaks(clock: FakeClock) -> None:
    from rota.api import create_app

    app = create_app(Client(BrokenStore(clock=clock)), settings=ApiSettings())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as api:
        response = await api.post("/api/jobs", json={"kind": "email"})
    assert response.status_code == 503
    assert "hunter2" not in response.text


async def test_an_unexpected_error_is_a_bare_json_500(clock: FakeClock) -> None:
    from rota.api import create_app

    class Buggy(MemoryStore):
        async def list_workers(self) -> list[WorkerInfo]:
            raise RuntimeError("bug with postgresql://u:hunter2-db-password@h/db inside")

    app = create_app(Client(Buggy(clock=clock)), settings=ApiSettings())
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as api:
        response = await api.get("/api/workers")
    assert response.status_code == 500
    assert response.json() == {"error": "internal error"}
