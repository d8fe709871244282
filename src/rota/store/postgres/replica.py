"""PostgresReplica: reads from a streaming replica, and its lag measured against the primary.

The lag is read in two statements, primary first: the primary's now(), WAL write position and
snapshot, then whether the replica has replayed up to that position, whether it has seen every
transaction the primary's snapshot saw completed, and when the last transaction it replayed
committed. Either one means nothing the primary had committed when asked is missing on the
replica: lag zero. The second holds on an idle primary even while the replica has WAL left to
replay (a checkpoint, the standby snapshots the primary logs every 15 s: records without a
commit), where the last replayed commit may be hours old. Otherwise every commit the replica
lacks happened after the last one it replayed, so ``primary now - last replayed commit``
bounds how stale its answers are.
"""

from __future__ import annotations

from datetime import timedelta

from rota.domain.errors import InvalidInput
from rota.store.base import Store
from rota.store.postgres.store import PostgresStore
from rota.store.replica import PRIMARY_NEEDED, ReadReplica, ReplicaLag, check_read

_PRIMARY_POSITION = "SELECT now(), pg_current_wal_lsn()::text, pg_current_snapshot()::text"
# "Seen": the replica's snapshot reaches as far as the primary's (xmax), and every transaction
# it still counts as running below that was running on the primary too. Transactions that
# wrote nothing have no id and commit nothing, so they cannot be missing.
_REPLAYED = """
SELECT pg_is_in_recovery(),
       pg_last_wal_replay_lsn() >= %(lsn)s::pg_lsn,
       pg_last_xact_replay_timestamp(),
       pg_is_in_recovery()
       AND pg_snapshot_xmax(pg_current_snapshot()) >= pg_snapshot_xmax(%(snapshot)s::pg_snapshot)
       AND NOT EXISTS (
           SELECT FROM pg_snapshot_xip(pg_current_snapshot()) AS running(xid)
           WHERE running.xid < pg_snapshot_xmax(%(snapshot)s::pg_snapshot)
             AND running.xid NOT IN (SELECT pg_snapshot_xip(%(snapshot)s::pg_snapshot)))
"""


def open_replica(primary: Store, read_url: str) -> ReadReplica:
    """The read replica at ``read_url`` of the PostgreSQL store ``primary`` (it connects on
    first use); InvalidInput unless both are PostgreSQL."""
    check_read(read_url)
    if not isinstance(primary, PostgresStore):
        raise InvalidInput(PRIMARY_NEEDED)
    return PostgresReplica(primary, PostgresStore.from_url(read_url))


class PostgresReplica:
    """A ReadReplica: ``reads`` is the replica's store, ``primary`` the store it copies."""

    def __init__(self, primary: PostgresStore, reads: PostgresStore) -> None:
        self._primary = primary
        self._reads = reads

    @property
    def store(self) -> Store:
        return self._reads

    async def lag(self) -> ReplicaLag:
        async with self._primary._connection() as conn:
            row = await (await conn.execute(_PRIMARY_POSITION)).fetchone()
        assert row is not None
        primary_now, position, snapshot = row
        async with self._reads._connection() as conn:
            query = await conn.execute(_REPLAYED, {"lsn": position, "snapshot": snapshot})
            row = await query.fetchone()
        assert row is not None
        in_recovery, caught_up, replayed_at, seen_every_commit = row
        if not in_recovery:
            return ReplicaLag(replaying=False, behind=None)
        if caught_up or seen_every_commit:
            return ReplicaLag(replaying=True, behind=timedelta(0))
        if replayed_at is None:
            return ReplicaLag(replaying=True, behind=None)
        return ReplicaLag(replaying=True, behind=max(timedelta(0), primary_now - replayed_at))

    async def close(self) -> None:
        await self._reads.close()
