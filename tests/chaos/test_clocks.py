"""T14-T16: only the database's clock decides. Worker processes run under libfaketime offsets
(-120 s, +120 s, +120 s at rate x1.5) against an unskewed PostgreSQL; one worker at a time has
its wall clock bumped by +-2^k ms or strobed (T15); DB time itself jumps through the injected
``now`` on every backend.

Pass (workers): no handler starts before its job's run_at in DB time (the handlers' start
instants are taken from CLOCK_MONOTONIC, which libfaketime leaves real, and mapped to the real
epoch), a skewed worker killed mid-run is rescued as fast as any, and the checker is clean.
Pass (bumps and strobes): the checker is clean, every job succeeds, and none needs a second
attempt (no worker died, so a control run rescues nothing: neither may a run with jumping
clocks).
Pass (DB jumps): +2x lease expires every lease at once (all rescued, every stale completion
fenced, every job then finishes); -1 h fires nothing early (no claim, no retry, no schedule
slot) and heartbeats keep leases relative to the DB's current time.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rota.domain.errors import LeaseLost
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.domain.schedule import Rule, ScheduleSpec
from rota.store import Store, open_store
from rota.testing import FakeClock
from tests.chaos.conftest import CHAOS_OPTIONS, MARGIN_S
from tests.support import faketime
from tests.support.chaosfleet import ChaosFleet, all_terminal
from tests.support.history import HISTORY_CLOCK_ENV, START, Report, check_store, read_events
from tests.support.nemesis import Fault, Nemesis
from tests.support.processes import WorkerProcess, eventually

SKEWS = {"behind": "-120", "ahead": "+120", "fast": "+120 x1.5"}
LIVENESS_S = CHAOS_OPTIONS.lease_s + CHAOS_OPTIONS.rescue_s + 5.0


@pytest.fixture
def database_url(pg_url: str) -> str:
    return pg_url


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(120)
async def test_skewed_worker_clocks_never_start_a_job_early_or_change_rescue(
    fleet: ChaosFleet, store: Store, tmp_path: Path
) -> None:
    if faketime.library() is None:
        pytest.skip(faketime.INSTALL_HINT)
    workers = {}
    for name, spec in SKEWS.items():
        fake = faketime.FakeTime(tmp_path / f"{name}.rc", spec)
        workers[name] = fleet.start(name, env=fake.env())
    for worker in workers.values():
        await fleet.wait_ready(worker)
    now = await store.now()
    specs = [
        JobSpec(
            kind="work",
            payload={"s": 0.3 if index % 2 else 0.05},
            run_at=now + timedelta(seconds=1 + (index % 20) * 0.2),
            max_attempts=10,
        )
        for index in range(300)
    ]
    ids = [r.job.id for r in await store.enqueue(specs)]
    run_at = {job_id: spec.run_at for job_id, spec in zip(ids, specs, strict=True)}

    # Let every skewed worker run jobs, then kill the one with the fastest clock (on a busy
    # machine one may start late: wait for each to have run some, not for a count alone).
    def progress() -> bool:
        events = read_events(fleet.history)
        return len(events) >= 100 and {e.worker for e in events} >= set(SKEWS)

    await eventually(progress, what="progress on every skewed worker")
    victim = workers["fast"]
    victim.kill()
    killed = time.monotonic()
    await victim.wait_exit()
    took = await all_terminal(store, len(ids), within_s=60)
    print(f"all terminal {took:.1f}s after killing the x1.5 worker")
    assert time.monotonic() - killed <= LIVENESS_S + MARGIN_S + 10  # + the backlog itself

    offset_ns = time.time_ns() - time.monotonic_ns()  # real epoch = monotonic + offset
    early = [
        (e.job, e.worker, (e.mono_ns + offset_ns) / 1e9 - run_at[e.job].timestamp())
        for e in read_events(fleet.history)
        if e.event == START and (e.mono_ns + offset_ns) / 1e9 < run_at[e.job].timestamp() - 0.005
    ]
    assert early == [], f"started before run_at (DB time): {early[:10]}"
    report = await check_store(
        store, fleet.history, enqueued=ids, expected=dict.fromkeys(ids, JobState.SUCCEEDED)
    )
    report.assert_clean()
    assert {e.worker for e in read_events(fleet.history)} >= set(SKEWS)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(120)
async def test_bumped_and_strobed_worker_clocks_change_nothing(
    fleet: ChaosFleet, store: Store, tmp_path: Path, seed: int
) -> None:
    if faketime.library() is None:
        pytest.skip(faketime.INSTALL_HINT)
    clocks = [faketime.FakeTime(tmp_path / f"w{index}.rc", "+0") for index in range(3)]
    workers = [fleet.start(f"w{index}", env=clock.env()) for index, clock in enumerate(clocks)]
    for worker in workers:
        await fleet.wait_ready(worker)
    nemesis = Nemesis(seed, ["bump", "strobe"], every_s=1.5, count=10, targets=len(clocks))
    rng = nemesis.rng("clocks")

    async def act(fault: Fault) -> None:
        clock = clocks[fault.target]  # one worker at a time
        step_s = 2 ** rng.randint(2, 18) / 1000  # 4 ms to 262 s
        if fault.kind == "bump":
            clock.set(f"{rng.choice('+-')}{step_s:.3f}")
            await asyncio.sleep(1.0)  # the fault's length
        else:
            until = time.monotonic() + rng.uniform(0.5, 2.0)
            for flip in range(1000):  # bounded in count and time
                if time.monotonic() >= until:
                    break
                clock.set(f"{'+-'[flip % 2]}{step_s:.3f}")
                await asyncio.sleep(rng.uniform(0.001, 0.2))
        clock.set("+0")

    ids: list[int] = []
    faults_done = asyncio.Event()

    async def feed() -> None:  # work arrives all through the faults
        for _ in range(120):  # bounded: at most 60 s
            specs = [
                JobSpec(kind="work", payload={"s": round(rng.uniform(0.05, 0.3), 3)})
                for _ in range(20)
            ]
            ids.extend(r.job.id for r in await store.enqueue(specs))
            if faults_done.is_set():
                return
            await asyncio.sleep(0.5)

    feeding = asyncio.create_task(feed())
    try:
        await nemesis.run(act, limit_s=30)
    finally:
        faults_done.set()
        await feeding
    print(nemesis.describe())
    await all_terminal(store, len(ids), within_s=60)
    report = await check_store(
        store, fleet.history, enqueued=ids, expected=dict.fromkeys(ids, JobState.SUCCEEDED)
    )
    report.assert_clean()
    retried = [job_id for job_id in ids if (await store.get(job_id)).attempt != 1]
    assert retried == [], f"jobs that needed another attempt: {retried[:10]}"
    assert {e.worker for e in read_events(fleet.history)} == {w.name for w in workers}


async def run_under_rate(
    fleet: ChaosFleet, store: Store, tmp_path: Path, spec: str, job_s: float
) -> tuple[Report, WorkerProcess]:
    """A worker whose every clock (monotonic too) runs at libfaketime ``spec`` takes eight
    ``long`` jobs of ``job_s`` of its seconds; then an unskewed worker joins for the rest."""
    if faketime.library() is None:
        pytest.skip(faketime.INSTALL_HINT)
    uptime = {HISTORY_CLOCK_ENV: "uptime"}  # CLOCK_MONOTONIC is faked in the skewed worker
    fake = faketime.FakeTime(tmp_path / "skewed.rc", spec, fake_monotonic=True)
    skewed = fleet.start("skewed", env={**fake.env(), **uptime})
    await fleet.wait_ready(skewed, within_s=60)
    ids = [
        r.job.id
        for r in await store.enqueue(
            [JobSpec(kind="long", payload={"s": job_s}) for _ in range(24)]
        )
    ]

    async def skewed_is_busy() -> bool:
        held = {info.name: info.running for info in await store.list_workers()}
        return held.get("skewed", 0) >= CHAOS_OPTIONS.concurrency

    await eventually(skewed_is_busy, within_s=30, what="the skewed worker to take 8 jobs")
    await fleet.start_ready("steady", env=uptime)
    await all_terminal(store, len(ids), within_s=120)
    report = await check_store(
        store, fleet.history, enqueued=ids, expected=dict.fromkeys(ids, JobState.SUCCEEDED)
    )
    return report, skewed


def measured_speed(worker: WorkerProcess) -> float:
    """The speed of its clock against the store's that the worker logged (once)."""
    [speed] = re.findall(r"clock runs at ([0-9.]+)x the store's", worker.stderr())
    return float(speed)


def overlapping(report: Report) -> list[tuple[int, int, int]]:
    """(job, token, token) of every two executions of a job that overlapped at all."""
    found = []
    for job_id, runs in report.runs.items():
        for one, other in itertools.combinations(runs, 2):
            one_end, other_end = one.end_ns or 2**63, other.end_ns or 2**63
            if one.start_ns < other_end and other.start_ns < one_end:
                found.append((job_id, one.token, other.token))
    return found


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(240)
async def test_a_worker_whose_clock_runs_slow_heartbeats_and_self_fences_on_store_time(
    fleet: ChaosFleet, store: Store, tmp_path: Path
) -> None:
    """libfaketime x0.2: each of the worker's seconds is five of the store's. Trusting its own
    clock it would heartbeat every 5 s on a 3 s lease and run on past it."""
    report, skewed = await run_under_rate(fleet, store, tmp_path, "+0 x0.2", job_s=1.0)
    report.assert_clean()
    assert overlapping(report) == [], "an execution overlapped another, under a lease or after"
    assert report.reexecuted() == [], "a lease ran out under a running handler"
    assert any(run.worker == "skewed" for runs in report.runs.values() for run in runs)
    assert measured_speed(skewed) == pytest.approx(0.2, rel=0.05)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(240)
async def test_a_worker_whose_clock_runs_fast_measures_it_and_keeps_its_leases(
    fleet: ChaosFleet, store: Store, tmp_path: Path
) -> None:
    """libfaketime x5: each of the worker's seconds is a fifth of the store's; trusting its
    own clock it would give up its leases five times too early."""
    report, skewed = await run_under_rate(fleet, store, tmp_path, "+0 x5", job_s=20.0)
    report.assert_clean()
    assert report.reexecuted() == [], "a lease was given up under a running handler"
    assert measured_speed(skewed) == pytest.approx(5, rel=0.05)


T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=10)


@pytest.fixture
async def timed_store(store_url: str) -> AsyncIterator[Store]:
    store = open_store(store_url, clock=FakeClock(T0))
    await store.migrate()
    yield store
    await store.close()


async def test_db_time_jumping_forward_expires_every_lease_and_fences_every_stale_write(
    timed_store: Store,
) -> None:
    store = timed_store
    await store.enqueue([JobSpec(kind="k", payload={"n": n}) for n in range(50)], now=T0)
    held = await store.claim("A", queues=["default"], limit=50, lease=LEASE, now=T0)
    jump = T0 + 2 * LEASE
    rescued = await store.rescue(now=jump)
    assert sorted(rescued.requeued) == sorted(job.id for job in held) and not rescued.dead
    for job in held:
        with pytest.raises(LeaseLost):
            await store.complete(job.lease, now=jump)
    assert (await store.heartbeat([j.lease for j in held], lease=LEASE, now=jump)).lost == [
        j.lease for j in held
    ]
    again = await store.claim("B", queues=["default"], limit=50, lease=LEASE, now=jump)
    assert len(again) == 50 and {j.attempt for j in again} == {2}
    assert min(j.lease_token or 0 for j in again) > max(j.lease_token or 0 for j in held)
    assert await store.complete_many([j.lease for j in again], now=jump) == []
    counts = await store.counts(now=jump)
    assert counts.total(JobState.SUCCEEDED) == 50


async def test_db_time_stepping_back_an_hour_fires_nothing_early(timed_store: Store) -> None:
    store = timed_store
    back = T0 - timedelta(hours=1)
    [due_later] = await store.enqueue([JobSpec(kind="k", run_at=T0 + LEASE)], now=T0)
    [retried] = await store.enqueue([JobSpec(kind="k", queue="retry")], now=T0)
    [claimed] = await store.claim("A", queues=["retry"], limit=1, lease=LEASE, now=T0)
    await store.fail(claimed.lease, error="boom", retry_in=LEASE, now=T0)
    [held_spec] = await store.enqueue([JobSpec(kind="k", queue="held")], now=T0)
    [held] = await store.claim("A", queues=["held"], limit=1, lease=LEASE, now=T0)
    every = ScheduleSpec(name="tick", kind="k", rule=Rule.every(LEASE, anchor=T0))
    await store.create_schedule(every, now=T0)
    first = await store.fire_due(now=T0 + LEASE)

    for queue in ("default", "retry"):
        assert await store.claim("B", queues=[queue], limit=5, lease=LEASE, now=back) == []
    assert await store.fire_due(now=back) == []
    assert await store.fire_due(now=T0 + LEASE) == []  # the slot already fired stays fired
    assert await store.rescue(now=back) == type(await store.rescue(now=back))()
    # A heartbeat keeps the lease `LEASE` ahead of the DB's clock as it now reads.
    assert (await store.heartbeat([held.lease], lease=LEASE, now=back)).lost == []
    assert (await store.get(held.id)).lease_until == back + LEASE
    # Forward again: everything fires on time, once.
    later = T0 + LEASE
    got = await store.claim("B", queues=["default", "retry"], limit=5, lease=LEASE, now=later)
    ordinary = sorted(j.id for j in got if j.schedule is None)
    assert ordinary == sorted([due_later.job.id, retried.job.id])
    assert len(first) == 1 and held_spec.job.id == held.id
