"""Claim and enqueue cost beside tens of millions of jobs, and what pruning a day costs.

``python -m bench.scale [--scale 1000000] [--batch 20000] [--runs 3] [--tenants 10000]``

The drain of a fixed batch of due no-op jobs by one rota worker
process (``bench.drains``, burst method, the drain settings of ``make bench``:
``Rota.drain_env``, fair claims on) and the enqueue rate (one bulk call of ``--batch`` jobs;
single calls), each in a database of its own:

- ``empty``: nothing else in the table; the batch's jobs have no tenant (one group);
- ``finished``: ``--scale`` jobs finished over one day that ended a day ago (99% succeeded
  with a result, 0.5% dead with an error, 0.5% cancelled; 20 kinds; one in ten with a unique
  key; the per-minute tally the completions would have written);
- ``not yet due``: ``--scale`` pending jobs of the drained queue and kind, due over the next
  day, starting an hour from now;
- ``10k tenants``: the batch spread round-robin over ``--tenants`` tenants (fair claims walk
  them all), against ``empty``'s one tenant.

Databases are loaded once (``INSERT ... SELECT generate_series``, then ``VACUUM ANALYZE``);
runs alternate scenario by scenario (empty, finished, not yet due, tenants, empty, ...), and
after each drain or enqueue its rows are deleted and the table vacuumed, so runs do not pile
on each other. Ratios: each run against the median of the empty table's runs.

Then the prune: the finished database's day (the whole UTC day before yesterday, one day
table of rota_jobs, 019_finished_by_day) is deleted the way the worker's pruner does it
(``store.prune(older_than=now - 1 day, limit=5000)`` until a short pass), timing every pass,
while a sampler reads ``pg_stat_user_tables`` every second and a probe takes a completion's
lock on the finished jobs' tables every 10 ms (how long the prune makes completions wait);
afterwards it waits for autovacuum to settle (at most ``--settle`` seconds) and reports the
dead tuples at their peak, the vacuums and autovacuums run, the WAL written, and each
autovacuum of a jobs table the server logged.

``--upgrade``: a database at migration 018 holding ``--scale`` finished jobs and a hundredth
as many pending ones, migrated to the current schema (019 moves the pending jobs and checks the
finished ones in one pass); the time it takes, which is how long job writes wait for it.

A throwaway production-configured cluster (``bench.cluster``) with ``pg_stat_statements``,
or ``--database-url`` (databases ``rota_bench_scale_*`` there are created and dropped).
Prints markdown and writes it to ``bench/results/scale.md`` (one section per ``--scale``, the
latest run of each). The figures quoted in docs/benchmarks.md live in ``bench/scale.md``,
which ``bench.report`` appends to that page: copy a run's tables there, with what they say.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from bench.cluster import Cluster
from bench.drains import drain
from bench.harness import (
    ROOT,
    Bench,
    Settings,
    drop_database,
    execute,
    progress,
    recreate_database,
    scalar,
)
from bench.report import machine
from bench.systems import Rota

OUT = ROOT / "bench" / "results" / "scale.md"
PRUNE_BATCH = 5_000

FINISHED = """
INSERT INTO rota_jobs (state, queue, kind, priority, run_at, attempt, max_attempts, lease_token,
                       worker, created_at, started_at, finished_at, payload, unique_key,
                       last_error, result, history)
SELECT s.state, 'default', 'kind' || (n %% 20), 0, t.at - interval '2 seconds',
       CASE WHEN s.state = 'dead' THEN 3 ELSE 1 END, 3, n, 'host-' || (n %% 8) || ':worker',
       t.at - interval '2 seconds', t.at - interval '1 second', t.at,
       json_build_object('user', n, 'action', 'send-email', 'template', 'welcome'),
       CASE WHEN n %% 10 = 0 THEN 'key-' || n END,
       CASE WHEN s.state = 'dead' THEN 'RuntimeError: SMTP server said 451' END,
       CASE WHEN s.state = 'succeeded' THEN json_build_object('sent', true) END,
       CASE WHEN s.state = 'dead' THEN '[{"attempt": 1, "outcome": "error"}]'::jsonb END
FROM generate_series(1, %(count)s) AS n
CROSS JOIN LATERAL (SELECT %(day)s::timestamptz
                           + (n - 1) * (interval '1 day' / %(count)s) AS at) AS t
CROSS JOIN LATERAL (SELECT CASE WHEN n %% 200 = 0 THEN 'dead'
                                WHEN n %% 200 = 1 THEN 'cancelled'
                                ELSE 'succeeded' END AS state) AS s
"""
TALLY = """
INSERT INTO rota_finished_per_minute (minute, state, n)
SELECT date_trunc('minute', finished_at), state, count(*) FROM rota_jobs
WHERE state IN ('succeeded', 'dead', 'cancelled') GROUP BY 1, 2
"""
FUTURE = """
INSERT INTO rota_jobs (kind, queue, payload, run_at, max_attempts, created_at)
SELECT 'noop', 'default', json_build_object('user', n),
       now() + interval '1 hour' + (n - 1) * (interval '1 day' / %(count)s), 3, now()
FROM generate_series(1, %(count)s) AS n
"""
#: The tables that hold jobs: rota_jobs is partitioned (019_finished_by_day), and the
#: statistics and sizes are its partitions'.
JOB_TABLES = "(SELECT relid FROM pg_partition_tree('rota_jobs') WHERE isleaf)"
TABLE_STATS = f"""
SELECT coalesce(sum(n_live_tup), 0), coalesce(sum(n_dead_tup), 0),
       coalesce(sum(vacuum_count), 0), coalesce(sum(autovacuum_count), 0),
       coalesce(sum(analyze_count), 0), coalesce(sum(autoanalyze_count), 0),
       pg_current_wal_lsn()
FROM pg_stat_user_tables WHERE relid IN {JOB_TABLES}
"""
#: The day the finished jobs finished in: the whole UTC day before yesterday, so that it is
#: one day table, wholly older than a cutoff of a day ago.
FINISHED_DAY = "(now() AT TIME ZONE 'UTC')::date - 2"
#: A statement that takes the lock a completion takes on the finished jobs' tables (it
#: inserts a finished job, rolled back): how long the prune makes completions wait.
PROBE = """
INSERT INTO rota_jobs (state, queue, kind, run_at, max_attempts, created_at, finished_at,
                       payload)
VALUES ('succeeded', 'probe', 'probe', now(), 1, now(), now(), '{}')
"""


class ScaleRota(Rota):
    """rota in one scenario's database; ``tenants`` spreads each batch over that many."""

    def __init__(self, settings: Settings, variant: str, tenants: int = 0) -> None:
        super().__init__(settings)
        self.variant = variant
        self.tenants = tenants
        self.database = f"rota_bench_scale_{variant.replace(' ', '_')}"
        self.dsn = settings.dsn(self.database)

    async def enqueue_bulk(self, kind: str, count: int, tenant: str | None = None) -> None:
        if not self.tenants:
            await super().enqueue_bulk(kind, count, tenant)
            return
        spec = self.app.spec
        width = len(str(self.tenants - 1))
        await self.app.enqueue_many(
            [spec(kind, {"seq": i}, tenant=f"t{i % self.tenants:0{width}d}") for i in range(count)]
        )


@dataclass
class Figures:
    drains: dict[str, list[float]] = field(default_factory=dict)
    bulk: dict[str, list[float]] = field(default_factory=dict)
    single: dict[str, list[float]] = field(default_factory=dict)
    claim_ms: dict[str, list[float]] = field(default_factory=dict)
    per_claim: dict[str, list[float]] = field(default_factory=dict)
    claim_pages: dict[str, list[float]] = field(default_factory=dict)
    prune: dict[str, Any] = field(default_factory=dict)
    upgrade: dict[str, Any] = field(default_factory=dict)
    load_s: dict[str, float] = field(default_factory=dict)
    sizes: dict[str, str] = field(default_factory=dict)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--scale", type=int, default=1_000_000, help="background jobs per table")
    parser.add_argument("--batch", type=int, default=20_000, help="due jobs drained per run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--singles", type=int, default=500, help="single enqueues per run")
    parser.add_argument("--settle", type=float, default=120.0, help="max s to wait for autovacuum")
    parser.add_argument(
        "--only", default="", help="comma-separated scenarios (empty is always run)"
    )
    parser.add_argument("--no-prune", action="store_true")
    parser.add_argument(
        "--upgrade", action="store_true", help="also time the migration of a table at 018"
    )
    parser.add_argument("--database-url")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    if args.scale < 1 or args.batch < 100 or not 1 <= args.runs <= 20 or args.tenants < 2:
        parser.error("--scale >= 1, --batch >= 100, --runs 1..20, --tenants >= 2")
    return args


async def load(system: ScaleRota, scale: int, figures: Figures) -> None:
    began = time.monotonic()
    async with await psycopg.AsyncConnection.connect(system.dsn, autocommit=True) as conn:
        if system.variant == "finished":
            [(day, _)] = await (
                await conn.execute(f"SELECT {FINISHED_DAY}, rota_jobs_add_day({FINISHED_DAY})")
            ).fetchall()
            await conn.execute(FINISHED, {"count": scale, "day": day})
            await conn.execute("SELECT setval('rota_lease_token_seq', %(count)s)", {"count": scale})
            await conn.execute(TALLY)
        elif system.variant == "not yet due":
            await conn.execute(FUTURE, {"count": scale})
        await conn.execute("VACUUM ANALYZE rota_jobs")
        await conn.execute("CHECKPOINT")
        row = await (
            await conn.execute(
                "SELECT pg_size_pretty(sum(pg_table_size(relid))), "
                f"pg_size_pretty(sum(pg_indexes_size(relid))) FROM {JOB_TABLES} AS leaves"
            )
        ).fetchone()
    assert row is not None
    figures.load_s[system.variant] = time.monotonic() - began
    figures.sizes[system.variant] = f"heap {row[0]}, indexes {row[1]}"
    progress(
        f"  loaded {system.variant}: {figures.sizes[system.variant]} in {figures.load_s[system.variant]:.0f}s"
    )


async def clean(system: ScaleRota, last_id: int) -> None:
    await execute(
        system.dsn, f"DELETE FROM rota_jobs WHERE id > {last_id}", "VACUUM ANALYZE rota_jobs"
    )


async def claim_stats(dsn: str, reset: bool = False) -> tuple[float, float, float] | None:
    """Per claim statement since the last reset: mean server time (ms), jobs, and buffers
    touched (shared hits and reads: what the claim reads, whatever the machine's load); None
    without pg_stat_statements."""
    try:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            if reset:
                await conn.execute("SELECT pg_stat_statements_reset()")
                return None
            row = await (
                await conn.execute(
                    "SELECT sum(total_exec_time) / nullif(sum(calls), 0), "
                    "sum(rows)::float / nullif(sum(calls), 0), "
                    "sum(shared_blks_hit + shared_blks_read)::float / nullif(sum(calls), 0) "
                    "FROM pg_stat_statements s "
                    "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database() "
                    "AND query LIKE '%%FROM rota_claim(%%'"
                )
            ).fetchone()
            if not row or row[0] is None:
                return None
            return float(row[0]), float(row[1]), float(row[2])
    except psycopg.errors.UndefinedTable:
        return None
    except psycopg.errors.UndefinedFunction:
        return None


async def one_run(
    bench: Bench, system: ScaleRota, args: argparse.Namespace, figures: Figures
) -> None:
    last_id = int(await scalar(system.dsn, "SELECT coalesce(max(id), 0) FROM rota_jobs"))
    await claim_stats(system.dsn, reset=True)
    try:
        result = await drain(bench, system, method="burst", processes=1, count=args.batch)
    finally:
        await clean(system, last_id)
    figures.drains.setdefault(system.variant, []).append(result.jobs_per_s)
    claim = await claim_stats(system.dsn)
    if claim is not None:
        figures.claim_ms.setdefault(system.variant, []).append(claim[0])
        figures.per_claim.setdefault(system.variant, []).append(claim[1])
        figures.claim_pages.setdefault(system.variant, []).append(claim[2])
    began = time.perf_counter()
    await system.enqueue_bulk("noop", args.batch)
    bulk = args.batch / (time.perf_counter() - began)
    await clean(system, last_id)
    began = time.perf_counter()
    for seq in range(args.singles):
        await system.enqueue_one("noop", seq)
    single = args.singles / (time.perf_counter() - began)
    await clean(system, last_id)
    figures.bulk.setdefault(system.variant, []).append(bulk)
    figures.single.setdefault(system.variant, []).append(single)
    progress(
        f"  {system.variant:12} drain {result.jobs_per_s:8,.0f} jobs/s"
        f"  claim {claim[0] if claim else 0:6.2f} ms, {claim[1] if claim else 0:4.0f} jobs,"
        f" {claim[2] if claim else 0:6.0f} buffers  bulk {bulk:8,.0f}/s  single {single:6,.0f}/s"
    )


async def prune(
    system: ScaleRota, args: argparse.Namespace, log: Path | None, figures: Figures
) -> None:
    """Delete the finished database's day as the pruner does, and watch what it sets off."""
    from rota.store import open_store

    store = open_store(system.dsn)
    samples: list[tuple[float, int]] = []
    stop = asyncio.Event()

    async def sample() -> None:
        async with await psycopg.AsyncConnection.connect(system.dsn, autocommit=True) as conn:
            while not stop.is_set():
                row = await (await conn.execute(TABLE_STATS)).fetchone()
                assert row is not None
                samples.append((time.monotonic(), int(row[1])))
                await asyncio.sleep(1.0)

    waits: list[float] = []

    async def probe() -> None:
        """A completion's stand-in, every 10 ms: how long the prune makes one wait."""
        async with await psycopg.AsyncConnection.connect(system.dsn) as conn:
            while not stop.is_set():
                started = time.perf_counter()
                await conn.execute(PROBE)
                waits.append(time.perf_counter() - started)
                await conn.rollback()
                await asyncio.sleep(0.01)

    log_offset = (await asyncio.to_thread(os.path.getsize, log)) if log is not None else 0
    async with await psycopg.AsyncConnection.connect(system.dsn, autocommit=True) as conn:
        before = await (await conn.execute(TABLE_STATS)).fetchone()
        count = await (
            await conn.execute(
                "SELECT count(*) FROM rota_jobs WHERE state IN ('succeeded', 'dead', 'cancelled') "
                "AND finished_at < now() - interval '1 day'"
            )
        ).fetchone()
    assert before is not None
    assert count is not None
    sampler = asyncio.create_task(sample())
    prober = asyncio.create_task(probe())
    batches: list[float] = []
    deleted = 0
    began = time.monotonic()
    try:
        while True:
            cutoff = await store.now() - timedelta(days=1)
            started = time.perf_counter()
            n = await store.prune(older_than=cutoff, limit=PRUNE_BATCH)
            batches.append(time.perf_counter() - started)
            deleted += n
            if n < PRUNE_BATCH:
                break
        pruned_s = time.monotonic() - began
        # Autovacuum's answer to the prune: wait until the dead tuples are gone (or --settle).
        # Backends flush their table statistics within a second or so; autovacuum looks
        # every autovacuum_naptime (a minute by default).
        settle_began = time.monotonic()
        while time.monotonic() - settle_began < args.settle:
            await asyncio.sleep(2.0)
            row = await scalar(
                system.dsn,
                f"SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables "
                f"WHERE relid IN {JOB_TABLES}",
            )
            running = await scalar(system.dsn, "SELECT count(*) FROM pg_stat_progress_vacuum")
            if int(row) < 0.02 * max(1, deleted) and not int(running):
                break
        settled_s = time.monotonic() - settle_began
    finally:
        stop.set()
        await sampler
        await prober
        await store.close()
    async with await psycopg.AsyncConnection.connect(system.dsn, autocommit=True) as conn:
        after = await (await conn.execute(TABLE_STATS)).fetchone()
        wal = await (
            await conn.execute("SELECT pg_wal_lsn_diff(%s, %s)", (after[6], before[6]))  # type: ignore[index]
        ).fetchone()
    assert after is not None
    assert wal is not None
    vacuums: list[float] = []
    if log is not None:
        text = (await asyncio.to_thread(log.read_bytes))[log_offset:].decode(errors="replace")
        for entry in re.split(r"\n(?=\d{4}-\d\d-\d\d )", text):
            if "automatic vacuum of table" in entry and re.search(r'rota_jobs\w*"', entry):
                elapsed = re.search(r"elapsed: ([\d.]+) s", entry)
                if elapsed:
                    vacuums.append(float(elapsed.group(1)))
    ordered = sorted(batches)
    figures.prune = {
        "jobs": int(count[0]),
        "deleted": deleted,
        "seconds": pruned_s,
        "batches": len(batches),
        "batch_median_ms": 1000 * statistics.median(batches),
        "batch_p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "batch_max_ms": 1000 * ordered[-1],
        "dead_peak": max((n for _, n in samples), default=0),
        "dead_after": int(after[1]),
        "autovacuums": int(after[3]) - int(before[3]),
        "autoanalyzes": int(after[5]) - int(before[5]),
        "wal_bytes": int(wal[0]),
        "settled_s": settled_s,
        "logged_vacuums": vacuums,
        "probe_max_ms": 1000 * max(waits, default=0.0),
        "probe_p99_ms": 1000 * sorted(waits)[min(len(waits) - 1, int(0.99 * len(waits)))]
        if waits
        else 0.0,
        "probes": len(waits),
    }
    progress(f"  prune: {figures.prune}")


async def upgrade(settings: Settings, scale: int, figures: Figures) -> None:
    """Migrate a table at 018 with ``scale`` finished and ``scale / 100`` pending jobs."""
    from rota.store.postgres.queries import migrations
    from rota.store.postgres.store import PostgresStore

    name = "rota_bench_scale_upgrade"
    dsn = await recreate_database(settings, name)
    store = PostgresStore.from_url(dsn)
    try:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(
                "CREATE TABLE rota_migrations ("
                "version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            for version, text in migrations():
                if version < "019":
                    async with conn.transaction():
                        await conn.execute(text.encode(), prepare=False)
                        await conn.execute(
                            "INSERT INTO rota_migrations (version) VALUES (%s)", [version]
                        )
            [(day,)] = await (await conn.execute(f"SELECT {FINISHED_DAY}")).fetchall()
            await conn.execute(FINISHED, {"count": scale, "day": day})
            await conn.execute(FUTURE, {"count": max(1, scale // 100)})
            await conn.execute("VACUUM ANALYZE rota_jobs")
            await conn.execute("CHECKPOINT")
        began = time.monotonic()
        applied = await store.migrate()
        figures.upgrade = {
            "jobs": scale + max(1, scale // 100),
            "seconds": time.monotonic() - began,
            "applied": [v for v in applied if not v.startswith("routines_")],
        }
        progress(f"  upgrade {applied}: {figures.upgrade}")
    finally:
        await store.close()
        await drop_database(settings, name)


async def main(args: argparse.Namespace, settings: Settings, log: Path | None) -> Figures:
    bench = Bench(settings)
    bench.settings.runs = args.runs
    figures = Figures()
    variants = ["empty", "finished", "not yet due", "10k tenants"]
    if args.only:
        wanted = {v.strip() for v in args.only.split(",")}
        variants = [v for v in variants if v == "empty" or v in wanted]
    systems = [
        ScaleRota(settings, v, tenants=args.tenants if v == "10k tenants" else 0) for v in variants
    ]
    try:
        for system in systems:
            await system.setup()
            await load(system, args.scale, figures)
        for run in range(args.runs):
            progress(f"-- run {run + 1} of {args.runs}")
            for system in systems:
                await one_run(bench, system, args, figures)
        finished = next((s for s in systems if s.variant == "finished"), None)
        if finished is not None and not args.no_prune:
            await prune(finished, args, log, figures)
        if args.upgrade:
            await upgrade(settings, args.scale, figures)
    finally:
        for system in systems:
            await system.close()
            await drop_database(settings, system.database)
    return figures


def markdown(args: argparse.Namespace, figures: Figures, command: str, seconds: float) -> str:
    def med(values: list[float]) -> str:
        return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"

    def ratio(table: dict[str, list[float]], variant: str) -> str:
        base = statistics.median(table["empty"])
        values = [v / base for v in table[variant]]
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    scale = f"{args.scale:,}"
    labels = {
        "empty": "empty table (one tenant)",
        "finished": f"+{scale} finished",
        "not yet due": f"+{scale} not yet due",
        "10k tenants": f"batch over {args.tenants:,} tenants",
    }
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    lines = [
        f"### At {scale} jobs",
        "",
        f"- **Date:** {time.strftime('%Y-%m-%d %H:%M %Z')}; **command:** `{command}` ({seconds / 60:.0f} min)",
        "- **Machine:** "
        + ", ".join(f"{k} {v}" for k, v in machine().items())
        + f"; load average at the end {load} (the machine is shared: absolute figures move, ratios less)",
        f"- Drain: {args.batch:,} due no-op jobs, burst into one warm rota worker process "
        f"({Rota.drain_settings()}, fair claims on); enqueue: one bulk call of "
        f"{args.batch:,} jobs, and {args.singles} single calls; {args.runs} runs each, "
        "scenarios alternating; median (min-max); ratios against the empty table's median.",
        "- Tables: "
        + "; ".join(f"{labels[v]}: {s}" for v, s in figures.sizes.items() if v != "empty"),
        "",
        "| scenario | drain jobs/s | drain ratio | claim statement: ms, jobs, buffers | bulk enqueue jobs/s | ratio | single enqueue jobs/s | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for variant, values in figures.drains.items():
        claim = figures.claim_ms.get(variant)
        per = figures.per_claim.get(variant)
        pages = figures.claim_pages.get(variant)
        claim_text = (
            f"{statistics.median(claim):.2f}, {statistics.median(per):.0f}, "
            f"{statistics.median(pages):,.0f}"
            if claim and per and pages
            else "—"
        )
        lines.append(
            f"| {labels[variant]} | {med(values)} | {ratio(figures.drains, variant)} | {claim_text} "
            f"| {med(figures.bulk[variant])} | {ratio(figures.bulk, variant)} "
            f"| {med(figures.single[variant])} | {ratio(figures.single, variant)} |"
        )
    p = figures.prune
    if p:
        logged = p["logged_vacuums"]
        vac = ", ".join(f"{elapsed:.1f} s" for elapsed in logged) or "none over 1 s"
        lines += [
            "",
            f"Prune of the day's {p['jobs']:,} finished jobs (`store.prune(limit={PRUNE_BATCH:,})`, "
            "passes back to back until a short one, as the pruner runs them; a day's table goes "
            "whole in one pass):",
            "",
            "| measure | value |",
            "|---|---|",
            f"| jobs deleted | {p['deleted']:,} in {p['batches']:,} passes |",
            f"| time | {p['seconds']:.1f} s ({p['deleted'] / max(p['seconds'], 1e-9):,.0f} jobs/s) |",
            f"| pass median / p99 / max | {p['batch_median_ms']:.0f} / {p['batch_p99_ms']:.0f} / {p['batch_max_ms']:.0f} ms |",
            f"| longest wait of a completion's lock on finished jobs (a probe every 10 ms, {p['probes']:,} probes) max / p99 | {p['probe_max_ms']:.1f} / {p['probe_p99_ms']:.1f} ms |",
            f"| dead tuples at their peak (sampled each second) | {p['dead_peak']:,} |",
            f"| autovacuums / autoanalyzes of rota_jobs during and after | {p['autovacuums']} / {p['autoanalyzes']} |",
            f"| autovacuums of rota_jobs the server logged (over 1 s), each | {vac} |",
            f"| dead tuples left {p['settled_s']:.0f} s after the prune | {p['dead_after']:,} |",
            f"| WAL written by the prune and its vacuums | {p['wal_bytes'] / 2**20:,.0f} MiB |",
        ]
    if figures.upgrade:
        u = figures.upgrade
        lines += [
            "",
            f"Upgrade of a table at 018 holding {u['jobs']:,} jobs to this version "
            f"(`store.migrate()`: {', '.join(u['applied'])} and the claim function; "
            f"job writes wait for it throughout): {u['seconds']:.1f} s.",
        ]
    return "\n".join(lines) + "\n"


def entry(argv: list[str]) -> int:
    args = parse(argv)
    command = "python -m bench.scale " + " ".join(shlex.quote(a) for a in argv if "://" not in a)
    began = time.time()
    cluster = None
    try:
        if args.database_url:
            settings = Settings(server_url=args.database_url, given_server=True)
            log = None
        else:
            cluster = Cluster.start(
                extra={
                    "shared_preload_libraries": "pg_stat_statements",
                    "pg_stat_statements.max": "1000",
                }
            )
            settings = Settings(server_url=cluster.url, postmaster=cluster.pid)
            log = cluster.log
            with psycopg.connect(settings.dsn("template1"), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            progress(f"PostgreSQL {cluster.pid} on {cluster.root}")
        figures = asyncio.run(main(args, settings, log))
        settings.remove_workdir()  # the workers' logs, kept only when the run failed
    finally:
        if cluster is not None:
            cluster.stop()
    text = markdown(args, figures, command.strip(), time.time() - began)
    print(text)
    if not args.no_write:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        previous = OUT.read_text() if OUT.exists() else ""
        sections = [s for s in re.split(r"(?=^### At )", previous, flags=re.M) if s.strip()]
        sections = [s for s in sections if not s.startswith(f"### At {args.scale:,} jobs")]
        OUT.write_text("".join([*sections, text]).strip() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(entry(sys.argv[1:]))
