"""Profile rota's drain: where the time goes, in the worker (py-spy) and in PostgreSQL.

    python -m bench.profile                 # 1 and 2 worker processes, 100,000 jobs
    python -m bench.profile --jobs 20000    # smaller

For each process count: the drain runs with py-spy attached to every worker (``--idle``, so
time spent waiting on the socket shows as waiting), the CPU used by the workers and by the
PostgreSQL server is read from /proc, and transactions and row writes per job from
``pg_stat_database``. Then ``EXPLAIN ANALYZE`` of one claim and one completion of a full batch
on a table of the same size gives the server's own time per statement. Writes
``bench/results/profile.md`` (included in docs/benchmarks.md) and the collapsed stacks
beside it. Needs py-spy (``pip install py-spy``).
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
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from bench.harness import (
    ROOT,
    Poller,
    Settings,
    cpu_seconds,
    drop_database,
    postgres_pids,
    start_workers,
)
from bench.systems import Rota

OUT = ROOT / "bench" / "results"

#: Leaf frames that mean "the event loop is waiting" (for PostgreSQL or for work).
_IDLE_LEAVES = ("select (selectors.py", "poll (selectors.py")
#: Frames whose inclusive share is worth reporting, by a readable name.
_WATCHED = {
    "claim (rota/store/postgres/store.py": "PostgresStore.claim",
    "complete_many (rota/store/postgres/store.py": "PostgresStore.complete_many",
    "heartbeat (rota/store/postgres/store.py": "PostgresStore.heartbeat",
    "row_to_job (rota/store/postgres/store.py": "row_to_job (building Job objects)",
    "claim_tick (rota/runtime/worker.py": "Worker.claim_tick",
    "_start (rota/runtime/worker.py": "Worker._start (task per job)",
    "run (rota/runtime/executor.py": "Executor.run (per job)",
    "_complete (rota/runtime/executor.py": "Executor._complete",
    "_flush (rota/runtime/completions.py": "Completer._flush",
    "job_context (rota/observability/logging.py": "job_context (log context per job)",
    "labels (prometheus_client/metrics.py": "prometheus labels()",
    "observe (prometheus_client/metrics.py": "prometheus observe()",
    "inc (prometheus_client/metrics.py": "prometheus inc()",
    "fetchall (psycopg/cursor_async.py": "psycopg fetchall (row decoding)",
    "execute (psycopg/cursor_async.py": "psycopg execute",
    "connection (psycopg_pool/pool_async.py": "pool checkout/return",
    "__init__ (rota/runtime/context.py": "JobContext()",
    "__init__ (<string>": "dataclass __init__ (Job, Execution...)",
    "create_task (asyncio/base_events.py": "asyncio.create_task",
}


def parse_stacks(path: Path) -> collections.Counter[tuple[str, ...]]:
    stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks[tuple(stack.split(";"))] += int(count)
    return stacks


def summarize(stacks: collections.Counter[tuple[str, ...]]) -> dict[str, Any]:
    """Main-thread shares: waiting, self time by function, inclusive time of watched frames."""
    main = {s: n for s, n in stacks.items() if (s and "MainThread" in s[0]) or _is_main(s)}
    total = sum(main.values()) or 1
    idle = sum(n for s, n in main.items() if _is_idle(s[-1]))
    leaves: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    for stack, n in main.items():
        if _is_idle(stack[-1]):
            continue
        leaves[_short(stack[-1])] += n
        seen = set()
        for frame in stack:
            for prefix, name in _WATCHED.items():
                if prefix in frame and name not in seen:
                    inclusive[name] += n
                    seen.add(name)
    return {
        "samples": total,
        "idle": idle / total,
        "self": [(name, n / total) for name, n in leaves.most_common(15)],
        "inclusive": [(name, n / total) for name, n in inclusive.most_common()],
    }


def _is_idle(frame: str) -> bool:
    return any(leaf in frame for leaf in _IDLE_LEAVES)


def _is_main(stack: tuple[str, ...]) -> bool:
    return bool(stack) and stack[0].startswith("thread") and "main" in stack[0].lower()


def _short(frame: str) -> str:
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    parts = where.split("/")
    return f"{name} ({'/'.join(parts[-2:])})"


def _spy(pid: int, output: Path) -> subprocess.Popen[bytes]:
    """py-spy recording ``pid`` until interrupted, idle samples and thread names kept."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    command = [spy, "record", "--pid", str(pid), "--rate", "200", "--format", "raw"]
    command += ["--idle", "--threads", "--output", str(output)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def stats(dsn: str) -> dict[str, int]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        row = await (
            await conn.execute(
                "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted, blks_hit + blks_read"
                " FROM pg_stat_database WHERE datname = current_database()"
            )
        ).fetchone()
    assert row is not None
    keys = ("commits", "inserted", "updated", "deleted", "blocks")
    return dict(zip(keys, (int(v) for v in row), strict=True))


async def profile_drain(settings: Settings, processes: int, jobs: int) -> dict[str, Any]:
    system = Rota(settings)
    await system.setup()
    try:
        await system.reset()
        env = system.drain_env
        group = start_workers(
            settings,
            "rota",
            system.dsn,
            processes=processes,
            concurrency=int(env["BENCH_CONCURRENCY"]),
            extra=env,
        )
        spies: list[subprocess.Popen[bytes]] = []
        outputs: list[Path] = []
        try:
            await group.wait_ready()
            mark = await system.watermark()
            async with Poller(system.dsn, system.done_sql(mark, 20)) as warm:
                await system.enqueue_bulk("noop", 20)
                await warm.until(bool, timeout_s=60)
            mark = await system.watermark()
            for index, pid in enumerate(group.pids):
                output = OUT / f"profile-{processes}proc-{index}.txt"
                outputs.append(output)
                spies.append(_spy(pid, output))
            await asyncio.sleep(1.0)  # py-spy attaches
            before = await stats(system.dsn)
            pg_before = {pid: cpu_seconds([pid]) for pid in postgres_pids()}
            worker_before = cpu_seconds(group.pids)
            async with Poller(system.dsn, system.done_sql(mark, jobs)) as poller:
                await system.enqueue_bulk("noop", jobs)
                started = time.time()
                ended = await poller.until(bool, timeout_s=max(120.0, jobs / 100))
            worker_cpu = cpu_seconds(group.pids) - worker_before
            pg_cpu = sum(cpu_seconds([pid]) - pg_before.get(pid, 0.0) for pid in postgres_pids())
            after = await stats(system.dsn)
            for spy in spies:
                spy.send_signal(signal.SIGINT)
            for spy in spies:
                spy.wait(timeout=60)
        finally:
            for spy in spies:
                if spy.poll() is None:
                    spy.kill()
            await group.stop()
        seconds = ended - started
        stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
        for output in outputs:
            if output.exists():
                stacks.update(parse_stacks(output))
        per_job = {key: (after[key] - before[key]) / jobs for key in before}
        # The server's own time for one claim and one completion of a full batch.
        await system.reset()
        await system.enqueue_bulk("noop", jobs)
        await system.vacuum("rota_jobs")
        explain = await explain_batch(system.dsn, int(env["BENCH_CLAIM_BATCH"]))
        return {
            "processes": processes,
            "jobs": jobs,
            "jobs_per_s": jobs / seconds,
            "worker_cpu_us": 1e6 * worker_cpu / jobs,
            "postgres_cpu_us": 1e6 * pg_cpu / jobs,
            "wall_us": 1e6 * seconds / jobs,
            "per_job": per_job,
            "profile": summarize(stacks) if stacks else None,
            "explain": explain,
        }
    finally:
        await system.close()


async def explain_batch(dsn: str, batch: int) -> dict[str, float]:
    """Execution time (ms) of one claim and one complete of ``batch`` jobs, rolled back."""
    from rota.store.postgres.queries import query

    found: dict[str, float] = {}
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        params = {
            "now": None,
            "queues": ["default"],
            "limit": batch,
            "lease": timedelta(seconds=30),
            "worker": "explain",
        }
        plan = await (
            await conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query("claim"), params)
        ).fetchone()
        assert plan is not None
        found["claim"] = float(plan[0][0]["Execution Time"])
        rows = await (await conn.execute(query("claim"), params)).fetchall()
        leases = {"now": None, "ids": [r[0] for r in rows], "tokens": [r[13] for r in rows]}
        plan = await (
            await conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query("complete"), leases)
        ).fetchone()
        assert plan is not None
        found["complete"] = float(plan[0][0]["Execution Time"])
        await conn.rollback()
    return found


async def profile_enqueue(settings: Settings, count: int) -> list[tuple[str, float, float]]:
    """cProfile of one ``App.enqueue_many`` of ``count`` jobs, in this process: the top
    functions by cumulative time (name, seconds cumulative, seconds own)."""
    import cProfile
    import pstats

    system = Rota(settings)
    await system.setup()
    try:
        await system.reset()
        profiler = cProfile.Profile()
        profiler.enable()
        await system.enqueue_bulk("noop", count)
        profiler.disable()
    finally:
        await system.close()
    table = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = []
    for (filename, line, name), (_, _, own, cumulative, _) in table.items():
        where = "/".join(Path(filename).parts[-2:])
        rows.append((f"{name} ({where}:{line})", cumulative, own))
    rows.sort(key=lambda row: -row[1])
    return rows[:25]


async def explain_backlog(settings: Settings, background: int, batch: int) -> dict[str, Any]:
    """The claim's plan and server time with ``background`` jobs not yet due: with ``batch``
    due jobs, and with none due (the last claims of every drain, and every idle poll)."""
    system = Rota(settings)
    await system.setup()
    try:
        await system.reset()
        await system.load_future(background)
        from rota.store.postgres.queries import query

        params = {
            "now": None,
            "queues": ["default"],
            "limit": batch,
            "lease": timedelta(seconds=30),
            "worker": "explain",
        }
        found: dict[str, Any] = {}
        async with await psycopg.AsyncConnection.connect(system.dsn) as conn:
            for label in ("none due", f"{batch} due"):
                if label != "none due":
                    await system.enqueue_bulk("noop", batch)
                    await system.vacuum("rota_jobs")
                plan = await (
                    await conn.execute(
                        "EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) " + query("claim"), params
                    )
                ).fetchall()
                await conn.rollback()
                text = [row[0] for row in plan]
                found[label] = {
                    "ms": next(
                        (float(t.split(":")[1].split()[0]) for t in text if "Execution Time" in t),
                        0.0,
                    ),
                    "due_scan": [
                        t.strip() for t in text if "rota_jobs_due" in t or "Rows Removed" in t
                    ][:4],
                }
        return found
    finally:
        await system.close()


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "## Profile of rota's drain",
        "",
        "`python -m bench.profile`: py-spy (200 Hz, idle samples kept) on every worker while "
        "it drains no-op jobs; CPU from /proc; statements and row writes from "
        "`pg_stat_database`; server time per statement from `EXPLAIN ANALYZE` of one batch.",
        "",
        "| | " + " | ".join(f"{r['processes']} process(es)" for r in results) + " |",
        "|---|" + "---|" * len(results),
    ]

    def row(label: str, values: list[str]) -> None:
        lines.append(f"| {label} | " + " | ".join(values) + " |")

    row("jobs/s while profiled", [f"{r['jobs_per_s']:,.0f}" for r in results])
    row("wall time per job (µs)", [f"{r['wall_us']:.0f}" for r in results])
    row("worker CPU per job (µs)", [f"{r['worker_cpu_us']:.0f}" for r in results])
    row("PostgreSQL CPU per job (µs)", [f"{r['postgres_cpu_us']:.0f}" for r in results])
    row("transactions per job", [f"{r['per_job']['commits']:.3f}" for r in results])
    row("rows updated per job", [f"{r['per_job']['updated']:.2f}" for r in results])
    row("rows inserted per job", [f"{r['per_job']['inserted']:.2f}" for r in results])
    row("buffer accesses per job", [f"{r['per_job']['blocks']:.1f}" for r in results])
    row(
        "claim of one batch, server time (ms)",
        [f"{r['explain']['claim']:.1f}" for r in results],
    )
    row(
        "complete of one batch, server time (ms)",
        [f"{r['explain']['complete']:.1f}" for r in results],
    )
    for r in results:
        p = r["profile"]
        if p is None:
            continue
        lines += [
            "",
            f"**{r['processes']} process(es), main thread** ({p['samples']:,} samples): "
            f"{100 * p['idle']:.0f}% waiting in the event loop's select (for PostgreSQL or "
            "for work), the rest running Python.",
            "",
            "| inclusive share of samples | % |",
            "|---|---|",
            *(f"| {name} | {100 * share:.1f} |" for name, share in p["inclusive"]),
            "",
            "| self time (leaf frame) | % |",
            "|---|---|",
            *(f"| `{name}` | {100 * share:.1f} |" for name, share in p["self"]),
        ]
    return "\n".join(lines)


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--processes", default="1,2")
    parser.add_argument("--background", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    settings = Settings()
    OUT.mkdir(parents=True, exist_ok=True)
    results = []
    for processes in (int(p) for p in args.processes.split(",")):
        print(f"profiling the drain with {processes} process(es)...", flush=True)
        results.append(await profile_drain(settings, processes, args.jobs))
    print("profiling one bulk enqueue...", flush=True)
    enqueue = await profile_enqueue(settings, args.jobs)
    print("explaining the claim beside a backlog...", flush=True)
    backlog = await explain_backlog(settings, args.background, 250)
    await drop_database(settings, "rota_bench_rota")
    text = markdown(results)
    text += "\n\n" + "\n".join(
        [
            f"**One `App.enqueue_many` of {args.jobs:,} jobs** (cProfile, in process; "
            "cumulative and own seconds; cProfile itself slows Python down):",
            "",
            "| function | cumulative s | own s |",
            "|---|---|---|",
            *(f"| `{name}` | {cum:.2f} | {own:.2f} |" for name, cum, own in enqueue[:18]),
            "",
            f"**The claim beside {args.background:,} jobs not yet due** "
            "(`EXPLAIN (ANALYZE, BUFFERS)`, batch 250):",
            "",
            *(
                f"- {label}: {found['ms']:.1f} ms; "
                + "; ".join(f"`{line}`" for line in found["due_scan"])
                for label, found in backlog.items()
            ),
        ]
    )
    (OUT / "profile.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
