"""What the verbs beside store.py use of PostgresStore, which mixes them in: one class per
concept (leases.py, operate.py, reads.py, maintain.py, registry.py, control.py), each a part
of the one store with its connections and clock."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psycopg import sql

    from rota.store.postgres.connect import Borrowed, Connections, PoolConnection
    from rota.store.postgres.enqueue import Flow
    from rota.store.postgres.rows import Row


class PostgresPart:
    """The plumbing a part of PostgresStore calls, defined in store.py (and _filtered and
    fold_counts, shared between parts)."""

    if TYPE_CHECKING:
        _connections: Connections

        def _now(self, now: datetime | None) -> datetime | None: ...
        def _connection(self, prefer: PoolConnection | None = None) -> Borrowed: ...
        def _start_claiming(self) -> bool: ...
        async def _fetch(self, name: str, params: dict[str, Any]) -> list[Row]: ...
        async def _run_flow(self, flow: Flow, *, announce_schedules: bool = False) -> Any: ...
        async def _filtered(
            self, statement: sql.Composable, *, again: bool = False
        ) -> list[Row]: ...
        async def fold_counts(self) -> None: ...
