"""T46: the soak. Mixed load on a throwaway PostgreSQL cluster for ROTA_SOAK_SECONDS (300 s
by default under CI=true; skipped otherwise), with nine faults spread over it (every 30 s in
CI; at most one a minute in a longer soak) rotating SIGKILL, SIGSTOP, PostgreSQL restart,
partition (the worker's proxy blackholed), listener kill and a clock bump (the worker's
libfaketime file), each on a worker drawn from the seed. Each fault heals well within its 30 s
(the longest lasts two leases, 6 s, and liveness takes lease + rescue + 5 s after it), so the
faults do not overlap. Load: 10% of
jobs fail once, 1% are poison, 1% run longer than the lease on heartbeats, and a schedule fires
every 10 s. Pass: every checker property (the schedule's jobs included, one per slot), the
fenced store, RSS growth of each never-killed worker under 10% after warm-up, each worker's
connections within its pool bound (counted at its proxy), every job terminal within lease +
rescue + backoff after the last fault, and a graceful stop of every worker at the end.

The end is taken in order, so the checker sees one consistent picture: the schedule is paused,
every job becomes terminal, the workers stop, and only then is the store read, once.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from rota.domain.errors import StoreUnavailable
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import Store
from tests.chaos.conftest import CHAOS_OPTIONS, IN_CI, MARGIN_S, proxied, through
from tests.support import faketime
from tests.support.chaosfleet import SCHEDULE, SCHEDULE_ENV, ChaosFleet, all_terminal, fleet_on
from tests.support.history import check_snapshot, snapshot
from tests.support.nemesis import Fault, Nemesis
from tests.support.postgres import Cluster
from tests.support.processes import WorkerProcess, eventually
from tests.support.proxy import BLACKHOLE, PASS, ChaosProxy

pytestmark = [pytest.mark.soak, pytest.mark.postgres, pytest.mark.slow]

SOAK_ENV = os.environ.get("ROTA_SOAK_SECONDS")
SECONDS = float(SOAK_ENV) if SOAK_ENV else (300.0 if IN_CI else 0.0)
#: Faults planned over the soak, one per SECONDS / FAULT_COUNT: nine fall inside it (the
#: tenth at its very end is left out), every type of FAULTS at least once.
FAULT_COUNT = 10
FAULTS = ["kill", "stop", "pg_restart", "partition", "listener_kill", "clock"]
LIVENESS_S = CHAOS_OPTIONS.lease_s + CHAOS_OPTIONS.rescue_s + 5.0
POOL_BOUND = 10 + 1  # pool_max + the LISTEN connection
WORKERS = 3
#: The schedule's period: the soak's "recurring every 10 s".
SCHEDULE_EVERY_S = 10


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@pytest.fixture
def soak_fleet(cluster_url: str, cluster_store: Store, tmp_path: Path) -> Iterator[ChaosFleet]:
    with fleet_on(cluster_url, cluster_store, tmp_path, CHAOS_OPTIONS) as fleet:
        yield fleet


async def pause_schedule(store: Store, name: str) -> None:
    """Stop the schedule firing (the test's connection may be reconnecting after a fault)."""

    async def paused() -> bool:
        try:
            return (await store.pause_schedule(name)).paused
        except StoreUnavailable:
            return False

    await eventually(paused, within_s=60, every_s=0.5, what=f"schedule {name} paused")


@pytest.mark.skipif(not SECONDS, reason="the soak runs under CI=true or with ROTA_SOAK_SECONDS")
@pytest.mark.timeout(int(SECONDS) + 300 if SECONDS else 60)
async def test_soak_mixed_load_under_rotating_faults(
    cluster: Cluster,
    cluster_url: str,
    cluster_store: Store,
    soak_fleet: ChaosFleet,
    proxies: list[ChaosProxy],
    tmp_path: Path,
    seed: int,
) -> None:
    if faketime.library() is None:
        pytest.skip(faketime.INSTALL_HINT)
    fleet, store = soak_fleet, cluster_store
    every_s = min(60.0, SECONDS / FAULT_COUNT)
    nemesis = Nemesis(
        seed, FAULTS, every_s=every_s, count=int(SECONDS / every_s), targets=WORKERS, rotate=True
    )
    schedule_env = {SCHEDULE_ENV: str(SCHEDULE_EVERY_S)}
    slots: dict[int, tuple[ChaosProxy, faketime.FakeTime, WorkerProcess]] = {}
    killed: set[str] = set()

    def start(index: int, name: str) -> WorkerProcess:
        proxy = proxied(cluster_url, proxies)
        clock = faketime.FakeTime(tmp_path / f"{name}.rc", "+0")
        worker = fleet.start(
            name, database_url=through(proxy, cluster_url), env={**clock.env(), **schedule_env}
        )
        slots[index] = (proxy, clock, worker)
        return worker

    originals = {f"w{index}" for index in range(WORKERS)}
    for index in range(WORKERS):
        start(index, f"w{index}")
    for _, _, worker in list(slots.values()):
        await fleet.wait_ready(worker, within_s=60)

    rng = nemesis.rng("load")
    acknowledged: list[int] = []
    #: Tags (payload "n") of jobs whose enqueue failed or timed out: each may or may not exist.
    ambiguous: set[int] = set()
    tags = itertools.count()
    stop_feeding = asyncio.Event()

    async def feed() -> None:
        while not stop_feeding.is_set():
            specs = []
            for _ in range(10):
                roll, tag = rng.random(), next(tags)
                if roll < 0.01:
                    specs.append(JobSpec(kind="poison", payload={"n": tag}, max_attempts=3))
                elif roll < 0.02:
                    payload = {"s": 1.5 * CHAOS_OPTIONS.lease_s, "n": tag}
                    specs.append(JobSpec(kind="long", payload=payload))
                else:
                    payload = {
                        "s": round(rng.uniform(0, 0.2), 3),
                        "fail": rng.random() < 0.1,
                        "n": tag,
                    }
                    specs.append(JobSpec(kind="work", payload=payload, max_attempts=10))
            try:
                results = await asyncio.wait_for(store.enqueue(specs), 15)
                acknowledged.extend(r.job.id for r in results)
            except (StoreUnavailable, TimeoutError):
                ambiguous.update(spec.payload["n"] for spec in specs)
            await asyncio.sleep(0.5)

    async def act(fault: Fault) -> None:
        index = fault.target % WORKERS
        proxy, clock, worker = slots[index]
        if fault.kind == "kill":
            worker.kill()
            killed.add(worker.name)
            await worker.wait_exit()
            start(index, f"{worker.name}-r{len(killed)}")
        elif fault.kind == "stop":
            worker.pause()
            await asyncio.sleep(2 * CHAOS_OPTIONS.lease_s)  # the fault's length
            worker.resume()
        elif fault.kind == "pg_restart":
            await asyncio.to_thread(cluster.restart, "fast")
        elif fault.kind == "partition":
            proxy.set(BLACKHOLE)
            await asyncio.sleep(2 * CHAOS_OPTIONS.lease_s)
            proxy.set(PASS)
        elif fault.kind == "listener_kill":
            async with await psycopg.AsyncConnection.connect(cluster_url, autocommit=True) as c:
                await c.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE query LIKE 'LISTEN %%' AND pid <> pg_backend_pid()"
                )
        else:
            clock.set("+300")
            await asyncio.sleep(5)
            clock.set("+0")

    feeding = asyncio.create_task(feed())
    started = time.monotonic()
    warm_rss: dict[str, int] = {}
    connections: list[int] = []
    over: list[str] = []  # the links of each sample over the bound, for a failure's log

    async def sample() -> None:
        while not stop_feeding.is_set():
            for proxy, _, worker in slots.values():
                if worker.alive:
                    # Sessions only. In a partition a worker's connections hang in their
                    # queries while it tries new ones, whose TLS request (libpq's first
                    # message) the blackhole never answers until connect_timeout; and
                    # psycopg interrupts a query a timeout cancelled with a CancelRequest on
                    # a connection of its own. Neither is a session on the server.
                    count = proxy.count(lambda link: link.session)
                    connections.append(count)
                    if count > POOL_BOUND:
                        links = proxy.describe_links()
                        over.append(f"{worker.name} at {time.monotonic() - started:.0f}s: {links}")
                warm = time.monotonic() - started > 0.2 * SECONDS
                # Only the first workers: a replacement sampled while still importing would
                # show growth that is just its start-up.
                original = worker.name in originals
                if worker.alive and worker.name not in killed and original and warm:
                    warm_rss.setdefault(worker.name, rss_kib(worker.pid))
            await asyncio.sleep(1)

    sampler = asyncio.create_task(sample())
    try:
        await nemesis.run(act, limit_s=SECONDS - every_s / 2)
        last_fault = time.monotonic()
        remaining = SECONDS - (last_fault - started)
        if remaining > 0:
            await asyncio.sleep(remaining)  # the soak's length
    finally:
        stop_feeding.set()
        await feeding
        await sampler
        print(nemesis.describe())

    # From here on nothing new may appear: no slot fires once the pause is stored, and no job
    # runs once the workers are gone; the store and the history are then read once.
    await pause_schedule(store, SCHEDULE)
    await all_terminal(store, 1, within_s=LIVENESS_S + MARGIN_S + 30)
    print(f"all terminal {time.monotonic() - last_fault:.0f}s after the last fault")
    for sample in over:
        print(f"over the bound: {sample}")
    assert max(connections) <= POOL_BOUND, f"connections per worker: max {max(connections)}"
    for name, before in warm_rss.items():
        # Only workers that lived through the whole soak: a killed one was replaced.
        worker = next((w for _, _, w in slots.values() if w.name == name), None)
        if worker is not None and worker.alive and name not in killed:
            after = rss_kib(worker.pid)
            print(f"{name}: RSS {before} -> {after} KiB")
            assert after <= before * 1.10, f"{name}: RSS grew {before} -> {after} KiB"
    codes = await fleet.stop()
    assert set(codes.values()) == {0}, f"a worker did not stop gracefully: exit codes {codes}"

    final = await snapshot(store)
    maybe = {
        job.id
        for job in final.jobs.values()
        if job.schedule is None and job.payload.get("n") in ambiguous
    }
    print(
        f"{len(final.jobs)} jobs: {len(acknowledged)} acknowledged, {len(maybe)} of "
        f"{len(ambiguous)} unacknowledged ones written, "
        f"{sum(job.schedule == SCHEDULE for job in final.jobs.values())} fired by {SCHEDULE}"
    )
    report = check_snapshot(final, fleet.history, enqueued=[*acknowledged, *maybe])
    report.assert_clean()
    fleet.check_fenced_effects(
        {
            j: job.lease_token or 0
            for j, job in final.jobs.items()
            if job.state is JobState.SUCCEEDED and job.kind == "work"  # only work writes effects
        }
    )
    poison = [job for job in final.jobs.values() if job.kind == "poison"]
    assert all(job.state is JobState.DEAD for job in poison)
