"""Lookups the dashboard makes stay index lookups on PostgreSQL whatever the table holds:
the plans, read with sequential scans disabled, use an index for each condition. (How fast
they are at millions of jobs is measured in bench/, not asserted here.)"""

from __future__ import annotations

import re

import psycopg
import pytest
from psycopg import sql

from rota.domain.job import JobSpec, JobState
from rota.store import open_store
from rota.store.base import JobFilter
from rota.store.postgres.filters import guarded, where
from rota.store.postgres.queries import query

pytestmark = pytest.mark.postgres


def plan(url: str, filter: JobFilter) -> str:
    clause, params = where(filter)
    query = sql.SQL("EXPLAIN SELECT id FROM rota_jobs WHERE {}").format(clause)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        rows = conn.execute(query, params).fetchall()
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
        assert "rota_jobs_unique_key" in text, text


def analyzed(url: str, statement: sql.Composable | str, params: dict[str, object]) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        explain = sql.SQL("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {}").format(
            statement if isinstance(statement, sql.Composable) else sql.SQL(statement)  # type: ignore[arg-type]
        )
        rows = conn.execute(explain, params).fetchall()
    return "\n".join(row[0] for row in rows)


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
        clause, params = where(filter)
        statement = guarded(
            sql.SQL("SELECT id FROM rota_jobs WHERE {} ORDER BY id DESC LIMIT 51").format(clause),
            filter,
        )
        text = analyzed(pg_url, statement, params)
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
