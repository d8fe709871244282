"""Run the benchmarks and rewrite docs/benchmarks.md and docs/benchmarks.png.

    python -m bench.run                       # everything, 3 runs each (about 45 minutes)
    python -m bench.run --only drain,latency  # a subset
    python -m bench.run --quick --runs 1      # a check of the harness with small loads
    python -m bench.run --systems rota        # rota alone
    python -m bench.run --database-url postgresql://user@host:5432/postgres   # a given server

By default the run starts its own PostgreSQL cluster, configured as production
(``bench/cluster.py``), and stops it at the end, also on Ctrl-C or failure. Scenarios run one
after another, never two at once (the machine has two cores). A scenario that cannot run
here is reported as skipped with its reason. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import shlex
import signal
import sys
import time
import traceback

from bench import report
from bench.cluster import Cluster, postmaster_of
from bench.harness import (
    PEERS312,
    ROOT,
    SYSTEMS,
    Bench,
    Settings,
    Skip,
    drop_database,
    peers312_problem,
    progress,
    summary_line,
)

SCENARIOS = (
    "enqueue",
    "drain",
    "latency",
    "backlog",
    "schedules",
    "memory",
    "sqlite",
    "fairness",
    "dashboard",
    "durable",
)
RESULTS = ROOT / "bench" / "results" / "latest.json"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    parser.add_argument("--only", help=f"comma-separated scenarios, of: {','.join(SCENARIOS)}")
    parser.add_argument("--runs", type=int, default=3, help="runs of each scenario (default 3)")
    parser.add_argument("--quick", action="store_true", help="small loads: a harness check")
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"comma-separated, default all: {','.join(SYSTEMS)}",
    )
    parser.add_argument(
        "--database-url",
        help="measure on this server instead of a cluster of the run's own: a URL of a "
        "database there (the suite creates and drops rota_bench_* databases on it)",
    )
    parser.add_argument(
        "--no-write",
        action="store_true",
        help="print only; leave docs/benchmarks.* and bench/results/latest.json alone "
        "(the raw values go to bench/results/unpublished.json)",
    )
    args = parser.parse_args(argv)
    chosen = [s.strip() for s in (args.only or ",".join(SCENARIOS)).split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(unknown)}")
    systems = tuple(s.strip() for s in args.systems.split(",") if s.strip())
    if set(systems) - set(SYSTEMS) or "rota" not in systems:
        parser.error(f"systems are {', '.join(SYSTEMS)} and must include rota")
    if not 1 <= args.runs <= 20:
        parser.error("--runs must be between 1 and 20")
    if args.database_url and not args.database_url.startswith(("postgresql://", "postgres://")):
        parser.error("--database-url must be a postgresql:// URL")
    args.scenarios = chosen
    args.system_list = systems
    return args


def _postmaster(url: str) -> int | None:
    """The given server's postmaster, when it runs on this machine (for its CPU)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        backend = conn.info.backend_pid
        parent = postmaster_of(backend)
    if parent is None:
        return None
    with contextlib.suppress(OSError), open(f"/proc/{parent}/comm") as handle:
        if handle.read().strip() in ("postgres", "postmaster"):
            return parent
    return None


def leave_out_peers312(bench: Bench) -> None:
    """Take the Python 3.12 peers out of the run when their venv cannot run them, each
    reported as skipped with the reason (the others are measured as usual)."""
    asked = [s for s in bench.settings.systems if s in PEERS312]
    problem = peers312_problem() if asked else None
    if problem:
        bench.settings.systems = tuple(s for s in bench.settings.systems if s not in PEERS312)
        for system in asked:
            bench.skip(system, f"not measured: {problem}")


async def main(args: argparse.Namespace, argv: list[str], cluster: Cluster | None) -> int:
    if cluster is not None:
        settings = Settings(server_url=cluster.url, postmaster=cluster.pid)
    else:
        settings = Settings(
            server_url=args.database_url,
            given_server=True,
            postmaster=_postmaster(args.database_url),
        )
    settings.runs = args.runs
    settings.quick = args.quick
    settings.systems = args.system_list
    bench = Bench(settings)
    leave_out_peers312(bench)
    bench.server = report.read_server(settings)
    started = time.time()
    # What is measured, taken as the run starts (a commit made meanwhile is not what ran).
    measured = report.versions()
    host = report.machine()
    cpu = [report.cpu_check()]
    progress(f"rota benchmarks: {', '.join(args.scenarios)}; {settings.runs} run(s) each")
    failed = 0
    for name in args.scenarios:
        module = importlib.import_module(f"bench.scenarios.{name}")
        progress(f"\n== {module.TITLE}")
        began = time.monotonic()
        try:
            await module.run(bench)
        except Skip as skip:
            bench.skip(name, str(skip))
        except Exception as error:
            failed += 1
            traceback.print_exc()
            bench.skip(name, f"failed: {type(error).__name__}: {error}")
        progress(
            f"   ({time.monotonic() - began:.0f} s; {(time.time() - started) / 60:.1f} min so far)"
        )
    for system in SYSTEMS:
        await drop_database(settings, f"rota_bench_{system}")
    cpu.append(report.cpu_check())
    print("\n== Summary (median, min-max over runs)")
    for m in bench.measurements:
        print(f"  {m.scenario:10} {m.system:13} {m.metric:44} {summary_line(m)} {m.unit}")
    command = ("python -m bench.run " + " ".join(shlex.quote(a) for a in _public(argv))).strip()
    # A run that publishes nothing leaves the published run's raw values where they are.
    results = RESULTS if not args.no_write else RESULTS.with_name("unpublished.json")
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(
        json.dumps(
            {
                "command": command,
                "started": started,
                "seconds": time.time() - started,
                "measurements": [m.to_json() for m in bench.measurements],
                "skipped": bench.skipped,
                "notes": bench.notes,
                "server": bench.server,
                "tuned": settings.tuned,
                "quick": settings.quick,
                "runs": settings.runs,
                "systems": list(settings.systems),
                "versions": measured,
                "machine": host,
                "cpu_check": cpu,
            },
            indent=1,
        )
    )
    if not args.no_write:
        report.write(
            bench,
            command=command,
            started=started,
            seconds=time.time() - started,
            measured=measured,
            host=host,
            cpu=cpu,
        )
        progress(f"\nwrote {report.MARKDOWN.relative_to(ROOT)} and {report.PLOT.relative_to(ROOT)}")
    if failed:
        progress(f"the worker processes' logs are kept in {settings.workdir}")
    else:
        settings.remove_workdir()
    return 1 if failed else 0


def _public(argv: list[str]) -> list[str]:
    """The command line as recorded: a given URL's password, if any, is not."""
    from urllib.parse import urlsplit

    shown = []
    for arg in argv:
        if arg.startswith(("postgresql://", "postgres://", "--database-url=")):
            prefix, _, url = arg.rpartition("=") if arg.startswith("--") else ("", "", arg)
            parts = urlsplit(url)
            if parts.password:
                netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
                url = parts._replace(netloc=netloc).geturl()
            arg = f"{prefix}={url}" if prefix else url
        shown.append(arg)
    return shown


def entry(argv: list[str]) -> int:
    args = parse(argv)
    # SIGTERM takes the Ctrl-C path: asyncio cancels the run, every `finally` stops its
    # workers, and the cluster is stopped below.
    signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    cluster = None
    try:
        if not args.database_url:
            progress("starting a throwaway PostgreSQL cluster (production settings)...")
            cluster = Cluster.start()
            progress(f"  PostgreSQL {cluster.pid} on {cluster.root} port {cluster.port}")
        return asyncio.run(main(args, argv, cluster))
    except (KeyboardInterrupt, asyncio.CancelledError):
        progress("\ninterrupted: stopping")
        return 130
    finally:
        if cluster is not None:
            cluster.stop()
            progress(f"stopped PostgreSQL {cluster.pid} and removed {cluster.root}")


if __name__ == "__main__":
    sys.exit(entry(sys.argv[1:]))
