"""Enqueue, claim and success on SQLite after migration 019: jobs that cannot conflict are
inserted many rows per statement and built from their specs, and those three writes count
their own jobs (no trigger does), on a new file and on one upgraded with jobs in it."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.domain.workflow import chain
from rota.store.sqlite import SqliteStore, jobs
from rota.store.sqlite.migrations import known
from rota.store.sqlite.rows import MAX_ROWS_PER_INSERT
from rota.testing import FakeClock
from tests.support.migrate import sqlite_schema_before

LEASE = timedelta(seconds=30)
EPOCH_2030 = datetime(2030, 1, 1, tzinfo=UTC)
PARIS = ZoneInfo("Europe/Paris")


def full_spec(**fields: Any) -> JobSpec:
    """A job of kind "full" with every field the store writes set to something other than its
    default (a payload of each JSON type, times in another zone), and ``fields``."""
    return JobSpec(
        kind="full",
        payload={"to": "ann", "n": [1, 2.5, None], "big": 2**70},
        priority=7,
        max_attempts=3,
        tenant="acme",
        timeout=timedelta(seconds=1.5),
        trace_context={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"},
        expires_at=datetime(2031, 4, 1, tzinfo=PARIS),
        **fields,
    )


@pytest.fixture
async def store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "rota.db", clock=clock)
    await store.migrate()
    yield store
    await store.close()


def _kept_and_counted(path: Path) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int]]]:
    with sqlite3.connect(path) as raw:
        kept = raw.execute(
            "SELECT queue, state, n FROM rota_counts WHERE n != 0 ORDER BY 1, 2"
        ).fetchall()
        counted = raw.execute(
            "SELECT queue, state, count(*) FROM rota_jobs GROUP BY 1, 2 ORDER BY 1, 2"
        ).fetchall()
    return kept, counted


async def test_jobs_built_from_their_specs_are_the_jobs_stored(
    store: SqliteStore, clock: FakeClock
) -> None:
    specs = [
        JobSpec(kind="plain"),
        full_spec(queue="mail", run_at=datetime(2031, 3, 30, 2, 30, 0, 123456, tzinfo=PARIS)),
        JobSpec(kind="later", delay=timedelta(minutes=5), expire_after=timedelta(hours=1)),
        JobSpec(kind="fired", schedule="nightly"),  # a schedule's job without a slot
        JobSpec(kind="slotted", slot_at=datetime(2030, 1, 1, 12, tzinfo=PARIS)),  # no schedule
    ]
    results = await store.enqueue(specs)
    for result in results:
        stored = await store.get(result.job.id)
        assert result.job == stored
        assert result.job.run_at.tzinfo is UTC and result.job.created_at.tzinfo is UTC
        assert (result.job.expires_at is None) or result.job.expires_at.tzinfo is UTC
        assert (result.job.slot_at is None) or result.job.slot_at.tzinfo is UTC
    assert [r.job.id for r in results] == sorted(r.job.id for r in results)
    assert results[2].job.run_at == clock.now() + timedelta(minutes=5)


async def test_a_batch_is_counted_once_per_queue_and_state(store: SqliteStore) -> None:
    await store.enqueue([JobSpec(kind="k", queue=q) for q in ["a", "b", "a", "c", "a"]])
    await store.enqueue(
        [
            JobSpec(kind="k", queue="a", unique_key="one"),
            JobSpec(kind="k", queue="a", unique_key="one"),  # a duplicate: not counted
            JobSpec(kind="k", queue="b"),
        ]
    )
    await store.enqueue_workflow(chain(JobSpec("k", queue="w"), JobSpec("k", queue="w")))
    kept, counted = _kept_and_counted(store.path)
    assert kept == counted
    assert ("a", "pending", 4) in kept and ("w", "waiting", 1) in kept


async def test_the_active_key_still_admits_one_active_job(store: SqliteStore) -> None:
    first, again = await store.enqueue(
        [JobSpec(kind="k", unique_key="once"), JobSpec(kind="k", unique_key="once")]
    )
    assert again.duplicate and again.job.id == first.job.id
    [claimed] = await store.claim("w", queues=["default"], limit=5, lease=LEASE)
    [while_running] = await store.enqueue([JobSpec(kind="k", unique_key="once")])
    assert while_running.duplicate and while_running.job.id == claimed.id
    await store.complete(claimed.lease)
    [after] = await store.enqueue([JobSpec(kind="k", unique_key="once")])
    assert not after.duplicate and after.job.state is JobState.PENDING


async def test_an_upgraded_file_keeps_its_counts_and_counts_new_inserts(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    before = sqlite_schema_before(path, 19)
    # Jobs from before the upgrade, counted by the trigger 019 drops.
    before.executemany(
        "INSERT INTO rota_jobs (kind, queue, payload, state, priority, run_at, max_attempts, "
        "created_at, unique_key) VALUES ('k', ?, '{}', 'pending', 0, 0, 3, 0, ?)",
        [("a", None), ("a", None), ("b", "held")],
    )
    before.close()

    store = SqliteStore(path)
    try:
        assert await store.migrate() == [m.name for m in known() if m.version >= 19]
        [dup] = await store.enqueue([JobSpec(kind="k", queue="b", unique_key="held")])
        assert dup.duplicate
        await store.enqueue([JobSpec(kind="k", queue="a"), JobSpec(kind="k", queue="c")])
        claimed = await store.claim("w", queues=["a", "b"], limit=2, lease=LEASE, fair=False)
        assert len(claimed) == 2
        await store.complete_many([claimed[0].lease])
    finally:
        await store.close()
    kept, counted = _kept_and_counted(path)
    assert kept == counted
    assert sorted(kept) == sorted(
        [
            ("a", "pending", 1),
            ("a", "running", 1),
            ("a", "succeeded", 1),
            ("b", "pending", 1),
            ("c", "pending", 1),
        ]
    )
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT sum(n) FROM rota_finished_per_second").fetchone() == (1,)
    with sqlite3.connect(path) as raw:
        triggers = {
            name for (name,) in raw.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        }
        assert "rota_jobs_counted_insert" not in triggers
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


async def test_claims_and_successes_keep_the_counts_exact(
    store: SqliteStore, clock: FakeClock
) -> None:
    await store.enqueue([JobSpec(kind="k", queue=q) for q in ["a", "a", "b", "c"]])
    first = await store.claim("w1", queues=["a", "b", "c"], limit=3, lease=LEASE, fair=False)
    clock.advance(LEASE * 2)  # w1's leases expire: the next claim takes them over
    second = await store.claim("w2", queues=["a", "b", "c"], limit=4, lease=LEASE, fair=False)
    assert {job.id for job in first} <= {job.id for job in second}
    assert await store.complete_many([job.lease for job in first]) == [job.lease for job in first]
    assert await store.complete_many([job.lease for job in second]) == []
    kept, counted = _kept_and_counted(store.path)
    assert kept == counted == [("a", "succeeded", 2), ("b", "succeeded", 1), ("c", "succeeded", 1)]
    with sqlite3.connect(store.path) as raw:
        assert raw.execute("SELECT sum(n) FROM rota_finished_per_second").fetchone() == (4,)


async def test_a_batch_larger_than_one_insert_gets_its_ids_in_order(
    store: SqliteStore, clock: FakeClock
) -> None:
    count = 2 * MAX_ROWS_PER_INSERT + 7
    specs = [
        JobSpec(kind="k", queue=f"q{i % 3}", payload={"i": i}, delay=timedelta(seconds=i % 2))
        for i in range(count)
    ]
    results = await store.enqueue(specs)
    assert [r.job.payload for r in results] == [{"i": i} for i in range(count)]
    ids = [r.job.id for r in results]
    assert ids == list(range(ids[0], ids[0] + count))
    for result in results[:: MAX_ROWS_PER_INSERT - 1]:
        assert result.job == await store.get(result.job.id)
    kept, counted = _kept_and_counted(store.path)
    assert kept == counted


def test_an_insert_holds_no_more_rows_than_this_sqlite_has_placeholders_for(
    tmp_path: Path,
) -> None:
    conn = sqlite_schema_before(tmp_path / "few.db", max(m.version for m in known()) + 1)
    # Two rows of 13 placeholders fit, three do not.
    conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 27)
    conn.execute("BEGIN IMMEDIATE")
    results, _ = jobs.enqueue(conn, [JobSpec(kind="k", payload=i) for i in range(5)], EPOCH_2030)
    conn.execute("COMMIT")
    assert [r.job.id for r in results] == [1, 2, 3, 4, 5]
    stored = conn.execute("SELECT id, payload FROM rota_jobs ORDER BY id").fetchall()
    assert stored == [(i + 1, str(i)) for i in range(5)]


async def test_claimed_jobs_are_the_jobs_stored(store: SqliteStore, clock: FakeClock) -> None:
    specs = [
        JobSpec(kind="plain"),
        full_spec(
            queue="q",
            unique_key="full-1",
            schedule="nightly",
            slot_at=datetime(2030, 1, 1, 12, tzinfo=PARIS),
        ),
        JobSpec(kind="failed", queue="q", max_attempts=3),
        JobSpec(kind="rerun", queue="q", tenant="acme"),
    ]
    results = await store.enqueue(specs)
    failed, rerun = results[2].job, results[3].job
    # One failed attempt (its error kept), one run that succeeded with a result and runs again.
    first = await store.claim("w0", queues=["q"], limit=4, lease=LEASE)
    for job in first:
        if job.id == failed.id:
            await store.fail(job.lease, error="boom", retry_in=timedelta(0))
        elif job.id == rerun.id:
            await store.complete_many([job.lease], results=['{"done": true}'])
        else:
            await store.release(job.lease)
    await store.rerun(rerun.id)
    clock.advance(timedelta(seconds=1))
    claimed = await store.claim("w1", queues=["default", "q"], limit=10, lease=LEASE)
    assert sorted(job.id for job in claimed) == sorted(r.job.id for r in results)
    for job in claimed:
        assert job == await store.get(job.id)
        assert job.run_at.tzinfo is UTC and job.created_at.tzinfo is UTC
    by_id = {job.id: job for job in claimed}
    assert by_id[failed.id].last_error == "boom" and by_id[failed.id].attempt == 2
    assert by_id[rerun.id].result == {"done": True}  # the last run's, kept until this one ends
