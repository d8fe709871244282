"""Lookups the dashboard makes stay index lookups on PostgreSQL whatever the table holds:
the plans, read with sequential scans disabled, use an index for each condition. (How fast
they are at millions of jobs is measured in bench/, not asserted here.)"""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from rota.domain.job import JobSpec, JobState
from rota.store import open_store
from rota.store.base import JobFilter
from rota.store.postgres.filters import where

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
