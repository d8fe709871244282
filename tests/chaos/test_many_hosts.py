"""Many hosts on one PostgreSQL: three worker hosts and an enqueuing host, each a network
namespace of its own, joined to this machine by a veth pair (traffic never leaves it).

A throwaway PostgreSQL cluster listens on loopback and on the host end of every veth, and
trusts only the namespaces' own addresses. Each worker host runs two ``rota worker`` processes
(chaosapp: each ``work`` job writes its effect to the fenced downstream store, and every worker
runs the schedule firer of ``chaos-tick``, set to fire every slot); the enqueuing host is a
process enqueuing ``ROTA_SCALE_JOBS`` jobs through the library (10,000 by default, which keeps
the test within a few minutes on a busy 2-core CI machine; ``ROTA_SCALE_JOBS=20000`` or more for
a bigger run: every wait scales with it). While they drain, one worker host is partitioned (its
link cut, packets dropped, for twice the lease) and healed, then every worker of another host is
SIGKILLed and restarted.

Pass: the history checker finds nothing lost or unexpected, no overlap under a live lease, no
stale accept and one job per schedule slot; the fenced store never accepted a lower token; the
schedule has a job for every slot from before the partition to after the kill, no gap and no
twin, though its firers ran on every host; every host really connected from its namespace's
address; the faults hit work in flight (jobs the cut and the killed hosts held ran again
elsewhere); and every worker stops gracefully at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path

import psycopg
import pytest

from rota.domain.errors import StoreUnavailable
from rota.domain.job_state import JobState
from rota.store import JobFilter, Store, open_store
from tests.chaos.conftest import CHAOS_OPTIONS, MARGIN_S
from tests.support import netns
from tests.support.chaosfleet import (
    SCHEDULE,
    SCHEDULE_ALL_ENV,
    SCHEDULE_ENV,
    ChaosFleet,
    all_terminal,
    fleet_on,
)
from tests.support.effects import EFFECTS_ENV
from tests.support.enqueuer import acknowledged
from tests.support.history import START, Report, check_snapshot, read_events, snapshot
from tests.support.migrate import migrate_url
from tests.support.postgres import Cluster, pg_bin, with_database
from tests.support.processes import REPO_ROOT, WorkerProcess, eventually

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

HOSTS = 3
WORKERS_PER_HOST = 2
JOBS = int(os.environ.get("ROTA_SCALE_JOBS", "10000"))
BATCH = 500
CONCURRENCY = 16
#: Connections the final read of every job's attempts uses at once.
SNAPSHOT_CONNECTIONS = 16
SCHEDULE_EVERY_S = 1
LEASE_S = CHAOS_OPTIONS.lease_s
LIVENESS_S = CHAOS_OPTIONS.lease_s + CHAOS_OPTIONS.rescue_s + 5.0
DATABASE = "rota_hosts"
#: Bound on every wait for the drain to reach a point: the whole run, scaled by its size.
DRAIN_S = 120 + JOBS / 50


@dataclass
class Host:
    """A namespace and the worker processes running in it."""

    name: str
    ns: netns.Netns
    url: str
    workers: list[WorkerProcess] = field(default_factory=list)

    @property
    def names(self) -> set[str]:
        return {worker.name for worker in self.workers}


@pytest.fixture
def namespaces() -> Iterator[list[netns.Netns]]:
    """One namespace per worker host and one for the enqueuing host."""
    reason = netns.unavailable()
    if reason:
        pytest.skip(f"the many-hosts test needs network namespaces: {reason}")
    made: list[netns.Netns] = []
    try:
        for _ in range(HOSTS + 1):
            made.append(netns.Netns.create())
        yield made
    finally:
        for ns in made:
            ns.destroy()


@pytest.fixture
def hosts_cluster(namespaces: list[netns.Netns]) -> Iterator[Cluster]:
    """A throwaway cluster listening on loopback and every veth's host end, trusting only the
    namespaces' addresses."""
    if pg_bin("initdb") is None or pg_bin("pg_ctl") is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    cluster = Cluster.create(
        listen=["127.0.0.1", *(ns.host_ip for ns in namespaces)],
        trusted=[ns.cidr for ns in namespaces],
    )
    try:
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
        migrate_url(with_database(cluster.url, DATABASE))
        yield cluster
    finally:
        cluster.destroy()


def url_via(ns: netns.Netns, cluster: Cluster) -> str:
    """The database as a process inside ``ns`` reaches it: the host end of its veth."""
    return f"postgresql://postgres@{ns.host_ip}:{cluster.port}/{DATABASE}"


@pytest.fixture
async def hosts_store(hosts_cluster: Cluster) -> AsyncIterator[Store]:
    store = open_store(
        with_database(hosts_cluster.url, DATABASE) + f"?pool_max={SNAPSHOT_CONNECTIONS}"
    )
    yield store
    await store.close()


@pytest.fixture
def hosts_fleet(hosts_cluster: Cluster, hosts_store: Store, tmp_path: Path) -> Iterator[ChaosFleet]:
    local = with_database(hosts_cluster.url, DATABASE)
    with fleet_on(local, hosts_store, tmp_path, CHAOS_OPTIONS) as fleet:
        yield fleet


class Enqueuer:
    """The enqueuing host's process (``tests.support.enqueuer``), known by its Popen."""

    def __init__(self, ns: netns.Netns, url: str, directory: Path, seed: int) -> None:
        self.ids_file = directory / "enqueued.ids"
        self.log = directory / "enqueuer.stderr"
        env = {
            **os.environ,
            "ROTA_DATABASE_URL": url,
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)]),
        }
        command = [sys.executable, "-m", "tests.support.enqueuer"]
        args = [str(JOBS), str(BATCH), str(self.ids_file), str(seed)]
        with self.log.open("wb") as stderr:
            self.popen = subprocess.Popen(
                [*ns.prefix(), *command, *args],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )

    async def finished(self, within_s: float) -> list[int]:
        await eventually(
            lambda: self.popen.poll() is not None, within_s=within_s, what="the enqueuer to exit"
        )
        assert self.popen.returncode == 0, f"enqueuer failed:\n{self.log.read_text()[-3000:]}"
        return acknowledged(str(self.ids_file))

    def reap(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=10)


async def client_addresses(url: str) -> set[str]:
    sql = (
        "SELECT DISTINCT host(client_addr) FROM pg_stat_activity "
        "WHERE datname = current_database() AND client_addr IS NOT NULL"
    )
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        return {row[0] for row in await (await conn.execute(sql)).fetchall()}


async def done(store: Store, fraction: float) -> None:
    """Wait until ``fraction`` of the jobs have succeeded."""

    async def enough() -> bool:
        try:
            return (await store.counts()).total(JobState.SUCCEEDED) >= fraction * JOBS
        except StoreUnavailable:  # the test's own connection may be reconnecting
            return False

    await eventually(enough, within_s=DRAIN_S, every_s=0.2, what=f"{fraction:.0%} of jobs done")


def taken_over(report: Report, names: set[str]) -> list[int]:
    """Jobs that an execution on one of ``names`` ran first and another worker ran later."""
    return [
        job
        for job, runs in report.runs.items()
        if any(run.worker in names for run in runs[:-1]) and runs[-1].worker not in names
    ]


@pytest.mark.timeout(int(DRAIN_S * 3 + 300))
async def test_hosts_in_namespaces_survive_a_partition_and_a_killed_host(
    namespaces: list[netns.Netns],
    hosts_cluster: Cluster,
    hosts_store: Store,
    hosts_fleet: ChaosFleet,
    tmp_path: Path,
    seed: int,
) -> None:
    store, fleet = hosts_store, hosts_fleet
    local = with_database(hosts_cluster.url, DATABASE)
    *worker_spaces, enqueuing_space = namespaces
    hosts = [
        Host(f"h{index}", ns, url_via(ns, hosts_cluster)) for index, ns in enumerate(worker_spaces)
    ]
    every_slot = {SCHEDULE_ENV: str(SCHEDULE_EVERY_S), SCHEDULE_ALL_ENV: "1"}

    def start(host: Host, name: str) -> WorkerProcess:
        worker = fleet.start(
            name,
            database_url=host.url,
            prefix=host.ns.prefix(),
            env={EFFECTS_ENV: host.url, **every_slot},
            concurrency=CONCURRENCY,
        )
        host.workers.append(worker)
        return worker

    for host in hosts:
        for index in range(WORKERS_PER_HOST):
            start(host, f"{host.name}-w{index}")
    for worker in list(fleet.workers):
        await fleet.wait_ready(worker, within_s=60)

    seen: set[str] = set()
    sampling = asyncio.Event()

    async def sample() -> None:
        while not sampling.is_set():
            with contextlib.suppress(psycopg.OperationalError):  # a busy moment: next time
                seen.update(await client_addresses(local))
            await asyncio.sleep(0.5)

    sampler = asyncio.create_task(sample())
    enqueuer = Enqueuer(enqueuing_space, url_via(enqueuing_space, hosts_cluster), tmp_path, seed)
    started = time.monotonic()
    try:
        # 1. A partition: every packet between host 0 and the database dropped for 2x lease.
        cut = hosts[0]
        await done(store, 0.15)
        cut_db_at = await store.now()
        cut.ns.cut()
        await asyncio.sleep(2 * LEASE_S)  # the fault's shape: the partition lasts 2x the lease
        cut.ns.heal()
        healed_ns = time.monotonic_ns()

        def resumed() -> bool:
            return any(
                e.event == START and e.worker in cut.names and e.mono_ns > healed_ns
                for e in read_events(fleet.history)
            )

        await eventually(resumed, within_s=60, what="the healed host to take work again")
        assert all(worker.alive for worker in cut.workers), "a partitioned worker exited"

        # 2. A crash: every worker of host 1 SIGKILLed, then started again.
        crashed = hosts[1]
        await done(store, 0.45)
        killed = set(crashed.names)
        victims = list(crashed.workers)
        for worker in victims:
            worker.kill()
        for worker in victims:
            assert await worker.wait_exit() == -signal.SIGKILL
        killed_db_at = await store.now()
        await asyncio.sleep(0.5)  # the fault's shape: the host is down for half a second
        crashed.workers.clear()
        for index in range(WORKERS_PER_HOST):
            await fleet.wait_ready(start(crashed, f"{crashed.name}-w{index}-r1"), within_s=60)

        ids = await enqueuer.finished(within_s=DRAIN_S)
        assert len(ids) == JOBS, f"{len(ids)} of {JOBS} enqueues acknowledged"

        async def fired_after_the_kill() -> bool:
            newest = await store.list_jobs(JobFilter(schedule=SCHEDULE), limit=1)
            slot = newest.jobs[0].slot_at if newest.jobs else None
            return slot is not None and slot > killed_db_at

        await eventually(fired_after_the_kill, within_s=60, what="a slot after the kill fired")
    finally:
        sampling.set()
        await sampler
        enqueuer.reap()

    # The end, in order, so the checker sees one picture: no slot fires once the pause is
    # stored, no job runs once the workers are gone; then the store is read once.
    async def paused() -> bool:
        try:
            return (await store.pause_schedule(SCHEDULE)).paused
        except StoreUnavailable:
            return False

    await eventually(paused, within_s=60, every_s=0.5, what="the schedule paused")
    await all_terminal(store, len(ids), within_s=DRAIN_S + LIVENESS_S + MARGIN_S)
    drained_s = time.monotonic() - started
    codes = await fleet.stop()
    assert set(codes.values()) == {0}, f"a worker did not stop gracefully: exit codes {codes}"

    reading = time.monotonic()
    final = await snapshot(store, concurrency=SNAPSHOT_CONNECTIONS)
    report = check_snapshot(
        final, fleet.history, enqueued=ids, expected=dict.fromkeys(ids, JobState.SUCCEEDED)
    )
    slots = sorted(
        job.slot_at
        for job in final.jobs.values()
        if job.schedule == SCHEDULE and job.slot_at is not None
    )
    print(
        f"{len(ids)} jobs enqueued from {enqueuing_space.ns_ip}, {len(slots)} fired by "
        f"{SCHEDULE}, all terminal after {drained_s:.0f}s; {len(report.reexecuted())} ran "
        f"more than once; store read and checked in {time.monotonic() - reading:.0f}s; "
        f"connections seen from {sorted(seen)}"
    )
    report.assert_clean()
    fleet.check_fenced_effects(
        {
            job_id: job.lease_token or 0
            for job_id, job in final.jobs.items()
            if job.state is JobState.SUCCEEDED
        }
    )

    # Every host really talked to the database from its own namespace.
    assert {ns.ns_ip for ns in namespaces} <= seen, f"connections came from {sorted(seen)}"
    # One job per slot and no slot missing, from before the partition to after the kill.
    assert slots, "the schedule never fired"
    gaps = [(a, b) for a, b in pairwise(slots) if b - a != timedelta(seconds=SCHEDULE_EVERY_S)]
    assert not gaps, f"slots missing or doubled between: {gaps[:5]}"
    assert slots[0] < cut_db_at and slots[-1] > killed_db_at, _span(slots, cut_db_at, killed_db_at)
    # The faults hit work in flight: jobs the cut host and the killed host held ran elsewhere.
    from_cut = taken_over(report, cut.names)
    from_killed = taken_over(report, killed)
    print(f"taken over: {len(from_cut)} from the cut host, {len(from_killed)} from the killed one")
    assert from_cut, "no job the partitioned host held was taken over: the cut hit no work"
    assert from_killed, "no job the killed host held was taken over: the kill hit no work"


def _span(slots: list[datetime], cut_at: datetime, killed_at: datetime) -> str:
    return (
        f"slots {slots[0]:%T}..{slots[-1]:%T} do not span the faults "
        f"(cut {cut_at:%T}, kill {killed_at:%T})"
    )
