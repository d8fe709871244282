"""Writes docs/benchmarks.md (machine, versions, results beside the peers, goals) and
docs/benchmarks.png (throughput and latency per system) from one run's measurements."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path

import psycopg

from bench.harness import ROOT, SYSTEMS, Bench, Measurement

MARKDOWN = ROOT / "docs" / "benchmarks.md"
PLOT = ROOT / "docs" / "benchmarks.png"
PROFILE = ROOT / "bench" / "results" / "profile.md"
NAMES = {"rota": "rota", "pgqueuer": "PgQueuer", "procrastinate": "Procrastinate"}


def machine(bench: Bench) -> dict[str, str]:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.partition(":")[2].strip()
            break
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal"):
            mem_kib = int(line.split()[1])
    info = {
        "CPU": f"{cpu}, {os.cpu_count()} cores",
        "RAM": f"{mem_kib / 1024 / 1024:.0f} GiB",
        "kernel": f"Linux {platform.release()}",
        "Python": platform.python_version(),
    }
    with psycopg.connect(bench.settings.dsn("postgres"), autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        info["PostgreSQL"] = f"{version[0] if version else '?'} on {bench.settings.host}"
        for setting in ("synchronous_commit", "fsync", "shared_buffers", "autovacuum"):
            row = conn.execute(f"SHOW {setting}").fetchone()
            info[f"`{setting}`"] = row[0] if row else "?"
    return info


def versions() -> dict[str, str]:
    found = {}
    for package in ("rota", "pgqueuer", "procrastinate", "psycopg", "asyncpg", "uvloop"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    try:
        commit = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    found["rota commit"] = commit
    return found


def cell(m: Measurement | None) -> str:
    if m is None:
        return "—"
    text = f"{_num(m.median)} ({_num(m.low)}-{_num(m.high)})"
    return f"{text} *{m.note}*" if m.note else text


def _num(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def results_table(bench: Bench) -> list[str]:
    shown = [s for s in SYSTEMS if s in bench.settings.systems]
    lines = [
        "| scenario | measure | unit | " + " | ".join(NAMES[s] for s in shown) + " |",
        "|---|---|---|" + "---|" * len(shown),
    ]
    seen: list[tuple[str, str]] = []
    for m in bench.measurements:
        if (m.scenario, m.metric) not in seen:
            seen.append((m.scenario, m.metric))
    for scenario, metric in seen:
        row = [bench.find(scenario, metric, system) for system in shown]
        first = next(m for m in row if m is not None)
        arrow = "↑" if first.better == "higher" else "↓"
        lines.append(
            f"| {scenario} | {metric} {arrow} | {first.unit} | "
            + " | ".join(cell(m) for m in row)
            + " |"
        )
    return lines


def goals(bench: Bench) -> list[str]:
    """Each goal of issue 7: met, or by how much it falls short."""
    rows = ["| goal | rota | target | status |", "|---|---|---|---|"]

    def median(scenario: str, metric: str, system: str) -> float | None:
        m = bench.find(scenario, metric, system)
        return m.median if m else None

    def at_least(label: str, ours: float | None, target: float | None, unit: str) -> None:
        if ours is None or target is None:
            rows.append(f"| {label} | {_opt(ours, unit)} | {_opt(target, unit)} | not measured |")
            return
        status = (
            f"met (+{100 * (ours / target - 1):.0f}%)"
            if ours >= target
            else f"**missed by {100 * (1 - ours / target):.0f}%**"
        )
        rows.append(f"| {label} | {_num(ours)} {unit} | ≥ {_num(target)} {unit} | {status} |")

    def at_most(label: str, ours: float | None, target: float | None, unit: str) -> None:
        if ours is None or target is None:
            rows.append(f"| {label} | {_opt(ours, unit)} | {_opt(target, unit)} | not measured |")
            return
        status = (
            f"met ({100 * (1 - ours / target):.0f}% under)"
            if ours <= target
            else f"**missed: {100 * (ours / target - 1):.0f}% over**"
        )
        rows.append(f"| {label} | {_num(ours)} {unit} | ≤ {_num(target)} {unit} | {status} |")

    for processes in ("1 process", "2 processes"):
        metric = f"drain, {processes}"
        at_least(
            f"drain, {processes} ≥ PgQueuer",
            median("drain", metric, "rota"),
            median("drain", metric, "pgqueuer"),
            "jobs/s",
        )
    at_least(
        "bulk enqueue ≥ PgQueuer",
        median("enqueue", "bulk enqueue, one call", "rota"),
        median("enqueue", "bulk enqueue, one call", "pgqueuer"),
        "jobs/s",
    )
    at_most(
        "pickup p99 ≤ PgQueuer",
        median("latency", "pickup latency p99", "rota"),
        median("latency", "pickup latency p99", "pgqueuer"),
        "ms",
    )
    for variant in ("not yet due", "finished"):
        at_least(
            f"backlog ratio, 1M {variant}",
            median("backlog", f"ratio to empty: {variant}", "rota"),
            0.9,
            "x",
        )
    at_most("schedule lag p99", median("schedules", "schedule lag p99", "rota"), 50.0, "ms")
    at_most(
        "worker RSS, 1,000 sleeping jobs",
        median("memory", "RSS, 1,000 jobs running", "rota"),
        150.0,
        "MiB",
    )
    for processes in ("1 process", "2 processes"):
        at_least(
            f"SQLite drain, {processes}",
            median("sqlite", f"drain, {processes}", "rota"),
            3000.0,
            "jobs/s",
        )
    return rows


def _opt(value: float | None, unit: str) -> str:
    return "—" if value is None else f"{_num(value)} {unit}"


def write(bench: Bench, *, command: str, started: float) -> None:
    info = machine(bench)
    found = versions()
    lines = [
        "# Benchmarks",
        "",
        "rota beside [PgQueuer](https://github.com/janbjorge/pgqueuer) and "
        "[Procrastinate](https://github.com/procrastinate-org/procrastinate), measured in the "
        "same run on the same PostgreSQL server, each peer with its own worker at its best "
        "settings. This file is written by `make bench` (`python -m bench.run`); do not edit "
        "it by hand. Raw values of every run: `bench/results/latest.json`.",
        "",
        f"- **Date:** {time.strftime('%Y-%m-%d %H:%M %Z', time.localtime(started))}",
        f"- **Command:** `{command}` ({bench.settings.runs} runs of each scenario"
        + (", quick loads" if bench.settings.quick else "")
        + ")",
    ]
    lines += [f"- **{key}:** {value}" for key, value in info.items()]
    lines += [
        "- **Versions:** " + ", ".join(f"{k} {v}" for k, v in found.items()),
        "",
        "Workers at their best settings:",
        "",
    ]
    from bench.systems import make

    for system in bench.settings.systems:
        lines.append(f"- {NAMES[system]}: {make(system, bench.settings).settings_text()}")
    lines += [
        "",
        "Each cell: median (min-max) over the runs; ↑ higher is better, ↓ lower is better. "
        "Where a system ran a smaller batch the cell says so in italics (throughput is a rate, "
        "so it compares; Procrastinate drains a few hundred jobs a second here, and a full batch "
        "would take minutes per run).",
        "",
        "## Results",
        "",
        *results_table(bench),
        "",
        "## Goals of issue 7 on this machine",
        "",
        *goals(bench),
        "",
        "Issue 7's reference figures, from another machine of the same kind (2 cores, "
        "PostgreSQL 15, `synchronous_commit` on), for orientation only: PgQueuer 1.6 "
        "~14,600 / ~19,700 jobs/s drain with 1 / 2 processes, ~61,000 jobs/s bulk enqueue, "
        "2.6 / 4.2 ms pickup p50 / p99, ~730 jobs/s beside 1M not-yet-due jobs; Procrastinate "
        "3.10 ~620 / ~800 jobs/s drain, ~16,000 jobs/s bulk enqueue. The goals are judged "
        "against the peers measured in this run, on this server.",
        "",
        "## How each figure is taken",
        "",
        "- **enqueue**: single = one call per job, each its own commit; bulk = one call "
        "with every job (`App.enqueue_many`, PgQueuer's list `Queries.enqueue`, "
        "Procrastinate's `batch_defer_async`), timed from Python values to commit.",
        "- **drain**: workers are started and warmed up first; the clock runs from the "
        "bulk enqueue's return (its commit) until a poll (20/s) sees every job finished. "
        "drain-cpu is the CPU the worker processes and the PostgreSQL server used during "
        "the drain, per job.",
        "- **latency**: 50 enqueues a second, one per call, into one idle worker; from the "
        "enqueue call's return to the handler's first line (`time.time()` on both sides).",
        "- **backlog**: 1,000,000 rows loaded with one `INSERT ... SELECT generate_series`, "
        "then `VACUUM ANALYZE`; the same drain with one process; ratio to the empty-table "
        'drain. PgQueuer deletes finished jobs, so its "finished" rows are its log table.',
        "- **memory**: RSS of one worker process with 1,000 `asyncio.sleep` jobs running.",
        "- **dashboard**: one call after a warm-up, then timed calls; the HTTP ones go "
        "through the whole ASGI app in process (httpx `ASGITransport`).",
        "- Every load is bounded in count and time; scenarios run one at a time.",
        "- This server runs with `autovacuum` off, so the suite truncates or deletes and "
        "`VACUUM ANALYZE`s between runs itself; numbers on a server with autovacuum on and "
        "a churning jobs table depend on its settings for that table.",
    ]
    if bench.notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {scenario}: {text}" for scenario, text in bench.notes]
    if bench.skipped:
        lines += ["", "## Skipped", ""]
        lines += [f"- **{scenario}**: {why}" for scenario, why in bench.skipped]
    if PROFILE.exists():
        lines += ["", PROFILE.read_text().strip()]
    lines += ["", "![Throughput and latency per system](benchmarks.png)", ""]
    MARKDOWN.write_text("\n".join(lines))
    plot(bench)


def plot(bench: Bench) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = [s for s in SYSTEMS if s in bench.settings.systems]
    throughput = [
        ("drain", "drain, 1 process", "drain, 1 proc"),
        ("drain", "drain, 2 processes", "drain, 2 procs"),
        ("enqueue", "bulk enqueue, one call", "bulk enqueue / 10"),
        ("backlog", "drain: 1,000,000 not yet due", "drain beside 1M not due"),
    ]
    latency = [
        ("latency", "pickup latency p50", "pickup p50"),
        ("latency", "pickup latency p99", "pickup p99"),
    ]
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), width_ratios=(2, 1))
    width = 0.8 / len(systems)
    for index, system in enumerate(systems):
        values, errors_low, errors_high = [], [], []
        for scenario, metric, label in throughput:
            m = bench.find(scenario, metric, system)
            scale = 0.1 if label.startswith("bulk") else 1.0
            values.append(m.median * scale if m else 0)
            errors_low.append((m.median - m.low) * scale if m else 0)
            errors_high.append((m.high - m.median) * scale if m else 0)
        xs = [i + index * width for i in range(len(throughput))]
        left.bar(xs, values, width, label=NAMES[system], yerr=[errors_low, errors_high])
        values, errors_low, errors_high = [], [], []
        for scenario, metric, _ in latency:
            m = bench.find(scenario, metric, system)
            values.append(m.median if m else 0)
            errors_low.append(m.median - m.low if m else 0)
            errors_high.append(m.high - m.median if m else 0)
        xs = [i + index * width for i in range(len(latency))]
        right.bar(xs, values, width, label=NAMES[system], yerr=[errors_low, errors_high])
    center = width * (len(systems) - 1) / 2
    left.set_xticks([i + center for i in range(len(throughput))], [t[2] for t in throughput])
    left.set_ylabel("jobs/s (median; bars: min-max)")
    left.set_title("Throughput (higher is better)")
    left.legend()
    right.set_xticks([i + center for i in range(len(latency))], [t[2] for t in latency])
    right.set_ylabel("ms")
    right.set_title("Pickup latency (lower is better)")
    figure.suptitle("rota vs PgQueuer vs Procrastinate, same run, same PostgreSQL")
    figure.tight_layout()
    figure.savefig(PLOT, dpi=110)
    plt.close(figure)


def rewrite_from_results(path: Path = ROOT / "bench" / "results" / "latest.json") -> None:
    """Rebuild the report from saved results (after editing the report code)."""
    from bench.harness import Settings

    data = json.loads(path.read_text())
    systems = tuple(s for s in SYSTEMS if any(m["system"] == s for m in data["measurements"]))
    bench = Bench(Settings(systems=systems))
    bench.measurements = [Measurement(**m) for m in data["measurements"]]
    bench.skipped = [tuple(s) for s in data["skipped"]]  # type: ignore[misc]
    bench.notes = [tuple(n) for n in data["notes"]]  # type: ignore[misc]
    runs = max((len(m.values) for m in bench.measurements if m.scenario != "dashboard"), default=3)
    bench.settings.runs = runs
    bench.settings.quick = "--quick" in data["command"]
    write(bench, command=data["command"], started=data["started"])


if __name__ == "__main__":
    rewrite_from_results()
