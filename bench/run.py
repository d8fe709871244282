"""Run the benchmarks and rewrite docs/benchmarks.md and docs/benchmarks.png.

    python -m bench.run                       # everything, 3 runs each (about half an hour)
    python -m bench.run --only drain,latency  # a subset
    python -m bench.run --quick --runs 1      # a smoke check with small loads (a few minutes)
    python -m bench.run --systems rota        # rota alone

Scenarios run one after another, never two at once (the machine has two cores). A scenario
that cannot run here (a feature not built yet) is reported as skipped with its reason.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import shlex
import sys
import time
import traceback

from bench import report
from bench.harness import ROOT, SYSTEMS, Bench, Settings, Skip, drop_database, summary_line

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
)
RESULTS = ROOT / "bench" / "results" / "latest.json"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    parser.add_argument("--only", help=f"comma-separated scenarios, of: {','.join(SCENARIOS)}")
    parser.add_argument("--runs", type=int, default=3, help="runs of each scenario (default 3)")
    parser.add_argument("--quick", action="store_true", help="small loads: a smoke check")
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help="comma-separated, default all three"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5432)
    parser.add_argument("--user", default="postgres")
    parser.add_argument(
        "--no-write", action="store_true", help="print only; leave docs/benchmarks.* alone"
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
    args.scenarios = chosen
    args.system_list = systems
    return args


async def main(argv: list[str]) -> int:
    args = parse(argv)
    settings = Settings(
        host=args.host,
        port=args.port,
        user=args.user,
        runs=args.runs,
        quick=args.quick,
        systems=args.system_list,
    )
    bench = Bench(settings)
    started = time.time()
    print(f"rota benchmarks: {', '.join(args.scenarios)}; {settings.runs} run(s) each", flush=True)
    failed = 0
    for name in args.scenarios:
        module = importlib.import_module(f"bench.scenarios.{name}")
        print(f"\n== {module.TITLE}", flush=True)
        began = time.monotonic()
        try:
            await module.run(bench)
        except Skip as skip:
            bench.skip(name, str(skip))
        except Exception as error:
            failed += 1
            traceback.print_exc()
            bench.skip(name, f"failed: {type(error).__name__}: {error}")
        print(f"   ({time.monotonic() - began:.0f} s)", flush=True)
    for system in SYSTEMS:
        await drop_database(settings, f"rota_bench_{system}")
    print("\n== Summary (median, min-max over runs)")
    for m in bench.measurements:
        print(f"  {m.scenario:10} {m.system:13} {m.metric:40} {summary_line(m)} {m.unit}")
    command = "python -m bench.run " + " ".join(shlex.quote(a) for a in argv)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "command": command.strip(),
                "started": started,
                "seconds": time.time() - started,
                "measurements": [m.to_json() for m in bench.measurements],
                "skipped": bench.skipped,
                "notes": bench.notes,
            },
            indent=1,
        )
    )
    if not args.no_write:
        report.write(bench, command=command.strip(), started=started)
        print(f"\nwrote {report.MARKDOWN.relative_to(ROOT)} and {report.PLOT.relative_to(ROOT)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
