"""Before and after: what drain, enqueue and claim cost at one commit against another.

    python -m bench.regression                              # the default refs, 3 runs
    python -m bench.regression --refs d3410a8,HEAD --runs 5 --jobs 20000
    python -m bench.regression --quick                      # a check that it runs

Each ref is checked out into a temporary git worktree. Every measurement runs in a fresh
process whose ``rota`` is imported from that tree (``PYTHONPATH``), against one throwaway
cluster configured as production (``bench/cluster.py``) and a database created afresh and
migrated by that tree's own code. Refs take turns run by run (A B C, then B C A, ...), so drift
in the machine hits all of them alike. Per run and ref:

- **enqueue, single**: ``App.enqueue`` one job per call, one after another (median per call);
- **enqueue, batched**: ``App.enqueue_many`` of 500 jobs per call (per job);
- **claim** and **complete**: ``Store.claim`` of 100 from a backlog of ``--jobs`` due jobs and
  ``Store.complete_many`` of those 100 (median per statement); then, for 20 more claims, the
  completion's execution inside the server and its triggers' part (EXPLAIN ANALYZE);
- **drain**: a worker process (``App.run_worker``, concurrency 500, claim batch 250, no-op
  handler) warm and held (SIGSTOP) while ``--jobs`` jobs are enqueued and analysed, then let go;
  jobs/s from go until none is due or running, with the worker's and PostgreSQL's CPU per job.

Prints a Markdown table (medians, min-max, ratio to the first ref); ``--markdown PATH`` also
writes it there. Nothing else is written.

``--ablate`` measures the current tree alone: the claim and completion statements with, in
turn, nothing turned off, the workflows' state trigger disabled, their two partial indexes
dropped, and the exact counts' triggers dropped (``ABLATIONS``), each on a freshly loaded
backlog in one database, rotated run by run: what each of them costs those statements.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: The last commit before job results came in, the last before workflows, the one that
#: brought workflows in, and the tip: each feature's step and the net of all of them.
DEFAULT_REFS = ("d3410a8", "135512f", "d4d5e50", "d7ba3c7", "HEAD")
DATABASE = "rota_regression"
CONCURRENCY = 500
CLAIM_BATCH = 250

METRICS = (
    # key, label, unit, whether more is better
    ("enqueue_single_us", "enqueue, one job per call (median)", "µs", False),
    ("enqueue_batched_us", "enqueue, 500 per call, per job", "µs", False),
    ("claim_ms", "claim 100 (median statement)", "ms", False),
    ("complete_ms", "complete 100 (median statement)", "ms", False),
    ("complete_exec_ms", "complete 100, server execution (EXPLAIN ANALYZE)", "ms", False),
    ("complete_triggers_ms", "complete 100, of which triggers", "ms", False),
    ("drain_jobs_s", "drain", "jobs/s", True),
    ("worker_cpu_us", "drain, worker CPU per job", "µs", False),
    ("pg_cpu_us", "drain, PostgreSQL CPU per job", "µs", False),
    ("per_claim", "drain, jobs per claim", "jobs", True),
    ("per_completion", "drain, jobs per completion", "jobs", True),
)


# ----------------------------------------------------------------- in the tree's process


def _worker(dsn: str, ready: str) -> None:
    """A worker process of the tree under test, as ``--worker``."""
    from rota import App

    app = App(dsn)

    @app.job("noop")
    async def noop(ctx: Any, payload: Any) -> None:
        return None

    def mark_ready(worker: Any) -> None:
        Path(ready).write_text(str(os.getpid()))

    async def run() -> None:
        try:
            await app.run_worker(
                handle_signals=True,
                ready=mark_ready,
                concurrency=CONCURRENCY,
                claim_batch=CLAIM_BATCH,
            )
        finally:
            await app.close()

    asyncio.run(run())


async def _until(dsn: str, question: str, timeout_s: float) -> None:
    import psycopg

    deadline = time.monotonic() + timeout_s
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while True:
            row: Any = await (await conn.execute(question)).fetchone()
            if row[0]:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(question)
            await asyncio.sleep(0.01)


async def _claims(store: Any, jobs: int) -> tuple[float, float]:
    """Median ms of a claim of 100 and of its completion, over ``jobs // 400`` rounds (10 at
    least) from a backlog of at least 100 per round."""
    claims, completes = [], []
    for _ in range(max(10, jobs // 400)):
        started = time.perf_counter()
        claimed = await store.claim(
            "bench", queues=["default"], limit=100, lease=timedelta(minutes=5)
        )
        claims.append(time.perf_counter() - started)
        started = time.perf_counter()
        lost = await store.complete_many([job.lease for job in claimed])
        completes.append(time.perf_counter() - started)
        if len(claimed) != 100 or lost:
            raise RuntimeError(f"claimed {len(claimed)} of 100, lost {len(lost)}")
    return statistics.median(claims) * 1e3, statistics.median(completes) * 1e3


async def _completion_plan(dsn: str, store: Any, rounds: int) -> tuple[float, float]:
    """Median execution time inside the server of a completion of 100 and of its triggers'
    part: the statement the store would send, run by EXPLAIN ANALYZE (for real, committed)
    after each of ``rounds`` claims. Planning is left out: the store's statements are
    prepared, and the completion runs under its generic plan."""
    import psycopg

    from rota.store.postgres.queries import query

    fetch = store._fetch
    sent: dict[str, Any] = {}

    async def capture(name: str, params: dict[str, Any]) -> list[Any]:
        if name != "complete":
            return list(await fetch(name, params))
        sent.update(params)
        return []

    executions, triggers = [], []
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for _ in range(rounds):
            claimed = await store.claim(
                "bench", queues=["default"], limit=100, lease=timedelta(minutes=5)
            )
            store._fetch = capture
            try:
                await store.complete_many([job.lease for job in claimed])
            finally:
                store._fetch = fetch
            cursor = await conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query("complete"), sent)
            [(plan,)] = await cursor.fetchall()
            executions.append(plan[0]["Execution Time"])
            triggers.append(sum(trigger["Time"] for trigger in plan[0].get("Triggers", [])))
    return statistics.median(executions), statistics.median(triggers)


async def _batches(dsn: str, jobs: int) -> tuple[float, float]:
    """Jobs per claim and per completion statement over the drain just measured.

    A claim stamps every job it takes with one ``started_at`` (the statement's ``now()``), a
    completion every job it finishes with one ``finished_at``: the distinct stamps count the
    statements. A faster worker frees its slots sooner and may claim and complete fewer jobs at
    a time, which costs the server more per job without either statement getting dearer.
    """
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT count(DISTINCT started_at), count(DISTINCT finished_at) FROM rota_jobs "
            "WHERE payload::text LIKE '{\"i\"%'"
        )
        claims, completions = await cursor.fetchone() or (0, 0)
    return jobs / max(claims, 1), jobs / max(completions, 1)


async def _measure(dsn: str, jobs: int, singles: int, postmaster: int) -> dict[str, Any]:
    """The figures of one run, in the tree whose ``rota`` this process imports."""
    import psycopg

    import rota
    from bench.cluster import process_cpu_seconds, server_cpu_seconds
    from rota import App

    async with App(dsn, auto_migrate=True):
        pass
    figures: dict[str, Any] = {"rota": rota.__file__}
    app = App(dsn)
    await app.open()
    try:
        took = []
        for i in range(singles):
            started = time.perf_counter()
            await app.enqueue("noop", {"seq": i})
            took.append(time.perf_counter() - started)
        figures["enqueue_single_us"] = statistics.median(took) * 1e6

        started = time.perf_counter()
        for first in range(0, jobs, 500):
            count = min(500, jobs - first)
            await app.enqueue_many(app.spec("noop", {"seq": first + i}) for i in range(count))
        figures["enqueue_batched_us"] = (time.perf_counter() - started) / jobs * 1e6

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute("VACUUM ANALYZE rota_jobs")
        figures["claim_ms"], figures["complete_ms"] = await _claims(app.store, jobs)
        plan = await _completion_plan(dsn, app.store, rounds=20)
        figures["complete_exec_ms"], figures["complete_triggers_ms"] = plan
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute("DELETE FROM rota_jobs WHERE state = 'pending'")
            await conn.execute("VACUUM ANALYZE rota_jobs")

        with tempfile.TemporaryDirectory(prefix="rota-regression-") as tmp:
            ready = Path(tmp) / "ready"
            worker = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.regression", "--worker", dsn, str(ready), cwd=ROOT
            )
            try:
                deadline = time.monotonic() + 60
                while not ready.exists():
                    if worker.returncode is not None or time.monotonic() > deadline:
                        raise RuntimeError("the worker did not start")
                    await asyncio.sleep(0.05)
                os.kill(worker.pid, signal.SIGSTOP)
                for first in range(0, jobs, 1000):
                    count = min(1000, jobs - first)
                    await app.enqueue_many(app.spec("noop", {"i": first + i}) for i in range(count))
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute("ANALYZE rota_jobs")
                cpu, pg = process_cpu_seconds(worker.pid), server_cpu_seconds(postmaster)
                started = time.perf_counter()
                os.kill(worker.pid, signal.SIGCONT)
                await _until(
                    dsn,
                    "SELECT NOT EXISTS (SELECT 1 FROM rota_jobs "
                    "WHERE state IN ('pending', 'running'))",
                    timeout_s=300,
                )
                took_s = time.perf_counter() - started
                figures["drain_jobs_s"] = jobs / took_s
                figures["worker_cpu_us"] = (process_cpu_seconds(worker.pid) - cpu) / jobs * 1e6
                figures["pg_cpu_us"] = (server_cpu_seconds(postmaster) - pg) / jobs * 1e6
                figures["per_claim"], figures["per_completion"] = await _batches(dsn, jobs)
            finally:
                os.kill(worker.pid, signal.SIGCONT)
                worker.terminate()
                await asyncio.wait_for(worker.wait(), timeout=30)
    finally:
        await app.close()
    return figures


#: The exact counts' statement triggers (migration 017), by name suffix and event.
_COUNT_TRIGGERS = (("inserted", "INSERT"), ("updated", "UPDATE"), ("deleted", "DELETE"))

#: What ``--ablate`` turns off, one at a time, in one database of the current tree: the
#: statements run against a freshly loaded backlog each time, and are undone after.
ABLATIONS: dict[str, tuple[list[str], list[str]]] = {
    "as shipped": ([], []),
    "workflow state trigger disabled": (
        ["ALTER TABLE rota_jobs DISABLE TRIGGER rota_jobs_settle_dependents"],
        ["ALTER TABLE rota_jobs ENABLE TRIGGER rota_jobs_settle_dependents"],
    ),
    "workflow partial indexes dropped": (
        ["DROP INDEX rota_jobs_workflow", "DROP INDEX rota_jobs_blocked_by"],
        [
            "CREATE INDEX rota_jobs_workflow ON rota_jobs (workflow, id) WHERE workflow IS NOT NULL",
            "CREATE INDEX rota_jobs_blocked_by ON rota_jobs (blocked_by) WHERE blocked_by IS NOT NULL",
        ],
    ),
    # Dropped, not disabled: a disabled trigger still has PostgreSQL capture its transition
    # tables (every updated row's old and new version), which is most of what it costs.
    "count triggers dropped": (
        [f"DROP TRIGGER rota_jobs_count_{what} ON rota_jobs" for what, _ in _COUNT_TRIGGERS],
        [
            f"CREATE TRIGGER rota_jobs_count_{what} AFTER {event} ON rota_jobs "
            f"REFERENCING {tables} FOR EACH STATEMENT EXECUTE FUNCTION rota_count_{what}()"
            for (what, event), tables in zip(
                _COUNT_TRIGGERS,
                (
                    "NEW TABLE AS rota_inserted",
                    "OLD TABLE AS rota_updated_old NEW TABLE AS rota_updated_new",
                    "OLD TABLE AS rota_deleted",
                ),
                strict=True,
            )
        ],
    ),
}


async def _ablate(dsn: str, jobs: int, runs: int) -> dict[str, list[tuple[float, float]]]:
    """Claim and completion statements with each of ``ABLATIONS`` in turn, rotated by run."""
    import psycopg

    from rota import App

    async with App(dsn, auto_migrate=True):
        pass
    app = App(dsn)
    await app.open()
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in ABLATIONS}
    names = list(ABLATIONS)
    try:
        for run in range(runs):
            for name in names[run % len(names) :] + names[: run % len(names)]:
                off, on = ABLATIONS[name]
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute("DELETE FROM rota_jobs")
                    for statement in off:
                        await conn.execute(statement)
                try:
                    for first in range(0, jobs, 500):
                        count = min(500, jobs - first)
                        await app.enqueue_many(app.spec("noop", {}) for _ in range(count))
                    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
                        await c.execute("VACUUM ANALYZE rota_jobs")
                    pair = await _claims(app.store, jobs)
                finally:
                    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
                        for statement in on:
                            await c.execute(statement)
                figures[name].append(pair)
                print(
                    f"run {run + 1} {name}: claim {pair[0]:.2f} ms, complete {pair[1]:.2f} ms",
                    file=sys.stderr,
                )
    finally:
        await app.close()
    return figures


def _ablation_table(figures: dict[str, list[tuple[float, float]]]) -> str:
    base = figures["as shipped"]
    lines = [
        "| claim 100 and complete 100, median statement | claim, ms | complete, ms |",
        "|---|---|---|",
    ]
    for name, pairs in figures.items():
        cells = []
        for i in (0, 1):
            values = [pair[i] for pair in pairs]
            median = statistics.median(values)
            ratio = (
                ""
                if pairs is base
                else (f", {median / statistics.median(pair[i] for pair in base):.2f}x")
            )
            cells.append(f"{median:.2f} ({min(values):.2f}-{max(values):.2f}{ratio})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ----------------------------------------------------------------------- the harness side


def _worktree(ref: str, into: Path) -> tuple[str, Path]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", ref], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    tree = into / commit
    subprocess.run(
        ["git", "worktree", "add", "--detach", "--quiet", str(tree), commit],
        cwd=ROOT,
        check=True,
    )
    return commit, tree


def _recreate(url: str, database: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {database}")


def _run_one(
    tree: Path, url: str, dsn: str, postmaster: int, args: argparse.Namespace
) -> dict[str, Any]:
    _recreate(url, DATABASE)
    env = {**os.environ, "PYTHONPATH": f"{tree / 'src'}{os.pathsep}{ROOT}"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.regression",
            "--measure",
            dsn,
            "--jobs",
            str(args.jobs),
            "--singles",
            str(args.singles),
            "--postmaster",
            str(postmaster),
        ],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.PIPE,  # the figures; what goes wrong reaches stderr, and the log
        text=True,
    )
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if not figures["rota"].startswith(str(tree)):
        raise RuntimeError(f"measured {figures['rota']}, not the tree at {tree}")
    return figures


def _table(labels: dict[str, str], results: dict[str, list[dict[str, Any]]]) -> str:
    refs = list(results)
    head = "| measure | " + " | ".join(labels[r] for r in refs) + " |"
    lines = [head, "|---" * (len(refs) + 1) + "|"]
    for key, label, unit, _more_better in METRICS:
        cells = []
        first = statistics.median(f[key] for f in results[refs[0]])
        for ref in refs:
            values = [f[key] for f in results[ref]]
            median = statistics.median(values)
            spread = (
                f"{min(values):,.0f}-{max(values):,.0f}"
                if median >= 100
                else (f"{min(values):.2f}-{max(values):.2f}")
            )
            shown = f"{median:,.0f}" if median >= 100 else f"{median:.2f}"
            ratio = "" if ref == refs[0] or not first else f", {median / first:.2f}x"
            cells.append(f"{shown} ({spread}{ratio})")
        lines.append(f"| {label}, {unit} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _harness(args: argparse.Namespace) -> int:
    from bench.cluster import Cluster
    from bench.harness import with_database

    refs = [r.strip() for r in args.refs.split(",") if r.strip()]
    load = os.getloadavg()[0]
    print(f"load average at start {load:.2f} on {os.cpu_count()} CPUs", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="rota-regression-trees-") as tmp:
        trees: dict[str, Path] = {}
        labels: dict[str, str] = {}
        cluster = Cluster.start()
        try:
            for ref in refs:
                commit, tree = _worktree(ref, Path(tmp))
                trees[ref], labels[ref] = tree, f"{ref} ({commit})" if ref != commit else commit
            dsn = with_database(cluster.url, DATABASE)
            results: dict[str, list[dict[str, Any]]] = {ref: [] for ref in refs}
            for run in range(args.runs):
                order = refs[run % len(refs) :] + refs[: run % len(refs)]
                for ref in order:
                    figures = _run_one(trees[ref], cluster.url, dsn, cluster.pid, args)
                    results[ref].append(figures)
                    shown = ", ".join(f"{key} {figures[key]:,.1f}" for key, *_ in METRICS)
                    print(f"run {run + 1} {labels[ref]}: {shown}", file=sys.stderr)
        finally:
            cluster.stop()
            for tree in trees.values():
                subprocess.run(
                    ["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False
                )
    table = _table(labels, results)
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n")
    print(f"load average at end {os.getloadavg()[0]:.2f}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        _worker(argv[1], argv[2])
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m bench.regression", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--refs", default=",".join(DEFAULT_REFS), help="comma-separated git refs")
    parser.add_argument("--runs", type=int, default=3, help="runs per ref (3)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain and claim backlog")
    parser.add_argument("--singles", type=int, default=1_000, help="single enqueues per run")
    parser.add_argument("--quick", action="store_true", help="small loads: a check that it runs")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    parser.add_argument(
        "--ablate",
        action="store_true",
        help="instead: the current tree's claim and completion with the workflow trigger, the "
        "workflow indexes and the count triggers each turned off in turn",
    )
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--postmaster", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        figures = asyncio.run(_measure(args.measure, args.jobs, args.singles, args.postmaster))
        print(json.dumps(figures))
        return 0
    if args.quick:
        args.runs, args.jobs, args.singles = 1, 4_000, 100
    if args.ablate:
        return _ablate_here(args)
    return _harness(args)


def _ablate_here(args: argparse.Namespace) -> int:
    from bench.cluster import Cluster
    from bench.harness import with_database

    print(f"load average at start {os.getloadavg()[0]:.2f}", file=sys.stderr)
    cluster = Cluster.start()
    try:
        _recreate(cluster.url, DATABASE)
        figures = asyncio.run(_ablate(with_database(cluster.url, DATABASE), args.jobs, args.runs))
    finally:
        cluster.stop()
    table = _ablation_table(figures)
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
