"""StaleCopy: a read replica stand-in for tests that need no PostgreSQL.

A store of its own, which the test fills to differ from the primary the way a lagging replica
does, and a lag the test sets. The real thing is ``rota.store.postgres.replica``.
"""

from __future__ import annotations

from datetime import timedelta

from rota.store import Store
from rota.store.replica import ReplicaLag


class StaleCopy:
    """A ReadReplica over ``store``, trailing by ``behind`` (None: unknown)."""

    def __init__(self, store: Store, behind: timedelta | None) -> None:
        self._store = store
        self.behind = behind

    @property
    def store(self) -> Store:
        return self._store

    async def lag(self) -> ReplicaLag:
        return ReplicaLag(replaying=True, behind=self.behind)

    async def close(self) -> None:
        return None
