"""Migrations 020 and 021 on SQLite: the checks SQLite runs for every row it writes to rota_jobs
(the state CHECK, the partial indexes' WHERE, the triggers' WHEN) compare with = rather than
list three or more values after IN, which costs a temporary B-tree per row; the triggers that
count add without an upsert, and the writes of many rows a drain makes undo their whole
transaction on a broken constraint, so SQLite keeps no statement journal for them; and a file
upgraded with jobs in every state keeps its jobs, its counts and its tallies."""

from __future__ import annotations

import re
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store.sqlite import SqliteStore, claims
from rota.store.sqlite.migrations import known
from rota.testing import FakeClock
from tests.support.migrate import sqlite_schema_before

LEASE = timedelta(seconds=30)
AT = datetime(2030, 1, 1, tzinfo=UTC)
#: `IN (` followed by three or more values.
_LONG_LIST = re.compile(r"\bIN\s*\(\s*'[^']*'\s*,\s*'[^']*'\s*,", re.IGNORECASE)

_INSERT = (
    "INSERT INTO rota_jobs (kind, queue, payload, state, priority, run_at, max_attempts, "
    "created_at, attempt, finished_at) VALUES ('k', ?, '{}', ?, 0, 0, 3, 0, ?, ?)"
)


def _schema_of_jobs(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    return conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE tbl_name = 'rota_jobs' AND sql IS NOT NULL"
    ).fetchall()


def test_no_check_index_or_trigger_of_the_jobs_lists_values_after_in(tmp_path: Path) -> None:
    conn = sqlite_schema_before(tmp_path / "new.db", max(m.version for m in known()) + 1)
    schema = _schema_of_jobs(conn)
    assert {name for name, _ in schema} >= {"rota_jobs", "rota_jobs_finished"}
    assert [name for name, sql in schema if _LONG_LIST.search(sql)] == []
    # A change of state's own program (the triggers' programs follow its Halt) builds no
    # temporary table for the CHECK and the partial indexes.
    program = [
        row[1]
        for row in conn.execute("EXPLAIN UPDATE rota_jobs SET state = ? WHERE id = ?", ("x", 1))
    ]
    assert "OpenEphemeral" not in program[: program.index("Halt")]


def test_no_trigger_of_the_jobs_upserts(tmp_path: Path) -> None:
    conn = sqlite_schema_before(tmp_path / "new.db", max(m.version for m in known()) + 1)
    triggers = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'rota_jobs'"
    ).fetchall()
    assert {name for name, _ in triggers} >= {
        "rota_jobs_counted_update",
        "rota_jobs_tallied_update",
    }
    assert [name for name, sql in triggers if "ON CONFLICT" in sql.upper()] == []


def test_a_claim_that_breaks_a_constraint_undoes_its_whole_transaction(tmp_path: Path) -> None:
    conn = sqlite_schema_before(tmp_path / "new.db", max(m.version for m in known()) + 1)
    # A pending job with no attempt left: leasing it breaks attempt <= max_attempts.
    conn.execute(_INSERT, ("q", "pending", 3, None))
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE rota_meta SET value = value + 1000 WHERE name = 'fencing_token'")
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        claims.claim(conn, "w", ["q"], 5, LEASE, AT, fair=True, after="")
    assert not conn.in_transaction
    assert conn.execute("SELECT value FROM rota_meta WHERE name = 'fencing_token'").fetchone() == (
        0,
    )


def test_the_rewritten_state_check_admits_the_states_and_refuses_the_rest(tmp_path: Path) -> None:
    conn = sqlite_schema_before(tmp_path / "new.db", max(m.version for m in known()) + 1)
    for state in JobState:
        conn.execute(_INSERT, ("q", state.value, 0, None))
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute(_INSERT, ("q", "paused", 0, None))
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute("UPDATE rota_jobs SET state = 'Pending'")


async def test_an_upgraded_file_keeps_its_jobs_counts_and_tallies(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "old.db"
    before = sqlite_schema_before(path, 20)
    finished_at = 5_000_000
    rows = [
        ("a", "pending", 0, None),
        ("a", "running", 1, None),
        ("a", "succeeded", 1, finished_at),
        ("b", "dead", 3, finished_at),
        ("b", "cancelled", 0, finished_at + 1_000_000),
        ("b", "waiting", 0, None),
    ]
    before.executemany(_INSERT, rows)
    # Counted and tallied as the release before keeps them.
    before.execute(
        "INSERT INTO rota_counts SELECT queue, state, count(*) FROM rota_jobs GROUP BY 1, 2"
    )
    before.execute(
        "INSERT INTO rota_finished_per_second SELECT finished_at - finished_at % 1000000, state, "
        "count(*) FROM rota_jobs WHERE finished_at IS NOT NULL GROUP BY 1, 2"
    )
    before.close()

    store = SqliteStore(path, clock=clock)
    try:
        assert await store.migrate() == [m.name for m in known() if m.version >= 20]
        counts = await store.counts()
        assert counts.by_state == {
            JobState.PENDING: 1,
            JobState.RUNNING: 1,
            JobState.SUCCEEDED: 1,
            JobState.DEAD: 1,
            JobState.CANCELLED: 1,
            JobState.WAITING: 1,
            JobState.HELD: 0,
        }
        # A new job's life through the rewritten checks, and the old finished ones pruned.
        [new] = await store.enqueue([JobSpec(kind="k", queue="a")])
        [claimed] = await store.claim("w", queues=["a"], limit=1, lease=LEASE)
        assert claimed.id == 1  # the older pending job first
        await store.complete(claimed.lease)
        # A change the triggers count (into a state queue "a" had no count for), then pruning.
        [again] = await store.claim("w", queues=["a"], limit=1, lease=LEASE)
        assert again.id == new.job.id
        await store.fail(again.lease, error="no", retry_in=LEASE, permanent=True)
        pruned = await store.prune(older_than=clock.now())
        assert pruned == 3
    finally:
        await store.close()
    with sqlite3.connect(path) as raw:
        kept = raw.execute("SELECT queue, state, n FROM rota_counts WHERE n != 0 ORDER BY 1, 2")
        counted = raw.execute(
            "SELECT queue, state, count(*) FROM rota_jobs GROUP BY 1, 2 ORDER BY 1, 2"
        )
        assert kept.fetchall() == counted.fetchall()
        tallied = raw.execute(
            "SELECT second, state, n FROM rota_finished_per_second WHERE n != 0 ORDER BY 1, 2"
        )
        finished = raw.execute(
            "SELECT finished_at - finished_at % 1000000, state, count(*) FROM rota_jobs "
            "WHERE state IN ('succeeded', 'dead', 'cancelled') GROUP BY 1, 2 ORDER BY 1, 2"
        )
        assert tallied.fetchall() == finished.fetchall()
        states = raw.execute("SELECT id, state FROM rota_jobs ORDER BY id").fetchall()
        assert states == [(1, "succeeded"), (2, "running"), (6, "waiting"), (new.job.id, "dead")]
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
