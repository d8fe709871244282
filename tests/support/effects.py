"""The fenced downstream store of the chaos tests: ``effects(key pk, value, fence)``.

A write carries the handler's fencing token and is accepted only if no write with an equal or
higher token was accepted before (insert if absent, else ``UPDATE ... WHERE fence < token``).
Every write, accepted or rejected, is appended to ``chaos_effect_log`` in the same
transaction, so a test can prove a lower token was never accepted after a higher one.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from typing import Any

EFFECTS_ENV = "ROTA_CHAOS_EFFECTS"
#: Connections a worker process writes effects on at once (PostgreSQL).
PG_CONNECTIONS = 4

PG_EFFECTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS chaos_effects (
    key text PRIMARY KEY, value bigint NOT NULL, fence bigint NOT NULL);
CREATE TABLE IF NOT EXISTS chaos_effect_log (
    seq bigserial PRIMARY KEY, key text NOT NULL, fence bigint NOT NULL,
    accepted boolean NOT NULL, pid integer NOT NULL);
"""
SQLITE_EFFECTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS chaos_effects (
    key TEXT PRIMARY KEY, value INTEGER NOT NULL, fence INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS chaos_effect_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, fence INTEGER NOT NULL,
    accepted INTEGER NOT NULL, pid INTEGER NOT NULL);
"""
#: The write and its log line in one statement (one round trip, one transaction): the log
#: row's seq is drawn after the upsert took the key's row lock, so seq order is commit order.
_PG_WRITE = """
WITH written AS (
    INSERT INTO chaos_effects (key, value, fence) VALUES (%(key)s, %(value)s, %(fence)s)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value, fence = excluded.fence
    WHERE chaos_effects.fence < excluded.fence
    RETURNING fence
)
INSERT INTO chaos_effect_log (key, fence, accepted, pid)
SELECT %(key)s, %(fence)s, EXISTS (SELECT FROM written), %(pid)s
RETURNING accepted
"""
_SQLITE_WRITE = """
INSERT INTO chaos_effects (key, value, fence) VALUES (?, ?, ?)
ON CONFLICT (key) DO UPDATE SET value = excluded.value, fence = excluded.fence
WHERE chaos_effects.fence < excluded.fence
RETURNING fence
"""
_SQLITE_LOG = "INSERT INTO chaos_effect_log (key, fence, accepted, pid) VALUES (?, ?, ?, ?)"


class FencedEffects:
    """The downstream store: one row per key, written only with a higher fencing token."""

    def __init__(self, target: str) -> None:
        self.target = target
        #: Idle PostgreSQL connections; at most PG_CONNECTIONS are in use at once.
        self._idle: list[Any] = []
        self._slots = asyncio.Semaphore(PG_CONNECTIONS)

    async def write(self, key: str, value: int, fence: int) -> bool:
        if self.target.startswith("postgresql://"):
            return await self._write_pg(key, value, fence)
        return await asyncio.to_thread(self._write_sqlite, key, value, fence)

    async def _write_pg(self, key: str, value: int, fence: int) -> bool:
        import psycopg

        params = {"key": key, "value": value, "fence": fence, "pid": os.getpid()}
        async with self._slots:
            conn = self._idle.pop() if self._idle else None
            if conn is None or conn.closed:
                conn = await psycopg.AsyncConnection.connect(
                    self.target, autocommit=True, connect_timeout=5
                )
            try:
                row = await (await conn.execute(_PG_WRITE, params)).fetchone()
            except BaseException:  # failed or cancelled mid-statement: never reuse it
                await conn.close()
                raise
            self._idle.append(conn)
        return bool(row[0])

    def _write_sqlite(self, key: str, value: int, fence: int) -> bool:
        conn = sqlite3.connect(self.target, timeout=30, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            accepted = conn.execute(_SQLITE_WRITE, (key, value, fence)).fetchone() is not None
            conn.execute(_SQLITE_LOG, (key, fence, int(accepted), os.getpid()))
            conn.execute("COMMIT")
            return accepted
        finally:
            conn.close()
