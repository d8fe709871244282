"""Named credentials and the trusted-proxy header: who may call the API, under which name, with
which role.

Each API token and basic-auth user has a name (what the audit log records) and a role:

- ``admin``: everything;
- ``operator``: reads, and the day-to-day actions on jobs, workflows, queues and schedules
  (enqueue, retry, cancel, re-run, reschedule, bulk retry and cancel, pause and resume, run a
  schedule now, send signals), but not what deletes jobs or changes configuration (delete,
  bulk delete, limits, creating, editing or removing schedules);
- ``read-only``: reads only.

They are read from TOML, a file (``ROTA_CREDENTIALS_FILE``) or the text itself in the
environment (``ROTA_CREDENTIALS``)::

    [[credential]]
    name = "alice"
    role = "admin"
    token = "3f0c...a long random string"

    [[credential]]
    name = "deploy-bot"
    role = "operator"
    user = "deploy"            # a basic-auth user
    password = "..."

    [proxy]                    # optional: a single sign-on proxy in front of rota
    header = "X-Forwarded-User"
    trusted = ["10.0.0.5", "10.0.1.0/24"]
    role = "read-only"         # for every user the proxy names...
    roles = { alice = "admin" }  # ...but these

The trusted-proxy header is believed only on requests whose peer address (the TCP connection's,
never a forwarded header) is in ``trusted``; from anywhere else it is ignored. The proxy must
set the header itself on every request, overwriting whatever a client sent.
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rota.domain.errors import InvalidInput

#: A credential's name: what the audit log records. No ``:``, so no name can pass for the
#: prefixed identities (``token:admin``, ``basic:<user>``, ``cli:<os user>``, ``proxy:<user>``).
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")
MIN_NAMED_TOKEN_LENGTH = 16
#: Longest user name a proxy header may carry (it is recorded in the audit log).
MAX_PROXY_USER_LENGTH = 190
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Role(StrEnum):
    ADMIN = "admin"
    OPERATOR = "operator"
    READ_ONLY = "read-only"


def parse_role(value: object, where: str) -> Role:
    try:
        return Role(str(value))
    except ValueError:
        raise InvalidInput(
            f"{where}: role must be one of admin, operator, read-only (got {value!r})"
        ) from None


@dataclass(frozen=True, slots=True)
class Credential:
    """One named API token, or one named basic-auth user (``user`` and ``password``)."""

    name: str
    role: Role
    token: str | None = field(default=None, repr=False)
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        where = f"credential {self.name!r}"
        if not NAME_PATTERN.fullmatch(self.name):
            raise InvalidInput(
                f"{where}: a name is 1-64 letters, digits and . _ @ + - (no ':' or spaces)"
            )
        if (self.token is None) == (self.user is None):
            raise InvalidInput(f"{where}: give either a token or a user and password")
        if self.token is not None and (
            self.token != self.token.strip() or len(self.token) < MIN_NAMED_TOKEN_LENGTH
        ):
            raise InvalidInput(
                f"{where}: a token needs at least {MIN_NAMED_TOKEN_LENGTH} characters and "
                "no surrounding whitespace"
            )
        if self.user is not None:
            if not self.user.strip() or ":" in self.user or not self.user.isprintable():
                raise InvalidInput(f"{where}: a user name must be printable and without ':'")
            if not self.password or not self.password.strip():
                raise InvalidInput(f"{where}: a basic-auth user needs a non-empty password")


@dataclass(frozen=True, slots=True)
class TrustedProxy:
    """A proxy in front of rota that authenticates people and names them in ``header``."""

    header: str
    trusted: tuple[_Network, ...]
    role: Role = Role.READ_ONLY
    #: Roles of particular users, as ``(user, role)`` pairs; the others get ``role``.
    roles: tuple[tuple[str, Role], ...] = ()

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", self.header):
            raise InvalidInput("proxy: header must be an HTTP header name")
        if self.header.lower() in ("authorization", "cookie", "host"):
            raise InvalidInput(f"proxy: {self.header} cannot carry the user name")
        if not self.trusted:
            raise InvalidInput("proxy: trusted must list the proxy's addresses")

    def trusts(self, address: str) -> bool:
        """Whether a peer address is one of the proxy's."""
        try:
            peer = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(peer in network for network in self.trusted)

    def role_of(self, user: str) -> Role:
        return next((role for name, role in self.roles if name == user), self.role)


def parse_credentials(text: str, source: str) -> tuple[tuple[Credential, ...], TrustedProxy | None]:
    """Credentials and the proxy setting from TOML ``text`` (``source`` names it in errors)."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise InvalidInput(f"{source}: not valid TOML: {error}") from None
    unknown = set(document) - {"credential", "proxy"}
    if unknown:
        raise InvalidInput(f"{source}: unknown section {sorted(unknown)[0]!r}")
    entries = document.get("credential", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InvalidInput(f"{source}: credential must be an array of tables ([[credential]])")
    credentials = tuple(
        _credential(entry, f"{source}: credential {n + 1}") for n, entry in enumerate(entries)
    )
    proxy = document.get("proxy")
    if proxy is not None and not isinstance(proxy, dict):
        raise InvalidInput(f"{source}: proxy must be a table ([proxy])")
    return credentials, None if proxy is None else _proxy(proxy, f"{source}: proxy")


def _credential(entry: dict[str, Any], where: str) -> Credential:
    _only(entry, {"name", "role", "token", "user", "password"}, where)
    values = {key: entry.get(key) for key in ("name", "token", "user", "password")}
    for key, value in values.items():
        if value is not None and not isinstance(value, str):
            raise InvalidInput(f"{where}: {key} must be a string")
    if values["name"] is None:
        raise InvalidInput(f"{where}: needs a name")
    return Credential(
        name=values["name"],
        role=parse_role(entry.get("role"), where),
        token=values["token"],
        user=values["user"],
        password=values["password"],
    )


def _proxy(entry: dict[str, Any], where: str) -> TrustedProxy:
    _only(entry, {"header", "trusted", "role", "roles"}, where)
    header, trusted, roles = entry.get("header"), entry.get("trusted"), entry.get("roles", {})
    if not isinstance(header, str):
        raise InvalidInput(f"{where}: needs a header name")
    if not isinstance(trusted, list) or not all(isinstance(t, str) for t in trusted):
        raise InvalidInput(f"{where}: trusted must be a list of addresses or networks")
    if not isinstance(roles, dict):
        raise InvalidInput(f"{where}: roles must be a table of user = role")
    try:
        networks = tuple(ipaddress.ip_network(t.strip(), strict=False) for t in trusted)
    except ValueError as error:
        raise InvalidInput(f"{where}: {error}") from None
    return TrustedProxy(
        header=header,
        trusted=networks,
        role=parse_role(entry.get("role", Role.READ_ONLY.value), where),
        roles=tuple((str(user), parse_role(role, where)) for user, role in roles.items()),
    )


def _only(entry: dict[str, Any], known: set[str], where: str) -> None:
    unknown = set(entry) - known
    if unknown:
        raise InvalidInput(f"{where}: unknown key {sorted(unknown)[0]!r}")


def load_credentials(
    path: str | None, text: str | None
) -> tuple[tuple[Credential, ...], TrustedProxy | None]:
    """Credentials from the file at ``path`` (ROTA_CREDENTIALS_FILE) or from ``text``
    (ROTA_CREDENTIALS); neither gives none, both is refused."""
    if path is not None and text is not None:
        raise InvalidInput("set ROTA_CREDENTIALS_FILE or ROTA_CREDENTIALS, not both")
    if text is not None:
        return parse_credentials(text, "ROTA_CREDENTIALS")
    if path is None:
        return (), None
    try:
        with open(path, encoding="utf-8") as file:
            content = file.read()
    except (OSError, UnicodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise InvalidInput(f"cannot read credentials file {path}: {reason}") from None
    return parse_credentials(content, path)
