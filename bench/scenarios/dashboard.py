"""Dashboard at scale: with 1,000,000 jobs in PostgreSQL, the jobs list's first page
and the overview counts, through the store and through the HTTP API (in process, with httpx's
ASGI transport: no network). rota only: the peers' dashboards are separate products.

The million jobs: 940,000 succeeded, 20,000 dead, 30,000 pending (10,000 of them due), 10,000
pending in another queue; one ``INSERT ... SELECT generate_series``, then ``VACUUM ANALYZE``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from bench.harness import Bench, execute
from bench.systems import Rota

NAME = "dashboard"
TITLE = "Dashboard queries with 1,000,000 jobs (PostgreSQL)"
CALLS_PER_RUN = 5

_LOAD = """
INSERT INTO rota_jobs (kind, queue, payload, state, run_at, attempt, max_attempts, lease_token,
                       worker, created_at, started_at, finished_at, last_error)
SELECT 'noop',
       CASE WHEN g % 100 = 0 THEN 'reports' ELSE 'default' END,
       '{{}}',
       s.state,
       CASE WHEN s.state = 'pending' AND g % 3 = 0 THEN now() + interval '1 hour'
            ELSE now() - (g || ' seconds')::interval END,
       CASE WHEN s.state = 'pending' THEN 0 ELSE 1 END, 3,
       CASE WHEN s.state = 'pending' THEN NULL ELSE g END,
       CASE WHEN s.state = 'pending' THEN NULL ELSE 'loader' END,
       now() - (g || ' seconds')::interval,
       CASE WHEN s.state = 'pending' THEN NULL ELSE now() - (g || ' seconds')::interval END,
       CASE WHEN s.state = 'pending' THEN NULL ELSE now() - (g || ' seconds')::interval END,
       CASE WHEN s.state = 'dead' THEN 'ValueError: boom' END
FROM generate_series(1, {count}) AS g
CROSS JOIN LATERAL (SELECT CASE WHEN g % 50 = 0 THEN 'dead'
                                WHEN g % 25 = 1 THEN 'pending'
                                ELSE 'succeeded' END AS state) AS s
"""


async def run(bench: Bench) -> None:
    from rota.api.app import create_app
    from rota.api.settings import ApiSettings
    from rota.client import Client
    from rota.domain.job import JobState
    from rota.store import JobFilter

    count = bench.settings.size(1_000_000, 100_000)
    system = Rota(bench.settings)
    await system.setup()
    try:
        await system.reset()
        await execute(system.dsn, _LOAD.format(count=count))
        await system.vacuum("rota_jobs")
        store = system.app.store
        api = create_app(Client(store), settings=ApiSettings())
        transport = httpx.ASGITransport(app=api, client=("127.0.0.1", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:

            async def get(path: str) -> None:
                response = await http.get(path)
                response.raise_for_status()

            calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
                (
                    "store.list_jobs, first page of 50",
                    lambda: store.list_jobs(JobFilter(), limit=50),
                ),
                (
                    "store.list_jobs, dead jobs, first page",
                    lambda: store.list_jobs(JobFilter(states=frozenset({JobState.DEAD})), limit=50),
                ),
                ("store.counts()", store.counts),
                ("GET /api/jobs", lambda: get("/api/jobs")),
                ("GET /api/jobs?state=dead", lambda: get("/api/jobs?state=dead")),
                ("GET /api/stats", lambda: get("/api/stats")),
            ]
            for label, call in calls:
                await call()  # warm the cache and the connection once
                for _ in range(bench.runs * CALLS_PER_RUN):
                    started = time.perf_counter()
                    await call()
                    elapsed = time.perf_counter() - started
                    bench.record(NAME, label, "rota", 1000 * elapsed, unit="ms", better="lower")
    finally:
        await system.close()
