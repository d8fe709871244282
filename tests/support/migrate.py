"""Migrating a database from synchronous test code."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import psycopg

from rota.store import open_store
from rota.store.postgres.queries import migrations
from rota.store.sqlite.migrations import known


def migrate_url(url: str) -> list[str]:
    async def run() -> list[str]:
        store = open_store(url)
        try:
            return await store.migrate()
        finally:
            await store.close()

    return asyncio.run(run())


def sqlite_schema_before(path: Path, version: int) -> sqlite3.Connection:
    """A SQLite file at ``path`` migrated by hand up to, not including, ``version``, as an
    earlier release left it; an autocommit connection to it."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(
        "CREATE TABLE rota_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
        "applied_at INTEGER NOT NULL)"
    )
    for migration in known():
        if migration.version < version:
            for statement in migration.statements():
                conn.execute(statement)
            conn.execute(
                "INSERT INTO rota_migrations VALUES (?, ?, 0)", (migration.version, migration.name)
            )
    conn.execute("COMMIT")
    return conn


def postgres_schema_before(url: str, version: str) -> None:
    """The empty database at ``url`` migrated up to, not including, the migration named
    ``version`` (e.g. "019"), as an earlier release left it: its migrations applied and
    recorded, with this version's functions (the routines, which every release remakes)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE rota_migrations ("
            "version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for name, text in migrations():
            if name >= version and not name.startswith("routines_"):
                continue
            with conn.transaction():
                conn.execute(text.encode(), prepare=False)
                conn.execute("INSERT INTO rota_migrations (version) VALUES (%s)", [name])
