"""Browser-test harness: the API served by uvicorn on a free loopback port in a thread, and a
headless Debian Chromium driven by Playwright (never a downloaded browser build)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import uvicorn

from rota.api import ApiSettings, create_app
from rota.client import Client
from rota.store.memory import MemoryStore

if TYPE_CHECKING:
    from playwright.async_api import Page

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ADMIN_TOKEN = "e2e-admin-token-0123"
#: A server that knows who acts: the dashboard signs in with ADMIN_TOKEN (see log_in).
AS_ADMIN = ApiSettings(auth_token=ADMIN_TOKEN)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
INSTALL_HINT = "install Debian's browser with `apt-get install -y chromium`"


@dataclass(frozen=True)
class Served:
    """A running dashboard: its base URL and the store behind it (shared across threads)."""

    url: str
    store: MemoryStore


@pytest.fixture
def chromium() -> Path:
    if not CHROMIUM.exists():
        if IN_CI:
            pytest.fail(f"CI=true but {CHROMIUM} is missing: {INSTALL_HINT}")
        pytest.skip(INSTALL_HINT)
    return CHROMIUM


@contextlib.contextmanager
def serve_asgi(app: Any, *, lifespan: str = "off") -> Iterator[str]:
    """``app`` served by uvicorn on 127.0.0.1:<free port> in a thread; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_config=None, log_level="warning", lifespan=lifespan, ws="none", access_log=False
    )
    server = uvicorn.Server(config)
    # Listening before uvicorn starts means early connections wait in the backlog: no polling
    # for "started" is needed.
    sock.listen(128)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    """create_app over a MemoryStore on real time, served on 127.0.0.1:<free port>.

    Parametrize indirectly with an ApiSettings to serve with other settings.
    """
    settings = getattr(request, "param", None) or ApiSettings()
    store = MemoryStore()
    with serve_asgi(create_app(Client(store), settings=settings)) as url:
        yield Served(url, store)


@pytest.fixture
async def browser(chromium: Path) -> AsyncIterator[object]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        instance = await playwright.chromium.launch(
            executable_path=str(chromium), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield instance
        finally:
            await instance.close()


async def log_in(tab: Page, served: Served, token: str = ADMIN_TOKEN) -> None:
    """Sign ``tab`` in to ``served`` through the dashboard's login form."""
    from playwright.async_api import expect

    await tab.goto(served.url + "/login")
    await tab.fill("input[name=token]", token)
    await tab.click("button[type=submit]")
    await expect(tab.locator("#nav a[data-view=audit]")).to_be_visible()


#: One row of the Audit view as it reads: identity, action, target, filter, jobs touched.
AuditRow = tuple[str, str, str, str, str]


async def expect_audit(tab: Page, served: Served, rows: list[AuditRow]) -> None:
    """Open the Audit view in ``tab`` and expect exactly ``rows`` there, newest first."""
    from playwright.async_api import expect

    await tab.goto(served.url + "/#/audit")
    shown = tab.locator("table.audit tbody tr")
    await expect(shown).to_have_count(len(rows))
    for column, name in enumerate(("identity", "action", "target", "filter", "count")):
        await expect(shown.locator(f".{name}")).to_have_text([row[column] for row in rows])
