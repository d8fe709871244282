"""Profile rota's no-op drain: where the worker's CPU per job goes, and what each statement
costs the server, with fair claims on and off.

    python -m bench.profile                  # 50,000 jobs, 1 process, fairness on and off
    python -m bench.profile --jobs 20000 --fair on

Runs on a throwaway cluster with the benchmark's production settings plus
``pg_stat_statements`` (loaded for this command only: the benchmark's cluster does not load
it). For each fairness setting: one worker process (the drain settings of ``bench.run``) is
started and warmed up, py-spy attaches to it (``py-spy record --threads``, 250 Hz, samples of
threads on CPU only), and a burst of no-op jobs is drained. Reported:

- the worker's and the server's CPU per job (``/proc``);
- py-spy's samples, as µs per job: by the leaf frame's module (where the CPU burns), and
  inclusive for the parts of the worker's hot path (what each step costs with its callees);
- per statement (``pg_stat_statements``): calls per 1,000 jobs and server time per job.

Writes ``bench/results/profile.md`` and the raw stacks beside it; prints the markdown. Needs
py-spy (in the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.cluster import Cluster
from bench.harness import ROOT, Bench, Poller, Settings, cpu_seconds, progress, start_workers
from bench.systems import Rota

OUT = ROOT / "bench" / "results"
RATE_HZ = 250

#: Leaf frames by where they live, first match wins: "where the CPU burns".
_MODULES = (
    ("prometheus_client/", "prometheus_client (metrics)"),
    ("logging/", "logging"),
    ("rota/observability/", "rota.observability (log context, metrics)"),
    ("json/", "json"),
    ("psycopg_pool/", "psycopg_pool"),
    ("psycopg/", "psycopg (Python side: execute, adapt, load rows)"),
    ("asyncio/", "asyncio (event loop, tasks, futures)"),
    ("concurrent/", "concurrent.futures / threads"),
    ("threading.py", "threading"),
    ("rota/runtime/", "rota.runtime (worker, executor, completer)"),
    ("rota/store/", "rota.store (claim, complete, rows)"),
    ("rota/domain/", "rota.domain (Job, Lease objects)"),
    ("<string>", "dataclass __init__ (Job, Lease...)"),
    ("dataclasses.py", "dataclasses"),
    ("enum.py", "enum"),
    ("datetime", "datetime"),
    ("bench/", "the benchmark's no-op handler"),
)

#: Inclusive: a sample counts for a step when any frame of its stack matches.
_STEPS = (
    ("claim (rota/store/postgres/store.py", "PostgresStore.claim (send, wait, decode rows)"),
    ("row_to_job (rota/store/postgres/rows.py", "row_to_job (a Job per claimed row)"),
    ("_start (rota/runtime/worker.py", "Worker._start (Execution, JobContext, timer, task)"),
    ("run (rota/runtime/executor.py", "Executor.run (one job's task, handler included)"),
    ("job_context (rota/observability/logging.py", "job_context (log context per job)"),
    ("_kind_metrics (rota/runtime/executor.py", "metric children lookup"),
    ("prometheus_client/", "prometheus_client calls (inc, dec, observe)"),
    ("complete (rota/runtime/completions.py", "Completer.complete (future per job)"),
    ("_flush (rota/runtime/completions.py", "Completer._flush (batch, settle futures)"),
    ("complete_many (rota/store/postgres/store.py", "PostgresStore.complete_many"),
    (
        "_retrying (rota/runtime/executor.py",
        "Executor._retrying + bounded (a task and asyncio.wait per job)",
    ),
    ("heartbeat (rota/store/postgres/store.py", "PostgresStore.heartbeat"),
    ("psycopg_pool/", "pool checkout and return"),
    ("_run_once (asyncio/base_events.py", "event loop (all callbacks, with their callees)"),
)


def parse_stacks(path: Path) -> collections.Counter[tuple[str, ...]]:
    stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks[tuple(stack.split(";"))] += int(count)
    return stacks


def _where(frame: str) -> str:
    return frame.partition(" (")[2]


#: Leaf frames that mean a thread waits (py-spy can count a runnable thread waiting for a
#: core as active, on a busy machine): left out before shares are taken.
_WAITING = ("select (selectors.py", "poll (selectors.py", "wait (threading.py", "_worker (")


def summarize(stacks: collections.Counter[tuple[str, ...]], cpu_us: float) -> dict[str, Any]:
    """µs per job by leaf module and by step (inclusive), and the top leaf functions: each
    a share of the samples spent running, times the worker's CPU per job from /proc (so the
    figures add up to what the kernel counted, whatever the sampler's own overhead)."""
    modules: collections.Counter[str] = collections.Counter()
    steps: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for stack, n in stacks.items():
        frames = [f for f in stack if not f.startswith(("thread ", "process "))]
        if not frames or any(key in frames[-1] for key in _WAITING):
            continue
        total += n
        leaf = frames[-1]
        where = _where(leaf)
        name = next((label for key, label in _MODULES if key in where), "other")
        modules[name] += n
        leaves[_short(leaf)] += n
        for key, label in _STEPS:
            if any(key in frame for frame in frames):
                steps[label] += n
    scale = cpu_us / total if total else 0.0
    return {
        "samples": total,
        "modules": [(name, n * scale) for name, n in modules.most_common()],
        "steps": [(label, steps[label] * scale) for _, label in _STEPS if steps[label]],
        "leaves": [(name, n * scale) for name, n in leaves.most_common(20)],
    }


def _short(frame: str) -> str:
    name, _, where = frame.partition(" (")
    parts = where.rstrip(")").split("/")
    return f"{name} ({'/'.join(parts[-2:])})"


def _spy(pid: int, output: Path) -> subprocess.Popen[bytes]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    command = [spy, "record", "--pid", str(pid), "--rate", str(RATE_HZ), "--format", "raw"]
    command += ["--threads", "--nonblocking", "--output", str(output)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def statements(dsn: str) -> list[tuple[str, int, float, int]]:
    """(query start, calls, total ms, rows) of this database's statements since the reset."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        rows = await (
            await conn.execute(
                "SELECT query, calls, total_exec_time, rows FROM pg_stat_statements s "
                "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database() "
                "ORDER BY total_exec_time DESC"
            )
        ).fetchall()
    merged: dict[str, list[float]] = {}
    for query, calls, total, count in rows:
        entry = merged.setdefault(_label(query), [0, 0.0, 0])
        entry[0] += int(calls)
        entry[1] += float(total)
        entry[2] += int(count)
    found = [(label, int(c), t, int(r)) for label, (c, t, r) in merged.items()]
    return sorted(found, key=lambda s: -s[2])


def _label(query: str) -> str:
    text = " ".join(query.split())
    if "rota_finished_per_minute" in text and "UPDATE rota_jobs" in text:
        return "complete (a batch of leases)"
    if "WITH RECURSIVE open_queues" in text:
        return "claim (fair walk, lock, lease)"
    if "lease_until = " in text and "UPDATE rota_jobs" in text:
        return "heartbeat"
    if text.startswith("COPY rota_jobs"):
        return "enqueue: COPY of the batch"
    if "store's clock for a bulk COPY" in text or "reserve" in text.lower():
        return "enqueue: reserve ids"
    if "rota_finished_per_minute" in text and text.startswith("SELECT coalesce(sum(n)"):
        return "the harness's poll"
    return text[:70]


async def profile_drain(bench: Bench, jobs: int, fair: bool) -> dict[str, Any]:
    settings = bench.settings
    system = Rota(settings)
    await system.setup()
    try:
        await system.reset()
        env = {**system.drain_env, "BENCH_FAIR": "1" if fair else "0"}
        group = start_workers(
            settings,
            "rota",
            system.dsn,
            processes=1,
            concurrency=int(env["BENCH_CONCURRENCY"]),
            extra=env,
        )
        output = OUT / f"profile-fair-{'on' if fair else 'off'}.txt"
        spy = None
        try:
            await group.wait_ready()
            mark = await system.watermark()
            async with Poller(system.dsn, system.done_sql(mark, 1000)) as warm:
                await system.enqueue_bulk("noop", 1000)
                await warm.until(bool, timeout_s=120)
            mark = await system.watermark()
            spy = _spy(group.pids[0], output)
            await asyncio.sleep(1.5)  # py-spy attaches
            async with await psycopg.AsyncConnection.connect(system.dsn, autocommit=True) as c:
                await c.execute("SELECT pg_stat_statements_reset()")
            async with Poller(system.dsn, system.done_sql(mark, jobs)) as poller:
                exclude = (poller.backend_pid,)
                await system.enqueue_bulk("noop", jobs)
                started = time.time()
                pg_before = settings.server_cpu(exclude)
                worker_before = cpu_seconds(group.pids)
                seen = await poller.until(bool, timeout_s=max(120.0, jobs / 100), every_s=0.1)
                worker_cpu = cpu_seconds(group.pids) - worker_before
                pg_after = settings.server_cpu(exclude)
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
            found = await statements(system.dsn)
        finally:
            if spy is not None and spy.poll() is None:
                spy.kill()
            await group.stop()
        finished = await system.last_finished()
        ended = finished if finished is not None and started < finished <= seen else seen
        stacks = parse_stacks(output) if output.exists() else collections.Counter()
        return {
            "fair": fair,
            "jobs": jobs,
            "jobs_per_s": jobs / (ended - started),
            "worker_cpu_us": 1e6 * worker_cpu / jobs,
            "postgres_cpu_us": (
                1e6 * (pg_after - pg_before) / jobs
                if pg_after is not None and pg_before is not None
                else None
            ),
            "profile": summarize(stacks, 1e6 * worker_cpu / jobs),
            "statements": found,
        }
    finally:
        await system.close()


def markdown(results: list[dict[str, Any]], command: str) -> str:
    heads = [f"fair claims {'on' if r['fair'] else 'off'}" for r in results]
    lines = [
        f"`{command}` ({time.strftime('%Y-%m-%d %H:%M %Z')}): one worker process, "
        f"{results[0]['jobs']:,} no-op jobs in a burst, py-spy at {RATE_HZ} Hz on the worker "
        "(threads on CPU only; its shares are scaled to the CPU the kernel counted), "
        "`pg_stat_statements` on the server (its times are wall time inside the server).",
        "",
        "| | " + " | ".join(heads) + " |",
        "|---|" + "---|" * len(results),
    ]

    def row(label: str, values: list[str]) -> None:
        lines.append(f"| {label} | " + " | ".join(values) + " |")

    row("jobs/s while profiled", [f"{r['jobs_per_s']:,.0f}" for r in results])
    row("worker CPU per job, /proc (µs)", [f"{r['worker_cpu_us']:.0f}" for r in results])
    row("py-spy samples of running code", [f"{r['profile']['samples']:,}" for r in results])
    row(
        "PostgreSQL CPU per job (µs)",
        [f"{r['postgres_cpu_us']:.0f}" if r["postgres_cpu_us"] else "—" for r in results],
    )

    def table(title: str, key: str) -> None:
        names: list[str] = []
        for r in results:
            names += [name for name, _ in r["profile"][key] if name not in names]
        lines.extend(["", f"| {title} | " + " | ".join(heads) + " |"])
        lines.append("|---|" + "---|" * len(results))
        for name in names:
            values = [dict(r["profile"][key]).get(name) for r in results]
            lines.append(
                f"| {name} | " + " | ".join("—" if v is None else f"{v:.1f}" for v in values) + " |"
            )

    table("worker µs per job, by the leaf frame's module", "modules")
    table("worker µs per job, inclusive, by step of the hot path", "steps")
    table("worker µs per job, top leaf functions", "leaves")
    lines.extend(
        [
            "",
            "| statement | "
            + " | ".join(f"{h}: calls / 1,000 jobs, server µs / job" for h in heads)
            + " |",
        ]
    )
    lines.append("|---|" + "---|" * len(results))
    labels: list[str] = []
    for r in results:
        labels += [s[0] for s in r["statements"][:8] if s[0] not in labels]
    for label in labels:
        cells = []
        for r in results:
            match = next((s for s in r["statements"] if s[0] == label), None)
            cells.append(
                "—"
                if match is None
                else f"{1000 * match[1] / r['jobs']:.1f}, {1000 * match[2] / r['jobs']:.1f}"
            )
        lines.append(f"| `{label}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--fair", default="on,off", help="on, off or on,off")
    args = parser.parse_args(argv)
    fairness = [f.strip() == "on" for f in args.fair.split(",") if f.strip()]
    OUT.mkdir(parents=True, exist_ok=True)
    cluster = Cluster.start(
        extra={"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.max": "1000"}
    )
    try:
        settings = Settings(server_url=cluster.url, postmaster=cluster.pid)
        # In the template, so the benchmark's fresh database has the view too.
        async with await psycopg.AsyncConnection.connect(
            settings.dsn("template1"), autocommit=True
        ) as conn:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        bench = Bench(settings)
        results = []
        for fair in fairness:
            progress(f"profiling a drain of {args.jobs:,} jobs, fair claims {fair}...")
            results.append(await profile_drain(bench, args.jobs, fair))
        settings.remove_workdir()  # the workers' logs, kept only when the run failed
    finally:
        cluster.stop()
    text = markdown(results, "python -m bench.profile " + " ".join(argv))
    (OUT / "profile.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
