"""Writes docs/benchmarks.md (machine, server settings as the server reports them, versions,
results beside the peers, the goals) and docs/benchmarks.png from one run."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
import timeit
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg

from bench.cluster import KEY_SETTINGS
from bench.harness import PYTHON312, ROOT, SYSTEMS, Bench, Measurement, Settings

MARKDOWN = ROOT / "docs" / "benchmarks.md"
PLOT = ROOT / "docs" / "benchmarks.png"
#: What the run above says and does not, written after reading it (dated, with the commit it
#: read), spliced in verbatim after the notes; the published write-ups below follow it. The
#: investigations behind the figures (profiles, before and after) are in bench/reading.md,
#: which the report does not splice.
PUBLISHED = ROOT / "bench" / "published.md"
#: The dashboard and the API at millions of jobs (``bench.dashboard_scale``), and cost beside
#: millions of jobs (``bench.scale``), each spliced in verbatim after it.
DASHBOARD_SCALE = ROOT / "bench" / "dashboard_scale.md"
SCALE = ROOT / "bench" / "scale.md"
#: /healthz and leases under API load (``bench.serve_load``), spliced in the same way.
SERVE_LOAD = ROOT / "bench" / "serve_load.md"
#: Fan-in and chains (``bench.workflows``), spliced in the same way.
WORKFLOWS = ROOT / "bench" / "workflows.md"
#: A day of the seeds' estimate, compressed (``bench.day``), spliced in the same way.
DAY = ROOT / "bench" / "day.md"
#: Durable jobs of 10 steps beside DBOS (``bench.durable``), spliced in the same way.
DURABLE = ROOT / "bench" / "durable.md"
#: Import, --help and a worker's first claim (``bench.startup``), spliced in the same way.
STARTUP = ROOT / "bench" / "startup.md"
#: Takeover after SIGKILL and a restarted worker's first claim (``bench.takeover``), likewise.
TAKEOVER = ROOT / "bench" / "takeover.md"
#: What the activity tallies add to a completion (``bench.activity_cost``), the same way.
ACTIVITY = ROOT / "bench" / "activity_cost.md"
#: The write-ups, in the order the report splices them.
WRITE_UPS = (
    PUBLISHED,
    DASHBOARD_SCALE,
    SCALE,
    DAY,
    SERVE_LOAD,
    WORKFLOWS,
    DURABLE,
    STARTUP,
    TAKEOVER,
    ACTIVITY,
)
NAMES = {
    "rota": "rota",
    "pgqueuer": "PgQueuer",
    "procrastinate": "Procrastinate",
    "oban": "Oban for Python",
    "dbos": "DBOS",
}
#: Settings that only say where this run's cluster happened to live.
_PER_RUN = {"port", "unix_socket_directories", "data_directory", "config_file", "hba_file"}


def read_server(settings: Settings) -> dict[str, Any]:
    """What the server says about itself: version and every setting not at its built-in
    default (plus ``KEY_SETTINGS`` whatever their source), from ``pg_settings``."""
    with psycopg.connect(settings.server_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT name, current_setting(name), source FROM pg_settings "
            "WHERE source NOT IN ('default', 'override', 'client', 'session') "
            "OR name = ANY(%s) ORDER BY name",
            [list(KEY_SETTINGS)],
        ).fetchall()
        version = conn.execute("SHOW server_version").fetchone()
    return {
        "version": version[0] if version else "?",
        "given": settings.given_server,
        "cpu_visible": settings.postmaster is not None,
        "settings": [[name, value, source] for name, value, source in rows if name not in _PER_RUN],
    }


def machine() -> dict[str, str]:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.partition(":")[2].strip()
            break
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal"):
            mem_kib = int(line.split()[1])
    return {
        "CPU": f"{cpu}, {os.cpu_count()} cores",
        "RAM": f"{mem_kib / 1024 / 1024:.0f} GiB",
        "kernel": f"Linux {platform.release()}",
        "Python": platform.python_version(),
    }


#: The CPU check's workload: one call of it, timed over ``CPU_CHECK_CALLS`` calls, best of 5.
CPU_CHECK = "dumps(payload)"
CPU_CHECK_SETUP = "from json import dumps; payload = {'seq': 1234, 'kind': 'noop'}"
CPU_CHECK_CALLS = 50_000


def cpu_check() -> float:
    """µs per call of a fixed Python workload (``json.dumps`` of a small dict), the best of 5
    rounds: taken as a run starts and as it ends, it says how fast the machine ran Python
    then. Machines of one kind differ from hour to hour (a shared host), and a run's figures
    compare with another run's only as far as their checks agree."""
    rounds = timeit.repeat(CPU_CHECK, setup=CPU_CHECK_SETUP, number=CPU_CHECK_CALLS, repeat=5)
    return min(rounds) / CPU_CHECK_CALLS * 1e6


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
    found.update(peers312_versions())
    return found


def peers312_versions() -> dict[str, str]:
    """The versions of the peers run in the Python 3.12 venv, and its Python."""
    if not PYTHON312.exists():
        return {}
    script = (
        "import sys; from importlib import metadata as m\n"
        "for p in ('oban', 'dbos'):\n"
        "    try: print(p, '(Python 3.12 venv)', m.version(p))\n"
        "    except m.PackageNotFoundError: print(p, '(Python 3.12 venv)', 'not installed')\n"
        "print('Python of that venv', sys.version.split()[0])"
    )
    try:
        out = subprocess.run(
            [str(PYTHON312), "-c", script], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    return dict(line.rsplit(" ", 1) for line in out.splitlines() if " " in line)


def harness_check(bench: Bench) -> bool:
    """Quick loads or fewer than 3 runs: the run checks the harness, it measures nothing."""
    return bench.settings.quick or bench.settings.runs < 3


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


def server_section(bench: Bench) -> list[str]:
    server = bench.server
    if server.get("given"):
        how = (
            "the server given with `--database-url` (not started by the run: its settings "
            "below are whatever it was configured with)"
        )
    else:
        how = (
            "a throwaway cluster the run started itself (`bench/cluster.py`): `initdb` in a "
            "temporary directory on the local disk, a port of its own, connections over a unix "
            "socket; stopped and removed at the end"
        )
    lines = [
        f"PostgreSQL {server.get('version', '?')}: {how}. Every setting not at PostgreSQL's "
        "built-in default, and the key ones whatever their source, as the server itself "
        "reported them (`pg_settings`) at the start of the run:",
        "",
        "| setting | value | source |",
        "|---|---|---|",
    ]
    lines += [f"| `{name}` | {value} | {source} |" for name, value, source in server["settings"]]
    if not server.get("cpu_visible"):
        lines += ["", "The server's processes are not visible from here: no PostgreSQL CPU."]
    return lines


def goals(bench: Bench) -> list[str]:
    """Each goal, as set, with what this run measured. A goal beside the peers is measured
    against the best peer of this run (the one rota must beat by the factor to beat every
    one), named in its row."""
    rows = [
        "| goal | target | rota | best peer (this run) | status |",
        "|---|---|---|---|---|",
    ]

    def median(scenario: str, metric: str, system: str) -> float | None:
        m = bench.find(scenario, metric, system)
        return m.median if m else None

    def row(
        label: str, target: str, ours: float | None, theirs: str, unit: str, status: str
    ) -> None:
        rows.append(f"| {label} | {target} | {_opt(ours, unit)} | {theirs} | {status} |")

    def best_peer(scenario: str, metric: str, higher: bool) -> tuple[str, float] | None:
        found = [
            (system, value)
            for system in SYSTEMS
            if system != "rota"
            and (value := median(scenario, metric, system)) is not None
            and value > 0
        ]
        if not found:
            return None
        return (max if higher else min)(found, key=lambda pair: pair[1])

    def versus(label: str, scenario: str, metric: str, factor: float, higher: bool) -> None:
        ours = median(scenario, metric, "rota")
        sign = "≥" if higher else "≤"
        m = bench.find(scenario, metric, "rota")
        unit = m.unit if m else ""
        target = f"{sign} {factor:g}x every peer" if factor != 1 else f"{sign} every peer"
        best = best_peer(scenario, metric, higher)
        if ours is None or best is None:
            row(label, target, ours, "—", unit, "not measured")
            return
        system, theirs = best
        ratio = ours / theirs
        met = ratio >= factor if higher else ratio <= factor
        row(
            label,
            target,
            ours,
            f"{NAMES[system]}: {_opt(theirs, unit)}",
            unit,
            f"{'met' if met else '**not met**'} ({ratio:.2f}x)",
        )

    def absolute(label: str, scenario: str, metric: str, limit: float, higher: bool) -> None:
        ours = median(scenario, metric, "rota")
        m = bench.find(scenario, metric, "rota")
        unit = m.unit if m else ""
        target = f"{'≥' if higher else '≤'} {_num(limit)} {unit}".strip()
        if ours is None:
            row(label, target, ours, "—", unit, "not measured")
            return
        met = ours >= limit if higher else ours <= limit
        row(label, target, ours, "—", unit, "met" if met else "**not met**")

    for method in ("burst", "backlog"):
        for processes in ("1 process", "2 processes"):
            metric = f"{method} drain, {processes}"
            versus(f"{metric} (no-op)", "drain", metric, 2.0, True)
    absolute(
        "worker CPU per no-op job (backlog, 1 process)",
        "drain-cpu",
        "worker CPU per job, backlog, 1 proc",
        40.0,
        False,
    )
    absolute(
        "PostgreSQL CPU per job (backlog, 1 process)",
        "drain-cpu",
        "PostgreSQL CPU per job, backlog, 1 proc",
        60.0,
        False,
    )
    absolute("bulk enqueue", "enqueue", "bulk enqueue, one call", 100_000.0, True)
    versus("bulk enqueue beside the peers", "enqueue", "bulk enqueue, one call", 1.5, True)
    versus(
        "single enqueue (one job per call)", "enqueue", "single enqueue, 1 job per call", 1, True
    )
    versus("pickup latency p99, idle worker", "latency", "pickup latency p99", 0.8, False)
    absolute("SQLite drain, 1 process", "sqlite", "drain, 1 process", 15_000.0, True)
    absolute("SQLite bulk enqueue", "sqlite", "bulk enqueue, one call", 50_000.0, True)
    return rows


def _opt(value: float | None, unit: str) -> str:
    return "—" if value is None else f"{_num(value)} {unit}".strip()


HOW = [
    "- **enqueue**: single = one call per job, each its own commit; bulk = one call with "
    "every job, each system's fastest documented path (`App.enqueue_many`, COPY from 2,000 "
    "jobs; PgQueuer's list `Queries.enqueue`, one INSERT of arrays; Procrastinate's "
    "`batch_defer_async`; Oban for Python's `enqueue_many`, one INSERT; DBOS has none, so its "
    "bulk is `DBOSClient.enqueue_in_transaction` once per workflow in one transaction, over a "
    "tenth of the batch), timed from "
    "Python values to commit, into an emptied table after a warm-up; the table is emptied "
    "again after the run.",
    "- **drain**, two methods, workers started and warmed up first (1,000 jobs run end to end "
    "before the clock starts). *burst*: one bulk enqueue into idle workers, clock from the "
    "enqueue call's return (its commit) to the last job's completion as the store recorded "
    "it. *backlog*: workers held (SIGSTOP: connected and warm, claiming nothing), the jobs "
    "enqueued and the table `ANALYZE`d, clock from the moment they are let go (SIGCONT) to the "
    "last completion. Systems alternate run by run (rota, PgQueuer, Procrastinate, Oban for "
    "Python, DBOS, rota, ...) "
    "so drift hits each alike; each run starts on an emptied table (`TRUNCATE`) and empties it "
    "again when done, so that no system's leftover rows are vacuumed in the next system's "
    "window; autovacuum does what it does during the drain. *rota / PgQueuer* pairs run i of "
    "each.",
    "- **drain-cpu**: user + system CPU over the drain, per job: of the worker processes "
    "(`/proc/<pid>/stat`), and of the whole PostgreSQL server (postmaster, backends, "
    "autovacuum, checkpointer, WAL writer; exited backends through the postmaster's children "
    "time) less the harness's own polling backend. In the burst method the enqueue's commit "
    "is before the window; the backlog method measures claims and completions alone.",
    "- **latency**: 50 enqueues a second, one per call, into one idle worker that ran 100 jobs "
    "first; from the enqueue call's return to the handler's first line (`time.time()` on both "
    "sides).",
    "- **backlog**: 1,000,000 rows loaded with one `INSERT ... SELECT generate_series`, then "
    "`VACUUM ANALYZE`; a burst drain with one process; ratio to the empty-table drain. "
    'PgQueuer deletes finished jobs, so its "finished" rows are its log table.',
    "- **memory**: RSS of one worker process with 1,000 `asyncio.sleep` jobs running.",
    "- **sqlite**: rota's embedded default, a fresh file per run, WAL mode; polled through its "
    "per-state counters.",
    "- **dashboard**: 10,000,000 jobs (a week of day partitions of finished jobs), every "
    "statement under its generic plan (`plan_cache_mode = force_generic_plan`); each route "
    "called twice, then 20 times in a row per run, through the whole ASGI app in process "
    "(httpx `ASGITransport`).",
    "- **Oban for Python and DBOS** run in a Python 3.12 venv of their own (`make "
    "setup-bench312`; Oban for Python needs 3.12): their workers are that venv's processes "
    "(`bench/peers312.py`), and their enqueues run in a process there that times its own "
    "loops, so no exchange between the harness and that process is inside a figure; for "
    "pickup latency it notes the instant each enqueue call returned, as the harness does for "
    "the others. Every system reaches PostgreSQL the same way: the run's own cluster over a "
    "unix socket, or the server given with `--database-url` as its URL says.",
    "- Every load is bounded in count and time; scenarios run one at a time; the goals compare "
    "with the peers measured in this run only.",
]


#: The reading guide at the top of the report: each section, what it measures, how to take it.
GUIDE = [
    "## How to read this page",
    "",
    "The tables of `make bench` come first (one run, every system in it); the sections after "
    "them are each taken by a tool of their own, with its command, date and machine stated "
    "where it starts. Compare figures within a table, or across tables only as far as their "
    "machines and dates agree.",
    "",
    "| section | what it measures | reproduce |",
    "|---|---|---|",
    "| Results | enqueue (one job per call, one bulk call), drains of no-op jobs (a burst into "
    "idle workers, a held backlog; 1 and 2 worker processes) with the worker's and "
    "PostgreSQL's CPU per job, pickup latency of an idle worker, drains beside 1,000,000 jobs "
    "not yet due or finished, schedule lag, a worker's memory, SQLite, fairness, the "
    "dashboard's reads, durable jobs; every system of the run, median (min-max) of its runs "
    "| `make bench` (about 45 min; rewrites this page), `make bench-quick` to check the "
    "harness |",
    "| Goals | rota's figures of the Results against the goals set, and against the best "
    "peer's of the same run | `make bench` |",
    "| How each figure is taken | the method of each scenario of the Results | |",
    "| Reading the run above | what the published run shows against the goals, pair by pair | |",
    "| The dashboard and the API at 1,000,000 and 10,000,000 jobs | the dashboard's and the "
    "API's reads on a big jobs table, PostgreSQL and SQLite | `make bench-dashboard` |",
    "| Claim, enqueue and prune beside millions of jobs | a claim's, an enqueue's and the "
    "prune's cost beside 10,000,000 finished or future jobs | `make bench-scale` |",
    "| A day of the seeds' estimate, compressed | a day of steady jobs and hourly schedules "
    "at 50x and 100x: backlog, schedule lag, slots claimed | `make bench-day` |",
    "| `rota serve` under API load; one greedy reader | /healthz latency and leases under "
    "API reads; an admin's writes beside one greedy reader | `make bench-serve` |",
    "| Fan-in and chains | a workflow's fan-in and chain beside plain jobs | "
    "`make bench-workflows` |",
    "| Durable jobs: 10 steps each, beside DBOS | 10-step durable jobs per second | "
    "`make bench-durable` |",
    "| Startup | import, `--help` and a worker's first claim | `make bench-startup` |",
    "| Takeover after SIGKILL | a killed worker's jobs taken over, a restarted worker's "
    "first claim | `make bench-takeover` |",
    "| Activity tallies | what the kind and queue pages' per-minute tallies add to a "
    "completion | `python -m bench.activity_cost` |",
    "",
    "The investigations behind these figures (where a job's CPU goes, where a pickup's time "
    "goes, what a change cost before and after, the runs not published) are in the "
    "repository's bench/reading.md, each with its command, figures, date and machine; "
    "bench/README.md lists the suite and its tools.",
]


def write_ups() -> list[str]:
    """The write-ups the report splices after its own sections, each verbatim."""
    lines: list[str] = []
    for write_up in WRITE_UPS:
        if write_up.exists():
            lines += ["", write_up.read_text().strip()]
    return lines


def write(
    bench: Bench,
    *,
    command: str,
    started: float,
    seconds: float | None = None,
    measured: dict[str, str] | None = None,
    host: dict[str, str] | None = None,
    cpu: list[float] | None = None,
) -> None:
    """The report of ``bench``; ``measured``: the versions (and rota's commit) the run
    recorded as it started, else those found now; ``host``: the machine it recorded, else
    this one; ``cpu``: its CPU checks as it started and ended (``cpu_check``), if taken."""
    found = measured or versions()
    check = harness_check(bench)
    lines = [
        "# Benchmarks",
        "",
        "rota beside [PgQueuer](https://github.com/janbjorge/pgqueuer), "
        "[Procrastinate](https://github.com/procrastinate-org/procrastinate), "
        "[Oban for Python](https://pypi.org/project/oban/) and "
        "[DBOS](https://pypi.org/project/dbos/), measured in the "
        "same run on the same PostgreSQL server, each peer with its own worker at its best "
        "documented settings. This file is written by `make bench` (`python -m bench.run`); do "
        "not edit it by hand. The run also writes the raw values of every run to "
        "`bench/results/latest.json`, which the repository does not keep.",
        "",
    ]
    if check:
        lines += [
            "> **Harness check, not a measurement.** This file was written by a run with "
            + ("quick (small) loads" if bench.settings.quick else "")
            + (" and " if bench.settings.quick and bench.settings.runs < 3 else "")
            + (
                f"{bench.settings.runs} run{'s' if bench.settings.runs > 1 else ''}"
                if bench.settings.runs < 3
                else ""
            )
            + ", possibly on a busy machine: it shows that every scenario runs end to end and "
            "what the report looks like. Its figures support no claim; `make bench` on a quiet "
            "machine replaces them.",
            "",
        ]
    lines += [
        f"- **Date:** {time.strftime('%Y-%m-%d %H:%M %Z', time.localtime(started))}",
        f"- **Command:** `{command}` ({bench.settings.runs} "
        + ("run" if bench.settings.runs == 1 else "runs")
        + " of each scenario"
        + (", quick loads" if bench.settings.quick else "")
        + (f", {seconds / 60:.0f} min" if seconds else "")
        + ")",
    ]
    lines += [f"- **{key}:** {value}" for key, value in (host or machine()).items()]
    if cpu:
        lines.append(
            f"- **CPU check:** {cpu[0]:.2f} µs as the run started, {cpu[-1]:.2f} as it ended "
            f"(`json.dumps` of a small dict, the best of 5 rounds of {CPU_CHECK_CALLS:,} calls; "
            "lower is faster: two runs' figures compare only as far as their checks agree)"
        )
    lines += [
        "- **Versions:** " + ", ".join(f"{k} {v}" for k, v in found.items()),
        "",
        *GUIDE,
        "",
        "## PostgreSQL server",
        "",
        *server_section(bench),
        "",
        "## Workers",
        "",
        "Each system runs its own worker the way its documentation says to run it in "
        "production, at its best settings:",
        "",
    ]
    from bench.systems import make

    for system in bench.settings.systems:
        lines.append(f"- {NAMES[system]}: {make(system, bench.settings).settings_text()}")
    lines += [
        "",
        "Each cell: median (min-max) over the runs; ↑ higher is better, ↓ lower is better. "
        "Where a system ran a smaller batch the cell says so in italics (throughput is a rate, "
        "so it compares; Procrastinate drains a few hundred jobs a second, and a full batch "
        "would take minutes per run).",
        "",
        "## Results",
        "",
        *results_table(bench),
        "",
        "## Goals",
        "",
        "As set (issue 45: at least 2x every peer's drain, 1.5x its bulk enqueue, 0.8x the "
        "best peer's pickup p99), not adjusted; the peers' figures are from this run, on this "
        "server; the durable jobs' goal (2x DBOS) is in the notes. Fair claims are on (rota's default) in every rota figure."
        + (" **Harness check: the statuses below judge nothing.**" if check else ""),
        "",
        *goals(bench),
        "",
        "## How each figure is taken",
        "",
        *HOW,
    ]
    if bench.notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {scenario}: {text}" for scenario, text in bench.notes]
    if bench.skipped:
        lines += ["", "## Skipped", ""]
        lines += [f"- **{scenario}**: {why}" for scenario, why in bench.skipped]
    lines += write_ups()
    lines += ["", "![Throughput and latency per system](benchmarks.png)", ""]
    MARKDOWN.write_text("\n".join(lines))
    plot(bench)


def plot(bench: Bench) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = [s for s in SYSTEMS if s in bench.settings.systems]
    throughput = [
        ("drain", "burst drain, 1 process", "burst, 1 proc"),
        ("drain", "burst drain, 2 processes", "burst, 2 procs"),
        ("drain", "backlog drain, 1 process", "backlog, 1 proc"),
        ("drain", "backlog drain, 2 processes", "backlog, 2 procs"),
        ("enqueue", "bulk enqueue, one call", "bulk enqueue / 10"),
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
    title = " vs ".join(NAMES[s] for s in systems) + ", same run, same PostgreSQL"
    if harness_check(bench):
        title += " (HARNESS CHECK: not a measurement)"
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(PLOT, dpi=110)
    plt.close(figure)


def rewrite_from_results(path: Path = ROOT / "bench" / "results" / "latest.json") -> None:
    """Rebuild the report from saved results (after editing the report code)."""
    data = json.loads(path.read_text())
    bench = Bench(Settings(systems=tuple(data["systems"])))
    bench.measurements = [Measurement(**m) for m in data["measurements"]]
    bench.skipped = [tuple(s) for s in data["skipped"]]  # type: ignore[misc]
    bench.notes = [tuple(n) for n in data["notes"]]  # type: ignore[misc]
    bench.server = data["server"]
    bench.settings.tuned = data["tuned"]
    bench.settings.runs = data["runs"]
    bench.settings.quick = data["quick"]
    # The commit and versions the run measured (runs saved before they were recorded: now's).
    write(
        bench,
        command=data["command"],
        started=data["started"],
        seconds=data["seconds"],
        measured=data.get("versions"),
        host=data.get("machine"),
        cpu=data.get("cpu_check"),
    )


if __name__ == "__main__":
    rewrite_from_results()
