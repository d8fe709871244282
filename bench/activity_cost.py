"""What the activity tallies (migration 029) cost a completion: ``python -m bench.activity_cost``.

One throwaway production-configured cluster (``bench.cluster``), one database, one store.
Each round drains the same backlog twice, by claims of 100 completed in one batch each: once
with the completion statement as rota sends it, once with its ``activity`` part (the upsert of
the per-minute tallies) cut out, in alternating order so that drift hits both. The figures are
PostgreSQL's CPU per job (every server process, user + system), the wall time of the drain,
and the completion's execution inside the server (EXPLAIN ANALYZE of 20 more completions of
100, committed), median (min-max) of ``--rounds`` rounds. Failures are not measured: one
``fail`` per job adds one more upsert, of its error's fingerprint.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from datetime import timedelta

import psycopg

from bench.cluster import Cluster, server_cpu_seconds
from rota.domain.job import JobSpec
from rota.store import open_store
from rota.store.postgres.queries import queries
from rota.store.postgres.rows import completion

LEASE = timedelta(seconds=60)
KINDS = ("email", "report", "resize")


def without_activity(statement: str) -> str:
    """``statement`` with its ``activity AS (...)`` part cut out."""
    start = statement.index(", activity AS (")
    depth = 0
    for end in range(statement.index("(", start), len(statement)):
        depth += {"(": 1, ")": -1}.get(statement[end], 0)
        if depth == 0:
            return statement[:start] + statement[end + 1 :]
    raise ValueError("unbalanced statement")


async def drain(url: str, postmaster: int, jobs: int, tallied: bool) -> dict[str, float]:
    named = queries()
    full = named["complete"]
    named["complete"] = full if tallied else without_activity(full)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE rota_jobs, rota_finished_per_minute, rota_activity")
        conn.execute("VACUUM ANALYZE rota_jobs")
    store = open_store(url)
    found: dict[str, float] = {}
    try:
        await store.enqueue([JobSpec(kind=KINDS[n % 3]) for n in range(jobs + 20 * 100)])
        cpu, wall = server_cpu_seconds(postmaster), time.perf_counter()
        done = 0
        while done < jobs:
            claimed = await store.claim("w", queues=["default"], limit=100, lease=LEASE)
            await store.complete_many([job.lease for job in claimed])
            done += len(claimed)
        found["claim + complete, PostgreSQL µs/job"] = (
            (server_cpu_seconds(postmaster) - cpu) * 1e6 / jobs
        )
        found["claim + complete, s"] = time.perf_counter() - wall
        executions = []
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            for _ in range(20):
                claimed = await store.claim("w", queues=["default"], limit=100, lease=LEASE)
                ids = [job.id for job in claimed]
                _, params = completion(ids, [job.lease.token for job in claimed], None, None)
                cursor = await conn.execute(
                    "EXPLAIN (ANALYZE, FORMAT JSON) " + named["complete"],
                    params,
                )
                [(plan,)] = await cursor.fetchall()
                executions.append(plan[0]["Execution Time"])
        found["complete 100, server execution ms"] = statistics.median(executions)
    finally:
        named["complete"] = full
        await store.close()
    return found


async def measure(url: str, postmaster: int, jobs: int, rounds: int) -> None:
    store = open_store(url)
    await store.migrate()
    await store.close()
    results: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for round_ in range(rounds):
        for tallied in (True, False) if round_ % 2 == 0 else (False, True):
            results[tallied].append(await drain(url, postmaster, jobs, tallied))
    print(f"\n{jobs:,} jobs per drain, median (min-max) of {rounds} rounds\n")
    print("| measure | with the tallies | without |")
    print("|---|---|---|")
    for key in results[True][0]:
        cells = []
        for tallied in (True, False):
            values = [r[key] for r in results[tallied]]
            cells.append(f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})")
        print(f"| {key} | {cells[0]} | {cells[1]} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    cluster = Cluster.start()
    try:
        url = cluster.new_database("rota_activity")
        asyncio.run(measure(url, cluster.pid, args.jobs, args.rounds))
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
