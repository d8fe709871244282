"""Statements stay index lookups on PostgreSQL whatever the table holds: the dashboard's
lookups (plans read with sequential scans disabled use an index for each condition), and the
claim and the prune beside jobs not yet due and finished ones (plans as the planner picks them
on an analysed table). How fast they are at millions of jobs is measured in bench/ (bench.scale),
not asserted here."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.domain.schedule import Rule, ScheduleSpec
from rota.store import open_store
from rota.store.postgres.filters import guarded, where
from rota.store.postgres.queries import query
from rota.store.records import JobFilter
from tests.support.plans import CLAIM_CALLS, nodes, routine_plan, sent_params

pytestmark = pytest.mark.postgres


def plan(url: str, filter: JobFilter) -> str:
    query = sql.SQL("EXPLAIN SELECT id FROM rota_jobs WHERE {}").format(where(filter))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        rows = conn.execute(query).fetchall()
    return "\n".join(row[0] for row in rows)


async def test_a_search_by_id_or_unique_key_reads_indexes_only(pg_url: str) -> None:
    store = open_store(pg_url)
    try:
        [result] = await store.enqueue([JobSpec(kind="hook", unique_key="order-7")])
        held = result.job
        await store.cancel(held.id)  # finished: no longer covered by the active-key index
        assert (await store.get(held.id)).state is JobState.CANCELLED
        found = await store.list_jobs(JobFilter(search="order-7"), limit=10)
        assert [job.id for job in found.jobs] == [held.id]
    finally:
        await store.close()

    for search in ("order-7", str(held.id)):
        text = plan(pg_url, JobFilter(search=search))
        assert "Seq Scan" not in text, text
        # Each table of jobs (019_finished_by_day) is read by its own index on unique_key.
        tables = set(re.findall(r" on (rota_jobs_\w+) rota_jobs", text))
        assert "rota_jobs_active" in tables, text
        for table in tables:
            assert f"{table}_unique_key" in text, text


def analyzed(url: str, statement: sql.Composable | str, params: dict[str, object]) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        explain = sql.SQL("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {}").format(
            statement if isinstance(statement, sql.Composable) else sql.SQL(statement)  # type: ignore[arg-type]
        )
        rows = conn.execute(explain, params).fetchall()
    return "\n".join(row[0] for row in rows)


async def test_a_firing_batch_looks_up_the_last_jobs_of_its_own_schedules_only(
    pg_url: str,
) -> None:
    store = open_store(pg_url)
    try:
        every = Rule.every(timedelta(hours=1))
        await store.upsert_schedules(
            [ScheduleSpec(name=f"s{n:03}", kind="k", rule=every) for n in range(500)]
        )
        assert len(await store.fire_due(limit=500)) == 500  # each has a last job now
        later = await store.now() + timedelta(hours=2)
    finally:
        await store.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO rota_jobs (kind, queue, payload, run_at, max_attempts, created_at)"
            " SELECT 'k', 'default', '{}', now(), 3, now() FROM generate_series(1, 20000)"
        )
        conn.execute("ANALYZE")

    # All 500 are due again; a batch of 100 is picked and locked before its last jobs are
    # looked up, so no table of jobs is read for the 400 others (at an hour's top, with
    # millions of finished jobs, that lookup for every due schedule at every batch made
    # firing 2,000 schedules three times as slow).
    text = analyzed(pg_url, query("due_schedules"), {"now": later, "limit": 100, "workflows": []})
    read = [
        int(rows) * int(loops)
        for rows, loops in re.findall(r" on rota_jobs\w*.*rows=(\d+) loops=(\d+)", text)
    ]
    assert read, text
    assert sum(read) <= 100, text


async def test_a_filter_no_job_matches_reads_no_job(pg_url: str) -> None:
    store = open_store(pg_url)
    try:
        await store.enqueue([JobSpec(kind="hook", queue="mail") for _ in range(20)])
        nothing = JobFilter(kind="no-such-kind")
        assert (await store.list_jobs(nothing)).jobs == []
        assert (
            await store.count_jobs(JobFilter(queue="mail", states=frozenset({JobState.DEAD}))) == 0
        )
        assert len((await store.list_jobs(JobFilter(kind="hook", queue="mail"))).jobs) == 20
    finally:
        await store.close()

    for filter in (
        nothing,
        JobFilter(queue="no-such-queue"),
        JobFilter(kind="hook", states=frozenset({JobState.DEAD})),
    ):
        statement = guarded(
            sql.SQL("SELECT id FROM rota_jobs WHERE {} ORDER BY id DESC LIMIT 51").format(
                where(filter)
            ),
            filter,
        )
        text = analyzed(pg_url, statement, {})
        # The maintained counts (017_counts) answer first, above the LIMIT: no part of the
        # jobs' plan runs (nor any parallel worker starts).
        assert "rota_counts" in text, text
        assert not re.search(r"Workers Launched: [1-9]", text), text
        jobs_scans = [line for line in text.splitlines() if " on rota_jobs" in line]
        assert jobs_scans, text
        assert all("never executed" in line for line in jobs_scans), text


async def test_the_oldest_due_job_is_one_index_entry(pg_url: str) -> None:
    store = open_store(pg_url)
    try:
        await store.enqueue([JobSpec(kind="hook", queue=f"q{n % 3}") for n in range(30)])
        assert (await store.counts()).oldest_due_at is not None
    finally:
        await store.close()
    text = analyzed(pg_url, query("oldest_due"), {"now": None})
    assert "rota_jobs_pending_run_at" in text, text
    assert "rows=1 " in text.split("rota_jobs_pending_run_at", 1)[1], text  # one entry read


# ---------------------------------------------------------------------- claim and prune

TENANTS = 2_000

LOAD = [
    # One due job for each of many tenants.
    """
INSERT INTO rota_jobs (kind, queue, payload, tenant, run_at, max_attempts, created_at)
SELECT 'k', 'default', '{}', 't' || lpad(g::text, 5, '0'), now() - interval '1 second', 3, now()
FROM generate_series(1, %(tenants)s) AS g
""",
    # Jobs not yet due, in the groups the claim walks.
    """
INSERT INTO rota_jobs (kind, queue, payload, tenant, run_at, max_attempts, created_at)
SELECT 'k', 'default', '{}', 't' || lpad((1 + g %% 997)::text, 5, '0'),
       now() + interval '1 hour' + g * interval '1 ms', 3, now()
FROM generate_series(1, 50000) AS g
""",
    # Jobs finished two days ago.
    """
INSERT INTO rota_jobs (state, kind, queue, payload, run_at, attempt, max_attempts, created_at,
                       started_at, finished_at)
SELECT 'succeeded', 'k', 'default', '{}', t, 1, 3, t, t, t
FROM generate_series(1, 50000) AS g,
     LATERAL (SELECT now() - interval '2 days' + g * interval '1 ms' AS t) AS at
""",
    "INSERT INTO rota_finished_per_minute SELECT now() - interval '2 days', 'succeeded', 50000",
    "ANALYZE rota_jobs",
]


def named(found: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(node type, relation or index) of each node."""
    return [
        (node["Node Type"], node.get("Index Name") or node.get("Relation Name")) for node in found
    ]


def scans(url: str, statement: str, params: dict[str, object]) -> list[tuple[str, str | None]]:
    """(node type, relation or index) of every node of the statement's plan."""
    with psycopg.connect(url, autocommit=True) as conn:
        [(found,)] = conn.execute(
            "EXPLAIN (FORMAT JSON) " + statement,  # type: ignore[arg-type]
            params,
        ).fetchall()
    return named(nodes(found[0]["Plan"]))


#: The tables of finished jobs and their indexes (019_finished_by_day).
FINISHED_TABLES = re.compile(r"^rota_jobs_(\d{8}|until_|finished)")


def job_table_scans(found: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """The sequential scans of a plan over tables of jobs."""
    return [
        (node, name)
        for node, name in found
        if node == "Seq Scan" and name is not None and name.startswith("rota_jobs")
    ]


def only_active_jobs(found: list[tuple[str, str | None]]) -> bool:
    """Whether a plan reads no table of finished jobs: a claim's reads rota_jobs_active."""
    return not any(name and FINISHED_TABLES.match(name) for _, name in found)


def claim_scans(url: str, params: dict[str, object], call: str) -> list[tuple[str, str | None]]:
    """The nodes of the plan a claim's function (``call``) runs under: its generic plan."""
    return named(nodes(routine_plan(url, call, params)["Plan"]))


async def drained(store: Any, jobs: int) -> None:
    """Enqueue ``jobs`` jobs, then claim and complete every one: the active jobs' table is
    left with its pages and no live row."""
    await store.enqueue([JobSpec(kind="k") for _ in range(jobs)])
    while claimed := await store.claim(
        "w", queues=["default"], limit=1_000, lease=timedelta(seconds=30)
    ):
        assert await store.complete_many([job.lease for job in claimed]) == []


async def test_a_fair_claim_over_many_tenants_fills_its_batch_from_the_due_index(
    pg_url: str,
) -> None:
    """Beside jobs not yet due and finished jobs, a claim of 250 over 2,000 tenants with one
    due job each takes 250 jobs of 250 tenants, reading the due-jobs index: no sequential scan
    of rota_jobs, so the rows not due or finished cost nothing."""
    from rota.store.postgres.store import PostgresStore

    with psycopg.connect(pg_url, autocommit=True) as conn:
        for statement in LOAD:
            conn.execute(statement, {"tenants": TENANTS})  # type: ignore[arg-type]
    store = open_store(pg_url)
    assert isinstance(store, PostgresStore)
    try:
        sent = sent_params(store)
        jobs = await store.claim("w", queues=["default"], limit=250, lease=timedelta(seconds=30))
        assert len(jobs) == 250
        assert len({job.tenant for job in jobs}) == 250
    finally:
        await store.close()
    for call in CLAIM_CALLS:
        found = claim_scans(pg_url, sent["claim_fresh_call"], call)
        assert not job_table_scans(found), (call, found)
        assert any(name == "rota_jobs_due" for _, name in found), (call, found)
        assert only_active_jobs(found), (call, found)


async def test_a_claim_after_a_burst_into_a_table_analysed_all_finished_keeps_the_due_index(
    pg_url: str,
) -> None:
    """The statistics say no job is pending (analysed while every job had finished), then a
    burst arrives before any autoanalyze: the claim still walks rota_jobs_due and never plans
    over rota_jobs_pending_run_at (which, planned in, read and sorted every pending job per
    claim), while the oldest-due query still reads that index's first entry."""
    from rota.store.postgres.store import PostgresStore

    store = open_store(pg_url)
    assert isinstance(store, PostgresStore)
    try:
        await drained(store, 2_000)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("ANALYZE rota_jobs")
        for _ in range(10):
            await store.enqueue([JobSpec(kind="k") for _ in range(2_000)])

        sent = sent_params(store)
        assert (
            len(await store.claim("w", queues=["default"], limit=250, lease=timedelta(seconds=30)))
            == 250
        )
    finally:
        await store.close()
    for call in CLAIM_CALLS:
        found = claim_scans(pg_url, sent["claim_fresh_call"], call)
        assert all(name != "rota_jobs_pending_run_at" for _, name in found), (call, found)
        assert any(name == "rota_jobs_due" for _, name in found), (call, found)
    oldest = scans(pg_url, query("oldest_due"), {"now": None})
    assert ("Index Scan", "rota_jobs_pending_run_at") in oldest or (
        "Index Only Scan",
        "rota_jobs_pending_run_at",
    ) in oldest, oldest


async def test_a_claim_runs_this_versions_statement_under_one_generic_plan(pg_url: str) -> None:
    """A claim calls rota_claim_fresh (after rota_claim_all, while its queues look idle;
    rota_claim only after a lease expired), which migrate made from this version's statements, each with plan_cache_mode = force_generic_plan as its
    own setting: PL/pgSQL keeps the statement's plan for the session, so it is made once per
    connection. Left to itself PostgreSQL would make a custom plan for every claim (its
    parameters make the generic plan's estimate look worse), about as long to make as the
    claim takes to run."""
    from rota.store.postgres.queries import ROUTINES
    from rota.store.postgres.store import PostgresStore

    store = PostgresStore(pg_url, pool_min=1, pool_max=1)
    try:
        sent = sent_params(store)
        await store.enqueue([JobSpec(kind="k") for _ in range(30)])
        claimed = await store.claim("w", queues=["default"], limit=10, lease=timedelta(seconds=30))
        assert len(claimed) == 10
    finally:
        await store.close()
    assert "claim_fresh_call" in sent and "claim" not in sent, sent
    assert "claim_call" not in sent, sent  # no lease had expired
    for call in ROUTINES:
        function = ROUTINES[call].function
        with psycopg.connect(pg_url) as conn:
            [(config, source)] = conn.execute(
                "SELECT proconfig, prosrc FROM pg_proc WHERE proname = %s", [function]
            ).fetchall()
        assert config == [
            "plan_cache_mode=force_generic_plan",
            "enable_seqscan=off",
            "enable_bitmapscan=off",
            "enable_sort=off",
            "jit=off",
        ], function
        assert source in ROUTINES[call].definition(), function


async def test_a_claim_planned_on_an_empty_table_leases_a_burst_by_tuple_id(
    pg_url: str,
) -> None:
    """rota_claim keeps the plan it made first for its session. Made while the statistics say
    the table is empty (a fresh database, or one analysed between bursts), the claim's UPDATE
    found its rows by reading the table: joined by id with the table outermost, or through the
    (state, id) index with the batch's ids as a filter, a read of every pending job per claim
    (measured: a tenth of the drain rate at 20,000 pending jobs). It finds each row where the
    claim's lock did, by a TID scan of the active jobs' table, whatever the statistics say."""
    from rota.store.postgres.store import PostgresStore

    store = PostgresStore(pg_url, pool_min=1, pool_max=1)
    try:
        # Drained and vacuumed: the table keeps its pages, its statistics say no row.
        await drained(store, 5_000)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE rota_jobs_active")
        await store.enqueue([JobSpec(kind="k") for _ in range(5_000)])
        sent = sent_params(store)
        claimed = await store.claim("w", queues=["default"], limit=250, lease=timedelta(seconds=30))
        assert len(claimed) == 250
    finally:
        await store.close()
    for call in CLAIM_CALLS:  # each explained in a transaction rolled back after it
        found = nodes(routine_plan(pg_url, call, sent["claim_fresh_call"], analyze=True)["Plan"])
        [update] = [node for node in found if node.get("Operation") == "Update"]
        [under] = [
            node
            for node in nodes(update)
            if node.get("Relation Name") == "rota_jobs_active" and node is not update
        ]
        assert under["Node Type"] == "Tid Scan", (call, under)
        assert under["Actual Rows"] == 250 and not under.get("Rows Removed by Filter"), under
        assert not job_table_scans(named(found)), (call, named(found))
        assert only_active_jobs(named(found)), (call, named(found))


async def test_a_claim_into_an_idle_queue_reads_no_more_due_jobs_than_its_batch(
    pg_url: str,
) -> None:
    """rota_claim_all, which a store tries while its queues seem idle, reads the first due
    jobs of every queue by run_at, at most one more than its batch: planned on statistics
    that said the table was empty, beside 5,000 due jobs of another queue and 2,000 not yet
    due, a claim of ten from an idle queue holding one job reads 11 index entries, finds a
    crowd and leaves the claim to the fair walk (which takes the job). Its locks and its
    update find their rows by tuple id."""
    from rota.store.postgres.store import PostgresStore

    store = PostgresStore(pg_url, pool_min=1, pool_max=1)
    try:
        await drained(store, 2_000)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE rota_jobs_active")
        await store.enqueue([JobSpec(kind="k", queue="busy") for _ in range(5_000)])
        await store.enqueue(
            [JobSpec(kind="k", queue="busy", delay=timedelta(hours=1)) for _ in range(2_000)]
        )
        await store.enqueue([JobSpec(kind="k", queue="idle")])
    finally:
        await store.close()
    # A store of its own: the one that drained the table found crowds and skips rota_claim_all
    # for a while (CROWDED_SKIP).
    store = PostgresStore(pg_url, pool_min=1, pool_max=1)
    try:
        sent = sent_params(store)
        claimed = await store.claim("w", queues=["idle"], limit=10, lease=timedelta(seconds=30))
        assert [job.queue for job in claimed] == ["idle"]
    finally:
        await store.close()
    assert set(sent) == {"claim_all_call", "claim_fresh_call"}, sent
    found = nodes(
        routine_plan(pg_url, "claim_all_call", sent["claim_all_call"], analyze=True)["Plan"]
    )
    [few] = [node for node in found if node.get("Index Name") == "rota_jobs_pending_run_at"]
    assert few["Node Type"] == "Index Scan" and few["Actual Rows"] == 11, few
    tid = [node for node in found if node["Node Type"] == "Tid Scan"]
    assert [node["Relation Name"] for node in tid] == ["rota_jobs_active"] * 2, named(found)
    assert not job_table_scans(named(found)), named(found)
    assert only_active_jobs(named(found)), named(found)


async def test_a_claim_looks_for_expired_leases_without_reading_the_running_jobs(
    pg_url: str,
) -> None:
    """Every claim first asks whether a lease it could take over has expired. Planned on
    statistics taken while no job ran, beside 2,000 running jobs whose leases hold, the answer
    is one read of rota_jobs_leases that stops at its first entry (the oldest lease, not yet
    expired): before, it read every running job's entry of the (state, id) index, so a claim
    cost more the more jobs ran (rota_claim, run once a lease has expired, still reads them).
    No claim's plan is compiled by JIT: a claim is short, and a plan node the claim's
    settings disable (a sort it cannot avoid) counts in its cost far above JIT's thresholds,
    and JIT would compile every claim, for far longer than the claim runs."""
    from rota.store.postgres.store import PostgresStore

    store = PostgresStore(pg_url, pool_min=1, pool_max=1)
    try:
        await store.enqueue([JobSpec(kind="k") for _ in range(3_000)])
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE rota_jobs_active")
        running = await store.claim(
            "w", queues=["default"], limit=2_000, lease=timedelta(minutes=5)
        )
        assert len(running) == 2_000
        sent = sent_params(store)
        claimed = await store.claim("w", queues=["default"], limit=250, lease=timedelta(seconds=30))
        assert len(claimed) == 250
    finally:
        await store.close()
    # rota_claim, which takes expired leases over, runs only once one has expired.
    for call in ("claim_all_call", "claim_fresh_call"):
        top = routine_plan(pg_url, call, sent["claim_fresh_call"], analyze=True)
        assert "JIT" not in top, (call, top["JIT"])
        found = nodes(top["Plan"])
        assert "rota_jobs_active_state_id" not in {name for _, name in named(found)}, call
        [stale] = [node for node in found if node.get("Index Name") == "rota_jobs_leases"]
        assert stale["Actual Rows"] == 0 and stale["Shared Hit Blocks"] <= 3, (call, stale)


async def test_prune_finds_old_finished_jobs_by_index(pg_url: str) -> None:
    """The prune's batch is found by an index over finished jobs, not by reading the table:
    each batch costs about its own rows, however many jobs are pending or finished later."""
    from rota.store.postgres.queries import query

    with psycopg.connect(pg_url, autocommit=True) as conn:
        for statement in LOAD:
            conn.execute(statement, {"tenants": TENANTS})  # type: ignore[arg-type]
        [(now,)] = conn.execute("SELECT now()").fetchall()
    params: dict[str, object] = {"older_than": now - timedelta(days=1), "limit": 5_000}
    # Jobs finished two days ago, before any day table existed: the default partition's,
    # deleted row by row (a day table goes whole: test_postgres_retention.py).
    statement = sql.SQL(query("prune_rows")).format(
        leaf=sql.Identifier("rota_jobs_finished_default")
    )
    with psycopg.connect(pg_url, autocommit=True) as conn:
        statement_text = statement.as_string(conn)
    found = scans(pg_url, statement_text, params)
    assert not job_table_scans(found), found
    store = open_store(pg_url)
    try:
        assert await store.prune(older_than=now - timedelta(days=1), limit=5_000) == 5_000
    finally:
        await store.close()


async def test_a_burst_into_an_idle_table_has_its_statistics_by_the_next_rescue(
    pg_url: str,
) -> None:
    """Drained and vacuumed, the active jobs' table keeps its pages (a plan made while it is
    empty still prices a sequential scan as the table it was) and its statistics say no row;
    after a burst, the next rescue analyses it, and the rescue after that leaves it be."""
    from rota.store.postgres.store import PostgresStore
    from rota.store.postgres.upkeep import refresh_statistics

    store = PostgresStore.from_url(pg_url)

    def statistics() -> tuple[int, int]:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            [(pages, tuples)] = conn.execute(
                "SELECT relpages, reltuples::bigint FROM pg_class"
                " WHERE oid = 'rota_jobs_active'::regclass"
            ).fetchall()
        return int(pages), int(tuples)

    try:
        await drained(store, 5_000)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE rota_jobs_active")
        pages, tuples = statistics()
        assert pages > 0 and tuples == 0, (pages, tuples)

        await store.enqueue([JobSpec("k") for _ in range(20_000)])
        assert statistics()[1] == 0
        await store.rescue()
        assert statistics()[1] >= 10_000, statistics()
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            assert not await refresh_statistics(conn)
    finally:
        await store.close()


async def test_a_rescue_vacuums_the_active_jobs_once_their_dead_rows_outnumber_the_live(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Autovacuum comes by once a minute at most, and a busy queue leaves millions of dead
    rows in that time: a rescue vacuums the active jobs' table once its dead rows reach a floor
    and outnumber the live ones, and not again until they do."""
    from rota.store.postgres import upkeep
    from rota.store.postgres.store import PostgresStore

    with psycopg.connect(pg_url, autocommit=True) as conn:
        # Only the rescues vacuum here: an autovacuum between them would take the dead rows.
        conn.execute("ALTER TABLE rota_jobs_active SET (autovacuum_enabled = off)")
    store = PostgresStore(pg_url, pool_min=1, pool_max=1)

    async def rescue_and_count() -> int:
        async with store._connection() as conn:  # its statistics now, not within a second
            await conn.execute("SELECT pg_stat_force_next_flush()")
        await store.rescue()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            [(count,)] = conn.execute(
                "SELECT vacuum_count FROM pg_stat_user_tables"
                " WHERE relid = 'rota_jobs_active'::regclass"
            ).fetchall()
        return int(count)

    try:
        await drained(store, 2_000)  # a claim and an end each: 4,000 dead row versions
        await store.enqueue([JobSpec(kind="k", delay=timedelta(hours=1)) for _ in range(100)])
        before = await rescue_and_count()  # below the default floor: a busy few seconds' worth
        monkeypatch.setattr(upkeep, "VACUUM_FLOOR", 1_000)
        await drained(store, 2_000)
        assert await rescue_and_count() == before + 1
        assert await rescue_and_count() == before + 1  # nothing dead since

        # Rows an open snapshot still sees cannot be removed: one vacuum finds them, and the
        # next waits until as many more have died, not the next rescue.
        with psycopg.connect(pg_url) as holder:
            holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            holder.execute("SELECT count(*) FROM rota_schedules").fetchone()
            await drained(store, 2_000)
            assert await rescue_and_count() == before + 2
            await drained(store, 100)
            assert await rescue_and_count() == before + 2
            await drained(store, 1_000)
            assert await rescue_and_count() == before + 3
    finally:
        await store.close()


async def test_a_vacuum_of_the_active_jobs_cleans_the_due_index_however_few_rows_died(
    pg_url: str,
) -> None:
    """Beside many jobs not yet due, a drained burst leaves dead rows on few of the table's
    pages, below the 2% under which a vacuum skips its index pass by default; the claims'
    groups start with those jobs' entries. The active jobs' table cleans its indexes on every
    vacuum (021), so the due index is left with the live jobs alone."""
    from rota.store.postgres.store import PostgresStore

    future = 200_000
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO rota_jobs (kind, queue, payload, run_at, max_attempts, created_at)"
            " SELECT 'k', 'default', '{}', now() + interval '1 hour' + g * interval '1 ms', 3,"
            " now() FROM generate_series(1, %(future)s) AS g",
            {"future": future},
        )
        conn.execute("VACUUM ANALYZE rota_jobs_active")
    store = PostgresStore(pg_url, pool_min=1, pool_max=1)
    try:
        await drained(store, 500)
    finally:
        await store.close()
    told: list[str] = []
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.add_notice_handler(lambda notice: told.append(notice.message_primary or ""))
        conn.execute("VACUUM (VERBOSE) rota_jobs_active")
    report = "\n".join(told)
    found = re.search(r"index scan (\w+): \d+ pages from table \(([\d.]+)% of total\)", report)
    assert found is not None, report
    share = float(found.group(2))
    assert share < 2, report  # the burst's dead rows sit on few pages...
    assert found.group(1) == "needed", report  # ...and the index pass ran all the same
    due = re.search(r'index "rota_jobs_due": pages: \d+ in total, (\d+) newly deleted', report)
    assert due is not None and int(due.group(1)) > 0, report  # the drained jobs' entries went


class Explaining:
    """A limited claim's connection that, before running claim_ids, explains it (EXPLAIN
    ANALYZE in a savepoint rolled back): its plan under the claim transaction's own settings,
    for the rows the claim chose."""

    def __init__(self, conn: Any, plans: list[dict[str, Any]]) -> None:
        self._conn = conn
        self._plans = plans

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def execute(self, statement: Any, params: Any = None, **options: Any) -> Any:
        if statement == query("claim_ids"):
            async with self._conn.transaction(force_rollback=True):
                cursor = await self._conn.execute(
                    "EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params
                )
                [(found,)] = await cursor.fetchall()
                self._plans.append(found[0]["Plan"])
        return await self._conn.execute(statement, params, **options)


async def test_a_limited_claim_leases_its_choice_by_tuple_id(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a limit the claim chooses in Python and then leases its choice (claim_ids), in a
    transaction with the claim's planner settings: on a table whose statistics say empty,
    the lease is a TID scan of the chosen rows, not a read of every pending job's entry."""
    from rota.domain.flow import Limit, LimitScope
    from rota.store.postgres import limits
    from rota.store.postgres import store as module
    from rota.store.postgres.store import PostgresStore

    plans: list[dict[str, Any]] = []

    async def explained(conn: Any, params: dict[str, Any], limit: int) -> Any:
        return await limits.claim_limited(Explaining(conn, plans), params, limit)

    store = PostgresStore(pg_url, pool_min=1, pool_max=1)
    try:
        await store.set_limit(Limit(LimitScope.KIND, "other", 5, None, None))
        await drained(store, 5_000)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE rota_jobs_active")
        await store.enqueue([JobSpec(kind="k") for _ in range(5_000)])
        monkeypatch.setattr(module, "claim_limited", explained)
        claimed = await store.claim("w", queues=["default"], limit=250, lease=timedelta(seconds=30))
        assert len(claimed) == 250
    finally:
        await store.close()
    [plan] = plans
    [under] = [node for node in nodes(plan) if node.get("Relation Name") == "rota_jobs_active"]
    assert under["Node Type"] == "Tid Scan", under
    assert under["Actual Rows"] == 250 and not under.get("Rows Removed by Filter"), under
