"""Security at the front door (TESTPLAN J, T36 and T37): auth on every route, read-only mode,
same-origin mutations, content types, headers, the bind check and the host allow-list."""

from __future__ import annotations

import base64
import re
from datetime import timedelta
from html.parser import HTMLParser
from importlib import resources

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts

from rota.api import ApiSettings, BindRefused, check_bind
from rota.api.security import CONTENT_SECURITY_POLICY, GUESS_WINDOW, MAX_GUESSES, PUBLIC_PATHS
from rota.domain.errors import InvalidInput
from rota.store.memory import MemoryStore
from rota.testing import FakeClock
from tests.unit.api.conftest import BASE_URL, TOKEN, MakeApp, asgi_client, dead_job, total_jobs

JSON = {"content-type": "application/json"}
PATH_VALUES = {"job_id": "1", "workflow_id": "1", "name": "app.js", "scope": "kind", "key": "email"}


def endpoints(app: FastAPI) -> list[tuple[str, str]]:
    """(method, concrete path) for every route the app serves, so new routes are covered."""
    found: list[tuple[str, str]] = []
    # iter_route_contexts also walks included routers (app.routes holds them unexpanded).
    for route in iter_route_contexts(app.routes):
        if route.methods is None or route.path is None:
            continue
        path = re.sub(r"{(\w+)(:\w+)?}", lambda m: PATH_VALUES[m.group(1)], route.path)
        found.extend((method, path) for method in sorted(route.methods) if method != "HEAD")
    assert len(found) > 15
    return found


def mutating(app: FastAPI) -> list[str]:
    return sorted(
        {path for method, path in endpoints(app) if method == "POST" and path.startswith("/api/")}
    )


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def call(api: httpx.AsyncClient, method: str, path: str, **headers: str) -> httpx.Response:
    if method == "POST":
        return await api.post(path, content=b"{}", headers={**JSON, **headers})
    return await api.request(method, path, headers=headers)


@pytest.mark.parametrize(
    ("settings", "good", "bad"),
    [
        pytest.param(ApiSettings(auth_token=TOKEN), f"Bearer {TOKEN}", [None, "Bearer wrong-token-123", f"Basic {TOKEN}", f"bearer{TOKEN}", basic("x", TOKEN)], id="token"),
        pytest.param(ApiSettings(basic_auth=("admin", "s3cret-pw")), basic("admin", "s3cret-pw"), [None, basic("admin", "wrong"), basic("root", "s3cret-pw"), "Basic !!!", "Basic " + base64.b64encode(b"admin").decode(), "Bearer s3cret-pw"], id="basic"),
    ],
)  # fmt: skip
async def test_every_route_requires_auth_except_healthz(
    make_app: MakeApp,
    store: MemoryStore,
    clock: FakeClock,
    settings: ApiSettings,
    good: str,
    bad: list[str | None],
) -> None:
    await dead_job(store)
    app = make_app(settings)
    async with asgi_client(app) as api:
        for method, path in endpoints(app):
            for credential in bad:
                headers = {"authorization": credential} if credential else {}
                response = await call(api, method, path, **headers)
                clock.advance(GUESS_WINDOW)  # each wrong guess in a window of its own
                if path in PUBLIC_PATHS:
                    assert response.status_code != 401
                    continue
                assert response.status_code == 401, (method, path, credential)
                assert response.json() == {"error": "authentication required"}
                assert "www-authenticate" in response.headers
            response = await call(api, method, path, authorization=good)
            assert response.status_code not in (401, 403), (method, path, response.text)
        assert (await api.get("/healthz")).json() == {"ok": True}
        # Undeclared paths do not reveal themselves before authentication either.
        assert (await api.get("/api/secret-route")).status_code == 401


async def test_settings_validate_and_hide_secrets() -> None:
    settings = ApiSettings(auth_token=TOKEN, basic_auth=("admin", "pw-hidden-1"))
    assert TOKEN not in repr(settings) and "pw-hidden-1" not in repr(settings)
    with pytest.raises(InvalidInput):
        ApiSettings(auth_token="short")
    with pytest.raises(InvalidInput):
        ApiSettings(basic_auth=("a:b", "pw"))


async def test_read_only_mode_refuses_every_mutation(make_app: MakeApp, store: MemoryStore) -> None:
    job = await dead_job(store)
    app = make_app(ApiSettings(read_only=True))
    async with asgi_client(app) as api:
        for path in mutating(app):
            response = await api.post(path, json={"kind": "email"})
            assert response.status_code == 403, path
            assert response.json() == {"error": "read-only mode"}
        assert (await api.get("/api/jobs")).status_code == 200
        assert (await api.get("/api/config")).json()["read_only"] is True
    assert (await store.get(job.id)).state.value == "dead"
    assert await total_jobs(store) == 1


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "https://evil.example"},
        {"origin": "http://127.0.0.1.evil.example"},
        {"origin": "http://127.0.0.1:8080"},
        {"origin": "https://127.0.0.1"},
        {"origin": "null"},
        {"origin": "null", "sec-fetch-site": "cross-site"},
        {"origin": "null", "sec-fetch-site": "none"},
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
        {"origin": "https://evil.example", "sec-fetch-site": "same-origin"},
    ],
)
async def test_cross_origin_posts_are_refused_and_change_nothing(
    app: FastAPI, store: MemoryStore, headers: dict[str, str]
) -> None:
    job = await dead_job(store)
    async with asgi_client(app) as api:
        for path in mutating(app):
            response = await api.post(path, json={"kind": "email"}, headers=headers)
            assert response.status_code == 403, (path, headers)
            assert response.json() == {"error": "cross-origin request refused"}
    assert (await store.get(job.id)).state.value == "dead"
    assert await total_jobs(store) == 1


@pytest.mark.parametrize(
    "headers",
    [{}, {"origin": "http://127.0.0.1"}, {"origin": "http://127.0.0.1:80"}, {"sec-fetch-site": "same-origin"}, {"sec-fetch-site": "none"}, {"origin": "null", "sec-fetch-site": "same-origin"}],
)  # fmt: skip
async def test_same_origin_and_scripted_posts_pass(
    api: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    response = await api.post("/api/jobs", json={"kind": "email"}, headers=headers)
    assert response.status_code == 201


async def test_form_and_text_plain_csrf_bodies_are_415(app: FastAPI, store: MemoryStore) -> None:
    job = await dead_job(store)
    async with asgi_client(app) as api:
        for path in mutating(app):
            for content_type in (
                "text/plain",
                "application/x-www-form-urlencoded",
                "multipart/form-data; boundary=b",
            ):
                response = await api.post(
                    path, content=b'{"kind": "email"}', headers={"content-type": content_type}
                )
                assert response.status_code == 415, (path, content_type)
    assert (await store.get(job.id)).state.value == "dead"
    assert await total_jobs(store) == 1


async def test_get_on_a_mutating_route_is_405(app: FastAPI, store: MemoryStore) -> None:
    job = await dead_job(store)
    async with asgi_client(app) as api:
        for path in mutating(app):
            if path in ("/api/jobs", "/api/schedules", "/api/limits"):
                continue  # GET lists them
            response = await api.get(path)
            assert response.status_code == 405, path
            assert response.json() == {"error": "method not allowed"}
    assert (await store.get(job.id)).state.value == "dead"


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/api/jobs", "GET, HEAD, POST"),
        ("DELETE", "/api/schedules", "GET, HEAD, POST"),
        ("OPTIONS", "/api/limits", "GET, HEAD, POST"),
        ("PATCH", "/api/jobs/1", "DELETE, GET, HEAD"),
        ("DELETE", "/api/jobs/count", "GET, HEAD"),
        ("GET", "/api/jobs/1/retry", "POST"),
    ],
)
async def test_405_allows_every_method_the_path_serves(
    api: httpx.AsyncClient, method: str, path: str, allow: str
) -> None:
    response = await api.request(method, path)
    assert response.status_code == 405
    assert response.headers["allow"] == allow


@pytest.mark.parametrize("path", ["/healthz", "/api/jobs", "/", "/openapi.json"])
async def test_head_answers_like_get_without_a_body(api: httpx.AsyncClient, path: str) -> None:
    got = await api.get(path)
    head = await api.head(path)
    assert head.status_code == got.status_code == 200
    assert head.content == b""
    assert head.headers["content-type"] == got.headers["content-type"]


@pytest.mark.parametrize(
    "path", ["/", "/api/jobs", "/static/app.js", "/nothing", "/openapi.json", "/metrics"]
)
async def test_security_headers_on_every_response(api: httpx.AsyncClient, path: str) -> None:
    response = await api.get(path, headers={"origin": "https://evil.example"})
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert (
        "unsafe-inline" not in CONTENT_SECURITY_POLICY
        and "unsafe-eval" not in CONTENT_SECURITY_POLICY
    )
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert response.headers["x-frame-options"] == "DENY"
    assert not any(name.startswith("access-control-") for name in response.headers)


async def test_cors_preflight_is_not_answered(api: httpx.AsyncClient) -> None:
    response = await api.options(
        "/api/jobs",
        headers={"origin": "https://evil.example", "access-control-request-method": "POST"},
    )
    assert response.status_code == 405
    assert not any(name.startswith("access-control-") for name in response.headers)


class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.problems: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {name for name, _ in attrs}
        if tag == "script" and "src" not in names:
            self.problems.append("inline script")
        if tag == "style":
            self.problems.append("inline style element")
        self.problems.extend(
            f"{tag}[{name}]" for name in names if name.startswith("on") or name == "style"
        )


def test_dashboard_markup_has_no_inline_code_and_js_never_parses_html() -> None:
    static = resources.files("rota.api").joinpath("static")
    for entry in static.iterdir():
        text = entry.read_text(encoding="utf-8")
        if entry.name.endswith(".html"):
            parser = _Markup()
            parser.feed(text)
            assert parser.problems == [], entry.name
        if entry.name.endswith(".js"):
            for sink in (
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
                "new Function",
            ):
                assert sink not in text, (entry.name, sink)


def test_check_bind() -> None:
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"):
        check_bind(host, ApiSettings())
    for host in ("0.0.0.0", "::", "192.168.1.10", "example.com", ""):
        with pytest.raises(BindRefused, match="without authentication"):
            check_bind(host, ApiSettings())
        check_bind(host, ApiSettings(auth_token=TOKEN))
        check_bind(host, ApiSettings(basic_auth=("admin", "pw")))
    assert issubclass(BindRefused, InvalidInput)


async def test_unauthenticated_server_answers_only_loopback_host_names(make_app: MakeApp) -> None:
    """DNS rebinding: a page on evil.example resolving to 127.0.0.1 sends Host: evil.example."""
    app = make_app()
    async with asgi_client(app) as api:
        for host in ("evil.example", "evil.example:8000", "10.0.0.1"):
            response = await api.get("/api/jobs", headers={"host": host})
            assert response.status_code == 400, host
            assert response.json() == {"error": "host not allowed"}
        for host in ("localhost:8000", "127.0.0.1", "[::1]:9000"):
            assert (await api.get("/api/jobs", headers={"host": host})).status_code == 200
    async with asgi_client(make_app(ApiSettings(allowed_hosts=("rota.internal",)))) as api:
        assert (await api.get("/healthz", headers={"host": "rota.internal:443"})).status_code == 200
        assert (await api.get("/healthz", headers={"host": "localhost"})).status_code == 400
    async with asgi_client(make_app(ApiSettings(auth_token=TOKEN))) as api:
        response = await api.get("/healthz", headers={"host": "rota.example.com"})
        assert response.status_code == 200


async def test_token_login_sets_an_httponly_strict_cookie_that_is_not_the_token(
    make_app: MakeApp, clock: FakeClock
) -> None:
    app = make_app(ApiSettings(auth_token=TOKEN, session_seconds=3600))
    async with asgi_client(app) as api:
        page = await api.get("/", headers={"accept": "text/html"})
        assert page.status_code == 401
        assert '<form method="post" action="/login">' in page.text
        assert (await api.get("/login.css")).status_code == 200
        assert (await api.get("/static/style.css")).status_code == 401

        wrong = await api.post("/login", data={"token": "nope-nope-nope"})
        assert wrong.status_code == 401 and "Wrong token" in wrong.text
        assert "set-cookie" not in wrong.headers

        cross = await api.post(
            "/login", data={"token": TOKEN}, headers={"origin": "https://evil.example"}
        )
        assert cross.status_code == 403

        login = await api.post("/login", data={"token": TOKEN})
        assert login.status_code == 303 and login.headers["location"] == "/"
        cookie = login.headers["set-cookie"]
        assert TOKEN not in cookie
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
        assert "Secure" not in cookie  # plain http here; https requests get Secure

        assert (await api.get("/api/jobs")).status_code == 200
        assert (await api.get("/")).status_code == 200
        assert (await api.get("/api/config")).json()["login"] is True
        # The cookie is an ambient credential: cross-origin mutations stay refused.
        forged = await api.post(
            "/api/jobs", json={"kind": "email"}, headers={"origin": "https://evil.example"}
        )
        assert forged.status_code == 403

        clock.advance(timedelta(seconds=3601))
        assert (await api.get("/api/jobs")).status_code == 401

        tampered = login.headers["set-cookie"].split(";")[0].split("=", 1)[1]
        expires, _, mac = tampered.partition(".")
        api.cookies.clear()
        api.cookies.set("rota_session", f"{int(expires) + 10**6}.{mac}")
        assert (await api.get("/api/jobs")).status_code == 401


async def test_login_over_https_marks_the_cookie_secure(make_app: MakeApp) -> None:
    app = make_app(ApiSettings(auth_token=TOKEN))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://127.0.0.1") as api:
        login = await api.post("/login", data={"token": TOKEN})
        assert "Secure" in login.headers["set-cookie"]


async def test_failed_logins_are_throttled(make_app: MakeApp, clock: FakeClock) -> None:
    async with asgi_client(make_app(ApiSettings(auth_token=TOKEN))) as api:
        for _ in range(10):
            assert (await api.post("/login", data={"token": "wrong-wrong"})).status_code == 401
        assert (await api.post("/login", data={"token": "wrong-again"})).status_code == 429
        clock.advance(timedelta(seconds=61))
        assert (await api.post("/login", data={"token": "wrong-again"})).status_code == 401


async def test_basic_auth_has_no_login_form(make_app: MakeApp) -> None:
    async with asgi_client(make_app(ApiSettings(basic_auth=("admin", "pw-1234")))) as api:
        page = await api.get("/", headers={"accept": "text/html"})
        assert page.status_code == 401
        assert page.headers["www-authenticate"].startswith("Basic ")
        assert (await api.post("/login", data={"token": "x"})).status_code == 404


def from_address(app: FastAPI, address: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url=BASE_URL)


async def test_wrong_logins_lock_out_their_address_never_a_right_token(
    make_app: MakeApp, clock: FakeClock
) -> None:
    app = make_app(ApiSettings(auth_token=TOKEN))
    async with from_address(app, "10.0.0.66") as attacker, from_address(app, "10.0.0.7") as user:
        for n in range(MAX_GUESSES):
            wrong = await attacker.post("/login", data={"token": f"guess-{n:04}-x"})
            assert wrong.status_code == 401
        assert (await attacker.post("/login", data={"token": "guess-more-x"})).status_code == 429
        assert (await user.post("/login", data={"token": TOKEN})).status_code == 303
        clock.advance(GUESS_WINDOW + timedelta(seconds=1))
        assert (await attacker.post("/login", data={"token": "guess-late-x"})).status_code == 401


async def test_a_right_credential_from_a_throttled_address_is_accepted(
    make_app: MakeApp,
) -> None:
    """Everyone behind one proxy or NAT (or every local client) shares an address: a
    stranger's wrong guesses from it must not lock out whoever holds the right credential,
    while the stranger's further guesses keep getting 429 (issue 41, point 5)."""
    settings = ApiSettings(auth_token=TOKEN, basic_auth=("admin", "pw-1234-secret"))
    app = make_app(settings)
    good_basic = basic("admin", "pw-1234-secret")
    async with from_address(app, "127.0.0.1") as shared:
        for n in range(MAX_GUESSES + 1):
            await shared.get("/api/jobs", headers={"authorization": f"Bearer guess-{n:04}"})
        for guess in (f"Bearer {TOKEN}x", basic("admin", "nope"), "Bearer another-guess"):
            refused = await shared.get("/api/jobs", headers={"authorization": guess})
            assert refused.status_code == 429 and refused.headers["retry-after"] == "60"
        for good in (f"Bearer {TOKEN}", good_basic):
            right = await shared.get("/api/jobs", headers={"authorization": good})
            assert right.status_code == 200, good
        assert (await shared.post("/login", data={"token": "wrong-wrong"})).status_code == 429
        login = await shared.post("/login", data={"token": TOKEN})
        assert login.status_code == 303
        assert (await shared.get("/api/jobs")).status_code == 200, "the session works too"


@pytest.mark.parametrize("scheme", ["Bearer", "Basic"])
async def test_api_credential_guesses_are_throttled_like_logins(
    make_app: MakeApp, clock: FakeClock, scheme: str
) -> None:
    settings = ApiSettings(auth_token=TOKEN, basic_auth=("admin", "pw-1234-secret"))
    app = make_app(settings)
    good = (
        f"Bearer {TOKEN}"
        if scheme == "Bearer"
        else "Basic " + base64.b64encode(b"admin:pw-1234-secret").decode()
    )
    async with from_address(app, "10.0.0.66") as attacker, from_address(app, "10.0.0.7") as user:
        for n in range(MAX_GUESSES):
            guess = f"Bearer guess-{n:04}" if scheme == "Bearer" else f"Basic {n:04}Zm9vOmJhcg=="
            response = await attacker.get("/api/jobs", headers={"authorization": guess})
            assert response.status_code == 401
        wrong = "Bearer guess-last" if scheme == "Bearer" else "Basic bGFzdDpndWVzcw=="
        refused = await attacker.get("/api/jobs", headers={"authorization": wrong})
        assert refused.status_code == 429 and refused.headers["retry-after"] == "60"
        assert (await user.get("/api/jobs", headers={"authorization": good})).status_code == 200


async def test_guesses_sharing_a_prefix_are_throttled_across_addresses(
    make_app: MakeApp,
) -> None:
    app = make_app(ApiSettings(auth_token=TOKEN))
    for n in range(MAX_GUESSES):
        async with from_address(app, f"10.1.0.{n}") as client:
            stale = await client.get("/api/jobs", headers={"authorization": f"Bearer sta-{n}"})
            assert stale.status_code == 401
    async with from_address(app, "10.2.0.1") as client:
        again = await client.get("/api/jobs", headers={"authorization": "Bearer sta-again"})
        assert again.status_code == 429
        right = await client.get("/api/jobs", headers={"authorization": f"Bearer {TOKEN}"})
        assert right.status_code == 200, "a right token is never locked out by others' guesses"


async def test_logout_ends_the_session_on_the_server(make_app: MakeApp) -> None:
    async with asgi_client(make_app(ApiSettings(auth_token=TOKEN))) as api:
        assert (await api.post("/login", data={"token": TOKEN})).status_code == 303
        cookie = api.cookies["rota_session"]
        assert (await api.get("/api/jobs")).status_code == 200
        assert (await api.post("/logout")).status_code == 303
        api.cookies.set("rota_session", cookie)  # a copy of the cookie kept somewhere
        assert (await api.get("/api/jobs")).status_code == 401
        assert (await api.post("/login", data={"token": TOKEN})).status_code == 303
        assert (await api.get("/api/jobs")).status_code == 200, "a new login works again"


@pytest.mark.parametrize("token", ["", " " * 12, "\t\n" * 5, " padded-token-1", "padded-token-1\n"])
def test_blank_or_padded_auth_tokens_are_refused(token: str) -> None:
    with pytest.raises(InvalidInput, match="auth token"):
        ApiSettings(auth_token=token)


@pytest.mark.parametrize("basic", [("   ", "pw-1234"), ("admin", "   ")])
def test_blank_basic_auth_is_refused(basic: tuple[str, str]) -> None:
    with pytest.raises(InvalidInput):
        ApiSettings(basic_auth=basic)
