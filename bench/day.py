"""A day of the seeds' estimate, compressed: steady jobs plus thousands of hourly schedules.

    python -m bench.day                         # 24 simulated hours at 100x: 14.4 minutes
    python -m bench.day --speed 50 --hours 6    # a quarter of a day at 50x: 7.2 minutes
    python -m bench.day --quick                 # a check that it runs: small, not quotable
    python -m bench.day --json day.json         # also keep the raw figures
    python -m bench.day --schedule-priority 10  # the schedules' jobs ahead of the steady ones

The estimate: 10 million jobs a day (115 a second on average) and thousands of "every hour"
schedules that all fall due at minute zero, spread by jitter. Compressed ``--speed`` times, a
simulated hour lasts ``3600 / speed`` real seconds: the steady jobs are enqueued at ``speed``
times their rate (11,574 jobs/s at 100x), and each of ``--schedules`` schedules runs every
``3600 / speed`` seconds, anchored at its creation (the workers create them all at start,
within the seconds their upsert takes), each with a fixed offset below ``--jitter-minutes``
of simulated time. Real time, real clocks: rota takes its time from PostgreSQL as in
production, so nothing but the periods is scaled, and leases and heartbeats are the defaults.

On a throwaway cluster configured as production (``bench/cluster.py``), ``--processes`` rota
worker processes (``bench.worker``, no-op handlers, the drain settings of ``Rota.drain_env``)
run the steady jobs and fire and run the schedules. The bench process enqueues the steady jobs
in batches every 100 ms, paced by the clock, and reads the counts each simulated minute.

Printed per simulated hour and for the whole day: schedule lag (a schedule's job claimed, by
the store's clock, after the run was due: its slot plus the schedule's fixed jitter offset),
p50, p99 and max, and the part of it that is the firer's (the job enqueued after the run was
due; the rest is the wait in the queue); the backlog (pending jobs, from the
counts the writes keep) at its largest and at the hour's end; the steady jobs enqueued and
all jobs succeeded so far; the schedules' jobs enqueued before the end and never claimed. The
schedules' first runs (the slots at their creation, before the first hour, however far each
one's jitter puts its run into that hour) are left out of the hours and the day, and shown on a
line of their own. Load average at the start is printed: a busy machine's figures are checks
of this program, not measurements.

``--schedule-priority N`` defines the schedules with a priority of their own (the steady jobs
have 0), so that where the workers cannot drain the steady load a schedule's run is claimed
ahead of the backlog rather than behind it; run once with and once without it to compare the
lag. The report says which was used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from bench.cluster import Cluster
from bench.harness import Settings, percentile, progress, start_workers
from bench.systems import Rota
from rota.domain.job import MAX_PRIORITY, MIN_PRIORITY
from rota.domain.job_state import JobState
from rota.domain.schedule_plan import jitter_offset

#: A batch of steady jobs goes out this often (real seconds).
ENQUEUE_EVERY_S = 0.1
#: The most jobs one enqueue call carries.
MAX_BATCH = 5_000

# Each schedule run's slot, the schedule's jitter, and when its job was enqueued and claimed:
# the run is due at its slot plus the schedule's fixed offset (rota.domain.schedule_plan).
_RUNS = """
SELECT j.schedule, j.slot_at, s.jitter_us, j.created_at, j.started_at
FROM rota_jobs j JOIN rota_schedules s ON s.name = j.schedule
WHERE j.schedule IS NOT NULL AND j.started_at IS NOT NULL AND j.slot_at IS NOT NULL
  AND j.run_at < %(end)s::timestamptz
"""
_UNCLAIMED = """
SELECT count(*) FROM rota_jobs WHERE schedule IS NOT NULL AND started_at IS NULL
  AND run_at < %(end)s::timestamptz
"""
# The same while the workers run: only active jobs can wait for a claim, and reading the
# finished ones too (millions) would load the machine while the last runs are claimed.
_WAITING = """
SELECT count(*) FROM rota_jobs_active WHERE schedule IS NOT NULL AND started_at IS NULL
  AND run_at < %(end)s::timestamptz
"""


@dataclass
class Sample:
    """The counts at one simulated minute."""

    hour: int
    pending: int
    running: int
    enqueued: int
    succeeded: int


@dataclass
class Day:
    """What one run measured."""

    speed: float
    hours: int
    rate: float
    samples: list[Sample] = field(default_factory=list)
    #: Per simulated hour, ms from each schedule run's due instant (its slot plus the
    #: schedule's jitter offset) to its job's claim, and to its job's enqueue by the firer.
    lags: dict[int, list[float]] = field(default_factory=dict)
    firing: dict[int, list[float]] = field(default_factory=dict)
    #: The same for the schedules' first runs (slots before the start: at their creation),
    #: which the hours leave out, however far their jitter put them into the first hour.
    first_lags: list[float] = field(default_factory=list)
    first_firing: list[float] = field(default_factory=list)
    unclaimed: int = 0
    load: float = 0.0
    #: The schedules' own priority, or None: the kind's (0, as the steady jobs').
    schedule_priority: int | None = None


async def enqueue_steady(system: Rota, rate: float, until: float, enqueued: list[int]) -> None:
    """Enqueue noop jobs at ``rate`` per real second until ``until`` (monotonic), paced by
    the clock: each batch makes up what the elapsed time asks for, at most MAX_BATCH."""
    started = time.monotonic()
    spec = system.app.spec
    while (now := time.monotonic()) < until:
        owed = int((now - started) * rate) - enqueued[0]
        while owed > 0:
            count = min(owed, MAX_BATCH)
            await system.app.enqueue_many(spec("noop", None) for _ in range(count))
            enqueued[0] += count
            owed -= count
        await asyncio.sleep(max(0.0, ENQUEUE_EVERY_S - (time.monotonic() - now)))


async def sample(
    system: Rota, day: Day, every_s: float, until: float, enqueued: list[int], start: float
) -> None:
    """Read the counts every ``every_s`` real seconds (a simulated minute) until ``until``."""
    hour_s = every_s * 60
    while time.monotonic() < until:
        counts = await system.app.store.counts()  # kept by the writes: cheap at any size
        day.samples.append(
            Sample(
                hour=int((time.monotonic() - start) // hour_s),
                pending=counts.total(JobState.PENDING),
                running=counts.total(JobState.RUNNING),
                enqueued=enqueued[0],
                succeeded=counts.total(JobState.SUCCEEDED),
            )
        )
        await asyncio.sleep(every_s)


#: The longest wait after the end for the slots due before it to be fired and claimed.
SETTLE_S = 10.0


async def settle(conn: psycopg.AsyncConnection[Any], params: dict[str, Any]) -> None:
    """Wait until the store's clock has passed the end by a second and no schedule run due
    before the end waits for its claim, or SETTLE_S (what is left is reported unclaimed)."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        row = await (
            await conn.execute(
                f"SELECT now() > %(end)s::timestamptz + interval '1 second', ({_WAITING})",
                params,
            )
        ).fetchone()
        if row is not None and row[0] and row[1] == 0:
            return
        await asyncio.sleep(0.25)


async def schedules_defined(dsn: str, count: int, *, timeout_s: float) -> Any:
    """Wait until the workers have upserted all ``count`` schedules (a ready worker may
    still be writing them); the store's clock then, the start of the first simulated hour."""
    deadline = time.monotonic() + timeout_s
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while True:
            row = await (
                await conn.execute("SELECT count(*), now() FROM rota_schedules")
            ).fetchone()
            if row and row[0] >= count:
                return row[1]
            if time.monotonic() > deadline:
                raise RuntimeError(f"the workers defined {row and row[0]} of {count} schedules")
            await asyncio.sleep(0.2)


async def measure(args: argparse.Namespace, cluster: Cluster) -> Day:
    hour_s = 3600 / args.speed
    rate = args.per_day / 86_400 * args.speed
    day = Day(
        speed=args.speed,
        hours=args.hours,
        rate=rate,
        load=os.getloadavg()[0],
        schedule_priority=args.schedule_priority,
    )
    settings = Settings(server_url=cluster.url, postmaster=cluster.pid, quick=args.quick)
    system = Rota(settings)
    await system.setup()
    env = {
        **system.drain_env,
        "BENCH_SCHEDULES": str(args.schedules),
        "BENCH_SCHEDULE_EVERY_S": repr(hour_s),
        "BENCH_SCHEDULE_JITTER_S": repr(args.jitter_minutes * 60 / args.speed),
    }
    if args.schedule_priority is not None:
        env["BENCH_SCHEDULE_PRIORITY"] = str(args.schedule_priority)
    group = start_workers(
        settings, "rota", system.dsn, processes=args.processes, concurrency=500, extra=env
    )
    try:
        await group.wait_ready()
        start_at = await schedules_defined(system.dsn, args.schedules, timeout_s=300)
        progress(
            f"{args.hours} simulated hours at {args.speed:g}x: {hour_s:.1f} s each,"
            f" {rate:,.0f} steady jobs/s, {args.schedules:,} schedules"
        )
        started = time.monotonic()
        until = started + args.hours * hour_s
        enqueued = [0]
        await asyncio.gather(
            enqueue_steady(system, rate, until, enqueued),
            sample(system, day, hour_s / 60, until, enqueued, started),
        )
        async with await psycopg.AsyncConnection.connect(system.dsn, autocommit=True) as conn:
            end = await (await conn.execute("SELECT now()")).fetchone()
            assert end is not None
            params = {"start": start_at, "hour_s": hour_s, "end": end[0]}
            # Slots due in the last moments are fired and claimed just after the end: wait for
            # them (at most SETTLE_S), or the last hour would count fewer runs than it had.
            await settle(conn, params)
            for name, slot_at, jitter_us, created_at, started_at in await (
                await conn.execute(_RUNS, params)
            ).fetchall():
                due = slot_at + jitter_offset(name, timedelta(microseconds=jitter_us))
                lag = (started_at - due).total_seconds() * 1000
                firing = (created_at - due).total_seconds() * 1000
                if slot_at < start_at:
                    # A first run, fired as its schedule was defined: told apart by its slot,
                    # not by its due instant, which its jitter may put into the first hour.
                    day.first_lags.append(lag)
                    day.first_firing.append(firing)
                    continue
                hour = math.floor((due - start_at).total_seconds() / hour_s)
                day.lags.setdefault(hour, []).append(lag)
                day.firing.setdefault(hour, []).append(firing)
            [unclaimed] = await (await conn.execute(_UNCLAIMED, params)).fetchone() or (0,)
            day.unclaimed = int(unclaimed)
    finally:
        await group.stop()
        group.kill()
        await system.close()
    settings.remove_workdir()  # the workers' logs, kept only when the run failed
    return day


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{percentile(values, 0.5):,.0f} / {percentile(values, 0.99):,.0f} / {max(values):,.0f}"


def _priority(day: Day) -> str:
    if day.schedule_priority is None:
        return "schedules at the kind's priority (0, as the steady jobs)"
    return f"schedules at priority {day.schedule_priority} (steady jobs at 0)"


def report(day: Day) -> str:
    lines = [
        f"load average at start {day.load:.2f} on {os.cpu_count()} CPUs;"
        f" {day.speed:g}x, {day.rate:,.0f} steady jobs/s; {_priority(day)}",
        "| simulated hour | schedule lag p50 / p99 / max, ms | of which firing p50 / p99 / max,"
        " ms | schedule runs | pending max / at end | steady jobs enqueued | jobs succeeded |",
        "|---|---|---|---|---|---|---|",
    ]
    for hour in range(day.hours):
        lags = day.lags.get(hour, [])
        samples = [s for s in day.samples if s.hour == hour]
        if not samples:
            continue
        lines.append(
            f"| {hour} | {_spread(lags)} | {_spread(day.firing.get(hour, []))} | {len(lags):,} |"
            f" {max(s.pending for s in samples):,} / {samples[-1].pending:,} |"
            f" {samples[-1].enqueued:,} | {samples[-1].succeeded:,} |"
        )
    # Slots before the first hour (the schedules' first, at their creation) are left out:
    # measure() keeps them apart.
    every = [lag for hour, lags in day.lags.items() if 0 <= hour < day.hours for lag in lags]
    fired = [ms for hour, values in day.firing.items() if 0 <= hour < day.hours for ms in values]
    if every:
        lines.append(
            f"| day | {_spread(every)} | {_spread(fired)} | {len(every):,} |"
            f" {max(s.pending for s in day.samples):,} / {day.samples[-1].pending:,} |"
            f" {day.samples[-1].enqueued:,} | {day.samples[-1].succeeded:,} |"
        )
    if day.first_lags:
        lines.append(
            f"the schedules' first runs, at their definition (left out above):"
            f" {len(day.first_lags):,}; lag p50 / p99 / max {_spread(day.first_lags)} ms,"
            f" of which firing {_spread(day.first_firing)} ms"
        )
    lines.append(f"schedule runs enqueued before the end and never claimed: {day.unclaimed:,}")
    return "\n".join(lines)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.day", description=__doc__.split("\n")[0])
    parser.add_argument("--speed", type=float, default=100.0, help="compression (100)")
    parser.add_argument("--hours", type=int, default=24, help="simulated hours (24)")
    parser.add_argument("--per-day", type=int, default=10_000_000, help="steady jobs a day")
    parser.add_argument("--schedules", type=int, default=2_000, help="hourly schedules (2,000)")
    parser.add_argument(
        "--jitter-minutes", type=float, default=5.0, help="simulated minutes of jitter (5)"
    )
    parser.add_argument("--processes", type=int, default=2, help="worker processes (2)")
    parser.add_argument(
        "--schedule-priority",
        type=int,
        metavar="N",
        help="the schedules' jobs' priority (default: the kind's, 0, as the steady jobs')",
    )
    parser.add_argument("--quick", action="store_true", help="1 hour, 100,000 a day, 100")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.hours, args.per_day, args.schedules = 1, 100_000, 100
    if args.speed <= 0 or args.hours <= 0 or args.per_day < 0 or args.schedules <= 0:
        parser.error("--speed, --hours and --schedules must be positive, --per-day not negative")
    if args.schedule_priority is not None and not (
        MIN_PRIORITY <= args.schedule_priority <= MAX_PRIORITY
    ):
        parser.error(f"--schedule-priority must be between {MIN_PRIORITY} and {MAX_PRIORITY}")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    cluster = Cluster.start()
    try:
        day = asyncio.run(measure(args, cluster))
    finally:
        cluster.stop()
    print(report(day))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "speed": day.speed,
                    "hours": day.hours,
                    "rate": day.rate,
                    "load": day.load,
                    "schedule_priority": day.schedule_priority,
                    "samples": [vars(s) for s in day.samples],
                    "lags_ms": {str(h): v for h, v in day.lags.items()},
                    "firing_ms": {str(h): v for h, v in day.firing.items()},
                    "first_lags_ms": day.first_lags,
                    "first_firing_ms": day.first_firing,
                    "unclaimed": day.unclaimed,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
