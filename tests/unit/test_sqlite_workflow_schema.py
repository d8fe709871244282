"""Migration 012 on SQLite loosens the state CHECK in place: 'waiting' is accepted, any other
unknown state is still refused, the file stays sound, and a connection opened before the
migration sees the new schema."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from rota.domain.job import JobSpec
from rota.store.sqlite import SqliteStore
from rota.store.sqlite.migrations import apply_pending, known
from tests.support.migrate import sqlite_schema_before

_INSERT = (
    "INSERT INTO rota_jobs (kind, queue, payload, state, priority, run_at, max_attempts, "
    "created_at) VALUES ('k', 'default', '{}', ?, 0, 0, 3, 0)"
)


def test_the_state_check_gains_waiting_and_still_refuses_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "schema.db"
    before = sqlite_schema_before(path, 12)
    before.execute(_INSERT, ("pending",))  # a job from before the upgrade
    with pytest.raises(sqlite3.IntegrityError):
        before.execute(_INSERT, ("waiting",))

    upgrader = sqlite3.connect(path, isolation_level=None)
    upgrader.execute("BEGIN IMMEDIATE")
    assert apply_pending(upgrader, 0) == [m.name for m in known() if m.version >= 12]
    upgrader.execute("COMMIT")

    for conn in (before, upgrader):
        conn.execute(_INSERT, ("waiting",))
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute(_INSERT, ("paused",))
    assert upgrader.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert upgrader.execute("SELECT count(*) FROM rota_jobs").fetchone() == (3,)


async def test_the_store_opens_an_upgraded_file_and_runs_workflows(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.db")
    await store.migrate()
    try:
        [plain] = await store.enqueue([JobSpec(kind="k")])
        assert plain.job.workflow is None and plain.job.waiting_on == 0
        assert await store.pending_migrations() == []
    finally:
        await store.close()
