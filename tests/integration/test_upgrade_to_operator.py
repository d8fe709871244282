"""Migration 011 (expires_at) applies on a database at 009, keeping its jobs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

from rota.store import JobFilter, open_store
from rota.store.sqlite import migrations as sqlite_migrations
from tests.support.migrate import postgres_schema_before
from tests.support.postgres import Server


async def test_sqlite_at_009_migrates_to_011_and_keeps_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(sqlite_migrations._CREATE_LEDGER)
    for migration in sqlite_migrations.known():
        if migration.version > 9:
            continue
        for statement in migration.statements():
            conn.execute(statement)
        conn.execute(
            "INSERT INTO rota_migrations (version, name, applied_at) VALUES (?, ?, 0)",
            (migration.version, migration.name),
        )
    conn.execute(
        "INSERT INTO rota_jobs (kind, queue, payload, state, priority, run_at, max_attempts, "
        "created_at) VALUES ('old', 'default', '{}', 'pending', 0, 0, 3, 0)"
    )
    conn.execute("COMMIT")
    conn.close()
    store = open_store(f"sqlite:///{path}")
    try:
        # 011 and every migration after it apply on a database at 009.
        after_009 = [m.name for m in sqlite_migrations.known() if m.version > 9]
        assert after_009[0] == "011_operator"
        assert await store.pending_migrations() == after_009
        assert await store.migrate() == after_009
        job = await store.get(1)
        assert (job.kind, job.expires_at) == ("old", None)
        assert await store.expire() == []
    finally:
        await store.close()


@pytest.mark.postgres
async def test_postgres_at_009_migrates_to_011_and_keeps_its_jobs(pg_server: Server) -> None:
    # A database as a release at 009 left it, with a job in it: every migration since applies.
    with pg_server.database(migrated=False) as url:
        postgres_schema_before(url, "011")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO rota_jobs (kind, queue, payload, run_at, max_attempts, created_at) "
                "VALUES ('old', 'default', '{}', now(), 3, now())"
            )
        store = open_store(url)
        try:
            pending = await store.pending_migrations()
            assert pending[0] == "011_operator"
            assert await store.migrate() == pending
            [job] = (await store.list_jobs(JobFilter())).jobs
            assert (job.kind, job.expires_at) == ("old", None)
            assert await store.expire() == []
        finally:
            await store.close()
