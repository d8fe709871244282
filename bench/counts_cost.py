"""What the maintained counts (migration 017) cost the writes: ``python -m bench.counts_cost``.

One throwaway production-configured cluster (``bench.cluster``), one database, one store.
Each round runs the same work twice, once with the counting triggers enabled and once with
them disabled (``ALTER TABLE ... DISABLE TRIGGER``), in alternating order, so drift hits both:
``--jobs`` jobs enqueued one per call, then the same number enqueued in one bulk call (COPY)
and drained by claims of 100 completed in one batch each. The figure is PostgreSQL's CPU per
job (every server process, user + system) and the wall time per phase, median of ``--rounds``
rounds. The difference between the two columns is what the counts cost; nothing else changes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

import psycopg

from bench.cluster import Cluster, server_cpu_seconds
from rota.domain.job import JobSpec
from rota.store import open_store

TRIGGERS = ("rota_jobs_count_inserted", "rota_jobs_count_updated", "rota_jobs_count_deleted")
LEASE = timedelta(seconds=60)


async def phases(
    url: str, postmaster: int, jobs: int, counted: bool, singles_too: bool
) -> dict[str, float]:
    """PostgreSQL CPU (us per job) and wall time (s) of each phase, counts on or off."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE rota_jobs, rota_job_deps, rota_finished_per_minute")
        for trigger in TRIGGERS:
            verb = "ENABLE" if counted else "DISABLE"
            conn.execute(f"ALTER TABLE rota_jobs {verb} TRIGGER {trigger}")
        conn.execute("VACUUM ANALYZE rota_jobs")
    store = open_store(url)
    found: dict[str, float] = {}
    try:
        await store.migrate()

        async def timed(name: str, work: Coroutine[Any, Any, object]) -> None:
            cpu, wall = server_cpu_seconds(postmaster), time.perf_counter()
            await work
            found[f"{name} us/job"] = (server_cpu_seconds(postmaster) - cpu) * 1e6 / jobs
            found[f"{name} s"] = time.perf_counter() - wall

        async def singles() -> None:
            for n in range(jobs):
                await store.enqueue([JobSpec(kind="noop", payload={"n": n})])

        async def drain() -> None:
            while claimed := await store.claim("w", queues=["default"], limit=100, lease=LEASE):
                await store.complete_many([job.lease for job in claimed])

        if singles_too:
            await timed("enqueue one per call", singles())
            await drain()
        await timed("bulk enqueue", store.enqueue([JobSpec(kind="noop") for _ in range(jobs)]))
        await timed("claim + complete, 100 a batch", drain())
    finally:
        await store.close()
    return found


async def measure(url: str, postmaster: int, jobs: int, rounds: int, singles_too: bool) -> None:
    results: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for round_ in range(rounds):
        for counted in (True, False) if round_ % 2 == 0 else (False, True):
            results[counted].append(await phases(url, postmaster, jobs, counted, singles_too))
    print(f"\n{jobs:,} jobs per phase, median of {rounds} rounds (counts on / off)\n")
    print("| phase | counts on: median (min-max) | counts off: median (min-max) |")
    print("|---|---|---|")
    for key in results[True][0]:
        cells = []
        for counted in (True, False):
            values = [r[key] for r in results[counted]]
            cells.append(f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})")
        print(f"| {key} | {cells[0]} | {cells[1]} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--no-singles", action="store_true", help="skip the one-job-per-call enqueue phase"
    )
    args = parser.parse_args()
    cluster = Cluster.start()
    try:
        url = cluster.new_database("rota_counts")

        async def setup() -> None:
            store = open_store(url)
            await store.migrate()
            await store.close()

        asyncio.run(setup())
        asyncio.run(measure(url, cluster.pid, args.jobs, args.rounds, not args.no_singles))
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
