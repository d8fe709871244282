"""The job lists' statements keep their plans once PostgreSQL plans them for every call.

A statement prepared on a connection runs under a generic plan after its fifth execution,
one plan for whatever it is given. A list of active jobs must not read the tables of finished
days under that plan, however many days are kept, and a tenant's list must read the tenant's
index rather than every job of a state. Figures at a million jobs: bench/dashboard_scale.py.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from rota.domain.job_state import JobState
from rota.store import open_store
from rota.store.postgres import filters
from rota.store.postgres.queries import LIST_COLUMNS
from rota.store.records import JobFilter
from tests.support.plans import nodes

pytestmark = pytest.mark.postgres

#: The tables of finished jobs (019_finished_by_day): a day's, an upgraded table's, the default.
FINISHED_TABLES = re.compile(r"^rota_jobs_(\d{8}|until_|finished)")

LOAD = [
    # A week of days, made before their jobs finish in them.
    "SELECT rota_jobs_add_day(d::date) FROM generate_series("
    "(now() AT TIME ZONE 'UTC')::date - 7, (now() AT TIME ZONE 'UTC')::date, interval '1 day') d",
    # Jobs finished over the seven whole days before today, and active ones. The week starts
    # at a UTC midnight, not at now() less seven days: a day's table then holds thousands of
    # jobs whatever the hour. Started from now(), the first or the last day held as few as
    # the minutes the hour left it, and a table of a few hundred rows is rightly read whole.
    """
INSERT INTO rota_jobs (state, kind, queue, payload, tenant, run_at, attempt, max_attempts,
                       created_at, started_at, finished_at)
SELECT (ARRAY['succeeded', 'dead', 'cancelled'])[1 + g % 3], 'k', 'default', '{}',
       't' || (g % 10), t, 1, 3, t, t, t
FROM generate_series(1, 20000) AS g,
     LATERAL (SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                     - interval '7 days' + g * interval '30 s' AS t) AS at
""",
    """
INSERT INTO rota_jobs (state, kind, queue, payload, tenant, run_at, max_attempts, created_at)
SELECT 'pending', 'k', 'default', '{}', 't' || (g % 10), now(), 3, now()
FROM generate_series(1, 2000) AS g
""",
    "ANALYZE rota_jobs",
]


def load(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in LOAD:
            conn.execute(statement)  # type: ignore[arg-type]


def generic_plan(
    url: str,
    statement: psycopg.sql.Composable,
    runs: int = 8,
    *,
    analyze: bool = False,
    setup: tuple[str, ...] = (),
) -> list[Any]:
    """The nodes of ``statement``'s plan once prepared and run ``runs`` times on one
    connection (its generic plan from the sixth execution on), as EXPLAIN shows it (and
    runs it, with ``analyze``)."""
    with psycopg.connect(url, autocommit=True) as conn:
        for setting in setup:
            conn.execute(setting)  # type: ignore[arg-type]
        text = statement.as_string(conn)
        conn.execute(f"PREPARE listed AS {text}")  # type: ignore[arg-type]
        for _ in range(runs):
            conn.execute("EXECUTE listed").fetchall()
        options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
        [(found,)] = conn.execute(f"EXPLAIN ({options}) EXECUTE listed").fetchall()  # type: ignore[arg-type]
    return nodes(found[0]["Plan"])


def relations(plan: list[Any]) -> set[str]:
    return {node["Relation Name"] for node in plan if "Relation Name" in node}


async def test_an_active_state_list_never_plans_a_read_of_finished_days(pg_url: str) -> None:
    load(pg_url)
    store = open_store(pg_url)
    try:
        pending = JobFilter(states=frozenset({JobState.PENDING}))
        page = await store.list_jobs(pending, limit=50, previews=True)
        assert len(page.jobs) == 50 and {job.state for job in page.jobs} == {JobState.PENDING}
        deeper = await store.list_jobs(pending, cursor=page.next_cursor, limit=50)
        assert max(job.id for job in deeper.jobs) < min(job.id for job in page.jobs)
    finally:
        await store.close()
    for filter in (
        pending,
        JobFilter(states=frozenset({JobState.PENDING, JobState.RUNNING})),
        JobFilter(states=frozenset({JobState.RUNNING}), tenant="t3"),
    ):
        for after in (None, 10**9):
            statement = filters.page(filter, LIST_COLUMNS, after=after, limit=51)
            read = relations(generic_plan(pg_url, statement))
            assert "rota_jobs_active" in read, read
            assert not {name for name in read if FINISHED_TABLES.match(name)}, read


async def test_a_list_of_a_tenant_without_jobs_reads_no_job(pg_url: str) -> None:
    load(pg_url)
    store = open_store(pg_url)
    try:
        listed = await store.list_jobs(JobFilter(tenant="t3"), limit=500)
        assert len(listed.jobs) == 500 and {job.tenant for job in listed.jobs} == {"t3"}
        assert [job.id for job in listed.jobs] == sorted((j.id for j in listed.jobs), reverse=True)
        assert (await store.list_jobs(JobFilter(tenant="nobody"))).jobs == []
    finally:
        await store.close()
    # A tenant with no job: its list reads no job at all (the tenant's index, 024, holds none
    # of its entries), in no state; it never walks the newest jobs of a state looking for one.
    for nobody in (
        JobFilter(tenant="nobody"),
        JobFilter(tenant="nobody", kind="k"),
        JobFilter(tenant="nobody", states=frozenset({JobState.PENDING, JobState.DEAD})),
    ):
        statement = filters.page(nobody, LIST_COLUMNS, after=None, limit=51)
        plan = generic_plan(pg_url, statement, analyze=True)
        scans = [node for node in plan if node.get("Relation Name", "").startswith("rota_jobs")]
        assert scans, plan
        for node in scans:
            assert node.get("Actual Rows", 0) == 0, node
            assert node.get("Rows Removed by Filter", 0) == 0, node


async def test_a_count_of_a_tenants_jobs_of_a_kind_reads_no_row(pg_url: str) -> None:
    load(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE rota_jobs")
    store = open_store(pg_url)
    try:
        assert await store.count_jobs(JobFilter(tenant="t3", kind="none")) == 0
        assert await store.count_jobs(JobFilter(tenant="t3", kind="k")) == 2_200
    finally:
        await store.close()
    statement = psycopg.sql.SQL("SELECT count(*) FROM rota_jobs WHERE {}").format(
        filters.where(JobFilter(tenant="t3", kind="none", states=frozenset({JobState.DEAD})))
    )
    # A table this small is cheaper read whole: with sequential and bitmap scans off, the plan
    # shows that the tenant's index alone answers (027 carries the kind), no row fetched.
    plan = generic_plan(
        pg_url,
        statement,
        analyze=True,
        setup=("SET enable_seqscan = off", "SET enable_bitmapscan = off"),
    )
    scans = [node for node in plan if node.get("Relation Name", "").startswith("rota_jobs")]
    assert scans, plan
    for node in scans:
        assert node["Node Type"] == "Index Only Scan", node
        assert node.get("Heap Fetches", 0) == 0, node


async def test_a_tenants_list_of_a_kind_checks_the_kind_in_the_index(pg_url: str) -> None:
    load(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        # Another tenant's jobs of a kind and of a queue that tenant t3 has none of.
        conn.execute(
            "INSERT INTO rota_jobs (state, kind, queue, payload, tenant, run_at, attempt,"
            " max_attempts, created_at, started_at, finished_at)"
            " SELECT s, k, q, '{}', 't4', now(), 1, 3, now(), now(), now()"
            " FROM (VALUES ('dead', 'other', 'default'), ('succeeded', 'k', 'elsewhere'))"
            " AS v(s, k, q)"
        )
        conn.execute("VACUUM ANALYZE rota_jobs")
    store = open_store(pg_url)
    try:
        mine = JobFilter(tenant="t3", kind="k")
        page = await store.list_jobs(mine, limit=50, previews=True)
        deeper = await store.list_jobs(mine, cursor=page.next_cursor, limit=50)
        listed = page.jobs + deeper.jobs
        assert len(listed) == 100 and {(j.tenant, j.kind) for j in listed} == {("t3", "k")}
        assert [job.id for job in listed] == sorted((j.id for j in listed), reverse=True)
        dead = JobFilter(tenant="t3", kind="k", states=frozenset({JobState.DEAD}))
        assert {job.state for job in (await store.list_jobs(dead)).jobs} == {JobState.DEAD}
        assert (await store.list_jobs(JobFilter(tenant="t3", kind="none"))).jobs == []
    finally:
        await store.close()
    # The tenant holds hundreds of dead jobs, none of this kind: the plan checks the kind in
    # the tenant's index (027 carries it) and reads no row to learn that none matches.
    for nothing in (
        JobFilter(tenant="t3", kind="other", states=frozenset({JobState.DEAD})),
        JobFilter(tenant="t3", queue="elsewhere", states=frozenset({JobState.SUCCEEDED})),
    ):
        statement = filters.page(nothing, LIST_COLUMNS, after=None, limit=51)
        plan = generic_plan(
            pg_url,
            statement,
            analyze=True,
            setup=("SET enable_seqscan = off", "SET enable_bitmapscan = off"),
        )
        checked = [
            node
            for node in plan
            if node.get("Relation Name", "").startswith("rota_jobs")
            and node.get("Rows Removed by Filter", 0) > 0
        ]
        assert checked, plan
        for node in checked:
            assert node["Node Type"] == "Index Only Scan", node
            assert node.get("Heap Fetches", 0) == 0, node


async def test_a_polled_list_and_count_are_planned_once_per_connection(pg_url: str) -> None:
    """A list's first page and a count, asked again word for word as the dashboard polls
    them, run prepared: planned once per connection. A deeper page, whose cursor makes its
    text new each time, runs unprepared and leaves nothing prepared behind."""
    from rota.store.postgres.store import PostgresStore

    load(pg_url)
    store = PostgresStore(pg_url, pool_min=1, pool_max=1)
    try:
        queue = JobFilter(queue="default")
        first = await store.list_jobs(queue, limit=20, previews=True)
        for _ in range(3):
            assert (await store.list_jobs(queue, limit=20, previews=True)).jobs == first.jobs
            await store.list_jobs(queue, cursor=first.next_cursor, limit=20, previews=True)
            await store.count_jobs(JobFilter(tenant="t3"), limit=100)
        async with store._connection() as conn:
            rows = await (
                await conn.execute(
                    "SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements"
                    " WHERE statement LIKE %s",
                    ["%FROM rota_jobs WHERE%"],
                    prepare=False,
                )
            ).fetchall()
    finally:
        await store.close()
    # The count prepared and run 3 times, the first page 4 times, on its one plan (a
    # statement without parameters has one); no deeper page.
    assert sorted(runs for _, runs in rows) == [3, 4], rows
    assert not any(" id < " in text for text, _ in rows), rows
