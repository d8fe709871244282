"""The estimated counts ("about N") stay near the truth where a filter's columns go together.

Past its exact threshold a count of a tenant's (or a schedule's) jobs is the planner's row
estimate (PostgresStore.count_or_estimate). Left to its per-column statistics the planner
takes the tenant, the state, the kind and the queue for independent, and where a tenant's
jobs all sit in one state, of one kind, it was off by up to 14x at a million jobs
(bench/dashboard_scale.py loads such jobs). Each table of rota_jobs carries statistics of
those columns together (031), the day tables made at run time included.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from rota.domain.job_state import JobState
from rota.store import open_store
from rota.store.postgres import filters
from rota.store.records import JobFilter
from tests.support.plans import nodes

pytestmark = pytest.mark.postgres

#: How many jobs each count below counts exactly; past it, the estimate.
EXACT_UP_TO = 100

DAYS = (
    # Three days before today, made at run time as the rescuers make them (019).
    "SELECT rota_jobs_add_day(d::date) FROM generate_series("
    "(now() AT TIME ZONE 'UTC')::date - 3, (now() AT TIME ZONE 'UTC')::date, interval '1 day') d"
)

# 40,000 jobs in one statement: n % 100 decides the state, 25% of the jobs active, the rest
# finished over four days; n % 10 the kind and n % 5 the queue. A third of the jobs come from
# a schedule, whose jobs share a state or two.
JOBS = """
INSERT INTO rota_jobs (state, kind, queue, payload, tenant, schedule, run_at, attempt,
                       max_attempts, created_at, started_at, finished_at)
SELECT s.state, 'k' || (n % 10), 'q' || (n % 5), '{{}}', 't' || ({tenant}),
       CASE WHEN n % 3 = 0 THEN 'every-' || (n % 100 / 10) END,
       at, 1, 3, at, at,
       CASE WHEN s.state IN ('succeeded', 'dead', 'cancelled') THEN at END
FROM generate_series(1, 40000) AS n,
     LATERAL (SELECT now() - ((n / 100) % 4) * interval '1 day' AS at) AS t,
     LATERAL (SELECT CASE WHEN n % 100 < 20 THEN 'pending' WHEN n % 100 < 25 THEN 'running'
                          WHEN n % 100 < 70 THEN 'succeeded' WHEN n % 100 < 90 THEN 'dead'
                          ELSE 'cancelled' END AS state) AS s
"""
#: The tenant n % 100 too: a tenant's jobs all sit in one state, of one kind and one queue.
TOGETHER = "n % 100"
#: Seven jobs in a row a tenant: a tenant's jobs sit in one state or two, of seven kinds (as
#: bench/dashboard_scale.py loads them), some 500 combinations of the four columns a day.
SPREAD = "(n / 7) % 100"


def load(url: str, tenant: str = TOGETHER) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(DAYS)
        conn.execute(JOBS.format(tenant=tenant))  # type: ignore[arg-type]
        conn.execute("ANALYZE rota_jobs")


def only(state: JobState) -> frozenset[JobState]:
    return frozenset({state})


#: Filters whose jobs go together, each matching from 400 to 1,333 jobs.
CORRELATED = [
    JobFilter(tenant="t42", states=only(JobState.SUCCEEDED)),
    JobFilter(tenant="t80", states=only(JobState.DEAD)),
    JobFilter(tenant="t10", states=only(JobState.PENDING)),
    JobFilter(tenant="t22", states=only(JobState.RUNNING)),
    JobFilter(tenant="t22", states=frozenset({JobState.PENDING, JobState.RUNNING})),
    JobFilter(tenant="t42", kind="k2"),
    JobFilter(tenant="t42", kind="k2", states=only(JobState.SUCCEEDED)),
    JobFilter(tenant="t10", queue="q0", states=only(JobState.PENDING)),
    JobFilter(tenant="t95", kind="k5", queue="q0", states=only(JobState.CANCELLED)),
    JobFilter(schedule="every-8", states=only(JobState.DEAD)),
]

#: Filters of tenants and schedules that have jobs, in combinations that match none.
UNMATCHED = [
    JobFilter(tenant="t42", states=only(JobState.DEAD)),
    JobFilter(tenant="t10", states=only(JobState.RUNNING)),
    JobFilter(tenant="t42", states=frozenset({JobState.DEAD, JobState.CANCELLED})),
    JobFilter(tenant="t42", kind="k3"),
    JobFilter(tenant="t42", kind="k2", states=only(JobState.DEAD)),
    JobFilter(schedule="every-5", states=only(JobState.DEAD)),
]


def planned(url: str, filter: JobFilter) -> tuple[int, list[Any]]:
    """The planner's estimate of ``filter``'s jobs (as count_or_estimate asks it) and the
    plan's nodes."""
    with psycopg.connect(url, autocommit=True) as conn:
        [(plan,)] = conn.execute(filters.estimate(filter), prepare=False).fetchall()
    top = plan[0]["Plan"]
    return int(top["Plan Rows"]), nodes(top)


async def assert_estimates(url: str, matching: list[JobFilter], unmatched: list[JobFilter]) -> None:
    """Each of ``matching`` (at least 4 * EXACT_UP_TO jobs) is estimated within twice its
    count; each of ``unmatched`` matches none and is estimated at a few rows."""
    store = open_store(url)
    try:
        for filter in matching:
            truth = await store.count_jobs(filter, limit=10**6)
            assert truth >= 4 * EXACT_UP_TO, (filter, truth)
            counted = await store.count_or_estimate(filter, exact_up_to=EXACT_UP_TO)
            assert counted.estimated, filter
            assert truth / 2 <= counted.n <= truth * 2, (filter, counted.n, truth)
        for filter in unmatched:
            assert await store.count_jobs(filter) == 0, filter
    finally:
        await store.close()
    # A combination that matches nothing is estimated at a few rows (at least one for each
    # table the plan reads), not at the tenant's or schedule's share of the state.
    for filter in unmatched:
        rows, _ = planned(url, filter)
        assert rows < EXACT_UP_TO // 2, (filter, rows)


async def test_an_estimated_count_of_correlated_filters_is_within_twice_the_truth(
    pg_url: str,
) -> None:
    load(pg_url)
    await assert_estimates(pg_url, CORRELATED, UNMATCHED)


async def test_a_tenants_state_is_estimated_well_however_many_kinds_it_spreads_over(
    pg_url: str,
) -> None:
    # More combinations of tenant, state, kind and queue than a list holds: the state tabs
    # under a tenant filter read the list of tenants and states alone.
    load(pg_url, tenant=SPREAD)
    await assert_estimates(
        pg_url,
        [
            JobFilter(tenant="t1", states=only(JobState.PENDING)),
            JobFilter(tenant="t5", states=only(JobState.SUCCEEDED)),
            JobFilter(tenant="t10", states=only(JobState.DEAD)),
            JobFilter(tenant="t13", states=only(JobState.CANCELLED)),
        ],
        [
            JobFilter(tenant="t5", states=only(JobState.DEAD)),
            JobFilter(tenant="t10", states=only(JobState.PENDING)),
            JobFilter(tenant="t42", states=only(JobState.SUCCEEDED)),
        ],
    )


async def test_the_active_jobs_estimate_reads_the_statistics_of_their_table_alone(
    pg_url: str,
) -> None:
    load(pg_url)
    # Pruned to rota_jobs_active, the estimate is that table's statistics' alone.
    for filter, truth in (
        (JobFilter(tenant="t10", states=only(JobState.PENDING)), 400),
        (JobFilter(tenant="t22", kind="k2", queue="q2", states=only(JobState.RUNNING)), 400),
    ):
        rows, plan = planned(pg_url, filter)
        read = {node["Relation Name"] for node in plan if "Relation Name" in node}
        assert read == {"rota_jobs_active"}, plan
        assert truth / 2 <= rows <= truth * 2, (filter, rows)


async def test_every_table_of_jobs_carries_the_statistics_of_its_filtered_columns(
    pg_url: str,
) -> None:
    load(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        leaves = {
            name
            for (name,) in conn.execute(
                "SELECT relid::text FROM pg_partition_tree('rota_jobs') WHERE isleaf"
            ).fetchall()
        }
        # The days made above at run time, the ones made ahead, the default, the active one.
        assert len(leaves) >= 8, leaves
        rows = conn.execute(
            "SELECT s.stxrelid::regclass::text, array_agg(a.attname ORDER BY a.attname),"
            " bool_and(d.stxdmcv IS NOT NULL), bool_and(c.reltuples > 0)"
            " FROM pg_statistic_ext s"
            " JOIN pg_class c ON c.oid = s.stxrelid"
            " JOIN pg_attribute a ON a.attrelid = s.stxrelid AND a.attnum = ANY(s.stxkeys)"
            " LEFT JOIN pg_statistic_ext_data d ON d.stxoid = s.oid AND NOT d.stxdinherit"
            " WHERE s.stxrelid = ANY(%s::regclass[])"
            " GROUP BY s.oid, s.stxrelid",
            [sorted(leaves)],
        ).fetchall()
    carried: dict[str, list[list[str]]] = {}
    for leaf, columns, built, has_rows in rows:
        carried.setdefault(leaf, []).append(columns)
        # ANALYZE built the list of common combinations of every table that holds jobs.
        assert built or not has_rows, (leaf, columns)
    expected = [["kind", "queue", "state", "tenant"], ["schedule", "state"], ["state", "tenant"]]
    assert {leaf: sorted(groups) for leaf, groups in carried.items()} == dict.fromkeys(
        leaves, expected
    )
