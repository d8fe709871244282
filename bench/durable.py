"""Durable jobs of 10 steps per second: rota beside DBOS, on the same PostgreSQL, in one run.

Each system gets a database of its own on a throwaway cluster configured as production
(``bench/cluster.py``) and one worker process: rota's ``App.run_worker`` with 100 slots (the
``ten_steps`` kind of ``bench/apps.py``: ten ``ctx.step`` calls, each checkpointed), and DBOS
launched at its documented defaults with a queue at its defaults (no concurrency limit, a 1 s
polling interval), running an async workflow of ten ``@DBOS.step`` calls (``bench/dbos_app.py``).
Both are warmed up first. Then, per run and system (alternating, so drift hits each alike):
the worker is held (SIGSTOP, connected and warm), the batch is enqueued (rota in one bulk call,
DBOS through ``DBOSClient.enqueue``, one call per workflow, as its API offers), and the clock
runs from the worker's release (SIGCONT) to the last job's success as its store recorded it.
Every step writes its checkpoint in both systems; the figure is jobs (of ten steps) per second::

    python -m bench.durable [--runs 3] [--jobs 2000] [--quick]

Prints a Markdown section with the machine, date, command, median and min-max of the runs,
and writes it to ``bench/durable.md`` (spliced into docs/benchmarks.md by ``make bench``)
unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import shlex
import statistics
import sys
import time
from datetime import UTC, datetime

import psycopg

from bench import report
from bench.cluster import Cluster
from bench.harness import ROOT, Settings, WorkerGroup, progress, start_workers, with_database

OUT = ROOT / "bench" / "durable.md"
CONCURRENCY = 100
WARM_UP = 50
#: How a system's jobs are counted as done, and when its last one finished (epoch seconds).
DONE = {
    "rota": "SELECT count(*) FROM rota_jobs WHERE state = 'succeeded' AND kind = 'ten_steps'",
    "dbos": "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS' "
    "AND name = 'ten_steps'",
}
LAST = {
    "rota": "SELECT extract(epoch FROM max(finished_at)) FROM rota_jobs "
    "WHERE state = 'succeeded' AND kind = 'ten_steps'",
    "dbos": "SELECT max(updated_at) / 1000.0 FROM dbos.workflow_status WHERE status = 'SUCCESS' "
    "AND name = 'ten_steps'",
}


async def _scalar(dsn: str, sql: str) -> float:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        row = await (await conn.execute(sql)).fetchone()
    return float(row[0] or 0) if row else 0.0


async def _until(dsn: str, system: str, count: int, timeout_s: float) -> float:
    """Poll (10 a second) until ``count`` jobs succeeded; the time it was seen."""
    deadline = time.monotonic() + timeout_s
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while True:
            row = await (await conn.execute(DONE[system])).fetchone()
            if row and row[0] >= count:
                return time.time()
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{system}: {row[0] if row else 0} of {count} jobs after {timeout_s}s"
                )
            await asyncio.sleep(0.1)


async def _enqueue(system: str, dsn: str, count: int) -> None:
    if system == "rota":
        from rota import App
        from rota.domain.job import JobSpec

        async with App(dsn, auto_migrate=True) as app:
            await app.enqueue_many([JobSpec(kind="ten_steps") for _ in range(count)])
        return
    from dbos import DBOSClient

    from bench.dbos_app import QUEUE, WORKFLOW

    def enqueue_all() -> None:
        client = DBOSClient(system_database_url=dsn)
        try:
            for _ in range(count):
                client.enqueue({"workflow_name": WORKFLOW, "queue_name": QUEUE})
        finally:
            client.destroy()

    await asyncio.to_thread(enqueue_all)


async def _prepare(system: str, dsn: str) -> None:
    if system == "rota":
        from rota.store import open_store

        store = open_store(dsn)
        try:
            await store.migrate()
        finally:
            await store.close()


async def measure(settings: Settings, system: str, dsn: str, count: int, runs: int) -> list[float]:
    """Jobs per second of ``runs`` backlog drains of ``count`` jobs, one warm worker."""
    await _prepare(system, dsn)
    extra = {"BENCH_CLAIM_BATCH": str(CONCURRENCY)} if system == "rota" else {}
    group: WorkerGroup = start_workers(
        settings, system, dsn, processes=1, concurrency=CONCURRENCY, extra=extra
    )
    rates: list[float] = []
    try:
        await group.wait_ready(timeout_s=120)
        done = int(await _scalar(dsn, DONE[system]))
        await _enqueue(system, dsn, WARM_UP)
        done += WARM_UP
        await _until(dsn, system, done, timeout_s=300)
        for index in range(runs):
            group.pause()
            try:
                await _enqueue(system, dsn, count)
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute("ANALYZE")
                started = time.time()
            finally:
                group.resume()
            done += count
            seen = await _until(dsn, system, done, timeout_s=max(600.0, count / 5))
            finished = await _scalar(dsn, LAST[system])
            ended = finished if started < finished <= seen else seen
            rates.append(count / (ended - started))
            progress(f"  {system} run {index + 1}: {rates[-1]:,.0f} jobs/s ({count:,} jobs)")
    finally:
        try:
            await group.stop()
        finally:
            group.kill()
    return rates


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def section(
    rates: dict[str, list[float]], *, count: int, command: str, started: datetime, quick: bool
) -> str:
    host = report.machine()
    versions = report.versions()
    try:
        from importlib import metadata

        versions["dbos"] = metadata.version("dbos")
    except Exception:
        versions["dbos"] = "not installed"
    ours, theirs = rates["rota"], rates.get("dbos", [])
    ratios = [a / b for a, b in zip(ours, theirs, strict=False)]
    lines = [
        "## Durable jobs: 10 steps each, beside DBOS",
        "",
        f"`{command}` on {started:%Y-%m-%d} ({host['CPU']}, {host['RAM']}, {host['kernel']}, "
        f"Python {host['Python']}; rota {versions.get('rota', '?')}, DBOS "
        f"{versions.get('dbos', '?')}), on a throwaway PostgreSQL cluster configured as "
        "production, one worker process each, both systems in the same run, alternating.",
        "",
    ]
    if quick:
        lines += [
            "> **Harness check, not a measurement**: small loads. Its figures support no claim.",
            "",
        ]
    lines += [
        f"| {len(ours)} runs of {count:,} jobs (median, min-max) | jobs of 10 steps per second "
        "| steps checkpointed per second |",
        "|---|---|---|",
        f"| rota (100 slots, `ctx.step`) | {_cell(ours)} | {_cell([r * 10 for r in ours])} |",
    ]
    if theirs:
        lines.append(
            f"| DBOS (queue and steps at its defaults) | {_cell(theirs)} | "
            f"{_cell([r * 10 for r in theirs])} |"
        )
        ratio = f"{statistics.median(ratios):.1f}x ({min(ratios):.1f}-{max(ratios):.1f})"
        lines += ["", f"rota / DBOS, run by run: {ratio} (goal: at least 2x)."]
    return "\n".join(lines) + "\n"


async def measure_all(
    settings: Settings, systems: list[str], count: int, runs: int
) -> dict[str, list[float]]:
    """Jobs per second of each system, ``runs`` times alternating, each in a fresh database of
    its own on the settings' server."""
    server = settings.server_url
    for system in systems:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS rota_bench_durable_{system}")
            conn.execute(f"CREATE DATABASE rota_bench_durable_{system}")
    rates: dict[str, list[float]] = {system: [] for system in systems}
    try:
        for run in range(runs):
            progress(f"  -- durable jobs, run {run + 1} of {runs}")
            for system in systems:
                dsn = with_database(server, f"rota_bench_durable_{system}")
                rates[system] += await measure(settings, system, dsn, count, 1)
    finally:
        for system in systems:
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS rota_bench_durable_{system} WITH (FORCE)")
    return rates


async def main(args: argparse.Namespace, argv: list[str]) -> int:
    systems = ["rota"]
    if importlib.util.find_spec("dbos") is not None:
        systems.append("dbos")
    else:
        progress("dbos is not installed (make setup-bench): measuring rota alone")
    count = 200 if args.quick else args.jobs
    started = datetime.now(UTC)
    cluster = None if args.database_url else Cluster.start()
    server = args.database_url or (cluster.url if cluster else "")
    settings = Settings(server_url=server, postmaster=cluster.pid if cluster else None)
    try:
        rates = await measure_all(settings, systems, count, args.runs)
    finally:
        if cluster is not None:
            cluster.stop()
        settings.remove_workdir()
    command = "python -m bench.durable " + " ".join(shlex.quote(a) for a in argv)
    text = section(rates, count=count, command=command.strip(), started=started, quick=args.quick)
    print(text)
    if not args.no_write:
        OUT.write_text(text)
        progress(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--quick", action="store_true", help="small loads: a harness check")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--database-url", help="a server's URL instead of a cluster of its own")
    cli_args = sys.argv[1:]
    sys.exit(asyncio.run(main(parser.parse_args(cli_args), cli_args)))
