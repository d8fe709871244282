"""Browser-test harness: the API served by uvicorn on a free loopback port in a thread, a
headless Debian Chromium driven by Playwright (never a downloaded browser build), and a watched
tab that fails a test on any console error, page error, CSP violation or script run from data."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import uvicorn

from rota.api import ApiSettings, create_app
from rota.client import Client
from rota.domain.job import JobSpec
from rota.store.memory import MemoryStore

if TYPE_CHECKING:
    from playwright.async_api import Browser, ConsoleMessage, Page

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

#: Markup that runs script if it is ever rendered as HTML (T38); ``window.__x`` says it ran.
XSS = [
    "<script>window.__x=1</script>",
    '"onmouseover="window.__x=3',
    "<img src=x onerror=window.__x=2>",
    "javascript:window.__x=4",
    "<svg onload=window.__x=5></svg>",
    "</script><script>window.__x=6</script>",
]
HOSTILE = " | ".join(XSS)

# Runs before any page script; CDP-injected, so the page's CSP does not apply to it.
WATCH_CSP = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(e.violatedDirective + " " + e.blockedURI);
});
"""


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


@contextlib.contextmanager
def serve_store(store: MemoryStore, settings: ApiSettings, **app_options: Any) -> Iterator[Served]:
    """``store`` served by create_app with ``settings`` and ``app_options`` (kinds=...)."""
    with serve_asgi(create_app(Client(store), settings=settings, **app_options)) as url:
        yield Served(url, store)


#: Where the tests save the pictures of the docs page "The dashboard" (docs/dashboard.md) and
#: of the README: each is taken by the test that checks what it shows, so none is ever stale.
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
#: The size of the window the pictures are taken in.
SCREEN = {"width": 1280, "height": 800}


async def screenshot(tab: Page, name: str, *, full_page: bool = False) -> Path:
    """Save what ``tab`` shows as docs/screenshots/NAME.png (the window, or the whole page)."""
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    await tab.set_viewport_size(SCREEN)
    await tab.screenshot(path=str(path), full_page=full_page, animations="disabled")
    return path


class Watched:
    """A tab and what went wrong in it: console errors and warnings, page errors."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.problems: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.problems.append(f"console {message.type}: {message.text}")

    async def assert_clean(self) -> None:
        violations = await self.page.evaluate("window.__cspViolations")
        assert violations == []
        assert self.problems == []
        assert await self.page.evaluate("typeof window.__x") == "undefined"


@pytest.fixture
def context_options() -> dict[str, Any]:
    """Options of the browser context ``page`` opens; override in a module to change them."""
    return {}


@pytest.fixture
async def page(browser: Browser, context_options: dict[str, Any]) -> AsyncIterator[Watched]:
    """A watched tab in a fresh browser context (no cookies), CSP violations recorded."""
    context = await browser.new_context(**context_options)
    await context.add_init_script(WATCH_CSP)
    tab = await context.new_page()
    try:
        yield Watched(tab)
    finally:
        await context.close()


async def same_document(tab: Page) -> None:
    """Mark the loaded document; ``assert_same_document`` fails after any reload."""
    await tab.evaluate("window.__sameDocument = true")


async def assert_same_document(tab: Page) -> None:
    assert await tab.evaluate("window.__sameDocument") is True, "the page reloaded"


async def dead_job(store: MemoryStore, **spec: Any) -> int:
    """A job (``spec`` as for JobSpec) claimed and failed for good, with hostile error text."""
    spec.setdefault("priority", 100)
    [result] = await store.enqueue([JobSpec(**spec)])
    [claimed] = await store.claim(
        "worker-1", queues=[result.job.queue], limit=1, lease=timedelta(seconds=30)
    )
    await store.fail(
        claimed.lease,
        error=f"failed: {HOSTILE}",
        traceback=f"Traceback\n{HOSTILE}",
        retry_in=timedelta(0),
        permanent=True,
    )
    return claimed.id


@pytest.fixture
async def browser(chromium: Path) -> AsyncIterator[Browser]:
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
