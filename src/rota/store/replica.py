"""Read replicas: a copy of the store that serves reads and may trail it (PostgreSQL only).

A streaming replica (``rota.store.postgres.replica.open_replica``) answers the read verbs (``get``, ``list_jobs``, ``counts``...) with the
primary's data as of a moment ago; every write, claim and read-your-write stays on the primary.
Only PostgreSQL has replicas: memory and SQLite are one process's or one machine's store.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol
from urllib.parse import urlsplit

from rota.domain.errors import InvalidInput
from rota.store import redact_url
from rota.store.base import Store


@dataclass(frozen=True, slots=True)
class ReplicaLag:
    """How far a read replica trails its primary.

    ``behind`` is zero when the replica had replayed everything the primary had written when
    asked; otherwise it is the primary's now minus the commit time of the last transaction the
    replica replayed: every read the replica answers is at most that stale. None when it
    cannot be told: the read database is not in recovery (not a replica, or promoted), or has
    replayed no transaction since it started.
    """

    replaying: bool
    behind: timedelta | None


class ReadReplica(Protocol):
    """A replica's store, for the read verbs only, and how far it trails the primary."""

    @property
    def store(self) -> Store:
        """The replica's store: call only read verbs on it (a replica refuses writes)."""
        ...

    async def lag(self) -> ReplicaLag:
        """How far the replica trails the primary now (one statement on each)."""
        ...

    async def close(self) -> None:
        """Release the replica's connections (not the primary's)."""
        ...


def check_read_url(database_url: str, read_url: str) -> None:
    """InvalidInput unless ``read_url`` can be a replica of ``database_url``: both PostgreSQL."""
    check_read(read_url)
    if _scheme(database_url) not in _POSTGRES:
        raise InvalidInput(PRIMARY_NEEDED)


_POSTGRES = ("postgresql", "postgres")
PRIMARY_NEEDED = "a read replica needs the database itself on PostgreSQL"


def check_read(read_url: str) -> None:
    """InvalidInput unless ``read_url`` is a PostgreSQL URL."""
    if _scheme(read_url) not in _POSTGRES:
        raise InvalidInput(
            "a read database must be a PostgreSQL replica (postgresql://...), "
            f"not {redact_url(read_url)!r}"
        )


def _scheme(url: str) -> str:
    try:
        return urlsplit(url).scheme.lower()
    except ValueError:
        return ""
