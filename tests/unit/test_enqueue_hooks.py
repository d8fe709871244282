"""Enqueue hooks (issue 43, point 6): ``before_enqueue`` may change or refuse a spec and
``after_enqueue`` sees what was written, on every path an App enqueues through: the library
(async, sync, many, workflows), ``rota enqueue --app`` and ``POST /api/jobs``. The Django
backend's path is tests/integration/test_django.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import rota
from rota.api import ApiSettings, create_app
from rota.domain.errors import InvalidInput
from rota.domain.job import EnqueueResult, JobSpec
from rota.store import JobFilter
from tests.support.cli import invoke, sqlite_url

BASE_URL = "http://127.0.0.1"


def hooked_app(url: str = "memory://") -> tuple[rota.App, list[tuple[str, int, str]]]:
    """An App whose before hook tags every payload and moves "bulk" jobs to their own queue,
    refuses payloads marked forbidden, and whose after hook records what was written."""
    app = rota.App(url)
    written: list[tuple[str, int, str]] = []

    @app.job("email")
    async def email(ctx: rota.JobContext, payload: dict) -> None:
        return None

    @app.job("report")
    async def report(ctx: rota.JobContext, payload: dict) -> None:
        return None

    @app.before_enqueue
    def tag(spec: JobSpec) -> JobSpec | None:
        if isinstance(spec.payload, dict) and spec.payload.get("forbidden"):
            raise InvalidInput("forbidden payloads are refused")
        payload = {**spec.payload, "tagged": True} if isinstance(spec.payload, dict) else None
        queue = "bulk" if payload and payload.get("bulk") else spec.queue
        return dataclasses.replace(spec, payload=payload, queue=queue)

    @app.before_enqueue
    def keep(spec: JobSpec) -> None:  # None keeps the spec as the previous hook left it
        assert spec.payload["tagged"] is True

    @app.after_enqueue
    def record(spec: JobSpec, result: EnqueueResult) -> None:
        assert result.job.payload == spec.payload
        written.append((result.job.kind, result.job.id, result.job.queue))

    return app, written


async def test_the_library_passes_every_enqueue_through_the_hooks() -> None:
    app, written = hooked_app()
    async with app:
        one = await app.enqueue("email", {"to": "a"})
        assert one.job.payload == {"to": "a", "tagged": True}
        [bulk, plain] = await app.enqueue_many(
            [app.spec("email", {"bulk": 1}), app.spec("report", {})]
        )
        assert (bulk.job.queue, plain.job.queue) == ("bulk", "default")
        child = await app.enqueue("report", {}, depends_on=[one.job.id])
        run = await app.workflows.enqueue(rota.chain(app.spec("email", {}), app.spec("report", {})))
        assert all(job.payload["tagged"] for job in run.jobs)
        with pytest.raises(InvalidInput, match="forbidden payloads are refused"):
            await app.enqueue("email", {"forbidden": True})
        with pytest.raises(InvalidInput, match="forbidden"):  # one refused: none written
            await app.enqueue_many([app.spec("email", {}), app.spec("email", {"forbidden": 1})])
        listed = (await app.jobs.list(JobFilter())).jobs
        assert len(listed) == 6
    assert [(kind, queue) for kind, _, queue in written] == [
        ("email", "default"),
        ("email", "bulk"),
        ("report", "default"),
        ("report", "default"),
        ("email", "default"),
        ("report", "default"),
    ]
    assert written[3][1] == child.job.id


def test_sync_enqueues_pass_through_the_hooks(tmp_path: Path) -> None:
    app, written = hooked_app(sqlite_url(tmp_path / "sync.db"))
    try:
        result = app.enqueue_sync("email", {"bulk": 1})
        assert (result.job.queue, result.job.payload) == ("bulk", {"bulk": 1, "tagged": True})
        with pytest.raises(InvalidInput, match="forbidden"):
            app.enqueue_sync("email", {"forbidden": True})
        run = app.workflows.enqueue_sync(rota.chain(app.spec("report", {})))
        assert run.jobs[0].payload == {"tagged": True}
    finally:
        asyncio.run(app.close())
    assert [kind for kind, _, _ in written] == ["email", "report"]


async def test_a_hook_may_not_return_anything_but_a_spec_or_send_a_kind_nowhere() -> None:
    app = rota.App("memory://")

    @app.job("email")
    async def email(ctx: rota.JobContext, payload: dict) -> None:
        return None

    with pytest.raises(InvalidInput, match="plain def"):

        @app.before_enqueue
        async def coroutine(spec: JobSpec) -> None:
            return None

    answers: list[object] = [{"kind": "email"}, JobSpec(kind="emial")]
    app.before_enqueue(lambda spec: answers.pop(0))
    async with app:
        with pytest.raises(InvalidInput, match="returned dict; return a JobSpec"):
            await app.enqueue("email")
        with pytest.raises(InvalidInput, match="unknown kind 'emial'"):
            await app.enqueue("email")
        assert (await app.jobs.list(JobFilter())).jobs == []


async def test_an_after_hook_that_raises_is_logged_and_the_job_stays(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = rota.App("memory://")

    @app.after_enqueue
    def broken(spec: JobSpec, result: EnqueueResult) -> None:
        raise RuntimeError("audit sink down")

    async with app:
        with caplog.at_level(logging.ERROR, logger="rota.enqueue"):
            result = await app.enqueue("anything")
        assert (await app.jobs.get(result.job.id)).kind == "anything"
    [line] = [r.getMessage() for r in caplog.records if r.name == "rota.enqueue"]
    assert "broken raised RuntimeError: audit sink down" in line
    assert f"job {result.job.id} is enqueued" in line


async def test_the_http_api_enqueues_through_the_apps_hooks() -> None:
    app, written = hooked_app()
    async with app:
        api = create_app(app.database.client, settings=ApiSettings(), enqueuer=app.enqueuer)
        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
            created = await http.post("/api/jobs", json={"kind": "email", "payload": {"bulk": 1}})
            assert created.status_code == 201
            assert (created.json()["queue"], created.json()["payload"]) == (
                "bulk",
                {"bulk": 1, "tagged": True},
            )
            after = await http.post(
                "/api/jobs",
                json={"kind": "report", "depends_on": [created.json()["id"]]},
            )
            assert after.status_code == 201 and after.json()["payload"] == {"tagged": True}
            refused = await http.post(
                "/api/jobs", json={"kind": "email", "payload": {"forbidden": True}}
            )
            assert refused.status_code == 400
            assert refused.json() == {"error": "forbidden payloads are refused"}
        assert len((await app.jobs.list(JobFilter())).jobs) == 2
    assert [(kind, queue) for kind, _, queue in written] == [
        ("email", "bulk"),
        ("report", "default"),
    ]


CLI_APP = """
import dataclasses

import rota

app = rota.App({url!r})
written = []


@app.job("email")
def email(ctx, payload):
    return None


@app.before_enqueue
def tag(spec):
    if spec.payload.get("forbidden"):
        raise rota.InvalidInput("forbidden payloads are refused")
    return dataclasses.replace(spec, payload={{**spec.payload, "tagged": True}}, priority=9)


@app.after_enqueue
def record(spec, result):
    print("after_enqueue", result.job.id, flush=True)
"""


@pytest.fixture
def cli_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    module = f"hooked_{uuid.uuid4().hex[:8]}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / f"{module}.py").write_text(CLI_APP.format(url=sqlite_url(tmp_path / "app.db")))
    yield f"{module}:app"
    sys.modules.pop(module, None)


def test_rota_enqueue_with_app_passes_through_its_hooks(cli_app: str) -> None:
    ran = invoke("enqueue", "email", "--app", cli_app, "--payload", '{"to": "a"}', "--json")
    assert ran.code == 0, ran.err
    lines = ran.out.splitlines()
    job = json.loads(lines[-1])
    assert (job["payload"], job["priority"]) == ({"to": "a", "tagged": True}, 9)
    assert lines[0] == f"after_enqueue {job['id']}"
    child = invoke("enqueue", "email", "--app", cli_app, "--after", str(job["id"]), "--json")
    assert json.loads(child.out.splitlines()[-1])["payload"] == {"tagged": True}
    with pytest.raises(InvalidInput, match="forbidden payloads are refused"):
        invoke("enqueue", "email", "--app", cli_app, "--payload", '{"forbidden": true}')


async def test_the_mounted_dashboard_enqueues_through_the_apps_hooks() -> None:
    from rota.contrib.asgi import dashboard

    app, written = hooked_app()
    try:
        transport = httpx.ASGITransport(app=dashboard(app))
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
            created = await http.post("/api/jobs", json={"kind": "email", "payload": {"bulk": 1}})
            assert created.status_code == 201 and created.json()["queue"] == "bulk"
            refused = await http.post(
                "/api/jobs", json={"kind": "email", "payload": {"forbidden": 1}}
            )
            assert refused.status_code == 400
    finally:
        await app.close()
    assert [(kind, queue) for kind, _, queue in written] == [("email", "bulk")]
