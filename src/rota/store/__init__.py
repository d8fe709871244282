"""The store seam: ``open_store(url)`` returns the backend for a database URL.

``memory://`` (tests and demos), ``sqlite:///path/to/file.db`` (the embedded default) and
``postgresql://...`` (or ``postgres://``) for a fleet.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from rota.domain.clock import Clock
from rota.domain.errors import InvalidInput
from rota.store.base import Store
from rota.store.records import Beat, Counts, JobFilter, Page, RescueResult, WorkerInfo

__all__ = [
    "Beat",
    "Counts",
    "JobFilter",
    "Page",
    "RescueResult",
    "Store",
    "WorkerInfo",
    "open_store",
    "redact_url",
]


def open_store(
    url: str, *, clock: Clock | None = None, listen_database_url: str | None = None
) -> Store:
    """The store for ``url``; InvalidInput for a URL no backend understands.

    ``clock`` replaces the store's own clock (tests pass a FakeClock; on PostgreSQL its
    readings are sent as the ``now`` of every statement instead of the server's ``now()``).
    ``listen_database_url`` (PostgreSQL only) is a direct connection for LISTEN, for a
    ``url`` that goes through a transaction pooler such as PgBouncer.
    The store is not migrated here: call ``await store.migrate()``.
    """
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        _ = parts.port  # checked now: libpq would only say it cannot connect
    except ValueError as error:  # "Invalid IPv6 URL" (postgresql://[::1), "Port out of range"
        raise InvalidInput(f"invalid database URL: {error}") from None
    if listen_database_url and scheme not in ("postgresql", "postgres"):
        raise InvalidInput("a listen database URL applies to PostgreSQL only")
    if scheme == "memory":
        from rota.store.memory import MemoryStore

        return MemoryStore(clock=clock)
    if scheme == "sqlite":
        from rota.store.sqlite import SqliteStore

        return SqliteStore.from_url(url, clock=clock)
    if scheme in ("postgresql", "postgres"):
        from rota.store.postgres.store import PostgresStore

        return PostgresStore.from_url(url, clock=clock, listen_url=listen_database_url or None)
    raise InvalidInput(
        f"unsupported database URL {redact_url(url)!r}: use memory://, sqlite:///path.db "
        "or postgresql://..."
    )


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***``, safe for logs and messages."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<invalid url>"
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()
