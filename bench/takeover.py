"""Takeover after SIGKILL, and a restarted worker's first claim: ``python -m bench.takeover``.

On a throwaway PostgreSQL configured as production (``bench/cluster.py``), migrated with ``rota
migrate``, ``--workers`` ``rota worker`` processes run a small app (written to a temporary
folder) whose jobs sleep ``--job-seconds``, with a short lease, heartbeat and rescue interval
given on their command line. The bench keeps ``--backlog`` jobs pending at all times, so every
worker always holds some and a restarted one has work at once.

Each of ``--kills`` rounds picks at random a worker that holds running jobs, reads in one
statement the store's ``now()`` and the jobs it holds (``state = 'running'`` and ``worker`` its
name), SIGKILLs it by its PID, and at once starts its replacement under a new name (slot and
generation: ``w1-g3``), reading the store's ``now()`` as it spawns it. Then, by the store's
clock:

- **takeover**, per job held at the kill: its next attempt's ``started_at`` (another worker's
  claim) minus the kill instant; split into **to rescue** (the rescuer returned the job to
  pending: the ``lease_expired`` entry of its history) and **rescue to claim**;
- **first claim**, per restart: the replacement's first ``started_at`` minus its spawn.

The bound the takeover is held to is lease + rescue interval + 1 s: the lease runs out at most
a lease after the kill, a rescuer sees it within one interval, and a worker claims it. The
report gives median, p95 and max, the settings, and the machine's load average (a busy machine
stretches every figure). The workers read bytecode cached by the first generation, as an
installed package's is; ``--compile-each-start`` has every start compile rota's sources instead
(an environment with ``PYTHONDONTWRITEBYTECODE`` set runs a checkout so). ``--write`` writes ``bench/takeover.md``; ``--keep-logs`` keeps the
workers' logs (``ROTA_LOG_LEVEL=debug`` in the environment makes them say more).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.cluster import Cluster, process_cpu_seconds
from bench.harness import percentile, progress
from rota.domain.job import JobSpec
from rota.store import Store, open_store

APP = """\
import asyncio
import os

import rota

app = rota.App(os.environ["ROTA_DATABASE_URL"])


@app.job("nap")
async def nap(ctx, payload):
    await asyncio.sleep(payload["s"])
"""
MODULE = "takeoverapp"

#: Each held job's row: who runs it now, since when, and its history of ended attempts.
_HELD = """
SELECT id, state, worker, started_at, history FROM rota_jobs WHERE id = ANY(%(ids)s)
"""
#: The store's clock and a worker's running jobs, read in one statement right before the kill.
_HOLDS = """
SELECT now(), coalesce(array_agg(id) FILTER (WHERE id IS NOT NULL), '{}')
FROM (SELECT 1) one LEFT JOIN rota_jobs ON state = 'running' AND worker = %(worker)s
"""
_FIRST_CLAIM = "SELECT min(started_at) FROM rota_jobs WHERE worker = %(worker)s"


@dataclass
class Slot:
    """One worker's place: the process running in it now and its generation."""

    index: int
    generation: int
    process: subprocess.Popen[bytes]
    spawned_at: datetime
    log: Path

    @property
    def name(self) -> str:
        return f"w{self.index}-g{self.generation}"


@dataclass
class Round:
    """What one kill measured: seconds by the store's clock."""

    victim: str
    slot: int
    held: int
    takeover_s: list[float] = field(default_factory=list)
    to_rescue_s: list[float] = field(default_factory=list)
    rescue_to_claim_s: list[float] = field(default_factory=list)
    #: Held jobs that finished before the kill landed (no next attempt to wait for).
    finished: int = 0
    first_claim_s: float | None = None
    first_claim_cpu_s: float | None = None


@dataclass
class Run:
    settings: dict[str, float]
    rounds: list[Round] = field(default_factory=list)
    #: Whether the workers read cached bytecode (else each start compiles the sources).
    bytecode: bool = True
    load_start: str = ""
    load_end: str = ""
    server_version: str = ""


class Fleet:
    """The worker processes, one per slot, each restarted under a new generation's name."""

    def __init__(self, args: argparse.Namespace, url: str, folder: Path) -> None:
        self.args = args
        self.url = url
        self.folder = folder
        self.slots: list[Slot] = []
        self.env = dict(os.environ, ROTA_DATABASE_URL=url)
        if args.compile_each_start:
            self.env["PYTHONDONTWRITEBYTECODE"] = "1"
        else:
            # As an installed package has it: bytecode compiled once (here by the first
            # generation, which no figure measures) and read by every later start.
            self.env.pop("PYTHONDONTWRITEBYTECODE", None)
            self.env["PYTHONPYCACHEPREFIX"] = str(folder / "bytecode")
        self.env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(folder), self.env.get("PYTHONPATH")])
        )

    def command(self, name: str) -> list[str]:
        args = self.args
        return [
            sys.executable,
            "-m",
            "rota",
            "worker",
            "--app",
            f"{MODULE}:app",
            "--name",
            name,
            "--concurrency",
            str(args.concurrency),
            "--lease-seconds",
            repr(args.lease),
            "--heartbeat-seconds",
            repr(args.heartbeat),
            "--rescue-seconds",
            repr(args.rescue),
        ]

    async def spawn(self, conn: psycopg.AsyncConnection[Any], index: int, generation: int) -> Slot:
        name = f"w{index}-g{generation}"
        log = self.folder / f"{name}.log"
        spawned_at = await store_now(conn)
        return Slot(index, generation, self.popen(name, log), spawned_at, log)

    def popen(self, name: str, log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            return subprocess.Popen(
                self.command(name), env=self.env, cwd=self.folder, stdout=out, stderr=out
            )

    def stop(self) -> None:
        """SIGTERM twice (a hard stop: jobs handed back), then SIGKILL, each by its PID."""
        for slot in self.slots:
            if slot.process.poll() is None:
                slot.process.send_signal(signal.SIGTERM)
                slot.process.send_signal(signal.SIGTERM)
        for slot in self.slots:
            try:
                slot.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                slot.process.kill()
                slot.process.wait()


async def store_now(conn: psycopg.AsyncConnection[Any]) -> datetime:
    row = await (await conn.execute("SELECT now()")).fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


async def top_up(
    store: Store, conn: psycopg.AsyncConnection[Any], args: argparse.Namespace, stop: asyncio.Event
) -> None:
    """Keep ``--backlog`` jobs pending (checked every 100 ms) until ``stop``."""
    while not stop.is_set():
        row = await (
            await conn.execute("SELECT count(*) FROM rota_jobs WHERE state = 'pending'")
        ).fetchone()
        owed = args.backlog - (row[0] if row else 0)
        if owed > 0:
            await store.enqueue(
                [
                    JobSpec(kind="nap", payload={"s": args.job_seconds}, max_attempts=25)
                    for _ in range(owed)
                ]
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=0.1)


async def first_claim(
    conn: psycopg.AsyncConnection[Any], slot: Slot, deadline: float
) -> tuple[float, float]:
    """Seconds from the slot's spawn to its worker's first claim, by the store's clock, and the
    CPU seconds the worker had used when the claim was seen (its start's cost, which a busy
    machine stretches into wall time)."""
    while time.monotonic() < deadline:
        if slot.process.poll() is not None:
            raise RuntimeError(f"{slot.name} exited: see {slot.log}")
        row = await (await conn.execute(_FIRST_CLAIM, {"worker": slot.name})).fetchone()
        if row and row[0] is not None:
            claimed: datetime = row[0]
            cpu = process_cpu_seconds(slot.process.pid)
            return (claimed - slot.spawned_at).total_seconds(), cpu
        await asyncio.sleep(0.02)  # the measuring loop's poll, off the workers' path
    raise TimeoutError(f"{slot.name} claimed nothing in time: see {slot.log}")


async def taken_over(
    conn: psycopg.AsyncConnection[Any],
    ids: list[int],
    victim: str,
    killed_at: datetime,
    found: Round,
    deadline: float,
) -> None:
    """Wait until each held job is claimed again by another worker; note when and how."""
    waiting = set(ids)
    while waiting and time.monotonic() < deadline:
        rows = await (await conn.execute(_HELD, {"ids": list(waiting)})).fetchall()
        for job_id, state, worker, started_at, history in rows:
            rescued = [
                entry
                for entry in history or []
                if entry.get("worker") == victim and entry.get("outcome") == "lease_expired"
            ]
            if worker != victim and started_at is not None and started_at > killed_at:
                takeover = (started_at - killed_at).total_seconds()
                found.takeover_s.append(takeover)
                if rescued:
                    rescue_at = rescued[-1]["finished_us"] / 1e6
                    to_rescue = rescue_at - killed_at.timestamp()
                    found.to_rescue_s.append(to_rescue)
                    found.rescue_to_claim_s.append(takeover - to_rescue)
                waiting.discard(job_id)
            elif worker == victim and state == "succeeded":
                found.finished += 1  # done in the instant between the read and the kill
                waiting.discard(job_id)
        if waiting:
            await asyncio.sleep(0.05)  # the measuring loop's poll, off the workers' path
    if waiting:
        raise TimeoutError(f"jobs {sorted(waiting)} of {victim} were not taken over in time")


async def kill_round(
    conn: psycopg.AsyncConnection[Any], fleet: Fleet, rng: random.Random, args: argparse.Namespace
) -> Round:
    candidates = []
    for slot in fleet.slots:
        row = await (await conn.execute(_HOLDS, {"worker": slot.name})).fetchone()
        if row and row[1]:
            candidates.append(slot)
    if not candidates:
        raise RuntimeError("no worker holds a running job: is the backlog kept up?")
    slot = rng.choice(candidates)
    row = await (await conn.execute(_HOLDS, {"worker": slot.name})).fetchone()
    assert row is not None
    killed_at, ids = row
    os.kill(slot.process.pid, signal.SIGKILL)  # by its PID only
    replacement = await fleet.spawn(conn, slot.index, slot.generation + 1)
    fleet.slots[slot.index] = replacement
    slot.process.wait()
    found = Round(victim=slot.name, slot=slot.index, held=len(ids))
    deadline = time.monotonic() + args.lease + args.rescue + 60
    claim, _ = await asyncio.gather(
        first_claim(conn, replacement, deadline),
        taken_over(conn, list(ids), slot.name, killed_at, found, deadline),
    )
    found.first_claim_s, found.first_claim_cpu_s = claim
    return found


async def measure(args: argparse.Namespace, cluster: Cluster, folder: Path) -> Run:
    run = Run(
        settings={
            "lease": args.lease,
            "heartbeat": args.heartbeat,
            "rescue": args.rescue,
            "workers": args.workers,
            "concurrency": args.concurrency,
            "job": args.job_seconds,
            "backlog": args.backlog,
        },
        bytecode=not args.compile_each_start,
        load_start=loadavg(),
    )
    (folder / f"{MODULE}.py").write_text(APP)
    fleet = Fleet(args, cluster.url, folder)
    store = open_store(cluster.url)
    stop = asyncio.Event()
    rng = random.Random(args.seed)
    async with (
        await psycopg.AsyncConnection.connect(cluster.url, autocommit=True) as conn,
        await psycopg.AsyncConnection.connect(cluster.url, autocommit=True) as feeder,
    ):
        row = await (await conn.execute("SHOW server_version")).fetchone()
        run.server_version = str(row[0]) if row else "?"
        filling = asyncio.create_task(top_up(store, feeder, args, stop))
        try:
            for index in range(args.workers):
                fleet.slots.append(await fleet.spawn(conn, index, 0))
            started = time.monotonic() + 120
            await asyncio.gather(*(first_claim(conn, slot, started) for slot in fleet.slots))
            for number in range(args.kills):
                # A random pause, so the kill falls anywhere in the heartbeat's period.
                await asyncio.sleep(args.settle + rng.uniform(0, args.heartbeat))
                found = await kill_round(conn, fleet, rng, args)
                run.rounds.append(found)
                progress(
                    f"kill {number + 1}/{args.kills}: {found.victim} held {found.held};"
                    f" takeover {_list(found.takeover_s)} s;"
                    f" first claim {found.first_claim_s:.2f} s (CPU {found.first_claim_cpu_s:.2f} s)"
                    " after its spawn at"
                    f" {fleet.slots[found.slot].spawned_at:%H:%M:%S.%f}"
                )
        finally:
            stop.set()
            await asyncio.gather(filling, return_exceptions=True)
            fleet.stop()
            await store.close()
    run.load_end = loadavg()
    return run


def _list(values: list[float]) -> str:
    return ", ".join(f"{value:.2f}" for value in values) or "-"


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _stats(values: list[float]) -> str:
    if not values:
        return "- | - | - | 0"
    return (
        f"{statistics.median(values):.2f} s | {percentile(values, 0.95):.2f} s |"
        f" {max(values):.2f} s | {len(values)}"
    )


def report(run: Run, command: str) -> str:
    s = run.settings
    bound = s["lease"] + s["rescue"] + 1.0
    takeovers = [value for found in run.rounds for value in found.takeover_s]
    claims = [found.first_claim_s for found in run.rounds if found.first_claim_s is not None]
    cpu = [found.first_claim_cpu_s for found in run.rounds if found.first_claim_cpu_s is not None]
    to_rescue = [value for found in run.rounds for value in found.to_rescue_s]
    to_claim = [value for found in run.rounds for value in found.rescue_to_claim_s]
    held = sum(found.held for found in run.rounds)
    finished = sum(found.finished for found in run.rounds)
    lines = [
        "## Takeover after SIGKILL, and a restarted worker's first claim",
        "",
        f"- **Date:** {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- **Command:** `{command}`",
        f"- **Machine:** {os.cpu_count()} cores, PostgreSQL {run.server_version} (throwaway,"
        f" production settings), Python {sys.version.split()[0]}; load average"
        f" {run.load_start} at the start, {run.load_end} at the end",
        f"- **Workers:** {s['workers']:g} `rota worker` processes, concurrency"
        f" {s['concurrency']:g}, `--lease-seconds {s['lease']:g} --heartbeat-seconds"
        f" {s['heartbeat']:g} --rescue-seconds {s['rescue']:g}`; jobs sleep {s['job']:g} s,"
        f" {s['backlog']:g} kept pending; "
        + (
            "bytecode cached (as an installed package has it)"
            if run.bytecode
            else "no bytecode cache: each start compiles rota's sources"
        ),
        f"- **How:** {len(run.rounds)} rounds: SIGKILL a worker holding jobs, restart it at once"
        " under a new name. Takeover: a held job's next claim minus the kill, by the store's"
        " clock (split at the rescuer's return of the job to pending); first claim: the"
        " restarted worker's first claim minus its spawn, and the CPU time it had used when"
        " the claim was seen (its start's cost, which the load stretches into wall time).",
        "",
        "| figure | median | p95 | max | count |",
        "|---|---|---|---|---|",
        f"| takeover | {_stats(takeovers)} |",
        f"| of which: kill to rescue | {_stats(to_rescue)} |",
        f"| of which: rescue to claim | {_stats(to_claim)} |",
        f"| first claim after restart | {_stats(claims)} |",
        f"| its CPU time by then | {_stats(cpu)} |",
        "",
    ]
    if takeovers:
        median = statistics.median(takeovers)
        verdict = "within" if median <= bound else "over"
        lines.append(
            f"Takeover median {median:.2f} s: {verdict} the bound lease + rescue + 1 s ="
            f" {bound:g} s."
        )
    if claims:
        median = statistics.median(claims)
        verdict = "within" if median <= 1.0 else "over"
        lines.append(f"First claim median {median:.2f} s: {verdict} 1 s of the spawn.")
    lines.append(
        f"{held} jobs held at the kills; {finished} finished in the instant before the kill"
        " landed (no takeover to measure)."
    )
    return "\n".join(lines) + "\n"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.takeover", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--kills", type=int, default=10, help="rounds (10)")
    parser.add_argument("--workers", type=int, default=3, help="worker processes (3)")
    parser.add_argument("--concurrency", type=int, default=4, help="jobs at once each (4)")
    parser.add_argument("--lease", type=float, default=5.0, help="--lease-seconds (5)")
    parser.add_argument("--heartbeat", type=float, default=1.0, help="--heartbeat-seconds (1)")
    parser.add_argument("--rescue", type=float, default=1.0, help="--rescue-seconds (1)")
    parser.add_argument("--job-seconds", type=float, default=2.0, help="each job's sleep (2)")
    parser.add_argument("--backlog", type=int, default=4, help="jobs kept pending (4)")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds between rounds (2)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--compile-each-start",
        action="store_true",
        help="no bytecode cache: every worker start compiles rota's sources",
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the workers' logs")
    parser.add_argument("--write", action="store_true", help="write bench/takeover.md")
    args = parser.parse_args(argv)
    if args.kills < 1 or args.workers < 2 or args.concurrency < 1 or args.backlog < 1:
        parser.error("--kills, --concurrency and --backlog at least 1, --workers at least 2")
    if min(args.lease, args.heartbeat, args.rescue, args.job_seconds) <= 0:
        parser.error("durations must be positive")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    command = "python -m bench.takeover " + " ".join(argv)
    cluster = Cluster.start()
    folder = Path(tempfile.mkdtemp(prefix="rota-takeover-"))
    failed = True
    try:
        subprocess.run(
            [sys.executable, "-m", "rota", "migrate", "--database-url", cluster.url],
            check=True,
            capture_output=True,
            timeout=120,
        )
        run = asyncio.run(measure(args, cluster, folder))
        failed = False
    finally:
        cluster.stop()
        if failed or args.keep_logs:
            progress(f"worker logs kept in {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    text = report(run, command.strip())
    print(text)
    if args.write:
        (Path(__file__).parent / "takeover.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
