"""Migration 011 (expires_at) applies on a database at 009, keeping its jobs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

from rota.store import JobFilter, open_store
from rota.store.sqlite import migrations as sqlite_migrations


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
        # 011 and every migration after it (012_workflows, 013_audit) apply on a database at 009.
        assert await store.pending_migrations() == ["011_operator", "012_workflows", "013_audit"]
        assert await store.migrate() == ["011_operator", "012_workflows", "013_audit"]
        job = await store.get(1)
        assert (job.kind, job.expires_at) == ("old", None)
        assert await store.expire() == []
    finally:
        await store.close()


@pytest.mark.postgres
async def test_postgres_at_009_migrates_to_011_and_keeps_its_jobs(pg_url: str) -> None:
    # The test database comes migrated: take it back to 009 (undo 011), with a job in it.
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP INDEX rota_jobs_expiring, rota_jobs_unique_held")
        conn.execute(
            "ALTER TABLE rota_jobs DROP COLUMN expires_at, DROP COLUMN unique_until, "
            "DROP COLUMN unique_states"
        )
        conn.execute("DELETE FROM rota_migrations WHERE version = '011_operator'")
        conn.execute(
            "INSERT INTO rota_jobs (kind, queue, payload, run_at, max_attempts, created_at) "
            "VALUES ('old', 'default', '{}', now(), 3, now())"
        )
    store = open_store(pg_url)
    try:
        assert await store.pending_migrations() == ["011_operator"]
        assert await store.migrate() == ["011_operator"]
        [job] = (await store.list_jobs(JobFilter())).jobs
        assert (job.kind, job.expires_at) == ("old", None)
        assert await store.expire() == []
    finally:
        await store.close()
