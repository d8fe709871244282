"""ApiSettings: how the HTTP API is secured and bounded, and the bind check that enforces it."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from rota.api.credentials import Credential, TrustedProxy
from rota.domain.errors import InvalidInput
from rota.domain.payload import MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH

#: Room for the fields around a maximal payload in a POST /api/jobs body.
BODY_OVERHEAD_BYTES = 64 * 1024


class BindRefused(InvalidInput):
    """Serving on a non-loopback address without authentication was refused."""


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """Security and limits of one API instance; built once by the CLI, passed to create_app.

    ``allowed_hosts`` guards against DNS rebinding: ``None`` accepts any Host header when auth is
    configured and only loopback names (localhost, 127.0.0.0/8, ::1) when it is not; a tuple
    accepts exactly those host names (``"*"`` accepts any). Secrets are kept out of ``repr``.
    """

    auth_token: str | None = field(default=None, repr=False)
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)
    #: A second token, and a second basic-auth user, that may read everything and change
    #: nothing (every mutation answers 403), beside the admin credentials above.
    read_token: str | None = field(default=None, repr=False)
    read_basic_auth: tuple[str, str] | None = field(default=None, repr=False)
    #: Named tokens and basic-auth users, each with its role (rota.api.credentials); the audit
    #: log records their names.
    credentials: tuple[Credential, ...] = field(default=(), repr=False)
    #: A single sign-on proxy whose header names the user, believed from its addresses only.
    trusted_proxy: TrustedProxy | None = None
    read_only: bool = False
    max_body_bytes: int = MAX_PAYLOAD_BYTES + BODY_OVERHEAD_BYTES
    #: The payload sits one level below the body's root; a little margin lets the domain's
    #: payload check (which names the field) speak first.
    max_json_depth: int = MAX_PAYLOAD_DEPTH + 2
    #: The workers' heartbeat interval: a worker is alive while its last beat is younger than
    #: three of these.
    heartbeat_interval_seconds: float = 10.0
    #: How long /metrics reuses store-derived gauges, so frequent scrapes stay cheap.
    metrics_cache_seconds: float = 2.0
    #: At most this many queues get their own ``queue`` label on /metrics; the rest are summed
    #: under ``queue="_other"`` so the series count stays bounded.
    max_metric_queues: int = 50
    allowed_hosts: tuple[str, ...] | None = None
    #: Lifetime of a dashboard login (token auth only).
    session_seconds: int = 12 * 3600
    #: At most this many requests are handled at once (the rest wait their turn), so a
    #: /healthz probe, which never waits, is never queued behind a crowd (rota.api.gate).
    max_concurrent_requests: int = 2
    #: Each identity's share of reads (rota.api.shares): at most this many in flight, and
    #: this many started a second (with three seconds' worth as a burst); past either, 429.
    max_reads_per_identity: int = 16
    read_rate_per_identity: float = 100.0
    #: GET /api/jobs/counts under a kind, tenant or search counts each state exactly up to
    #: this many jobs; past it, a state the store does not count already is estimated (and
    #: labelled so): Store.count_or_estimate.
    exact_count_up_to: int = 1000

    def __post_init__(self) -> None:
        for what, token in (("auth token", self.auth_token), ("read token", self.read_token)):
            if token is None:
                continue
            # Bearer values are read without surrounding whitespace, so such a token could
            # never match; a blank one would be a lock anyone could open.
            if not token.strip() or token != token.strip():
                raise InvalidInput(f"{what} must not be blank or start or end with whitespace")
            if len(token) < 8:
                raise InvalidInput(f"{what} must be at least 8 characters")
        if self.max_concurrent_requests < 1:
            raise InvalidInput("max_concurrent_requests must be at least 1")
        if self.max_reads_per_identity < 1 or not self.read_rate_per_identity > 0:
            raise InvalidInput(
                "max_reads_per_identity must be at least 1 and read_rate_per_identity positive"
            )
        if self.auth_token is not None and self.auth_token == self.read_token:
            raise InvalidInput("the read token must differ from the auth token")
        for what, basic in (
            ("basic auth", self.basic_auth),
            ("read basic auth", self.read_basic_auth),
        ):
            if basic is None:
                continue
            user, password = basic
            if not user.strip() or ":" in user or not password.strip() or not user.isprintable():
                raise InvalidInput(f"{what} needs a user without ':' and a non-empty password")
        if (
            self.basic_auth is not None
            and self.read_basic_auth is not None
            and self.basic_auth[0] == self.read_basic_auth[0]
        ):
            raise InvalidInput("the read-only basic-auth user must differ from the admin user")
        self._check_credentials()
        if self.max_body_bytes < 1024:
            raise InvalidInput("max_body_bytes must be at least 1024")
        if self.max_json_depth < 2:
            raise InvalidInput("max_json_depth must be at least 2")
        if self.heartbeat_interval_seconds <= 0 or self.metrics_cache_seconds < 0:
            raise InvalidInput("intervals must be positive")
        if self.exact_count_up_to < 0:
            raise InvalidInput("exact_count_up_to must not be negative")
        if self.max_metric_queues < 1 or self.session_seconds < 60:
            raise InvalidInput("max_metric_queues must be >= 1 and session_seconds >= 60")

    def _check_credentials(self) -> None:
        """Names, tokens and basic-auth users are each one credential's alone."""
        names = [credential.name for credential in self.credentials]
        tokens = [c.token for c in self.credentials if c.token is not None]
        tokens += [t for t in (self.auth_token, self.read_token) if t is not None]
        users = [c.user for c in self.credentials if c.user is not None]
        users += [b[0] for b in (self.basic_auth, self.read_basic_auth) if b is not None]
        for what, values in (("name", names), ("token", tokens), ("basic-auth user", users)):
            repeated = {value for value in values if values.count(value) > 1}
            if repeated:
                shown = "" if what == "token" else f" {sorted(repeated)[0]!r}"
                raise InvalidInput(f"two credentials have the same {what}{shown}")

    @property
    def has_auth(self) -> bool:
        return (
            bool(self.credentials)
            or self.trusted_proxy is not None
            or any(
                credential is not None
                for credential in (
                    self.auth_token,
                    self.basic_auth,
                    self.read_token,
                    self.read_basic_auth,
                )
            )
        )

    def host_allowed(self, host: str) -> bool:
        """Whether a request's Host name (port removed) may reach this API."""
        if self.allowed_hosts is not None:
            return "*" in self.allowed_hosts or host.lower() in self.allowed_hosts
        return self.has_auth or is_loopback(host)


def is_loopback(host: str) -> bool:
    """``localhost`` or an address in 127.0.0.0/8 or ::1 (brackets allowed)."""
    name = host.strip().lower().removeprefix("[").removesuffix("]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind(host: str, settings: ApiSettings) -> None:
    """Refuse (BindRefused) to serve on a non-loopback ``host`` unless auth is configured."""
    if settings.has_auth or is_loopback(host):
        return
    raise BindRefused(
        f"refusing to listen on {host!r} without authentication: set an auth token or basic "
        "auth, or bind to 127.0.0.1"
    )
