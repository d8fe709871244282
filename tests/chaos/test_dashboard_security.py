"""T36-T39 on top of tests/unit/api and tests/e2e: the auth matrix as a checked-in table
(auth_matrix.json) compared against every route, CSRF attempts from a foreign origin in a real
Chromium, and secrets hygiene of a real `rota serve` process on PostgreSQL."""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import re
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from fastapi.routing import iter_route_contexts

from rota.api import ApiSettings, create_app
from rota.api.security import GUESS_WINDOW, SESSION_COOKIE, Authenticator
from rota.client import Client
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store.memory import MemoryStore
from rota.testing import FakeClock
from tests.e2e.conftest import Served, browser, chromium, served
from tests.support.postgres import Server
from tests.support.serve import serving

MATRIX = Path(__file__).with_name("auth_matrix.json")
TOKEN = "chaos-token-0123456789"
READ_TOKEN = "chaos-read-token-9876543210"
READ_BASIC = ("viewer", "chaos-viewer-password")
READ_BASIC_HEADER = base64.b64encode(":".join(READ_BASIC).encode()).decode()
PATH_VALUES = {"job_id": "1", "workflow_id": "1", "name": "app.js", "scope": "kind", "key": "email"}
_ = (browser, chromium, served)  # fixtures for the browser test


def routes(app: Any) -> list[tuple[str, str]]:
    found = []
    for route in iter_route_contexts(app.routes):
        if route.methods is None or route.path is None:
            continue
        found += [(m, route.path) for m in sorted(route.methods) if m != "HEAD"]
    return found


def classify(response: httpx.Response) -> str:
    if response.status_code == 401:
        return "401"
    if response.status_code == 403 and "read-only" in response.text:
        return "read-only"
    assert response.status_code < 500, response.text[:300]
    return "served" if response.status_code != 403 else "403"


async def test_the_auth_matrix_matches_the_checked_in_table_for_every_route() -> None:
    clock = FakeClock()
    table: dict[str, dict[str, str]] = json.loads(MATRIX.read_text())
    apps = {
        "token": create_app(
            Client(MemoryStore(clock=clock)),
            settings=ApiSettings(
                auth_token=TOKEN, read_token=READ_TOKEN, read_basic_auth=READ_BASIC
            ),
        ),
        "read_only": create_app(
            Client(MemoryStore(clock=clock)),
            settings=ApiSettings(auth_token=TOKEN, read_only=True),
        ),
    }
    served_routes = {f"{m} {p}" for m, p in routes(apps["token"])}
    assert served_routes == set(table), (
        f"routes missing from auth_matrix.json: {sorted(served_routes - set(table))}; "
        f"stale entries: {sorted(set(table) - served_routes)}"
    )
    expired = Authenticator(ApiSettings(auth_token=TOKEN)).session_value(
        clock.now() - timedelta(days=2)
    )
    identities = {
        "anonymous": ("token", {}),
        "bad_token": ("token", {"authorization": "Bearer not-the-token-123"}),
        "expired_session": ("token", {"cookie": f"{SESSION_COOKIE}={expired}"}),
        "valid_token": ("token", {"authorization": f"Bearer {TOKEN}"}),
        "read_only": ("read_only", {"authorization": f"Bearer {TOKEN}"}),
        # Read-only identities in the same server as the admin token: they see everything,
        # and every change is refused as read-only.
        "read_token": ("token", {"authorization": f"Bearer {READ_TOKEN}"}),
        "read_basic": ("token", {"authorization": f"Basic {READ_BASIC_HEADER}"}),
    }
    observed: dict[str, dict[str, str]] = {}
    for who, (which, headers) in identities.items():
        transport = httpx.ASGITransport(app=apps[which])
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as api:
            for key in sorted(table):
                method, template = key.split(" ", 1)
                path = re.sub(r"{(\w+)(:\w+)?}", lambda m: PATH_VALUES[m.group(1)], template)
                options: dict[str, Any] = {"headers": {"accept": "application/json", **headers}}
                if method == "POST":
                    options["json"] = {}
                response = await api.request(method, path, **options)
                clock.advance(GUESS_WINDOW)  # wrong guesses are throttled per window
                observed.setdefault(key, {})[who] = classify(response)
    wrong = {
        key: {who: (table[key][who], got) for who, got in by.items() if table[key][who] != got}
        for key, by in observed.items()
    }
    wrong = {key: diff for key, diff in wrong.items() if diff}
    assert wrong == {}, f"(expected, observed) per route and identity: {wrong}"


@contextlib.contextmanager
def attacker_site(html: str) -> Iterator[str]:
    """A page of another origin (127.0.0.1 on another port), served from a thread."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/attack"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.mark.browser
async def test_cross_origin_form_fetch_and_get_change_nothing_in_a_real_browser(
    browser: Any, served: Served
) -> None:
    [result] = await served.store.enqueue([JobSpec(kind="email", max_attempts=1)])
    [claimed] = await served.store.claim(
        "w", queues=["default"], limit=1, lease=timedelta(seconds=30)
    )
    await served.store.fail(claimed.lease, error="x", retry_in=timedelta(0), permanent=True)
    dead = result.job.id
    before = sum((await served.store.counts()).by_state.values())
    target = served.url
    attacker = f"""<!doctype html><html><body>
<form id="f1" method="POST" action="{target}/api/jobs" enctype="text/plain">
  <input name='{{"kind":"email","x":"' value='"}}'></form>
<form id="f2" method="POST" action="{target}/api/jobs/{dead}/retry"></form>
<iframe name="sink1"></iframe><iframe name="sink2"></iframe>
<img src="{target}/api/jobs/{dead}/retry">
<script>
  document.getElementById('f1').target = 'sink1';
  document.getElementById('f2').target = 'sink2';
  document.getElementById('f1').submit();
  document.getElementById('f2').submit();
  window.fetched = Promise.allSettled([
    fetch('{target}/api/jobs', {{method: 'POST', mode: 'no-cors',
      headers: {{'Content-Type': 'text/plain'}}, body: '{{"kind":"email"}}'}}),
    fetch('{target}/api/jobs/{dead}/retry', {{method: 'POST', mode: 'no-cors'}}),
    fetch('{target}/api/jobs/bulk/retry', {{method: 'POST', mode: 'no-cors',
      headers: {{'Content-Type': 'text/plain'}}, body: '{{}}'}}),
  ]).then(() => true);
</script></body></html>"""
    context = await browser.new_context()
    page = await context.new_page()
    seen: list[tuple[str, int]] = []
    page.on("response", lambda r: seen.append((r.url, r.status)))
    with attacker_site(attacker) as evil_url:  # another origin: same host, another port
        await page.goto(evil_url)
        await page.wait_for_function("window.fetched !== undefined")
        await page.evaluate("window.fetched")
        await page.wait_for_load_state("networkidle")
    await context.close()
    to_api = [(url, status) for url, status in seen if url.startswith(target)]
    assert to_api, "no request reached the API: the test proved nothing"
    assert all(status in (403, 405, 415) for _, status in to_api), to_api
    assert sum((await served.store.counts()).by_state.values()) == before
    assert (await served.store.get(dead)).state is JobState.DEAD


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_real_serve_process_keeps_token_and_dsn_password_out_of_logs_pages_metrics_and_argv(
    pg_server: Server, tmp_path: Path
) -> None:
    password = "Pg-S3cret-Chaos-771"
    payload_secret = "sk_live_PAYLOAD_5ecret_42"
    with pg_server.database() as url:
        dsn = url.replace("postgres@", f"postgres:{password}@", 1)  # trust auth ignores it
        env = {"ROTA_DATABASE_URL": dsn, "ROTA_AUTH_TOKEN": TOKEN, "ROTA_LOG_LEVEL": "debug"}
        with serving(tmp_path, "--workers", "1", env=env) as srv:
            auth = {"Authorization": f"Bearer {TOKEN}"}

            def call(path: str, body: Any = None, accept: str = "application/json") -> str:
                request = urllib.request.Request(
                    srv.url + path,
                    data=json.dumps(body).encode() if body is not None else None,
                    headers={**auth, "Content-Type": "application/json", "Accept": accept},
                    method="POST" if body is not None else "GET",
                )
                try:
                    with urllib.request.urlopen(request, timeout=10) as response:
                        return response.read().decode()
                except urllib.error.HTTPError as error:
                    return error.read().decode()

            created = json.loads(
                call("/api/jobs", {"kind": "email", "payload": {"api_key": payload_secret}})
            )
            job_id = created["id"]
            srv.wait_until(
                lambda: json.loads(call(f"/api/jobs/{job_id}"))["state"] in ("succeeded", "dead"),
                timeout=30,
                what="the job to finish",
            )
            detail = call(f"/api/jobs/{job_id}")
            assert payload_secret in detail  # the payload is the user's data: shown to them
            outputs = [
                call("/api/jobs"),
                call("/api/stats"),
                call("/api/workers"),
                call("/api/config"),
                call("/metrics", accept="text/plain"),
                call("/", accept="text/html"),
                call("/openapi.json"),
                call("/api/jobs/999999"),
            ]
            # An outage: the server's connections are cut, so errors with DSNs get logged.
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            outputs.append(call("/api/jobs"))
            srv.wait_until(lambda: "read_only" in call("/api/config"), timeout=30, what="recovery")
            argv = subprocess.run(
                ["ps", "-o", "args=", "-p", str(srv.process.pid)],
                capture_output=True,
                text=True,
                check=False,
            ).stdout
            environ_visible = argv
        log = srv.log.read_text()
    assert "DEBUG" in log, "the log was not captured at DEBUG"
    metrics = outputs[4]
    for secret in (TOKEN, password):
        for name, text in [
            ("log", log),
            ("argv", environ_visible),
            *[(f"out{i}", o) for i, o in enumerate(outputs)],
            ("detail", detail),
        ]:
            assert secret not in text, f"{secret!r} leaked into {name}"
    assert payload_secret not in log, "the payload's secret was logged"
    assert payload_secret not in metrics
    _ = os
