"""rota mounted in a host ASGI app (rota.contrib.asgi): every URL stays below the prefix, the
login cookie is scoped to it, and the lifespan opens the App, runs workers and closes it."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.types import ASGIApp

from rota import App, JobContext, JobState
from rota.api import ApiSettings
from rota.contrib.asgi import dashboard, lifespan
from rota.domain.errors import InvalidInput

TOKEN = "mount-token-0123456789"


def jobs_app() -> App:
    app = App("memory://")

    @app.job("hello")
    async def hello(ctx: JobContext, payload: Any) -> None:
        return None

    return app


def host_with(app: App, settings: ApiSettings | None = None) -> FastAPI:
    host = FastAPI()

    @host.get("/")
    async def home() -> dict[str, str]:
        return {"host": "home"}

    host.mount("/rota", dashboard(app, settings=settings))
    return host


@pytest.fixture
async def app() -> AsyncIterator[App]:
    app = jobs_app()
    yield app
    await app.close()


@contextlib.asynccontextmanager
async def serving(asgi: ASGIApp) -> AsyncIterator[None]:
    """What a server does with an app's lifespan: startup, then shutdown, each awaited."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    task = asyncio.create_task(asgi(scope, inbox.get, outbox.put))  # type: ignore[arg-type]
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
        await task


def client(host: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=host), base_url="http://127.0.0.1")


async def test_the_dashboard_writes_every_url_below_its_prefix(app: App) -> None:
    async with client(host_with(app)) as api:
        page = await api.get("/rota/")
        assert page.status_code == 200
        assert 'data-root="/rota"' in page.text
        # Every URL the page names starts with the prefix (only in-page #links are relative).
        urls = re.findall(r'(?:href|src|action)="([^"]*)"', page.text)
        assert urls and all(url.startswith(("/rota/", "#")) for url in urls), urls
        assert int(page.headers["content-length"]) == len(page.content)
        assert (await api.get("/rota/static/app.js")).status_code == 200
        assert (await api.get("/rota/healthz")).json() == {"ok": True}
        created = await api.post("/rota/api/jobs", json={"kind": "hello"})
        assert created.status_code == 201
        listed = (await api.get("/rota/api/jobs")).json()
        assert [job["kind"] for job in listed["jobs"]] == ["hello"]
        # Only the kinds the App has handlers for are accepted.
        assert (await api.post("/rota/api/jobs", json={"kind": "other"})).status_code == 400
        # The host keeps its own routes.
        assert (await api.get("/")).json() == {"host": "home"}


async def test_the_login_stays_below_the_prefix_and_its_cookie_is_scoped_to_it(
    app: App,
) -> None:
    async with client(host_with(app, ApiSettings(auth_token=TOKEN))) as api:
        page = await api.get("/rota/", headers={"accept": "text/html"})
        assert page.status_code == 401
        assert 'action="/rota/login"' in page.text and 'href="/rota/login.css"' in page.text
        # What the login page needs is public below the prefix too.
        assert (await api.get("/rota/login.css")).status_code == 200
        assert (await api.get("/rota/healthz")).status_code == 200
        assert (await api.get("/rota/api/jobs")).status_code == 401

        login = await api.post("/rota/login", data={"token": TOKEN})
        assert login.status_code == 303 and login.headers["location"] == "/rota/"
        assert "Path=/rota;" in login.headers["set-cookie"] + ";"
        assert (await api.get("/rota/api/jobs")).status_code == 200

        logout = await api.post("/rota/logout")
        assert logout.headers["location"] == "/rota/login"
        assert "Path=/rota;" in logout.headers["set-cookie"] + ";"


async def test_served_at_the_root_the_urls_have_no_prefix(app: App) -> None:
    async with client(dashboard(app)) as api:
        page = await api.get("/")
        assert 'data-root=""' in page.text and 'src="/static/app.js"' in page.text


async def test_the_lifespan_opens_the_app_runs_its_workers_and_closes_it() -> None:
    app = jobs_app()
    ran = threading.Event()
    loops: list[asyncio.AbstractEventLoop] = []

    @app.job("signal")
    async def signal(ctx: JobContext, payload: Any) -> None:
        loops.append(asyncio.get_running_loop())
        ran.set()

    host = host_with(app)
    async with lifespan(app, workers=1, poll=0.05)(host):
        store = app.store
        async with client(host) as api:
            created = await api.post("/rota/api/jobs", json={"kind": "signal"})
            assert created.status_code == 201
        assert await asyncio.to_thread(ran.wait, 30)
        # Not on the host's loop: a request handler blocking it cannot stall a heartbeat.
        assert loops != [asyncio.get_running_loop()]
        job_id = created.json()["id"]
        # The handler has run; the completion may still be on its way.
        async with asyncio.timeout(30):
            while (await store.get(job_id)).state is not JobState.SUCCEEDED:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        assert [w.name for w in await store.list_workers()] != []
    # Shutdown stopped the worker gracefully: it deregistered itself.
    assert await store.list_workers() == []


async def test_a_fastapi_host_runs_the_lifespan_and_serves_the_dashboard() -> None:
    app = jobs_app()
    host = FastAPI(lifespan=lifespan(app))
    host.mount("/rota", dashboard(app))
    async with serving(host), client(host) as api:
        assert app.store is not None  # opened on startup, before any request
        assert (await api.post("/rota/api/jobs", json={"kind": "hello"})).status_code == 201
        stats = (await api.get("/rota/api/stats")).json()
        assert stats["counts"]["by_state"]["pending"] == 1


async def test_the_dashboard_served_on_its_own_opens_the_app_on_startup() -> None:
    app = jobs_app()
    async with serving(dashboard(app)), client(dashboard(app)) as api:
        assert app.store is not None
        assert (await api.get("/healthz")).json() == {"ok": True}


def test_a_negative_worker_count_is_refused() -> None:
    with pytest.raises(InvalidInput):
        lifespan(jobs_app(), workers=-1)
