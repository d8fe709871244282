"""T44: a deep backlog. One million pending jobs due in the future and 10,000 due now, loaded
with INSERT ... SELECT generate_series and ANALYZEd: the claim (the very statement and
parameters PostgresStore.claim sends) is planned on the due-jobs partial index with no
sequential scan of rota_jobs, and its latency stays within 2x of the same claim on a table
holding only the 10,000 due jobs (medians; compared, never an absolute bound).
"""

from __future__ import annotations

import json
import statistics
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from rota.store import open_store
from rota.store.postgres.store import PostgresStore
from tests.support.plans import CLAIM_CALLS, nodes, routine_plan, sent_params
from tests.support.postgres import Server

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

LOAD = [
    """
INSERT INTO rota_jobs (kind, queue, payload, priority, run_at, max_attempts, created_at)
SELECT 'k', 'default', '{}', (g %% 5)::smallint, now() + interval '1 day' + g * interval '1 ms',
       5, now()
FROM generate_series(1, %(future)s) AS g
""",
    """
INSERT INTO rota_jobs (kind, queue, payload, priority, run_at, max_attempts, created_at)
SELECT 'k', 'default', '{}', (g %% 5)::smallint, now() - g * interval '1 ms', 5, now()
FROM generate_series(1, %(due)s) AS g
""",
    "ANALYZE rota_jobs",
]


async def claim_params(url: str) -> dict[str, Any]:
    """The parameters PostgresStore.claim sends to a claim's functions (the first it calls,
    rota_claim_all; every one takes the same), captured, not run."""
    store = open_store(url)
    assert isinstance(store, PostgresStore)
    seen = sent_params(store, run=False)
    await store.claim("w", queues=["default"], limit=10, lease=timedelta(seconds=30))
    await store.close()
    return seen["claim_all_call"]


def claim_pages(url: str, params: dict[str, object], call: str) -> int:
    """The buffers (pages, from cache or disk) one claim by ``call`` touches under the plan
    it runs, by EXPLAIN ANALYZE in a transaction rolled back after it."""
    top = routine_plan(url, call, params, analyze=True)["Plan"]
    return int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))


async def claim_latency(url: str, rounds: int = 12) -> float:
    store = open_store(url)
    taken = []
    for _ in range(rounds):
        started = time.perf_counter()
        jobs = await store.claim("w", queues=["default"], limit=10, lease=timedelta(seconds=30))
        taken.append(time.perf_counter() - started)
        assert len(jobs) == 10
    await store.close()
    return statistics.median(taken[6:])  # warm: past the first, which prepared it and made its plan


@pytest.mark.timeout(240)
async def test_the_claim_uses_its_index_and_reads_as_little_over_a_million_pending_jobs(
    pg_server: Server,
) -> None:
    with pg_server.database() as deep, pg_server.database() as small:
        started = time.monotonic()
        for url, future in ((deep, 1_000_000), (small, 0)):
            with psycopg.connect(url, autocommit=True) as conn:
                for statement in LOAD:
                    conn.execute(statement, {"future": future, "due": 10_000})  # type: ignore[arg-type]
        print(f"loaded 1,010,000 rows in {time.monotonic() - started:.1f}s")

        params = await claim_params(deep)
        # The walks read the due index; rota_claim_all, the first due jobs by run_at.
        for call, index in [(call, "rota_jobs_due") for call in CLAIM_CALLS] + [
            ("claim_all_call", "rota_jobs_pending_run_at")
        ]:
            plan = routine_plan(deep, call, params)
            found = nodes(plan["Plan"])
            scans = [(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in found]
            assert not [s for s in scans if s[0] == "Seq Scan" and s[1] == "rota_jobs"], json.dumps(
                plan, indent=1
            )[:4000]
            assert any(s[2] == index for s in scans), (call, scans)

            # Its cost, counted in pages rather than timed: a claim over a million jobs not
            # yet due reads about what it reads over none (an index level more at most).
            deep_pages = claim_pages(deep, await claim_params(deep), call)
            small_pages = claim_pages(small, await claim_params(small), call)
            print(f"{call} reads {deep_pages} pages deep, {small_pages} small")
            assert deep_pages <= 2 * small_pages + 50, (call, deep_pages, small_pages)
        deep_s = await claim_latency(deep)
        small_s = await claim_latency(small)
        print(f"claim median: {deep_s * 1000:.2f} ms deep, {small_s * 1000:.2f} ms small")
