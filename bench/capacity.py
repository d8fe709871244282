"""What one PostgreSQL primary sustains per core, and where its wall is.

    python -m bench.capacity                       # PostgreSQL on 1 core, 100,000 jobs
    python -m bench.capacity --pg-cores 2 --jobs 200000 --processes 4
    python -m bench.capacity --quick               # a check that it runs: small, not quotable
    python -m bench.capacity --json figures.json   # also keep the raw figures

A throwaway cluster configured as production (``bench/cluster.py``) is started and every one
of its processes is pinned to the first ``--pg-cores`` CPUs (``sched_setaffinity`` on the
postmaster and its children; backends forked later inherit it). rota worker processes
(``bench.worker``, no-op handler) are pinned to the other CPUs when there are any. Then, with
the workers held (SIGSTOP), jobs are enqueued one per call and ``--batch`` per call by
``--clients`` concurrent callers, and the backlog is drained when the workers are let go.

For each phase the run reads, before and after, the server's CPU time (postmaster, every
backend and helper, exited children included), the workers' CPU time, the WAL position
(``pg_current_wal_lsn``), ``pg_stat_wal`` and the database's commits, and, during the drain,
the connections open. Printed per job: PostgreSQL CPU, WAL bytes, full-page images, commits
and WAL syncs (``--checkpoint`` starts each phase right after a CHECKPOINT: its WAL then carries
the full-page image of every page it is first to change, the worst case; without it, a short
run may see no checkpoint at all, the best case); and derived: the ceiling of the cores given (cores / CPU per job, enqueue and
drain together) and the WAL rate at that ceiling. The run writes nothing unless ``--json``.

Figures from a busy machine (the load average before the run started is printed, and a
warning when it exceeds half the cores) or from ``--quick`` are checks of this program, not measurements.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.cluster import Cluster, children
from bench.harness import Settings, cpu_seconds, progress, start_workers
from bench.systems import Rota

_COUNTERS = """
SELECT pg_current_wal_lsn()::text, w.wal_records, w.wal_fpi, w.wal_bytes, w.wal_sync,
       d.xact_commit
FROM pg_stat_wal w, pg_stat_database d WHERE d.datname = current_database()
"""
_BACKENDS = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"


@dataclass
class Reading:
    """Counters at one instant."""

    wall: float
    pg_cpu: float
    worker_cpu: float
    lsn: str
    wal_records: int
    wal_fpi: int
    wal_bytes: int
    wal_sync: int
    commits: int


@dataclass
class Phase:
    """One phase's counters, per job."""

    name: str
    jobs: int
    seconds: float
    pg_cpu_us: float
    worker_cpu_us: float
    wal_bytes: float
    wal_fpi: float
    commits: float
    wal_syncs: float
    #: Share of the PostgreSQL cores the server used during the phase.
    pg_core_use: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds


class Probe:
    """Reads the counters on a connection of its own (its backend is left out of the CPU)."""

    def __init__(self, dsn: str, postmaster: int, pg_cores: int) -> None:
        self.dsn = dsn
        self.postmaster = postmaster
        self.pg_cores = pg_cores
        self.worker_pids: list[int] = []

    async def __aenter__(self) -> Probe:
        self.conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.conn.close()

    async def read(self) -> Reading:
        from bench.cluster import server_cpu_seconds

        row = await (await self.conn.execute(_COUNTERS)).fetchone()
        assert row is not None
        lsn, records, fpi, wal_bytes, syncs, commits = row
        return Reading(
            wall=time.monotonic(),
            pg_cpu=server_cpu_seconds(self.postmaster, exclude=(self.conn.info.backend_pid,)),
            worker_cpu=cpu_seconds(self.worker_pids),
            lsn=lsn,
            wal_records=int(records),
            wal_fpi=int(fpi),
            wal_bytes=int(wal_bytes),
            wal_sync=int(syncs),
            commits=int(commits),
        )

    async def phase(self, name: str, jobs: int, before: Reading, after: Reading) -> Phase:
        row = await (
            await self.conn.execute("SELECT pg_wal_lsn_diff(%s, %s)", [after.lsn, before.lsn])
        ).fetchone()
        wal = float(row[0]) if row else 0.0
        seconds = after.wall - before.wall
        pg_cpu = after.pg_cpu - before.pg_cpu
        return Phase(
            name=name,
            jobs=jobs,
            seconds=seconds,
            pg_cpu_us=1e6 * pg_cpu / jobs,
            worker_cpu_us=1e6 * (after.worker_cpu - before.worker_cpu) / jobs,
            wal_bytes=wal / jobs,
            wal_fpi=(after.wal_fpi - before.wal_fpi) / jobs,
            commits=(after.commits - before.commits) / jobs,
            wal_syncs=(after.wal_sync - before.wal_sync) / jobs,
            pg_core_use=pg_cpu / seconds / self.pg_cores,
        )

    async def checkpoint(self, wanted: bool) -> None:
        """With ``wanted``, CHECKPOINT first: the phase then writes a full-page image for the
        first change of every page it touches, as the first minutes after a checkpoint do."""
        if wanted:
            await self.conn.execute("CHECKPOINT")

    async def ask(self, sql: str) -> Any:
        row = await (await self.conn.execute(sql)).fetchone()
        return row[0] if row else None


def pin(pid: int, cpus: set[int]) -> None:
    """Pin a process and every thread of it to ``cpus`` (one that has exited is left be: a
    server's short-lived children come and go while they are listed)."""
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            os.sched_setaffinity(int(task.name), cpus)
    except (FileNotFoundError, ProcessLookupError):
        pass


def pin_server(postmaster: int, cpus: set[int]) -> None:
    """The postmaster and every process it has forked so far; later ones inherit it."""
    for pid in [postmaster, *children(postmaster)]:
        pin(pid, cpus)


async def enqueue(system: Rota, count: int, batch: int, clients: int) -> None:
    """``count`` no-op jobs, ``batch`` per call, from ``clients`` concurrent callers."""
    calls = [min(batch, count - start) for start in range(0, count, batch)]
    queue: asyncio.Queue[int] = asyncio.Queue()
    for size in calls:
        queue.put_nowait(size)

    async def caller() -> None:
        while not queue.empty():
            size = queue.get_nowait()
            if size == 1:
                await system.app.enqueue("noop", {})
            else:
                await system.app.enqueue_many(system.app.spec("noop", {}) for _ in range(size))

    await asyncio.gather(*(caller() for _ in range(clients)))


async def measure(args: argparse.Namespace, cluster: Cluster) -> dict[str, Any]:
    # The load before this run's own processes start: what else the machine was doing.
    load = os.getloadavg()
    cpus = sorted(os.sched_getaffinity(0))
    pg_cpus = set(cpus[: args.pg_cores])
    worker_cpus = set(cpus[args.pg_cores :]) or set(cpus)
    pin_server(cluster.pid, pg_cpus)
    settings = Settings(server_url=cluster.url, postmaster=cluster.pid, quick=args.quick)
    system = Rota(settings)
    await system.setup()
    env = {**system.drain_env, "BENCH_CONCURRENCY": str(args.concurrency)}
    group = start_workers(
        settings,
        "rota",
        system.dsn,
        processes=args.processes,
        concurrency=args.concurrency,
        extra=env,
    )
    phases: list[Phase] = []
    backends = 0
    try:
        await group.wait_ready()
        for pid in group.pids:
            pin(pid, worker_cpus)
        async with Probe(system.dsn, cluster.pid, len(pg_cpus)) as probe:
            probe.worker_pids = group.pids
            progress(f"warming up: {args.warm:,} jobs end to end")
            mark = await system.watermark()
            await enqueue(system, args.warm, args.batch, args.clients)
            await _until(probe, system.done_sql(mark, args.warm), timeout_s=300)
            mark = await system.watermark()
            group.pause()
            try:
                singles = max(1, args.jobs // 10)
                for name, count, batch in (
                    ("enqueue, 1 per call", singles, 1),
                    (f"enqueue, {args.batch} per call", args.jobs, args.batch),
                ):
                    progress(f"{name}: {count:,} jobs from {args.clients} callers")
                    await probe.checkpoint(args.checkpoint)
                    before = await probe.read()
                    await enqueue(system, count, batch, args.clients)
                    phases.append(await probe.phase(name, count, before, await probe.read()))
                await system.analyze()
                await system.app.close()  # so the drain's connections are the workers' alone
                total = singles + args.jobs
                progress(f"drain: {total:,} jobs, {args.processes} worker processes")
                await probe.checkpoint(args.checkpoint)
                before = await probe.read()
            finally:
                group.resume()
            backends = await _until(
                probe, system.done_sql(mark, total), timeout_s=max(300.0, total / 50)
            )
            drained = await probe.phase(
                "drain (claim + complete)", total, before, await probe.read()
            )
            drained.extra["max_connections_seen"] = backends
            phases.append(drained)
    finally:
        await group.stop()
        await system.close()
    settings.remove_workdir()  # the workers' logs, kept only when the run failed
    return report(args, phases, pg_cpus, worker_cpus, load)


async def _until(probe: Probe, done_sql: str, *, timeout_s: float) -> int:
    """Poll until ``done_sql`` is true; the most backends seen meanwhile."""
    deadline = time.monotonic() + timeout_s
    most = 0
    while True:
        most = max(most, int(await probe.ask(_BACKENDS)) - 1)  # less the probe's own
        if await probe.ask(done_sql):
            return most
        if time.monotonic() > deadline:
            raise TimeoutError(f"not done after {timeout_s:.0f} s")
        await asyncio.sleep(0.1)


def report(
    args: argparse.Namespace,
    phases: list[Phase],
    pg_cpus: set[int],
    worker_cpus: set[int],
    load: tuple[float, float, float],
) -> dict[str, Any]:
    cores = os.cpu_count() or 1
    busy = load[0] > cores / 2
    lines = [
        "",
        "rota capacity of one PostgreSQL primary (python -m bench.capacity)",
        f"machine: {cores} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}",
    ]
    if busy or args.quick:
        why = "--quick" if args.quick else "a busy machine"
        lines.append(f"WARNING: {why}: these figures check the program; do not quote them")
    lines += [
        f"PostgreSQL on CPUs {sorted(pg_cpus)}; {args.processes} worker processes on CPUs "
        f"{sorted(worker_cpus)}, concurrency {args.concurrency}; no-op handler",
        "",
        f"{'phase':28} {'jobs/s':>9} {'PG µs/job':>10} {'PG core use':>11} "
        f"{'worker µs/job':>13} {'WAL B/job':>9} {'FPI/job':>8} {'commits/job':>11} "
        f"{'syncs/job':>9}",
    ]
    for p in phases:
        lines.append(
            f"{p.name:28} {p.jobs_per_s:>9,.0f} {p.pg_cpu_us:>10,.1f} {p.pg_core_use:>11.0%} "
            f"{p.worker_cpu_us:>13,.1f} {p.wal_bytes:>9,.0f} {p.wal_fpi:>8.3f} "
            f"{p.commits:>11.3f} {p.wal_syncs:>9.3f}"
        )
    batched, drain = phases[1], phases[2]
    per_job_us = batched.pg_cpu_us + drain.pg_cpu_us
    ceiling = len(pg_cpus) * 1e6 / per_job_us
    wal_per_job = batched.wal_bytes + drain.wal_bytes
    lines += [
        "",
        f"a job's lifecycle (batched enqueue + claim + complete): {per_job_us:,.1f} µs of "
        f"PostgreSQL CPU, {wal_per_job:,.0f} B of WAL",
        f"ceiling of {len(pg_cpus)} PostgreSQL core(s) at 100%: {ceiling:,.0f} jobs/s "
        f"({ceiling / len(pg_cpus):,.0f} per core); WAL then {ceiling * wal_per_job / 1e6:,.1f} MB/s",
        f"connections during the drain: at most {drain.extra['max_connections_seen']} "
        f"(each worker process holds up to pool_max + 1 for LISTEN)",
    ]
    print("\n".join(lines))
    return {
        "args": vars(args),
        "load_average": load,
        "cores": cores,
        "not_a_measurement": busy or args.quick,
        "pg_cpus": sorted(pg_cpus),
        "worker_cpus": sorted(worker_cpus),
        "phases": [{**vars(p), "jobs_per_s": p.jobs_per_s} for p in phases],
        "lifecycle_pg_cpu_us": per_job_us,
        "lifecycle_wal_bytes": wal_per_job,
        "ceiling_jobs_per_s": ceiling,
    }


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--pg-cores", type=int, default=1, help="CPUs for PostgreSQL (1)")
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs enqueued in batches")
    parser.add_argument("--batch", type=int, default=100, help="jobs per enqueue call (100)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent enqueuers (8)")
    parser.add_argument("--processes", type=int, default=2, help="worker processes (2)")
    parser.add_argument("--concurrency", type=int, default=500, help="per worker (500)")
    parser.add_argument(
        "--checkpoint",
        action="store_true",
        help="CHECKPOINT before each phase, so its WAL includes the full-page images",
    )
    parser.add_argument("--quick", action="store_true", help="5,000 jobs: a check that it runs")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs = min(args.jobs, 5_000)
    args.warm = min(2_000, max(100, args.jobs // 10))
    available = len(os.sched_getaffinity(0))
    if not 1 <= args.pg_cores <= available:
        parser.error(f"--pg-cores must be between 1 and the {available} CPUs available")
    if args.jobs < 100 or args.batch < 1 or args.clients < 1 or args.processes < 1:
        parser.error("--jobs >= 100 and --batch, --clients, --processes >= 1")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    progress("starting a throwaway PostgreSQL cluster (production settings)...")
    cluster = Cluster.start()
    try:
        figures = asyncio.run(measure(args, cluster))
    except KeyboardInterrupt:
        progress("interrupted: stopping")
        return 130
    finally:
        cluster.stop()
        progress(f"stopped PostgreSQL {cluster.pid} and removed {cluster.root}")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1, default=str))
        progress(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
