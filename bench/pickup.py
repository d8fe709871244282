"""Where a pickup's time goes: the latency scenario of ``bench.run`` (single enqueues at 50/s
into one idle, warm worker), with each system's worker traced (``bench.pickup_trace``).

    python -m bench.pickup                 # 1,000 pickups per system per run, 3 runs (A B A B A B)
    python -m bench.pickup --jobs 300 --runs 1
    python -m bench.pickup --server-cpu    # also each claim's CPU time in its server process

On a throwaway cluster with the benchmark's production settings (``bench.cluster``). Each
pickup, from the enqueue call's return (its commit) to the handler's first line, is split at
three points noted inside the worker: the notification reaching its Python code, the claim
statement handed to the driver, and its rows back (rota: psycopg's ``execute`` of its claim
function; PgQueuer: its asyncpg driver's ``fetch`` in ``Queries.dequeue``). All four
instants are ``time.time()`` on one host. Writes ``bench/results/pickup.md``; prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import sys
import time
from typing import Any

from bench.cluster import Cluster
from bench.harness import ROOT, Settings, percentile, progress
from bench.scenarios.latency import timed_pickups
from bench.systems import System, make

OUT = ROOT / "bench" / "results"
SYSTEMS = ("rota", "pgqueuer")
STAGES = (
    ("commit to notice", "the notification reaches the worker's Python code"),
    ("notice to claim sent", "the worker wakes and hands the claim to its driver"),
    ("claim statement", "round trip of the claim, driver included"),
    ("rows to handler", "rows decoded, job started, handler's first line"),
    ("total", "commit to the handler's first line"),
)


async def one(
    settings: Settings, system: System, count: int, *, server_cpu: bool = False
) -> dict[str, Any]:
    trace = settings.workdir / f"{system.name}-{time.monotonic_ns()}.trace.json"
    extra = {"BENCH_TRACE": str(trace)}
    if server_cpu:
        extra["BENCH_TRACE_SERVER_CPU"] = "1"
    committed, started = await timed_pickups(settings, system, count, extra=extra)
    events: dict[str, list[float]] = {}
    for name, at in json.loads(trace.read_text()):
        events.setdefault(name, []).append(at)
    cpu = events.pop("server_cpu", [])
    for times in events.values():
        times.sort()
    stages: dict[str, list[float]] = {name: [] for name, _ in STAGES}
    for seq, commit in committed.items():
        handler = started[seq]
        answered = _last_before(events.get("answered", []), handler)
        sent = _last_before(events.get("sent", []), answered)
        notice = _last_before(events.get("notice", []), sent)
        if answered is None or sent is None or notice is None:
            continue  # a pickup whose steps were not all seen (none are expected)
        for (name, _), ms in zip(
            STAGES,
            (notice - commit, sent - notice, answered - sent, handler - answered, handler - commit),
            strict=True,
        ):
            stages[name].append(1000 * ms)
    return {"stages": stages, "count": count, "server_cpu": cpu}


def _last_before(times: list[float], instant: float | None) -> float | None:
    if instant is None:
        return None
    index = bisect.bisect_right(times, instant)
    return times[index - 1] if index else None


def markdown(results: dict[str, list[dict[str, Any]]], command: str) -> str:
    lines = [
        "# Pickup latency, split",
        "",
        f"`{command}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Each cell: the "
        "median over runs of the run's percentile, in ms. A stage's percentiles do not add up "
        "to the total's.",
        "",
        "| stage | " + " | ".join(f"{name} p50 | {name} p99" for name in results) + " |",
        "|---|" + "---|---|" * len(results),
    ]
    for stage, what in STAGES:
        cells = []
        for runs in results.values():
            for fraction in (0.5, 0.99):
                values = sorted(percentile(run["stages"][stage], fraction) for run in runs)
                cells.append(f"{values[len(values) // 2]:.2f}")
        lines.append(f"| {stage} ({what}) | " + " | ".join(cells) + " |")
    counted = {
        name: sum(len(run["stages"]["total"]) for run in runs) for name, runs in results.items()
    }
    lines += [
        "",
        "Pickups split: " + ", ".join(f"{name} {n:,}" for name, n in counted.items()) + ".",
        "",
        *tail(results),
        *server_cpu(results),
    ]
    return "\n".join(lines)


def server_cpu(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """With --server-cpu: the CPU time of the claim's server process per claim that returned
    rows (the warm-up's included), every run's claims together."""
    cpus = {
        name: sorted(x for run in runs for x in run["server_cpu"]) for name, runs in results.items()
    }
    if not any(cpus.values()):
        return []
    lines = [
        "",
        "The claim's server CPU (its server process's CPU time from just before the claim was "
        "sent to just after its rows came back, µs; every run's claims that returned rows, "
        "the warm-up's included):",
        "",
        "| system | claims | p50 | p90 | p99 | p99.5 | max |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, values in cpus.items():
        if values:
            lines.append(
                f"| {name} | {len(values):,} | "
                + " | ".join(f"{percentile(values, q):.0f}" for q in (0.5, 0.9, 0.99, 0.995))
                + f" | {values[-1]:.0f} |"
            )
    return lines


#: The total's quantiles of the tail table, over every run's pickups together.
TAIL_QUANTILES = (0.5, 0.98, 0.99, 0.995, 0.999)


def tail(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The slowest 1% of each system's pickups (every run's together), each put down to the
    stage that took longest beyond that stage's median: which step makes the tail."""
    header = [
        "system",
        *(f"p{100 * q:g}" for q in TAIL_QUANTILES),
        "slowest 1%",
        *(f"by the {name}" for name, _ in STAGES[:-1]),
    ]
    lines = [
        "The tail, every run's pickups together: the total's quantiles (ms), and the slowest "
        "1% by the stage that exceeded its own median the most.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for name, runs in results.items():
        pickups = [
            row
            for run in runs
            for row in zip(*(run["stages"][stage] for stage, _ in STAGES), strict=True)
        ]
        if not pickups:
            continue
        totals = [row[-1] for row in pickups]
        medians = [percentile([row[i] for row in pickups], 0.5) for i in range(len(STAGES) - 1)]
        slowest = sorted(pickups, key=lambda row: row[-1])[-max(1, len(pickups) // 100) :]
        by_stage = [0] * len(medians)
        for row in slowest:
            excess = [row[i] - medians[i] for i in range(len(medians))]
            by_stage[excess.index(max(excess))] += 1
        lines.append(
            f"| {name} | "
            + " | ".join(f"{percentile(totals, q):.2f}" for q in TAIL_QUANTILES)
            + f" | {len(slowest)} | "
            + " | ".join(str(n) for n in by_stage)
            + " |"
        )
    return lines


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pickup")
    parser.add_argument("--jobs", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--server-cpu",
        action="store_true",
        help="also read each claim's CPU time in its server process (/proc; the server on this host)",
    )
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    cluster = Cluster.start()
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in SYSTEMS}
    try:
        settings = Settings(server_url=cluster.url, postmaster=cluster.pid)
        systems = [make(name, settings) for name in SYSTEMS]
        for system in systems:
            await system.setup()
        try:
            for index in range(args.runs):
                for system in systems:  # A B A B: drift hits both
                    progress(
                        f"run {index + 1} of {args.runs}: {system.name}, {args.jobs:,} pickups"
                    )
                    results[system.name].append(
                        await one(settings, system, args.jobs, server_cpu=args.server_cpu)
                    )
        finally:
            for system in systems:
                await system.close()
    finally:
        cluster.stop()
    settings.remove_workdir()  # kept when a run failed above
    text = markdown(results, "python -m bench.pickup " + " ".join(argv))
    (OUT / "pickup.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
