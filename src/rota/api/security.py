"""The API's front door: host check, authentication, same-origin and read-only rules, limits
and security headers, applied to every HTTP request before any route runs.

Order matters: a request from a host we do not serve is refused before anything else (DNS
rebinding), an unauthenticated one before it can learn which routes exist, and a mutation is
checked for its origin, the read-only switch and its content type before its body is read.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from starlette.datastructures import Headers
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rota.api.body import JSON_MEDIA_TYPE, BodyTooLarge, media_type
from rota.api.credentials import MAX_PROXY_USER_LENGTH, Role
from rota.api.settings import ApiSettings
from rota.domain.errors import InvalidInput

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = tuple(
    (name.encode(), value.encode())
    for name, value in (
        ("content-security-policy", CONTENT_SECURITY_POLICY),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("x-frame-options", "DENY"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cross-origin-resource-policy", "same-origin"),
    )
)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Reachable without credentials: the liveness probe and what the login page needs.
PUBLIC_PATHS = frozenset({"/healthz", "/login", "/login.css"})
SESSION_COOKIE = "rota_session"
_SESSION_CONTEXT = b"rota dashboard session v1"

#: ``(message, status, root)``: the login page, its URLs below ``root`` (see ``root_path``).
LoginPage = Callable[[str | None, int, str], HTMLResponse]
#: Wrong credentials one client address (or one token prefix) may present per window before
#: it is answered 429 until the window passes.
MAX_GUESSES = 10
GUESS_WINDOW = timedelta(minutes=1)
#: How much of a wrong credential keys its own count: a client with a stale token behind many
#: addresses is slowed too, and nothing secret is kept (a prefix this short names no token).
GUESS_PREFIX = 4
#: Addresses and prefixes tracked at once; the oldest are forgotten first.
MAX_TRACKED = 10_000


class GuessThrottle:
    """Failed credentials in a sliding window of the store's clock, counted per client address
    and per prefix of the credential presented.

    Only wrong credentials are refused: a correct one is accepted from any address, blocked or
    not, so no stranger (nor a neighbour behind the same proxy or NAT) can lock a user out.
    The throttle slows guessing and keeps it out of the way; it cannot make a short secret
    safe, which is why tokens are long random strings.
    """

    def __init__(self) -> None:
        self._failures: OrderedDict[str, deque[datetime]] = OrderedDict()

    def _recent(self, key: str, now: datetime) -> int:
        failures = self._failures.get(key)
        if failures is None:
            return 0
        while failures and (now - failures[0] > GUESS_WINDOW or failures[0] > now):
            failures.popleft()
        if not failures:
            del self._failures[key]
            return 0
        return len(failures)

    def address_blocked(self, address: str, now: datetime) -> bool:
        return self._recent(f"a:{address}", now) >= MAX_GUESSES

    def prefix_blocked(self, credential: str, now: datetime) -> bool:
        return self._recent(f"p:{credential[:GUESS_PREFIX]}", now) >= MAX_GUESSES

    def failed(self, address: str, credential: str, now: datetime) -> None:
        for key in (f"a:{address}", f"p:{credential[:GUESS_PREFIX]}"):
            self._failures.setdefault(key, deque()).append(now)
            self._failures.move_to_end(key)
        while len(self._failures) > MAX_TRACKED:
            self._failures.popitem(last=False)


def client_address(scope: Scope) -> str:
    """The peer's address (behind a proxy: the proxy's)."""
    client = scope.get("client")
    return str(client[0]) if client else ""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request comes from, as the audit log names them, and their role: a named
    credential's name, ``proxy:<user>`` (a trusted proxy's header), ``token:admin`` and
    ``token:read`` (ROTA_AUTH_TOKEN, ROTA_READ_TOKEN), ``basic:<user>`` (ROTA_BASIC_AUTH,
    ROTA_READ_BASIC_AUTH), or ``anonymous`` on a server without authentication."""

    identity: str
    role: Role

    @property
    def can_write(self) -> bool:
        return self.role is not Role.READ_ONLY


ANONYMOUS = Principal("anonymous", Role.ADMIN)
ADMIN_TOKEN = Principal("token:admin", Role.ADMIN)
READ_TOKEN = Principal("token:read", Role.READ_ONLY)


def admin_only(method: str, path: str) -> bool:
    """Whether a change needs the admin role: what deletes jobs or changes configuration
    (limits and schedules); an operator may do every other change."""
    if method == "DELETE" or path == "/api/jobs/bulk/delete":
        return True
    if path == "/api/limits" or path.startswith("/api/limits/"):
        return True
    return path == "/api/schedules" or (
        path.startswith("/api/schedules/") and path.endswith(("/edit", "/delete"))
    )


#: Where the security middleware leaves the request's Principal in the ASGI scope.
PRINCIPAL_KEY = "rota.principal"


def principal_of(scope: Scope) -> Principal:
    """The Principal the security middleware authenticated for this request."""
    principal = scope.get(PRINCIPAL_KEY)
    return principal if isinstance(principal, Principal) else ANONYMOUS


class Authenticator:
    """Checks credentials in constant time; issues and verifies dashboard session cookies.

    A session cookie holds an expiry and an HMAC over it, keyed by a key derived from the token
    it was opened with (the admin or the read token): the token itself never leaves the server,
    a session keeps its token's rights, and changing a token ends every session opened with it.
    """

    def __init__(self, settings: ApiSettings) -> None:
        self.settings = settings
        self._tokens: list[tuple[bytes, Principal]] = [
            (token.encode(), principal)
            for token, principal in (
                (settings.auth_token, ADMIN_TOKEN),
                (settings.read_token, READ_TOKEN),
                *((c.token, Principal(c.name, c.role)) for c in settings.credentials),
            )
            if token is not None
        ]
        self._session_keys = [
            (hmac.new(token, _SESSION_CONTEXT, hashlib.sha256).digest(), principal)
            for token, principal in self._tokens
        ]
        self._basic = [
            (user.encode(), password.encode(), Principal(f"basic:{user}", role))
            for basic, role in (
                (settings.basic_auth, Role.ADMIN),
                (settings.read_basic_auth, Role.READ_ONLY),
            )
            if basic is not None
            for user, password in [basic]
        ] + [
            (c.user.encode(), c.password.encode(), Principal(c.name, c.role))
            for c in settings.credentials
            if c.user is not None and c.password is not None
        ]
        #: Sessions ended by a logout, by cookie value, with their expiry (epoch seconds).
        self._ended: dict[str, int] = {}
        self.throttle = GuessThrottle()

    @property
    def enabled(self) -> bool:
        return self.settings.has_auth

    @property
    def login_enabled(self) -> bool:
        """Whether the dashboard logs in with a token form (basic auth uses the browser's)."""
        return bool(self._session_keys)

    def token_principal(self, candidate: str) -> Principal | None:
        """Whose token ``candidate`` is (every token is compared, in constant time)."""
        raw = candidate.encode("utf-8", "surrogateescape")
        found = None
        for token, principal in self._tokens:
            if hmac.compare_digest(raw, token):
                found = principal
        return found

    def proxy_principal(self, address: str, headers: Headers) -> Principal | None:
        """Who the trusted proxy says this request is from: only when the request's peer is
        one of the proxy's addresses and its header names a printable user."""
        proxy = self.settings.trusted_proxy
        if proxy is None or not proxy.trusts(address):
            return None
        user = (headers.get(proxy.header) or "").strip()
        if not user or len(user) > MAX_PROXY_USER_LENGTH or not user.isprintable():
            return None
        return Principal(f"proxy:{user}", proxy.role_of(user))

    def token_matches(self, candidate: str) -> bool:
        return self.token_principal(candidate) is not None

    def header_principal(self, authorization: str | None) -> Principal | None:
        """Whose token or basic credentials an Authorization header carries, if anyone's."""
        if not authorization:
            return None
        scheme, _, value = authorization.partition(" ")
        scheme = scheme.lower()
        value = value.strip()
        if scheme == "bearer":
            return self.token_principal(value)
        if scheme == "basic" and self._basic:
            try:
                decoded = base64.b64decode(value.encode("ascii"), validate=True)
            except (UnicodeError, binascii.Error, ValueError):
                return None
            user, sep, password = decoded.partition(b":")
            found = None
            for known_user, known_password, principal in self._basic:
                user_ok = hmac.compare_digest(user, known_user)
                password_ok = hmac.compare_digest(password, known_password)
                if sep and user_ok and password_ok:
                    found = principal
            return found
        return None

    def header_matches(self, authorization: str | None) -> bool:
        """Whether an Authorization header carries a configured token or basic credentials."""
        return self.header_principal(authorization) is not None

    def session_value(self, now: datetime, principal: Principal = ADMIN_TOKEN) -> str:
        """A fresh session cookie value for ``principal``'s token, valid for
        ``session_seconds`` from ``now``: its expiry, a random id (so each login can be ended
        alone) and a MAC over both."""
        key = next((k for k, p in self._session_keys if p == principal), None)
        if key is None:
            raise InvalidInput("sessions need a token")
        expires = int(now.timestamp()) + self.settings.session_seconds
        session = f"{expires}.{secrets.token_urlsafe(12)}"
        return f"{session}.{_mac(key, session).decode()}"

    def session_principal(self, value: str | None, now: datetime) -> Principal | None:
        """Whose live session ``value`` is: None when expired, ended, or not ours."""
        issued = self._session_expiry(value)
        if issued is None or now.timestamp() >= issued[0]:
            return None
        assert value is not None
        return None if value in self._ended else issued[1]

    def session_valid(self, value: str | None, now: datetime) -> bool:
        return self.session_principal(value, now) is not None

    def end_session(self, value: str | None, now: datetime) -> None:
        """Logout: the session is refused from now on, though its cookie may live on. Ended
        sessions are remembered until they would have expired anyway."""
        issued = self._session_expiry(value)
        self._ended = {v: e for v, e in self._ended.items() if e > now.timestamp()}
        if value is not None and issued is not None and issued[0] > now.timestamp():
            self._ended[value] = issued[0]

    def _session_expiry(self, value: str | None) -> tuple[int, Principal] | None:
        """The expiry and owner of a session value we issued (MAC checked), else None."""
        if not self._session_keys or not value:
            return None
        session, _, mac = value.rpartition(".")
        expires_text, _, _ = session.partition(".")
        if not (expires_text.isascii() and expires_text.isdigit()) or len(expires_text) > 12:
            return None
        presented = mac.encode("utf-8", "surrogateescape")
        found = None
        for key, principal in self._session_keys:
            if hmac.compare_digest(presented, _mac(key, session)):
                found = principal
        return (int(expires_text), found) if found is not None else None

    def challenge(self) -> dict[str, str]:
        scheme = "Basic" if self._basic else "Bearer"
        return {"WWW-Authenticate": f'{scheme} realm="rota", charset="UTF-8"'}


def _mac(key: bytes, session: str) -> bytes:
    message = session.encode("utf-8", "surrogateescape")
    return hmac.new(key, message, hashlib.sha256).hexdigest().encode()


def split_host(host_header: str) -> tuple[str, str | None]:
    """``(name, port)`` of a Host header value; IPv6 names keep their brackets."""
    host = host_header.strip().lower()
    if host.startswith("["):
        name, _, rest = host.partition("]")
        port = rest[1:] if rest.startswith(":") else None
        return name + "]", port or None
    name, _, port = host.partition(":")
    return name, port or None


def normalized_origin(scheme: str, host_header: str) -> str:
    """``scheme://host[:port]`` with the scheme's default port left out."""
    name, port = split_host(host_header)
    default = {"http": "80", "https": "443"}.get(scheme)
    return f"{scheme}://{name}" if port in (None, default) else f"{scheme}://{name}:{port}"


def is_same_origin(scheme: str, host_header: str, headers: Headers) -> bool:
    """The CSRF rule for mutations: a present Origin must be ours; without one, a present
    Sec-Fetch-Site must say same-origin or none; requests with neither (scripts) pass.

    ``Origin: null`` is what a browser sends for a same-origin form POST from a page with
    ``Referrer-Policy: no-referrer`` (ours), but also from sandboxed frames and data: URLs, so
    it is trusted only together with ``Sec-Fetch-Site: same-origin``, which pages cannot forge.
    """
    origin = headers.get("origin")
    fetch_site = headers.get("sec-fetch-site")
    if origin is not None and origin.strip().lower() == "null":
        return fetch_site is not None and fetch_site.strip().lower() == "same-origin"
    if origin is not None:
        origin_scheme, sep, origin_host = origin.strip().lower().partition("://")
        if not sep or "/" in origin_host:
            return False
        return normalized_origin(origin_scheme, origin_host) == normalized_origin(
            scheme, host_header
        )
    return fetch_site is None or fetch_site.strip().lower() in ("same-origin", "none")


class SecurityMiddleware:
    """Pure ASGI middleware: refusals are JSON (or the login page), headers go on everything."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        settings: ApiSettings,
        authenticator: Authenticator,
        now: Callable[[], Awaitable[datetime]],
        login_page: LoginPage,
    ) -> None:
        self.app = app
        self.settings = settings
        self.auth = authenticator
        self.now = now
        self.login_page = login_page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _with_security_headers(send)
        refusal = await self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, _limited(receive, self.settings.max_body_bytes), send)

    async def _refusal(self, scope: Scope) -> Response | None:
        headers = Headers(scope=scope)
        path = route_path(scope)
        method: str = scope["method"]
        host_header = headers.get("host") or _server_host(scope)
        name, _ = split_host(host_header)
        if not self.settings.host_allowed(name.removeprefix("[").removesuffix("]")):
            return _refuse(400, "host not allowed")
        if self.auth.enabled and path not in PUBLIC_PATHS:
            guess = await self._guess_refusal(scope, headers)
            if guess is not None:
                return guess
        principal = ANONYMOUS
        if self.auth.enabled and path not in PUBLIC_PATHS:
            found = await self._authenticated(scope, headers)
            if found is None:
                if (
                    self.auth.login_enabled
                    and method == "GET"
                    and "text/html" in headers.get("accept", "")
                ):
                    return self.login_page(None, 401, root_path(scope))
                return _refuse(401, "authentication required", self.auth.challenge())
            principal = found
        scope[PRINCIPAL_KEY] = principal
        if method not in SAFE_METHODS:
            if not is_same_origin(scope.get("scheme", "http"), host_header, headers):
                return _refuse(403, "cross-origin request refused")
            if self.settings.read_only and path.startswith("/api/"):
                return _refuse(403, "read-only mode")
            if not principal.can_write and path.startswith("/api/"):
                return _refuse(
                    403, f"read-only identity: {principal.identity} may read but change nothing"
                )
            if principal.role is Role.OPERATOR and admin_only(method, path):
                return _refuse(
                    403,
                    f"operator identity: {principal.identity} may not delete jobs or change "
                    "limits and schedules (admin only)",
                )
            content_type = headers.get("content-type")
            if (
                path.startswith("/api/")
                and content_type
                and media_type(content_type)[0] != JSON_MEDIA_TYPE
            ):
                return _refuse(415, "Content-Type must be application/json")
        declared = headers.get("content-length")
        if (
            declared is not None
            and declared.isascii()
            and declared.isdigit()
            and int(declared) > self.settings.max_body_bytes
        ):
            return _refuse(413, f"request body is larger than {self.settings.max_body_bytes} bytes")
        return None

    async def _guess_refusal(self, scope: Scope, headers: Headers) -> Response | None:
        """Bearer and basic credentials are throttled like logins: a wrong one is counted and
        answered 401, or 429 once its address (or token prefix) presented too many; a right one
        always passes."""
        authorization = headers.get("authorization")
        if not authorization:
            return None
        # A right credential is never refused, whoever shares its address: the throttle only
        # answers wrong ones.
        if self.auth.header_matches(authorization):
            return None
        now = await self.now()
        address = client_address(scope)
        if self.auth.throttle.address_blocked(address, now):
            return too_many_guesses()
        credential = authorization.partition(" ")[2].strip()
        blocked = self.auth.throttle.prefix_blocked(credential, now)
        self.auth.throttle.failed(address, credential, now)
        if blocked:
            return too_many_guesses()
        return _refuse(401, "authentication required", self.auth.challenge())

    async def _authenticated(self, scope: Scope, headers: Headers) -> Principal | None:
        principal = self.auth.header_principal(headers.get("authorization"))
        if principal is None:
            principal = self.auth.proxy_principal(client_address(scope), headers)
        if principal is not None:
            return principal
        if self.auth.login_enabled:
            cookie = _cookie(headers.get("cookie"), SESSION_COOKIE)
            if cookie is not None:
                return self.auth.session_principal(cookie, await self.now())
        return None


def too_many_guesses() -> Response:
    retry_after = str(int(GUESS_WINDOW.total_seconds()))
    return _refuse(429, "too many wrong credentials; wait a minute", {"Retry-After": retry_after})


def root_path(scope: Scope) -> str:
    """Where the app is mounted (ASGI ``root_path``, e.g. ``/rota``; "" at the root): every URL
    the dashboard writes starts with it."""
    root: str = scope.get("root_path", "")
    return root.rstrip("/")


def route_path(scope: Scope) -> str:
    """The request's path below the mount point, as the routes see it: a host app mounting
    rota at ``/rota`` passes ``/rota/healthz`` with ``root_path`` ``/rota``."""
    path: str = scope["path"]
    root = root_path(scope)
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("", "/"):
        return path[len(root) :] or "/"
    return path


def _refuse(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _server_host(scope: Scope) -> str:
    server = scope.get("server")
    if not server:
        return ""
    host, port = server[0], server[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def _cookie(header: str | None, name: str) -> str | None:
    if not header:
        return None
    for part in header.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            return value
    return None


def _with_security_headers(send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            raw: list[Any] = list(message.get("headers", []))
            present = {name.lower() for name, _ in raw}
            raw.extend(header for header in SECURITY_HEADERS if header[0] not in present)
            if b"cache-control" not in present:
                raw.append((b"cache-control", b"no-store"))
            message = {**message, "headers": raw}
        await send(message)

    return wrapped


def _limited(receive: Receive, limit: int) -> Receive:
    """``receive`` that raises BodyTooLarge once more than ``limit`` body bytes arrived, so no
    reader, whichever route it serves, can be made to buffer an unbounded body."""
    seen = 0

    async def wrapped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge(limit)
        return message

    return wrapped
