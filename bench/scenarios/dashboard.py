"""Dashboard at scale: every list, count, search and filter route of the API (in process,
with httpx's ASGI transport: no network) over 10,000,000 jobs in PostgreSQL with a week of day
partitions of finished jobs, every statement under its generic plan. rota only: the peers'
dashboards are separate products.

The jobs, the routes and the generic plans are ``bench.dashboard_scale``'s (its docstring);
this scenario times each route ``CALLS_PER_RUN`` times a run after two warm-up calls.
``python -m bench.dashboard_scale`` measures the same routes at 1,000,000 jobs, and SQLite.
"""

from __future__ import annotations

from bench import dashboard_scale
from bench.harness import Bench, execute
from bench.systems import Rota

NAME = "dashboard"
TITLE = "Dashboard routes with 10,000,000 jobs over a week of days (PostgreSQL)"
CALLS_PER_RUN = 20


async def run(bench: Bench) -> None:
    count = bench.settings.size(10_000_000, 100_000)
    system = Rota(bench.settings)
    await system.setup()
    try:
        await system.reset()
        await execute(
            system.dsn,
            f'ALTER DATABASE "{system.database}" SET plan_cache_mode = force_generic_plan',
        )
        await dashboard_scale.load_postgres(system.dsn, count)
        for _ in range(bench.runs):
            found = await dashboard_scale.timings(system.dsn, count, calls=CALLS_PER_RUN, warmup=2)
            for label in dashboard_scale.requests(count):
                for elapsed in found[label]:
                    bench.record(
                        NAME, label.replace("`", ""), "rota", elapsed, unit="ms", better="lower"
                    )
    finally:
        await system.close()
