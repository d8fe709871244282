"""What the dashboard's and the API's list, count, search and filter routes cost on a big jobs
table, measured the way people call them: the same request 20 times in a row.

``python -m bench.dashboard_scale [--jobs 1000000] [--backend postgres|sqlite|both]
[--database-url URL] [--calls 20] [--warmup 2] [--http]``

PostgreSQL: a throwaway production-configured cluster (``bench.cluster``; or the given server,
in a database of its own that it drops), migrated to the current schema, with a table of
finished jobs for each of the last eight days made before the load, so that the finished jobs
spread over a week of day partitions as a week of work leaves them. The database is set to
``plan_cache_mode = force_generic_plan``: every prepared statement runs with the plan it
settles on after its fifth execution on a connection (the generic plan), from the first call,
whichever pooled connection serves it (the lists' and counts' statements carry their values
as literals: planned for those values whether prepared or not). SQLite: a file in a temporary directory.

The jobs are loaded by one ``INSERT ... SELECT`` over a series (no Python loop): 60%
succeeded, spread over the last 7 days; 25% pending, half due and half a day later; 10% dead,
4% cancelled, 1% running; 5 queues, 10 kinds, 100 tenants; one job in ten with a unique key,
one in a hundred enqueued by one of 10 schedules; ids in the order of their time. Then
``VACUUM ANALYZE`` (``ANALYZE`` on SQLite). The API is served in process (httpx over ASGI, no
network, no auth), and each request runs ``--warmup`` times, then ``--calls`` times in a row;
the table is the median and the slowest of those calls in milliseconds, with the machine's
load average (figures from a busy machine say little). The identity's read share is lifted:
the bench measures the routes, and 20 fast calls in a row exceed it. ``--http`` calls a real
``rota serve --workers 0`` instead, over TCP on 127.0.0.1 with a bearer token and every
other setting at its default, the read share included: what a script calling the API sees.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg

from bench.cluster import Cluster
from rota.api import ApiSettings, create_app
from rota.client import Client
from rota.store import open_store

#: The share of each state, in hundredths: n % 100 below the bound.
_STATE_OF = """CASE WHEN n % 100 < 60 THEN 'succeeded' WHEN n % 100 < 85 THEN 'pending'
    WHEN n % 100 < 95 THEN 'dead' WHEN n % 100 < 99 THEN 'cancelled' ELSE 'running' END"""

PG_LOAD = f"""
INSERT INTO rota_jobs (state, queue, kind, priority, run_at, attempt, max_attempts, created_at,
                       started_at, finished_at, payload, tenant, unique_key, schedule, slot_at,
                       last_error, lease_token, lease_until, worker)
SELECT s.state, 'q' || (n % 5), 'k' || (n % 10), 0,
       CASE WHEN s.state = 'pending' AND n % 2 = 0 THEN now() + interval '1 day' ELSE t.at END,
       CASE WHEN s.state = 'pending' THEN 0 ELSE 1 END, 3, t.at,
       CASE WHEN s.state <> 'pending' THEN t.at END,
       CASE WHEN s.state IN ('succeeded', 'dead', 'cancelled') THEN t.at END,
       json_build_object('n', n), 't' || ((n / 7) % 100),
       CASE WHEN n % 10 = 0 THEN 'key-' || n END,
       CASE WHEN n % 100 = 1 THEN 'every-' || (n / 100 % 10) END,
       CASE WHEN n % 100 = 1 THEN t.at END,
       CASE WHEN s.state = 'dead' THEN 'RuntimeError: failed on purpose' END,
       CASE WHEN s.state = 'running' THEN n END,
       CASE WHEN s.state = 'running' THEN now() + interval '1 hour' END,
       CASE WHEN s.state = 'running' THEN 'bench-worker' END
FROM generate_series(1, %(jobs)s) AS n
CROSS JOIN LATERAL (SELECT {_STATE_OF} AS state) AS s
CROSS JOIN LATERAL (
    SELECT now() - interval '7 days' * (1 - n::float8 / %(jobs)s) AS at
) AS t
""".replace("%", "%%").replace("%%(jobs)s", "%(jobs)s")

SQLITE_LOAD = f"""
WITH RECURSIVE series(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM series WHERE n < :jobs),
rows AS (
    SELECT n, {_STATE_OF} AS state,
           :now - CAST(604800000000 * (1 - CAST(n AS REAL) / :jobs) AS INTEGER) AS at
    FROM series
)
INSERT INTO rota_jobs (state, queue, kind, priority, run_at, attempt, max_attempts, created_at,
                       started_at, finished_at, payload, tenant, unique_key, schedule, slot_at,
                       last_error, lease_token, lease_until, worker)
SELECT state, 'q' || (n % 5), 'k' || (n % 10), 0,
       CASE WHEN state = 'pending' AND n % 2 = 0 THEN :now + 86400000000 ELSE at END,
       CASE WHEN state = 'pending' THEN 0 ELSE 1 END, 3, at,
       CASE WHEN state <> 'pending' THEN at END,
       CASE WHEN state IN ('succeeded', 'dead', 'cancelled') THEN at END,
       '{{"n":' || n || '}}', 't' || ((n / 7) % 100),
       CASE WHEN n % 10 = 0 THEN 'key-' || n END,
       CASE WHEN n % 100 = 1 THEN 'every-' || (n / 100 % 10) END,
       CASE WHEN n % 100 = 1 THEN at END,
       CASE WHEN state = 'dead' THEN 'RuntimeError: failed on purpose' END,
       CASE WHEN state = 'running' THEN n END,
       CASE WHEN state = 'running' THEN :now + 3600000000 END,
       CASE WHEN state = 'running' THEN 'bench-worker' END
FROM rows
"""
#: What the store's own inserts would have counted (rota.store.sqlite.counts): the load is
#: one statement of the bench's, not the store's.
SQLITE_COUNT = [
    "INSERT INTO rota_counts (queue, state, n) SELECT queue, state, count(*) FROM rota_jobs"
    " GROUP BY queue, state",
    "INSERT INTO rota_finished_per_second (second, state, n)"
    " SELECT finished_at / 1000000 * 1000000, state, count(*) FROM rota_jobs"
    " WHERE finished_at IS NOT NULL GROUP BY 1, 2",
]


def requests(jobs: int) -> dict[str, str]:
    """Every list, count, search and filter the dashboard and the API answer, by label."""
    some = jobs // 2
    key = (some // 10) * 10
    return {
        "`GET /api/jobs`": "/api/jobs",
        "`?state=pending`": "/api/jobs?state=pending",
        "`?state=running`": "/api/jobs?state=running",
        "`?state=pending,running`": "/api/jobs?state=pending,running",
        "`?state=succeeded`": "/api/jobs?state=succeeded",
        "`?state=dead`": "/api/jobs?state=dead",
        "`?state=cancelled`": "/api/jobs?state=cancelled",
        "`?state=dead`, page 21 (keyset)": "PAGE21 /api/jobs?state=dead",
        "`?queue=q3`": "/api/jobs?queue=q3",
        "`?kind=k7`": "/api/jobs?kind=k7",
        "`?tenant=t42`": "/api/jobs?tenant=t42",
        "`?schedule=every-3`": "/api/jobs?schedule=every-3",
        "`?state=pending&queue=q3`": "/api/jobs?state=pending&queue=q3",
        "`?state=dead&kind=k7`": "/api/jobs?state=dead&kind=k7",
        "`?tenant=t42&state=dead`": "/api/jobs?tenant=t42&state=dead",
        "`?tenant=t42&state=pending&queue=q3`": "/api/jobs?tenant=t42&state=pending&queue=q3",
        "`?tenant=t42&kind=k7&state=succeeded`": "/api/jobs?tenant=t42&kind=k7&state=succeeded",
        "`?schedule=every-3&state=succeeded`": "/api/jobs?schedule=every-3&state=succeeded",
        "`?tenant=nobody` (no match)": "/api/jobs?tenant=nobody",
        "`?tenant=nobody&state=dead` (no match)": "/api/jobs?tenant=nobody&state=dead",
        "`?kind=nokind` (no match)": "/api/jobs?kind=nokind",
        "`?schedule=never` (no match)": "/api/jobs?schedule=never",
        "search by job id": f"/api/jobs?q={some}",
        "search by unique key": f"/api/jobs?q=key-{key}",
        "search, no match": "/api/jobs?q=no-such-key",
        "`GET /api/jobs/{id}` (job page)": f"/api/jobs/{some}",
        "`/api/jobs/counts`": "/api/jobs/counts",
        "`/api/jobs/counts?queue=q3`": "/api/jobs/counts?queue=q3",
        "`/api/jobs/counts?kind=k7`": "/api/jobs/counts?kind=k7",
        "`/api/jobs/counts?tenant=t42`": "/api/jobs/counts?tenant=t42",
        "`/api/jobs/counts?tenant=t42&kind=k7`": "/api/jobs/counts?tenant=t42&kind=k7",
        "`/api/jobs/counts?q=key-…`": f"/api/jobs/counts?q=key-{key}",
        "`/api/jobs/count?state=dead`": "/api/jobs/count?state=dead",
        "`/api/jobs/count?tenant=t42&state=succeeded`": (
            "/api/jobs/count?tenant=t42&state=succeeded"
        ),
        "`/api/jobs/count?kind=k7&action=retry`": "/api/jobs/count?kind=k7&action=retry",
        "`GET /api/stats`": "/api/stats",
        "`GET /api/queues`": "/api/queues",
    }


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard_scale")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--backend", choices=("postgres", "sqlite", "both"), default="both")
    parser.add_argument("--database-url", help="a server to use instead of a throwaway cluster")
    parser.add_argument(
        "--loaded", help="measure this already loaded database (a URL) instead of loading one"
    )
    parser.add_argument("--keep", action="store_true", help="keep the loaded database")
    parser.add_argument("--only", help="measure only the requests whose label contains this")
    parser.add_argument(
        "--http",
        action="store_true",
        help="call a real `rota serve --workers 0` over TCP with its default settings",
    )
    return parser.parse_args(argv)


@contextmanager
def pg_database(server_url: str | None, keep: bool) -> Iterator[str]:
    """A fresh database on ``server_url``, or on a throwaway cluster; dropped afterwards."""
    cluster = None
    if server_url is None:
        cluster = Cluster.start()
        server_url = cluster.url
    name = f"rota_dash_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        admin.execute(f'ALTER DATABASE "{name}" SET plan_cache_mode = force_generic_plan')
    url = urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))
    try:
        yield url
    finally:
        if keep:
            print(f"kept {url}", file=sys.stderr)
        else:
            with psycopg.connect(server_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if cluster is not None:
            cluster.stop()


async def load_postgres(url: str, jobs: int) -> None:
    store = open_store(url)
    await store.migrate()
    await store.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "SELECT rota_jobs_add_day(d::date) FROM generate_series("
            "(now() AT TIME ZONE 'UTC')::date - 8, (now() AT TIME ZONE 'UTC')::date,"
            " interval '1 day') AS d"
        )
        conn.execute(PG_LOAD, {"jobs": jobs})
        conn.execute("VACUUM ANALYZE")


async def load_sqlite(url: str, jobs: int) -> None:
    store = open_store(url)
    await store.migrate()
    await store.close()
    path = url.removeprefix("sqlite:///")
    conn = sqlite3.connect(path)
    try:
        conn.execute(SQLITE_LOAD, {"jobs": jobs, "now": int(time.time() * 1_000_000)})
        for statement in SQLITE_COUNT:
            conn.execute(statement)
        conn.commit()
        conn.execute("ANALYZE")
        conn.commit()
    finally:
        conn.close()


async def timings(
    url: str, jobs: int, *, calls: int, warmup: int, only: str | None = None
) -> dict[str, list[float]]:
    """Each request's ``calls`` timed calls after ``warmup`` untimed ones, in ms, by label:
    the API in process."""
    store = open_store(url)
    # The routes are measured, not one identity's read share (rota.api.shares), which calls
    # this fast in a row would exceed.
    settings = ApiSettings(
        allowed_hosts=("bench",),
        metrics_cache_seconds=0,
        max_reads_per_identity=100_000,
        read_rate_per_identity=1e9,
    )
    app = create_app(Client(store), settings=settings)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as api:
        found = await _call_each(api, jobs, calls=calls, warmup=warmup, only=only)
    await store.close()
    return found


async def _call_each(
    api: httpx.AsyncClient, jobs: int, *, calls: int, warmup: int, only: str | None
) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    for label, path in requests(jobs).items():
        if only and only not in label:
            continue
        if path.startswith("PAGE21 "):
            path = path.removeprefix("PAGE21 ")
            for _ in range(20):
                page = (await api.get(path)).raise_for_status().json()
                path = f"{path.split('&cursor=')[0]}&cursor={page['next_cursor']}"
        for _ in range(warmup):
            (await api.get(path)).raise_for_status()
        times = found[label] = []
        for _ in range(calls):
            begun = time.perf_counter()
            (await api.get(path)).raise_for_status()
            times.append((time.perf_counter() - begun) * 1000)
        print(f"{label}: {statistics.median(times):.1f} ({max(times):.1f})", file=sys.stderr)
    return found


async def timings_served(
    url: str, jobs: int, *, calls: int, warmup: int, only: str | None = None
) -> dict[str, list[float]]:
    """``timings`` through a real server, as a script calls it: ``rota serve --workers 0`` on
    a port of 127.0.0.1 with a bearer token and every other setting at its default (the
    identity's read share included), one keep-alive connection."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token = uuid.uuid4().hex
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rota",
        "serve",
        "--database-url",
        url,
        "--workers",
        "0",
        "--port",
        str(port),
        env={**os.environ, "ROTA_AUTH_TOKEN": token},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as api:
            for _ in range(600):
                if server.returncode is not None:
                    raise RuntimeError(f"rota serve exited {server.returncode}")
                try:
                    if (await api.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.05)
            else:
                raise RuntimeError("rota serve did not answer /healthz within 30 s")
            return await _call_each(api, jobs, calls=calls, warmup=warmup, only=only)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(server.wait(), 30)
        except TimeoutError:
            server.kill()
            await server.wait()


async def measure(url: str, jobs: int, args: argparse.Namespace) -> list[tuple[str, float, float]]:
    timer = timings_served if args.http else timings
    found = await timer(url, jobs, calls=args.calls, warmup=args.warmup, only=args.only)
    return [(label, statistics.median(times), max(times)) for label, times in found.items()]


async def run_backend(backend: str, args: argparse.Namespace) -> list[tuple[str, float, float]]:
    if args.loaded:
        return await measure(args.loaded, args.jobs, args)
    started = time.monotonic()
    if backend == "postgres":
        with pg_database(args.database_url, args.keep) as url:
            await load_postgres(url, args.jobs)
            print(
                f"loaded {args.jobs:,} jobs in {time.monotonic() - started:.0f}s", file=sys.stderr
            )
            return await measure(url, args.jobs, args)
    with tempfile.TemporaryDirectory(prefix="rota-dash-") as directory:
        path = Path(directory) / "rota.db"
        if args.keep:
            path = Path(tempfile.gettempdir()) / f"rota-dash-{uuid.uuid4().hex[:8]}.db"
            print(f"keeping sqlite:///{path}", file=sys.stderr)
        url = f"sqlite:///{path}"
        await load_sqlite(url, args.jobs)
        print(f"loaded {args.jobs:,} jobs in {time.monotonic() - started:.0f}s", file=sys.stderr)
        return await measure(url, args.jobs, args)


def main(argv: list[str]) -> int:
    args = parse(argv)
    backends = ("postgres", "sqlite") if args.backend == "both" else (args.backend,)
    results = {backend: asyncio.run(run_backend(backend, args)) for backend in backends}
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(
        f"\n{args.jobs:,} jobs, {args.warmup} warm-up calls then {args.calls} per request,"
        f" load average {load}\n"
    )
    print("| request | " + " | ".join(f"{b}: median (slowest) ms" for b in backends) + " |")
    print("|---|" + "---|" * len(backends))
    labels = [label for label, _, _ in results[backends[0]]]
    for i, label in enumerate(labels):
        cells = [f"{results[b][i][1]:.1f} ({results[b][i][2]:.1f})" for b in backends]
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
