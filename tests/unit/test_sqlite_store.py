"""SqliteStore beyond the contract: URLs, migrations, the file format, locks, and parity with
the reference store over random operations."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rota.domain.errors import (
    InvalidInput,
    JobNotFound,
    LeaseLost,
    MigrationsPending,
    StoreUnavailable,
)
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.domain.lease import Lease
from rota.store import JobFilter, WorkerInfo, open_store
from rota.store.memory import MemoryStore
from rota.store.sqlite import SqliteStore, connection
from rota.store.sqlite.migrations import known
from rota.testing import FakeClock
from tests.support.vm_steps import vm_steps

LEASE = timedelta(seconds=30)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(instant: datetime) -> int:
    return (instant - EPOCH) // timedelta(microseconds=1)


@pytest.fixture
async def store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "rota.db", clock=clock)
    await store.migrate()
    yield store
    await store.close()


# ---------------------------------------------------------------------- URLs


def test_relative_url_is_resolved_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = SqliteStore.from_url("sqlite:///data/rota.db")
    assert store.path == str(tmp_path / "data" / "rota.db")


def test_absolute_url_keeps_its_leading_slash(tmp_path: Path) -> None:
    store = SqliteStore.from_url(f"sqlite:///{tmp_path}/rota.db")
    assert str(tmp_path).startswith("/")
    assert store.path == str(tmp_path / "rota.db")


def test_open_store_dispatches_sqlite_urls_with_options(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/x.db?busy_timeout_ms=250&synchronous=full")
    assert isinstance(store, SqliteStore)
    assert store.path == str(tmp_path / "x.db")


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("sqlite:///:memory:", "memory://"),
        ("sqlite://", "sqlite:///"),
        ("sqlite:///", "file name"),
        ("sqlite:///data/", "file name"),
        ("sqlite://host/rota.db", "sqlite:///"),
        ("postgresql://localhost/rota", "sqlite:///"),
        ("sqlite:///rota.db?mode=ro", "unknown SQLite URL option 'mode'"),
        ("sqlite:///rota.db?busy_timeout_ms=soon", "whole number"),
        ("sqlite:///rota.db?busy_timeout_ms=-1", "whole number"),
        ("sqlite:///rota.db?busy_timeout_ms=99999999", "between"),
        ("sqlite:///rota.db?synchronous=off", "synchronous"),
        ("sqlite:///rota.db?synchronous=full&synchronous=normal", "twice"),
        ("sqlite:///rota.db?garbage", "options"),
        ("sqlite:///rota.db#top", "fragment"),
        ("sqlite:///file:rota.db", "URI"),
    ],
)
def test_bad_urls_are_refused_with_the_reason(url: str, complaint: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        SqliteStore.from_url(url)
    assert complaint in str(raised.value)


async def test_missing_parent_directories_are_created(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "rota.db"
    store = SqliteStore.from_url(f"sqlite:///{path}")
    try:
        assert await store.migrate() == [m.name for m in known()]
    finally:
        await store.close()
    assert path.is_file()


async def test_a_file_that_is_not_a_database_is_unavailable_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are not the pages you are looking for" * 200)
    store = SqliteStore(path)
    try:
        with pytest.raises(StoreUnavailable):
            await store.migrate()
    finally:
        await store.close()


# ---------------------------------------------------------------------- migrations


async def test_fresh_file_lists_every_migration_as_pending_until_migrated(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "rota.db")
    try:
        everything = [migration.name for migration in known()]
        assert everything and everything[0] == "001_initial"
        assert await store.pending_migrations() == everything
        with pytest.raises(MigrationsPending):
            await store.get(1)
        assert await store.migrate() == everything
        assert await store.pending_migrations() == []
        assert await store.migrate() == [], "migrating twice applies nothing"
    finally:
        await store.close()
    applied = sqlite3.connect(tmp_path / "rota.db").execute(
        "SELECT name FROM rota_migrations ORDER BY version"
    )
    assert [name for (name,) in applied] == everything


async def test_concurrent_migrate_from_two_stores_applies_each_migration_once(
    tmp_path: Path,
) -> None:
    stores = [SqliteStore(tmp_path / "rota.db") for _ in range(4)]
    try:
        results = await asyncio.gather(*(store.migrate() for store in stores))
        everything = [migration.name for migration in known()]
        assert sorted(results, key=len) == [[], [], [], everything]
        for store in stores:
            assert await store.pending_migrations() == []
        [result] = await stores[0].enqueue([JobSpec(kind="a")])
        assert (await stores[3].get(result.job.id)).kind == "a"
    finally:
        for store in stores:
            await store.close()


def test_every_migration_splits_into_complete_statements() -> None:
    for migration in known():
        statements = migration.statements()
        assert statements, migration.name
        assert all(sqlite3.complete_statement(statement) for statement in statements)
    triggers = [s for s in known()[0].statements() if s.startswith("CREATE TRIGGER")]
    assert len(triggers) == 5 and all(s.endswith("END;") for s in triggers)


# ---------------------------------------------------------------------- the file


async def test_every_connection_is_in_wal_mode_with_a_busy_timeout(tmp_path: Path) -> None:
    store = SqliteStore.from_url(f"sqlite:///{tmp_path}/rota.db?busy_timeout_ms=1234")
    try:
        settings = await store.connection_settings()
    finally:
        await store.close()
    assert settings == {
        "journal_mode": "wal",
        "busy_timeout": 1234,
        "synchronous": 1,  # NORMAL
        "foreign_keys": 1,
    }


async def test_instants_are_stored_as_integer_microseconds(
    store: SqliteStore, clock: FakeClock
) -> None:
    run_at = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
    slot = datetime(2026, 3, 4, 5, 0, tzinfo=UTC)
    [result] = await store.enqueue(
        [JobSpec(kind="a", run_at=run_at, schedule="s", slot_at=slot, timeout=LEASE)]
    )
    await store.register_worker(WorkerInfo("w", "h", 1, ("default",), 1))
    clock.set(run_at)
    [job] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
    await store.fail(job.lease, error="boom", retry_in=timedelta(0))
    [job] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
    await store.complete(job.lease)

    with sqlite3.connect(store.path) as raw:
        columns = ["run_at", "created_at", "started_at", "finished_at", "slot_at", "timeout_us"]
        row = raw.execute(
            "SELECT " + ", ".join(f"typeof({c}), {c}" for c in columns) + " FROM rota_jobs"
        ).fetchone()
        types, values = row[0::2], row[1::2]
        assert set(types) == {"integer"}
        assert values[0] == micros(run_at)
        assert values[4] == micros(slot)
        assert values[5] == 30_000_000
        history = raw.execute(
            "SELECT typeof(started_at), typeof(finished_at) FROM rota_attempts"
        ).fetchall()
        assert history == [("integer", "integer")] * 2
        workers = raw.execute("SELECT typeof(started_at), typeof(beat_at) FROM rota_workers")
        assert workers.fetchall() == [("integer", "integer")]
        lease_types = raw.execute(
            "SELECT DISTINCT typeof(lease_until) FROM rota_jobs WHERE lease_until IS NOT NULL"
        )
        assert lease_types.fetchall() in ([], [("integer",)])
    assert (await store.get(result.job.id)).run_at == run_at


async def test_data_survives_a_reopen_and_tokens_keep_increasing(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "rota.db"
    first = SqliteStore(path, clock=clock)
    await first.migrate()
    results = await first.enqueue(
        [JobSpec(kind="report", payload={"n": i}, unique_key=f"r{i}") for i in range(3)]
    )
    [held] = await first.claim("w", queues=["default"], limit=1, lease=LEASE)
    await first.complete(held.lease)
    before = [await first.get(result.job.id) for result in results]
    history = await first.attempts(held.id)
    await first.close()

    second = SqliteStore(path, clock=clock)
    try:
        assert await second.pending_migrations() == []
        assert [await second.get(result.job.id) for result in results] == before
        assert await second.attempts(held.id) == history
        [again] = await second.enqueue([JobSpec(kind="report", unique_key="r1")])
        assert again.duplicate and again.job.id == results[1].job.id
        [next_held] = await second.claim("w", queues=["default"], limit=1, lease=LEASE)
        assert next_held.lease_token is not None and held.lease_token is not None
        assert next_held.lease_token > held.lease_token
        [fresh] = await second.enqueue([JobSpec(kind="report")])
        assert fresh.job.id > max(result.job.id for result in results)
    finally:
        await second.close()


async def test_ids_are_never_reused_after_the_newest_jobs_are_pruned(
    store: SqliteStore, clock: FakeClock
) -> None:
    [result] = await store.enqueue([JobSpec(kind="a")])
    await store.cancel(result.job.id)
    clock.advance(timedelta(days=1))
    assert await store.prune(older_than=clock.now()) == 1
    [after] = await store.enqueue([JobSpec(kind="a")])
    assert after.job.id > result.job.id


async def test_numbers_beyond_sqlite_integers_name_no_job(store: SqliteStore) -> None:
    huge = 2**70
    for verb in (store.get, store.attempts, store.cancel, store.retry):
        with pytest.raises(JobNotFound):
            await verb(huge)
    ghost = Lease(job_id=huge, token=huge, attempt=1, worker="w")
    with pytest.raises(LeaseLost):
        await store.complete(ghost)
    with pytest.raises(LeaseLost):
        await store.fail(ghost, error="x", retry_in=timedelta(0))
    with pytest.raises(LeaseLost):
        await store.release(ghost)
    assert (await store.heartbeat([ghost], lease=LEASE)).lost == [ghost]
    await store.enqueue([JobSpec(kind="a")])
    assert len(await store.claim("w", queues=["default"], limit=huge, lease=LEASE)) == 1
    assert await store.count_jobs(JobFilter(), limit=huge) == 1


# ---------------------------------------------------------------------- locks


@pytest.mark.parametrize(
    "busy_timeout_ms",
    [
        pytest.param(10_000, id="busy_timeout-waits"),
        pytest.param(20, id="retries-after-busy_timeout"),
    ],
)
async def test_a_writer_holding_the_lock_briefly_delays_but_does_not_fail_a_call(
    tmp_path: Path, busy_timeout_ms: int
) -> None:
    path = tmp_path / "rota.db"
    url = f"sqlite:///{path}?busy_timeout_ms={busy_timeout_ms}"
    store = SqliteStore.from_url(url)
    await store.migrate()
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("UPDATE rota_meta SET value = value WHERE name = 'fencing_token'")
        hold_s = 0.3
        started = time.monotonic()
        enqueue = asyncio.ensure_future(store.enqueue([JobSpec(kind="a")]))
        waited: list[bool] = []

        def release() -> None:
            waited.append(not enqueue.done())
            holder.execute("COMMIT")

        asyncio.get_running_loop().call_later(hold_s, release)
        [result] = await enqueue
        assert waited == [True], "the enqueue finished while the other writer held the lock"
        assert time.monotonic() - started >= hold_s
        assert (await store.get(result.job.id)).state is JobState.PENDING
    finally:
        holder.close()
        await store.close()


async def test_a_lock_held_beyond_every_retry_is_reported_as_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "MAX_TRIES", 4)  # the default budget takes seconds
    path = tmp_path / "rota.db"
    store = SqliteStore(path, busy_timeout_ms=0)
    await store.migrate()
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailable) as raised:
            await store.enqueue([JobSpec(kind="a")])
        assert "locked" in str(raised.value)
        holder.execute("ROLLBACK")
        assert await store.count_jobs(JobFilter()) == 0, "nothing was written"
    finally:
        holder.close()
        await store.close()


async def test_a_closed_store_refuses_calls(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "rota.db")
    await store.migrate()
    await store.close()
    await store.close()
    with pytest.raises(StoreUnavailable):
        await store.get(1)


# ---------------------------------------------------------------------- beyond the contract


async def test_watch_hears_this_store_at_once_and_other_stores_by_polling(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "rota.db"
    store = SqliteStore(path, clock=clock)
    other = SqliteStore(path, clock=clock)
    await store.migrate()
    heard: asyncio.Queue[datetime | None] = asyncio.Queue()
    watching = asyncio.create_task(store.watch(heard.put_nowait))
    # One turn of the loop lets the watch submit its first look; the store runs calls in
    # order, so that look is done before the enqueue below commits.
    await asyncio.sleep(0)
    try:
        later = clock.now() + timedelta(minutes=5)
        await store.enqueue([JobSpec(kind="a", run_at=later), JobSpec(kind="a", delay=LEASE)])
        assert await heard.get() == clock.now() + LEASE
        soon = clock.now() + timedelta(seconds=1)
        await other.enqueue([JobSpec(kind="a", run_at=soon)])
        assert heard.empty(), "another store's insert is noticed by the next look"
        clock.advance(timedelta(seconds=0.1))
        # The look reports the earliest pending job inserted since the last one (it may
        # include this store's own: a hint may come twice).
        assert await asyncio.wait_for(heard.get(), timeout=10) == soon
    finally:
        watching.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watching
        await store.close()
        await other.close()


async def test_batches_larger_than_one_statement_claim_and_complete_in_order(
    store: SqliteStore,
) -> None:
    await store.enqueue([JobSpec(kind="a", priority=i % 3) for i in range(1000)])
    jobs = await store.claim("w", queues=["default"], limit=900, lease=LEASE)
    assert len(jobs) == 900
    assert [job.priority for job in jobs] == sorted((job.priority for job in jobs), reverse=True)
    tokens = [job.lease.token for job in jobs]
    assert tokens == sorted(tokens) and len(set(tokens)) == 900
    assert (await store.heartbeat([job.lease for job in jobs], lease=LEASE)).lost == []
    assert await store.complete_many([job.lease for job in jobs]) == []
    counts = await store.counts()
    assert (counts.total(JobState.SUCCEEDED), counts.total(JobState.PENDING)) == (900, 100)


async def test_claim_across_many_queues_keeps_claim_order(store: SqliteStore) -> None:
    queues = [f"q{i}" for i in range(40)]
    await store.enqueue(
        [JobSpec(kind="a", queue=queue, priority=i % 5) for i, queue in enumerate(queues)]
    )
    jobs = await store.claim("w", queues=queues, limit=10, lease=LEASE)
    assert [job.priority for job in jobs] == [4] * 8 + [3] * 2
    assert [job.id for job in jobs[:8]] == sorted(job.id for job in jobs[:8])


async def test_prune_with_a_limit_takes_the_oldest_finished_first(
    store: SqliteStore, clock: FakeClock
) -> None:
    results = await store.enqueue([JobSpec(kind="a") for _ in range(3)])
    for result in reversed(results):  # the newest job finishes first
        await store.cancel(result.job.id)
        clock.advance(timedelta(seconds=1))
    assert await store.prune(older_than=clock.now(), limit=1) == 1
    with pytest.raises(JobNotFound):
        await store.get(results[-1].job.id)


async def test_counters_agree_with_the_jobs_table(store: SqliteStore, clock: FakeClock) -> None:
    await _drive_randomly(random.Random(7), store, MemoryStore(clock=clock), clock, steps=300)
    with sqlite3.connect(store.path) as raw:
        kept = raw.execute(
            "SELECT queue, state, n FROM rota_counts WHERE n != 0 ORDER BY 1, 2"
        ).fetchall()
        counted = raw.execute(
            "SELECT queue, state, count(*) FROM rota_jobs GROUP BY 1, 2 ORDER BY 1, 2"
        ).fetchall()
        assert kept == counted
        tallied = raw.execute(
            "SELECT second, state, n FROM rota_finished_per_second WHERE n != 0 ORDER BY 1, 2"
        ).fetchall()
        finished = raw.execute(
            "SELECT finished_at - finished_at % 1000000, state, count(*) FROM rota_jobs "
            "WHERE state IN ('succeeded', 'dead', 'cancelled') GROUP BY 1, 2 ORDER BY 1, 2"
        ).fetchall()
        assert tallied == finished


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
async def test_matches_the_reference_store_over_random_operations(
    store: SqliteStore, clock: FakeClock, seed: int
) -> None:
    """Every verb, applied in the same random order to MemoryStore and SqliteStore with one
    clock, returns equal results (or raises the same error)."""
    await _drive_randomly(random.Random(seed), store, MemoryStore(clock=clock), clock, steps=250)


async def _drive_randomly(
    rnd: random.Random, store: SqliteStore, reference: MemoryStore, clock: FakeClock, steps: int
) -> None:
    start = clock.now()
    leases: list[Any] = []

    async def both(verb: str, *args: Any, **kwargs: Any) -> Any:
        outcomes: list[tuple[Any, ...]] = []
        for target in (reference, store):
            try:
                outcomes.append(("returned", await getattr(target, verb)(*args, **kwargs)))
            except Exception as error:
                outcomes.append(("raised", type(error), str(error)))
        assert outcomes[0] == outcomes[1], f"{verb}{args}{kwargs}"
        return outcomes[0][1] if outcomes[0][0] == "returned" else None

    def a_filter() -> JobFilter:
        states = rnd.choice([None, frozenset(rnd.sample(list(JobState), rnd.randint(0, 2)))])
        return JobFilter(
            states=states,
            kind=rnd.choice([None, None, "a", "b"]),
            queue=rnd.choice([None, None, "default", "mail"]),
            tenant=rnd.choice([None, None, "t1"]),
            search=rnd.choice([None] * 6 + ["k1", "3", "7"]),
        )

    def a_spec() -> JobSpec:
        fields: dict[str, Any] = {
            "kind": rnd.choice("ab"),
            "queue": rnd.choice(["default", "mail"]),
            "priority": rnd.choice([0, 0, 5, -5]),
            "max_attempts": rnd.randint(1, 3),
            "payload": {"i": rnd.randint(0, 9)},
        }
        if rnd.random() < 0.3:
            fields["unique_key"] = rnd.choice(["k1", "k2", "k3"])
        if rnd.random() < 0.2:
            fields["delay"] = timedelta(seconds=rnd.randint(0, 30))
        if rnd.random() < 0.2:
            fields["schedule"] = "s"
            fields["slot_at"] = start + timedelta(minutes=rnd.randint(0, 3))
        if rnd.random() < 0.2:
            fields["tenant"] = "t1"
        return JobSpec(**fields)

    for _ in range(steps):
        verb = rnd.choice(
            ["enqueue", "claim"] * 3
            + ["complete", "complete_many", "fail", "snooze", "release", "heartbeat"] * 2
            + ["retry", "cancel", "bulk_retry", "bulk_cancel", "rescue", "prune", "advance"]
            + ["list_jobs", "counts", "count_jobs", "throughput", "attempts", "get", "workers"]
        )
        lease = rnd.choice(leases) if leases else None
        if verb == "enqueue":
            await both("enqueue", [a_spec() for _ in range(rnd.randint(1, 4))])
        elif verb == "claim":
            queues = rnd.choice([["default"], ["mail"], ["default", "mail"]])
            claimed = await both(
                "claim",
                rnd.choice(["w1", "w2"]),
                queues=queues,
                limit=rnd.randint(0, 5),
                lease=timedelta(seconds=rnd.randint(5, 30)),
            )
            leases += [job.lease for job in claimed or []]
        elif verb == "complete" and lease:
            await both("complete", lease)
        elif verb == "fail" and lease:
            await both(
                "fail",
                lease,
                error=rnd.choice(["boom", "x" * 9000]),
                traceback=rnd.choice([None, "tb"]),
                retry_in=timedelta(seconds=rnd.randint(0, 20)),
                permanent=rnd.random() < 0.2,
            )
        elif verb == "snooze" and lease:
            await both("snooze", lease, timedelta(seconds=rnd.randint(0, 20)))
        elif verb == "release" and lease:
            await both("release", lease)
        elif verb in ("complete_many", "heartbeat") and leases:
            some = rnd.sample(leases, min(len(leases), rnd.randint(1, 5)))
            if verb == "heartbeat":
                await both("heartbeat", some, lease=timedelta(seconds=rnd.randint(5, 30)))
            else:
                await both("complete_many", some)
        elif verb == "retry":
            await both("retry", rnd.randint(1, 40), max_attempts=rnd.choice([None, 2, 5]))
        elif verb == "cancel":
            await both("cancel", rnd.randint(1, 40))
        elif verb in ("bulk_retry", "bulk_cancel"):
            await both(verb, a_filter(), limit=rnd.randint(0, 5))
        elif verb == "rescue":
            await both("rescue", limit=rnd.randint(1, 4))
        elif verb == "prune":
            # No limit below the number of candidates: which ones go first is not the contract's.
            older_than = clock.now() - timedelta(seconds=rnd.randint(0, 60))
            await both("prune", older_than=older_than, limit=1000)
        elif verb == "advance":
            clock.advance(
                timedelta(seconds=rnd.choice([1, 3, 10, 31]), microseconds=rnd.choice([0, 1]))
            )
        elif verb == "list_jobs":
            a, cursor = a_filter(), None
            while page := await both("list_jobs", a, cursor=cursor, limit=rnd.randint(1, 7)):
                if (cursor := page.next_cursor) is None:
                    break
        elif verb == "count_jobs":
            await both("count_jobs", a_filter(), limit=rnd.randint(0, 20))
        elif verb == "throughput":
            bucket = timedelta(seconds=rnd.choice([1, 10, 60]), microseconds=rnd.choice([0, 7]))
            await both("throughput", since=start, bucket=bucket)
        elif verb in ("attempts", "get"):
            await both(verb, rnd.randint(1, 40))
        elif verb == "counts":
            await both("counts")
        elif verb == "workers":
            name = rnd.choice(["w1", "w2"])
            info = WorkerInfo(name=name, host="h", pid=1, queues=("default",), concurrency=2)
            action = rnd.choice(["register", "beat", "deregister", "list", "prune"])
            if action == "register":
                await both("register_worker", info)
            elif action == "beat":
                await both("beat_worker", name)
            elif action == "deregister":
                await both("deregister_worker", name)
            elif action == "list":
                await both("list_workers")
            else:
                await both("prune_workers", older_than=clock.now() - timedelta(seconds=30))
    await both("list_jobs", JobFilter(), limit=500)
    await both("counts")


async def test_a_long_result_is_kept_out_of_its_job_s_row_and_deleted_with_it(
    store: SqliteStore, clock: FakeClock
) -> None:
    await store.enqueue([JobSpec(kind="report")])
    [job] = await store.claim("w", queues=["default"], limit=1, lease=timedelta(seconds=30))
    text = '"' + "x" * 100_000 + '"'
    assert await store.complete_many([job.lease], results=[text]) == []
    assert (await store.get(job.id)).result == "x" * 100_000
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("SELECT result FROM rota_jobs WHERE id = ?", (job.id,)).fetchone() == (
            None,
        ), "the row stays small"
        assert conn.execute("SELECT count(*) FROM rota_results").fetchone() == (1,)
    conn.close()
    clock.advance(timedelta(days=2))
    assert await store.prune(older_than=clock.now() - timedelta(days=1)) == 1
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("SELECT count(*) FROM rota_results").fetchone() == (0,)
    conn.close()


async def test_an_estimated_count_reads_a_sample_not_every_job(tmp_path: Path) -> None:
    """Past the exact threshold the estimate reads evenly spread windows of ids (about 17,000
    rows), not every job: asked together, min(id) and max(id) alone once scanned them all."""
    from rota.store.sqlite import reads

    path = tmp_path / "many.db"
    store = SqliteStore(path)
    await store.migrate()
    await store.close()
    conn = sqlite3.connect(path)
    try:
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000)"
            " INSERT INTO rota_jobs (state, queue, kind, priority, run_at, attempt,"
            " max_attempts, created_at, payload) SELECT 'pending', 'default',"
            " 'k' || (i % 10), 0, 0, 0, 3, 0, '{}' FROM n"
        )
        conn.execute(
            "INSERT INTO rota_counts (queue, state, n) VALUES ('default', 'pending', 300000)"
        )
        conn.commit()
        # What reading every job costs (no index has the payload).
        scan, _ = vm_steps(
            conn,
            lambda: conn.execute(
                "SELECT count(*) FROM rota_jobs WHERE payload = 'none'"
            ).fetchone(),
        )
        kind = JobFilter(kind="k3", states=frozenset({JobState.PENDING}))
        steps, counted = vm_steps(conn, lambda: reads.count_or_estimate(conn, kind, 1000))
    finally:
        conn.close()
    assert counted.estimated and 25_000 <= counted.n <= 35_000, counted
    # A scan of every job reads 300,000 rows; the estimate about 18,000, each a little more
    # work (the filter and the window): well under half the scan's work.
    assert steps < scan / 2, (steps, scan)
