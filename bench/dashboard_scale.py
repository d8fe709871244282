"""What the dashboard's reads cost on a big jobs table (counts, queues, metrics, searches).

``python -m bench.dashboard_scale [--jobs 1000000] [--database-url URL] [--calls 21]``

Starts a throwaway production-configured cluster (``bench.cluster``; or uses the given
server, in a database of its own that it drops), migrates it to the version before the
maintained counts (016), loads ``--jobs`` jobs in one statement (90% finished: succeeded,
dead and cancelled over a day; 10% pending, half of them not yet due; one in ten with a unique
key; 20 kinds, 5 queues), VACUUM ANALYZE, then times the remaining migrations on that table
(017_counts counts every row once and indexes the pending ones, holding writes meanwhile: the
figure is how long an upgrade pauses running workers). Then it serves the API in-process
(httpx over ASGI, no network) and times each request ``--calls`` times after one warm-up
call. It prints the median and the slowest call per request, in milliseconds, with the
machine's load average: figures from a busy machine say little.

The requests: ``/api/stats``, ``/api/queues`` and ``/metrics`` (the pages every dashboard view
polls; /metrics with its cache off, so every call refreshes the gauges from the store, as the
first scrape after ``metrics_cache_seconds`` does), a search by job id and by unique key
(``q=``), and a filter that matches nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg

from bench.cluster import Cluster
from rota.api import ApiSettings, create_app
from rota.client import Client
from rota.store import open_store
from rota.store.postgres.queries import migrations

LOAD = """
INSERT INTO rota_jobs (state, queue, kind, priority, run_at, attempt, max_attempts, created_at,
                       started_at, finished_at, payload, unique_key, last_error)
SELECT s.state,
       'q' || (n %% 5),
       'kind' || (n %% 20),
       0,
       CASE WHEN s.state = 'pending' AND n %% 2 = 0 THEN now() + interval '1 day'
            ELSE now() - (n %% 86400) * interval '1 second' END,
       CASE WHEN s.state = 'pending' THEN 0 ELSE 1 END,
       3,
       now() - (n %% 86400) * interval '1 second',
       CASE WHEN s.state = 'pending' THEN NULL ELSE now() - (n %% 86400) * interval '1 second' END,
       CASE WHEN s.state = 'pending' THEN NULL ELSE now() - (n %% 86400) * interval '1 second' END,
       json_build_object('n', n),
       CASE WHEN n %% 10 = 0 THEN 'key-' || n END,
       CASE WHEN s.state = 'dead' THEN 'RuntimeError: failed on purpose' END
FROM generate_series(1, %(jobs)s) AS n
CROSS JOIN LATERAL (SELECT CASE
    WHEN n %% 10 = 9 THEN 'pending'
    WHEN n %% 10 = 8 THEN 'dead'
    WHEN n %% 10 = 7 THEN 'cancelled'
    ELSE 'succeeded' END AS state) AS s
"""


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard_scale")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=21)
    parser.add_argument("--database-url", help="a server to use instead of a throwaway cluster")
    return parser.parse_args(argv)


@contextmanager
def database(server_url: str | None) -> Iterator[str]:
    """A fresh database on ``server_url``, or on a throwaway cluster; dropped afterwards."""
    cluster = None
    if server_url is None:
        cluster = Cluster.start()
        server_url = cluster.url
    name = f"rota_dash_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))
    try:
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if cluster is not None:
            cluster.stop()


#: The migrations applied before the jobs are loaded; the rest are timed on the loaded table.
LOADED_AT = "017"


def migrate_before(url: str, version: str) -> None:
    """Apply the migrations older than ``version`` as ``Store.migrate`` records them."""
    with psycopg.connect(url) as conn:
        conn.execute(
            "CREATE TABLE rota_migrations ("
            "version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for name, text in migrations():
            if name < version:
                conn.execute(text, prepare=False)
                conn.execute("INSERT INTO rota_migrations (version) VALUES (%s)", [name])


async def measure(url: str, jobs: int, calls: int) -> tuple[float, list[tuple[str, float, float]]]:
    store = open_store(url)
    migrate_before(url, LOADED_AT)
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(LOAD, {"jobs": jobs})
        conn.execute("VACUUM ANALYZE rota_jobs")
        some_id = conn.execute("SELECT max(id) / 2 FROM rota_jobs").fetchone()[0]  # type: ignore[index]
    print(f"loaded {jobs:,} jobs in {time.monotonic() - started:.0f}s", file=sys.stderr)
    started = time.monotonic()
    applied = await store.migrate()
    upgrade_s = time.monotonic() - started
    print(f"migrated {', '.join(applied)} in {upgrade_s:.1f}s", file=sys.stderr)
    settings = ApiSettings(allowed_hosts=("bench",), metrics_cache_seconds=0)
    app = create_app(Client(store), settings=settings)
    requests = {
        "GET /api/stats": "/api/stats",
        "GET /api/queues": "/api/queues",
        "GET /metrics": "/metrics",
        "search by job id": f"/api/jobs?q={some_id}",
        "search by unique key": f"/api/jobs?q=key-{(some_id // 10) * 10}",
        "a filter that matches nothing": "/api/jobs?kind=no-such-kind",
    }
    rows = []
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as api:
        for label, path in requests.items():
            (await api.get(path)).raise_for_status()  # warm-up
            times = []
            for _ in range(calls):
                begun = time.perf_counter()
                (await api.get(path)).raise_for_status()
                times.append((time.perf_counter() - begun) * 1000)
            rows.append((label, statistics.median(times), max(times)))
    await store.close()
    return upgrade_s, rows


def main(argv: list[str]) -> int:
    args = parse(argv)
    with database(args.database_url) as url:
        upgrade_s, rows = asyncio.run(measure(url, args.jobs, args.calls))
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"\n{args.jobs:,} jobs, {args.calls} calls each, load average {load}")
    print(f"migrations from {LOADED_AT} on the loaded table: {upgrade_s:.1f} s\n")
    print("| request | median ms | slowest ms |")
    print("|---|---|---|")
    for label, median, slowest in rows:
        print(f"| {label} | {median:.1f} | {slowest:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
