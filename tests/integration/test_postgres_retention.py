"""Finished jobs by day on PostgreSQL (019_finished_by_day): a day goes whole, with what
depended on its jobs (counts, workflow edges, result waits); a day the cutoff falls in stays;
a day in use is left for the next pass; days are made ahead by the rescuer; a row moved to
another partition under a waiting statement makes the statement run again, not fail."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, time, timedelta

import psycopg
import pytest

from rota.domain.errors import JobNotFound, LeaseLost
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.domain.workflow import Workflow, chain, chord
from rota.store.postgres.queries import migrations, queries
from rota.store.postgres.store import PostgresStore
from rota.store.postgres.upkeep import DAYS_AHEAD
from tests.support.migrate import postgres_schema_before
from tests.support.postgres import Server
from tests.support.processes import eventually

pytestmark = pytest.mark.postgres

LEASE = timedelta(seconds=30)


def day_table(at: datetime) -> str:
    return "rota_jobs_" + at.astimezone(UTC).strftime("%Y%m%d")


async def finished_tables(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> list[str]:
    cursor = await conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'rota_jobs_finished'::regclass ORDER BY 1"
    )
    return [str(name) for (name,) in await cursor.fetchall()]


async def table_of(conn: psycopg.AsyncConnection[tuple[object, ...]], job_id: int) -> str:
    cursor = await conn.execute(
        "SELECT tableoid::regclass::text FROM rota_jobs WHERE id = %s", [job_id]
    )
    row = await cursor.fetchone()
    assert row is not None, f"job {job_id} is gone"
    return str(row[0])


async def counted(store: PostgresStore) -> dict[JobState, int]:
    return {state: n for state, n in (await store.counts()).by_state.items() if n}


async def grouped(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> dict[JobState, int]:
    cursor = await conn.execute("SELECT state, count(*) FROM rota_jobs GROUP BY state")
    return {JobState(str(state)): int(str(n)) for state, n in await cursor.fetchall()}


async def finish(store: PostgresStore, specs: list[JobSpec]) -> list[int]:
    """Enqueue, claim and complete ``specs``: succeeded now, by the database's clock."""
    ids = [result.job.id for result in await store.enqueue(specs)]
    claimed = await store.claim("w", queues=["default"], limit=len(specs), lease=LEASE)
    assert sorted(job.id for job in claimed) == sorted(ids)
    assert await store.complete_many([job.lease for job in claimed]) == []
    return ids


async def test_a_finished_day_goes_whole_with_its_counts_and_edges(pg_url: str) -> None:
    """Jobs that finished today are in today's table; a prune whose cutoff is past the end of
    today drops the table (however many jobs, whatever the limit), the counts lose its jobs,
    a workflow parent's edges go with it, and active jobs and other days stay."""
    store = PostgresStore.from_url(pg_url)
    watcher = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        await store.rescue()
        now = await store.now()
        done = await finish(store, [JobSpec("k") for _ in range(30)])
        assert await table_of(watcher, done[0]) == day_table(now)
        parent, child = await store.enqueue_workflow(chain(JobSpec("first"), JobSpec("then")))
        [held] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
        assert held.id == parent.id
        await store.complete_many([held.lease])
        assert (await store.get(child.id)).state is JobState.PENDING
        waiting = (await store.enqueue([JobSpec("later", delay=timedelta(hours=1))]))[0].job
        await store.fold_counts()
        assert await counted(store) == await grouped(watcher)

        # The day the cutoff falls in stays whole: nothing is deleted row by row from it.
        last = max(job.finished_at or now for job in await store.get_many(done))
        assert await store.prune(older_than=last + timedelta(microseconds=1), limit=5) == 0
        assert (await store.get(done[0])).state is JobState.SUCCEEDED

        assert await store.prune(older_than=now + timedelta(days=1, hours=1), limit=5) == 31
        assert day_table(now) not in await finished_tables(watcher)
        for job_id in (done[0], done[-1], parent.id):
            with pytest.raises(JobNotFound):
                await store.get(job_id)
        assert (await store.get(child.id)).state is JobState.PENDING
        assert (await store.get(waiting.id)).state is JobState.PENDING
        cursor = await watcher.execute("SELECT count(*) FROM rota_job_deps")
        assert await cursor.fetchone() == (0,)
        await store.fold_counts()
        assert await counted(store) == await grouped(watcher) == {JobState.PENDING: 2}
        # The days after it are still there.
        tomorrow = day_table(now + timedelta(days=1))
        assert tomorrow in await finished_tables(watcher)
    finally:
        await watcher.close()
        await store.close()


async def test_a_day_in_use_is_left_for_the_next_pass(pg_url: str) -> None:
    """A transaction that read finished jobs holds its lock: the drop gives up at once,
    changes nothing, and the pass after it drops the day."""
    store = PostgresStore.from_url(pg_url)
    reader = await psycopg.AsyncConnection.connect(pg_url)
    try:
        now = await store.now()
        await finish(store, [JobSpec("k") for _ in range(3)])
        await reader.execute("SELECT count(*) FROM rota_jobs WHERE state = 'succeeded'")
        cutoff = now + timedelta(days=1, hours=1)
        assert await store.prune(older_than=cutoff) == 0
        await store.fold_counts()
        assert (await store.counts()).by_state[JobState.SUCCEEDED] == 3
        await reader.commit()
        assert await store.prune(older_than=cutoff) == 3
        await store.fold_counts()
        assert (await store.counts()).by_state[JobState.SUCCEEDED] == 0
    finally:
        await reader.close()
        await store.close()


async def test_two_pruners_drop_a_day_once(pg_url: str) -> None:
    """Every worker runs a pruner: two passes at once drop the day once between them, and
    its jobs leave the counts once."""
    a, b = PostgresStore.from_url(pg_url), PostgresStore.from_url(pg_url)
    try:
        now = await a.now()
        await finish(a, [JobSpec("k") for _ in range(7)])
        cutoff = now + timedelta(days=1, hours=1)
        assert (
            sum(await asyncio.gather(a.prune(older_than=cutoff), b.prune(older_than=cutoff))) == 7
        )
        await a.fold_counts()
        assert (await a.counts()).by_state[JobState.SUCCEEDED] == 0
    finally:
        await a.close()
        await b.close()


async def test_a_finished_parent_moved_to_another_day_keeps_its_edges(pg_url: str) -> None:
    """A finished workflow job whose finish time is rewritten (by hand) moves to another
    day's table: a move, not a delete, so its children keep their edges to it."""
    store = PostgresStore.from_url(pg_url)
    admin = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        now = await store.now()
        parent, child = await store.enqueue_workflow(chain(JobSpec("p"), JobSpec("c")))
        [held] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
        await store.complete(held.lease)
        await admin.execute(
            "UPDATE rota_jobs SET finished_at = finished_at + interval '1 day' WHERE id = %s",
            [parent.id],
        )
        assert await table_of(admin, parent.id) == day_table(now + timedelta(days=1))
        assert await store.parent_results(child.id) == {parent.id: None}
        assert (await store.get(child.id)).state is JobState.PENDING
    finally:
        await admin.close()
        await store.close()


async def test_days_are_made_ahead_by_the_rescuer(pg_url: str) -> None:
    store = PostgresStore.from_url(pg_url)
    admin = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        now = await store.now()
        ahead = [day_table(now + timedelta(days=n)) for n in range(DAYS_AHEAD + 1)]
        assert set(ahead) <= set(await finished_tables(admin))
        gone = ahead[-1]
        await admin.execute(f"ALTER TABLE rota_jobs_finished DETACH PARTITION {gone}")
        await admin.execute(f"DROP TABLE {gone}")
        assert gone not in await finished_tables(admin)
        await store.rescue()
        assert gone in await finished_tables(admin)
    finally:
        await admin.close()
        await store.close()


async def test_a_day_made_late_keeps_its_jobs_in_the_default_partition(pg_url: str) -> None:
    """Today's table missing (no worker rescued for days): today's jobs finish into the
    default partition, the rescuer cannot make today's table over them and says nothing,
    and retention deletes them row by row."""
    store = PostgresStore.from_url(pg_url)
    admin = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        now = await store.now()
        today = day_table(now)
        await admin.execute(f"ALTER TABLE rota_jobs_finished DETACH PARTITION {today}")
        await admin.execute(f"DROP TABLE {today}")
        done = await finish(store, [JobSpec("k") for _ in range(4)])
        assert await table_of(admin, done[0]) == "rota_jobs_finished_default"
        await store.rescue()
        assert today not in await finished_tables(admin)
        assert await store.prune(older_than=now + timedelta(hours=1), limit=3) == 3
        assert await store.prune(older_than=now + timedelta(hours=1), limit=3) == 1
        await store.fold_counts()
        assert (await store.counts()).by_state[JobState.SUCCEEDED] == 0
    finally:
        await admin.close()
        await store.close()


async def _waiting_for_lock(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> bool:
    cursor = await conn.execute(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    return await cursor.fetchone() == (1,)


async def test_a_completion_that_meets_a_moved_row_runs_again(pg_url: str) -> None:
    """A batch completion waits on a job that another transaction cancels, which moves its row
    to a finished table: the completion does not fail with 40001 but runs again, completes
    the rest of its batch, and reports the cancelled job's lease lost."""
    store = PostgresStore.from_url(pg_url)
    canceller = await psycopg.AsyncConnection.connect(pg_url)
    watcher = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        await store.enqueue([JobSpec("k") for _ in range(3)])
        held = await store.claim("w", queues=["default"], limit=3, lease=LEASE)
        victim = held[1]
        await canceller.execute(
            "UPDATE rota_jobs SET state = 'cancelled', finished_at = now() WHERE id = %s",
            [victim.id],
        )
        completing = asyncio.create_task(store.complete_many([job.lease for job in held]))
        await eventually(lambda: _waiting_for_lock(watcher), what="the completion waiting")
        await canceller.commit()
        assert await completing == [victim.lease]
        states = {job.id: (await store.get(job.id)).state for job in held}
        assert states == {
            held[0].id: JobState.SUCCEEDED,
            victim.id: JobState.CANCELLED,
            held[2].id: JobState.SUCCEEDED,
        }
    finally:
        await canceller.close()
        await watcher.close()
        await store.close()


async def test_a_heartbeat_that_meets_a_moved_row_reports_it_lost(pg_url: str) -> None:
    store = PostgresStore.from_url(pg_url)
    finisher = await psycopg.AsyncConnection.connect(pg_url)
    watcher = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        await store.enqueue([JobSpec("k") for _ in range(2)])
        held = await store.claim("w", queues=["default"], limit=2, lease=LEASE)
        await finisher.execute(
            "UPDATE rota_jobs SET state = 'succeeded', finished_at = now() WHERE id = %s",
            [held[0].id],
        )
        beating = asyncio.create_task(store.heartbeat([job.lease for job in held], lease=LEASE))
        await eventually(lambda: _waiting_for_lock(watcher), what="the heartbeat waiting")
        await finisher.commit()
        beat = await beating
        assert beat.lost == [held[0].lease]
        with pytest.raises(LeaseLost):
            await store.complete(held[0].lease)
        await store.complete(held[1].lease)
    finally:
        await finisher.close()
        await watcher.close()
        await store.close()


async def test_a_workflow_written_on_a_parent_that_moves_under_it_goes_on(pg_url: str) -> None:
    """A workflow enqueued on the caller's own transaction waits on its running parent's lock
    while the parent succeeds (its row moves to a finished table): the enqueue runs that step
    again in a savepoint, the caller's transaction is not aborted (its earlier write commits
    with the graph), and the child, whose parent has succeeded, is pending at once."""
    store = PostgresStore.from_url(pg_url)
    finisher = await psycopg.AsyncConnection.connect(pg_url)
    caller = await psycopg.AsyncConnection.connect(pg_url)
    watcher = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        [parent] = await store.enqueue([JobSpec("parent")])
        [held] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
        assert held.id == parent.job.id
        await finisher.execute(
            "UPDATE rota_jobs SET state = 'succeeded', finished_at = now() WHERE id = %s",
            [held.id],
        )
        await caller.execute("CREATE TABLE orders (id int)")
        await caller.execute("INSERT INTO orders VALUES (7)")
        graph = Workflow()
        graph.add(JobSpec("child"), after=[held.id])
        writing = asyncio.create_task(store.enqueue_workflow_on(caller, graph))
        await eventually(lambda: _waiting_for_lock(watcher), what="the enqueue waiting")
        await finisher.commit()
        [child] = await writing
        await caller.commit()
        assert (await store.get(child.id)).state is JobState.PENDING
        cursor = await watcher.execute("SELECT id FROM orders")
        assert await cursor.fetchall() == [(7,)]
    finally:
        for conn in (finisher, caller, watcher):
            await conn.close()
        await store.close()


async def test_a_workflow_parent_finishing_settles_its_children_across_the_move(
    pg_url: str,
) -> None:
    """The workflow trigger fires for a parent whose row moved to a finished table: a chord's
    child becomes pending when its last parent succeeds, and a dead parent cancels the child
    of another chord; retrying that parent re-arms it (the row moves back)."""
    store = PostgresStore.from_url(pg_url)
    try:
        _a, _b, joined = await store.enqueue_workflow(
            chord([JobSpec("a"), JobSpec("b")], JobSpec("j"))
        )
        held = await store.claim("w", queues=["default"], limit=2, lease=LEASE)
        await store.complete_many([held[0].lease])
        assert (await store.get(joined.id)).waiting_on == 1
        await store.complete_many([held[1].lease])
        assert (await store.get(joined.id)).state is JobState.PENDING

        first, then = await store.enqueue_workflow(
            chain(JobSpec("f", max_attempts=1), JobSpec("t"))
        )
        claimed = await store.claim("w", queues=["default"], limit=10, lease=LEASE)
        [failing] = [job for job in claimed if job.id == first.id]
        assert await store.fail(failing.lease, error="boom", retry_in=timedelta(0)) is JobState.DEAD
        assert (await store.get(then.id)).state is JobState.CANCELLED
        await store.retry(first.id)
        assert (await store.get(then.id)).state is JobState.WAITING
    finally:
        await store.close()


async def test_a_slot_is_unique_after_its_job_finished(pg_url: str) -> None:
    """A schedule slot's job finished (so it sits in a finished table, which no unique index
    shares with the active one): enqueueing the slot again finds it and inserts nothing."""
    store = PostgresStore.from_url(pg_url)
    try:
        slot = datetime(2026, 1, 1, tzinfo=UTC)
        spec = JobSpec("tick", schedule="hourly", slot_at=slot)
        [first] = await store.enqueue([spec])
        [held] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
        await store.complete(held.lease)
        again = await asyncio.gather(*(store.enqueue([spec]) for _ in range(4)))
        assert all(result.duplicate and result.job.id == first.job.id for [result] in again)
    finally:
        await store.close()


# ---------------------------------------------------------------------- the upgrade to 019

#: Jobs in every state, as an earlier release left them: finished ones three days ago, today
#: and in an unlikely future (a clock that ran ahead), one of them a schedule slot's; unique
#: keys held by active jobs; a workflow whose parent is running.
AFTER_READING = "ALTER TABLE rota_jobs DROP COLUMN heartbeats, DROP COLUMN last_heartbeat_at"
BEFORE_019 = [
    # The job columns this version's statements read that came after 019 (030's heartbeats),
    # for the jobs to be read before the upgrade; dropped again before it (AFTER_READING).
    "ALTER TABLE rota_jobs ADD COLUMN heartbeats integer NOT NULL DEFAULT 0, "
    "ADD COLUMN last_heartbeat_at timestamptz",
    """
INSERT INTO rota_jobs (kind, queue, payload, state, run_at, attempt, max_attempts, created_at,
                       started_at, finished_at, unique_key, schedule, slot_at, result)
SELECT 'old', 'default', json_build_object('n', g), s, now() - interval '3 days', 1, 3,
       now() - interval '3 days', now() - interval '3 days',
       CASE WHEN s IN ('succeeded', 'dead', 'cancelled') THEN now() - f END,
       CASE WHEN s = 'pending' THEN 'key-' || g || '-' || f END,
       CASE WHEN g = 1 AND s = 'succeeded' AND f = interval '3 days' THEN 'hourly' END,
       CASE WHEN g = 1 AND s = 'succeeded' AND f = interval '3 days'
            THEN timestamptz '2026-01-01 00:00+00' END,
       CASE WHEN s = 'succeeded' THEN '{"ok": true}'::json END
FROM generate_series(1, 20) AS g,
     unnest(ARRAY['pending', 'succeeded', 'dead', 'cancelled']) AS s,
     unnest(ARRAY[interval '3 days', interval '1 minute', interval '-2 days']) AS f
""",
    "INSERT INTO rota_finished_per_minute SELECT now() - interval '3 days', 'succeeded', 20",
]


async def test_an_upgrade_to_019_keeps_every_job_and_what_holds_on_them(
    pg_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database at 018 with jobs in every state, a running lease, a workflow and counts
    migrates to 019: every job reads back the same, the counts match, the lease completes,
    the workflow's child is released by its parent, ids go on from where they were, a
    finished slot stays taken, and the old finished jobs are pruned row by row, then their
    table goes whole."""
    with pg_server.database(migrated=False) as url:
        postgres_schema_before(url, "019")
        store = PostgresStore.from_url(url)
        admin = await psycopg.AsyncConnection.connect(url, autocommit=True)
        try:
            for statement in BEFORE_019:
                await admin.execute(statement.encode())
            parent, child = await store.enqueue_workflow(chain(JobSpec("p"), JobSpec("c")))
            # Before 019 no table of active jobs existed for rota_claim_all or rota_claim_fresh
            # to name: a release of then claimed through rota_claim alone, as this claim does.
            with monkeypatch.context() as patched:
                patched.setitem(queries(), "claim_all_call", queries()["claim_call"])
                patched.setitem(queries(), "claim_fresh_call", queries()["claim_call"])
                [running] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
            cursor = await admin.execute("SELECT id FROM rota_jobs ORDER BY id")
            ids = [int(str(job_id)) for (job_id,) in await cursor.fetchall()]
            before = await store.get_many(ids)
            assert len(before) == 20 * 4 * 3 + 2

            await admin.execute(AFTER_READING)
            upgrades = [v for v, _ in migrations() if v[:3].isdigit() and v >= "019"]
            assert upgrades[0] == "019_finished_by_day"
            assert await store.pending_migrations() == upgrades
            assert await store.migrate() == upgrades

            assert await store.get_many(ids) == before
            await store.fold_counts()
            assert await counted(store) == await grouped(admin)
            tables = await finished_tables(admin)
            now = await store.now()
            legacy = "rota_jobs_until_" + (now + timedelta(days=1)).strftime("%Y%m%d")
            assert legacy in tables
            assert day_table(now + timedelta(days=1)) in tables
            # Finished "in the future" before the upgrade: routed to the table of that day.
            assert day_table(now + timedelta(days=2)) in {
                await table_of(admin, job.id)
                for job in before
                if job.finished_at and job.finished_at > now
            }

            if running.id == parent.id:
                await store.complete(running.lease)
                assert (await store.get(child.id)).state is JobState.PENDING
            else:  # an old pending job was first in line
                await store.complete(running.lease)
            [fresh] = await store.enqueue([JobSpec("new")])
            assert fresh.job.id > max(ids)
            [again] = await store.enqueue(
                [JobSpec("tick", schedule="hourly", slot_at=datetime(2026, 1, 1, tzinfo=UTC))]
            )
            assert again.duplicate and again.job.kind == "old"

            # Three days old: row by row, from the upgraded table, in batches.
            assert await store.prune(older_than=now - timedelta(days=1), limit=50) == 50
            assert await store.prune(older_than=now - timedelta(days=1), limit=50) == 10
            assert await store.prune(older_than=now - timedelta(days=1), limit=50) == 0
            # Once all of it is older than the cutoff, the rest goes with the table: today's
            # finished jobs, and the lease completed since the upgrade.
            tomorrow = datetime.combine((now + timedelta(days=1)).date(), time(), UTC)
            assert await store.prune(older_than=tomorrow) == 60 + 1
            assert legacy not in await finished_tables(admin)
            await store.fold_counts()
            assert await counted(store) == await grouped(admin)
        finally:
            await admin.close()
            await store.close()
