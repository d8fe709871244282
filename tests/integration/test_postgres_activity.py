"""The activity tallies on PostgreSQL at scale: the pages' reads keep to their window under the
generic plan, and completions racing on the same tally rows never deadlock.

A page reads the activity tallies (029_activity) of one queue or kind over at most a day;
whatever the number of jobs (the tallies hold none), and however many days of tallies are
kept, its statements must reach that queue's or kind's minutes of the window through an index
condition, never by reading the table: a day of 30 queues here, the rows counted by EXPLAIN
ANALYZE.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from rota.domain.job import JobSpec
from rota.store import Store, open_store
from rota.store.postgres.activity import _FILTERS
from rota.store.postgres.queries import query
from tests.support.plans import nodes

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
LOAD = [
    # A day of minutes of 30 queues, each of one of 10 kinds, two duration buckets a minute.
    """
INSERT INTO rota_activity (minute, queue, kind, bucket, succeeded, failed, dead, waited)
SELECT %(now)s - m * interval '1 minute', 'q' || q, 'k' || (q %% 10), b, 5, 1, 0, 3
FROM generate_series(1, 1440) m, generate_series(0, 29) q, generate_series(9, 10) b
""",
    """
INSERT INTO rota_error_minutes (minute, queue, kind, fingerprint, sample, n)
SELECT %(now)s - m * interval '1 minute', 'q' || q, 'k' || (q %% 10), 'boom N', 'boom 1', 1
FROM generate_series(1, 1440) m, generate_series(0, 29) q
""",
    "ANALYZE rota_activity",
    "ANALYZE rota_error_minutes",
]
_PARAMETER = re.compile(r"%\((\w+)\)s")
TYPES = {
    "since": "timestamptz",
    "now": "timestamptz",
    "width_s": "integer",
    "queue": "text",
    "kind": "text",
    "limit": "integer",
}


def generic_plan(url: str, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The nodes of the plan ``name`` (filtered by the keys of ``params`` among queue and
    kind) runs under once prepared with its parameters open and run 8 times, with ANALYZE."""
    where = _FILTERS["queue" in params, "kind" in params]
    text = query(name).rstrip(";").replace("{filter}", where)
    names = list(dict.fromkeys(_PARAMETER.findall(text)))
    text = _PARAMETER.sub(lambda match: f"${names.index(match.group(1)) + 1}", text)
    declared = sql.SQL(", ").join(sql.SQL(TYPES[n]) for n in names)
    arguments = sql.SQL(", ").join(sql.Literal(params[n]) for n in names)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("PREPARE planned ({}) AS {}").format(declared, sql.SQL(text)))  # type: ignore[arg-type]
        for _ in range(8):
            conn.execute(sql.SQL("EXECUTE planned({})").format(arguments)).fetchall()
        [(plan,)] = conn.execute(
            sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE planned({})").format(arguments)
        ).fetchall()
    return nodes(plan[0]["Plan"])


def table_reads(plan: list[dict[str, Any]], table: str) -> list[dict[str, Any]]:
    return [node for node in plan if node.get("Relation Name") == table]


@pytest.mark.parametrize(
    ("name", "table", "by", "rows_per_minute"),
    [
        ("activity", "rota_activity", {"queue": "q7"}, 2),
        ("activity", "rota_activity", {"kind": "k3"}, 6),
        ("top_errors", "rota_error_minutes", {"queue": "q7"}, 1),
        ("top_errors", "rota_error_minutes", {"kind": "k3"}, 3),
    ],
)
async def test_a_page_reads_only_its_queue_or_kind_minutes_of_the_window(
    pg_url: str, name: str, table: str, by: dict[str, str], rows_per_minute: int
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for statement in LOAD:
            conn.execute(statement, {"now": NOW})  # type: ignore[arg-type]
    params = {"since": NOW - timedelta(hours=1), "now": NOW, "width_s": 60, "limit": 10, **by}
    plan = generic_plan(pg_url, name, params)
    reads = table_reads(plan, table)
    assert reads, plan
    for node in reads:
        # Through an index whose condition holds the window (the planner picks the primary
        # key's minutes or the queue's or kind's index): the rows outside it are never reached.
        assert node["Node Type"] in ("Index Scan", "Index Only Scan", "Bitmap Heap Scan"), node
        condition = node.get("Index Cond") or node.get("Recheck Cond") or ""
        assert "minute" in condition and next(iter(by)) in condition, node
        # The hour's minutes of that queue or kind, and nothing removed by a filter.
        assert node["Actual Rows"] <= 60 * rows_per_minute, node
        assert node.get("Rows Removed by Filter", 0) == 0, node


async def test_concurrent_completions_of_the_same_buckets_never_deadlock(pg_url: str) -> None:
    # Batches of jobs of three kinds, completed by four stores at once, each batch listing its
    # jobs in another order: every statement upserts the same (minute, queue, kind, bucket)
    # rows, and takes them in key order whatever the order of its jobs.
    stores = [open_store(pg_url) for _ in range(4)]
    try:
        kinds = ["a", "b", "c"]
        await stores[0].enqueue([JobSpec(kind=kinds[i % 3]) for i in range(4 * 8 * 30)])

        async def complete(store: Store, reverse: bool) -> int:
            done = 0
            for _ in range(8):
                jobs = await store.claim(
                    "w", queues=["default"], limit=30, lease=timedelta(minutes=5)
                )
                leases = [job.lease for job in (reversed(jobs) if reverse else jobs)]
                assert await store.complete_many(leases) == []
                done += len(jobs)
            return done

        done = await asyncio.gather(*(complete(s, i % 2 == 1) for i, s in enumerate(stores)))
        assert sum(done) == 4 * 8 * 30
        now = await stores[0].now()
        since = now.replace(second=0, microsecond=0) - timedelta(minutes=1)
        buckets = await stores[0].activity(since=since, bucket=timedelta(minutes=2))
        assert sum(b.succeeded for b in buckets) == 4 * 8 * 30
    finally:
        for store in stores:
            await store.close()
