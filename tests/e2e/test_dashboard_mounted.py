"""The dashboard mounted in a FastAPI host under /rota, served by uvicorn with the host's
lifespan running a worker, in headless Chromium: every view works and every request the
page makes stays below the prefix."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from playwright.async_api import Request, expect

from rota import App, JobContext, Permanent
from rota.contrib.asgi import dashboard, lifespan
from tests.e2e.conftest import Watched, serve_asgi

pytestmark = pytest.mark.browser

PREFIX = "/rota"


@dataclass
class Host:
    url: str
    requests: list[str] = field(default_factory=list)

    def record(self, request: Request) -> None:
        self.requests.append(request.url)


@pytest.fixture
def host() -> Iterator[Host]:
    jobs = App("memory://")

    @jobs.job("hello")
    async def hello(ctx: JobContext, payload: Any) -> None:
        return None

    @jobs.job("boom")
    async def boom(ctx: JobContext, payload: Any) -> None:
        raise Permanent("boom, on purpose")

    web = FastAPI(lifespan=lifespan(jobs, workers=1, poll=0.05))

    # Routes of the host's own at the names the dashboard uses: a request that escaped the
    # prefix would land here and fail the page.
    @web.get("/api/{rest:path}")
    async def not_rota(rest: str) -> dict[str, str]:
        return {"host": rest}

    web.mount(PREFIX, dashboard(jobs))
    with serve_asgi(web, lifespan="on") as url:
        yield Host(url)


@pytest.fixture
def page(page: Watched, host: Host) -> Watched:
    """conftest's watched tab, every request it makes recorded."""
    page.page.on("request", host.record)
    return page


async def finished(api: httpx.AsyncClient, job_id: int) -> str:
    """The job's state once a worker has finished it (bounded by the test's timeout)."""
    while True:
        state: str = (await api.get(f"{PREFIX}/api/jobs/{job_id}")).json()["state"]
        if state in ("succeeded", "dead"):
            return state


async def test_the_mounted_dashboard_works_below_its_prefix(page: Watched, host: Host) -> None:
    async with httpx.AsyncClient(base_url=host.url) as api:
        ok = (await api.post(f"{PREFIX}/api/jobs", json={"kind": "hello"})).json()["id"]
        dead = (await api.post(f"{PREFIX}/api/jobs", json={"kind": "boom"})).json()["id"]
        assert await finished(api, ok) == "succeeded"
        assert await finished(api, dead) == "dead"

    response = await page.page.goto(host.url + PREFIX)  # redirected to the trailing slash
    assert response is not None and response.ok
    assert "unsafe-inline" not in response.headers["content-security-policy"]
    await expect(page.page.locator(".cards .card")).to_have_count(9)
    await expect(page.page.locator("#status")).to_have_text("live")

    await page.page.click("#nav a[data-view=jobs]")
    await expect(page.page.locator("table.jobs tbody tr")).to_have_count(2)
    await page.page.click(f'tr[data-job="{dead}"] a')
    await expect(page.page.locator("h1 .badge")).to_have_text("dead")
    await expect(page.page.locator("pre.last-error")).to_contain_text("boom, on purpose")
    await page.page.click("a.back")
    await expect(page.page.locator("table.jobs tbody tr")).to_have_count(2)
    await page.page.click("#nav a[data-view=overview]")
    await expect(page.page.locator(".cards .card")).to_have_count(9)
    await page.assert_clean()

    assert host.requests, "the page made no requests"
    below = (host.url + PREFIX, host.url + PREFIX + "/")
    outside = [url for url in host.requests if url != below[0] and not url.startswith(below[1])]
    assert outside == []
    assert any(url.startswith(host.url + PREFIX + "/api/") for url in host.requests)
