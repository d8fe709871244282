"""rota's drain at several worker settings, alternated: how the bench's drain settings were chosen.

    python -m bench.drain_settings                                 # 1000/500, 500/250, 500/500
    python -m bench.drain_settings --settings 1000/500,500/250 --processes 2 --runs 3
    python -m bench.drain_settings --quick                         # a check that it runs

Each setting is ``concurrency/claim_batch``. On a throwaway cluster configured as production
(``bench/cluster.py``), one rota database, the settings take turns run by run; each run is
``bench.drains.drain`` of ``--jobs`` no-op jobs (``--method``: a burst into idle workers, or a
held backlog) with ``--processes`` worker processes, on an emptied table. Prints each run, then
per setting the medians of jobs/s and of the worker's and PostgreSQL's CPU per job. Nothing is
written.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys

from bench.cluster import Cluster
from bench.drains import METHODS, Drain, drain
from bench.harness import Bench, Settings, progress
from bench.systems import make

DEFAULT_SETTINGS = "1000/500,500/250,500/500"


def parse_settings(text: str) -> dict[str, dict[str, str]]:
    """``"1000/500,500/250"`` -> the drain environment of each setting, by its text."""
    found: dict[str, dict[str, str]] = {}
    for item in text.split(","):
        concurrency, _, batch = item.strip().partition("/")
        if not (concurrency.isdigit() and batch.isdigit()):
            raise SystemExit(f"--settings: {item!r} is not concurrency/claim_batch")
        found[item.strip()] = {"BENCH_CONCURRENCY": concurrency, "BENCH_CLAIM_BATCH": batch}
    return found


async def compare(url: str, postmaster: int, args: argparse.Namespace) -> None:
    settings = Settings(server_url=url, postmaster=postmaster, systems=("rota",))
    settings.quick = args.quick
    bench = Bench(settings)
    rota = make("rota", settings)
    await rota.setup()
    variants = parse_settings(args.settings)
    results: dict[str, list[Drain]] = {name: [] for name in variants}
    try:
        for index in range(args.runs):
            for name, env in variants.items():
                await rota.reset()
                result = await drain(
                    bench,
                    rota,
                    method=args.method,
                    processes=args.processes,
                    count=settings.size(args.jobs, 2_000),
                    env=env,
                )
                results[name].append(result)
                print(f"run {index + 1}  {name:>10}  {_line([result])}", flush=True)
    finally:
        await rota.close()
    print(f"\nmedians over {args.runs} run(s), {args.method}, {args.processes} process(es):")
    for name, runs in results.items():
        print(f"  {name:>10}  {_line(runs)}")


def _line(runs: list[Drain]) -> str:
    rate = statistics.median(r.jobs_per_s for r in runs)
    worker = statistics.median(r.worker_cpu_us for r in runs)
    server = [r.postgres_cpu_us for r in runs if r.postgres_cpu_us is not None]
    pg = f"{statistics.median(server):.1f}" if server else "n/a"
    return f"{rate:>9,.0f} jobs/s  worker {worker:.1f} µs/job  PostgreSQL {pg} µs/job"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default=DEFAULT_SETTINGS, help="concurrency/claim_batch,...")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--method", choices=METHODS, default="burst")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small loads, one run: a check")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs = 1
    progress("starting a throwaway PostgreSQL cluster (production settings)...")
    cluster = Cluster.start()
    try:
        asyncio.run(compare(cluster.url, cluster.pid, args))
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
