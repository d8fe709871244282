"""T4 / T31: SIGKILL chaos with the history checker, on PostgreSQL and on SQLite.

Four worker processes (eight jobs at once each) run a few thousand jobs that sleep U(0, 0.2 s),
a tenth failing their first attempt, with a 3 s lease, 1 s heartbeats and 1 s rescues. The
nemesis SIGKILLs a random worker about every 2 s and restarts it 0.5 s later. Handlers write
their effect to a fenced downstream store with ``ctx.fencing_token``. Pass: nothing lost or
unexpected, no overlap without an expired lease, one accepted completion from the latest claim,
tokens increasing, attempts within the limit, the fenced store never accepted a lower token,
nothing running at the end, and every job terminal within lease + rescue + backoff after the
last kill. On SQLite, ``PRAGMA integrity_check`` is ok after every kill. On PostgreSQL it also
runs through PgBouncer in transaction pooling mode (T24: workers and the test's enqueues go
through the pooler, LISTEN goes direct), where afterwards no advisory lock is left.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time

import pytest

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import Store
from tests.chaos.conftest import CHAOS_OPTIONS, MARGIN_S, POOLED_BACKENDS
from tests.support.chaosfleet import ChaosFleet, MostSucceeded, all_terminal, sqlite_integrity
from tests.support.history import END_ERR, check_store
from tests.support.nemesis import Fault, Nemesis
from tests.support.pgbouncer import advisory_locks, unpooled

pytestmark = [pytest.mark.slow]

#: lease + rescue interval + backoff cap (TESTPLAN T4: 3 + 1 + 5 s).
LIVENESS_S = CHAOS_OPTIONS.lease_s + CHAOS_OPTIONS.rescue_s + 5.0
JOBS = {"sqlite": 3000, "postgres": 6000}


def workload(count: int, rng: random.Random) -> list[JobSpec]:
    return [
        JobSpec(
            kind="work",
            payload={"s": round(rng.uniform(0.0, 0.2), 3), "fail": rng.random() < 0.1},
            max_attempts=10,  # a first failure and several kills may hit one job
        )
        for _ in range(count)
    ]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("database_url", POOLED_BACKENDS, indirect=True)
async def test_sigkilled_workers_lose_nothing_and_fencing_holds(
    fleet: ChaosFleet, store: Store, database_url: str, seed: int
) -> None:
    backend = "sqlite" if database_url.startswith("sqlite") else "postgres"
    for index in range(4):
        fleet.start(f"w{index}")
    for worker in list(fleet.workers):
        await fleet.wait_ready(worker)
    live = {index: fleet.workers[index] for index in range(4)}
    nemesis = Nemesis(seed=seed, kinds=["kill"], every_s=2.0, count=60, targets=4)
    rng = nemesis.rng("workload")
    specs = workload(JOBS[backend], rng)
    ids = [result.job.id for result in await store.enqueue(specs)]
    killed_names: set[str] = set()
    restarts = 0

    async def act(fault: Fault) -> None:
        nonlocal restarts
        victim = live[fault.target]
        victim.kill()
        killed_names.add(victim.name)
        assert await victim.wait_exit() == -signal.SIGKILL
        if backend == "sqlite":
            assert sqlite_integrity(database_url.removeprefix("sqlite:///")) == "ok"
        await asyncio.sleep(0.5)  # the fault's shape: the process is down for half a second
        restarts += 1
        live[fault.target] = fleet.start(f"w{fault.target}-r{restarts}")

    async with MostSucceeded(store, len(ids)) as most:
        await nemesis.run(act, stop=most.reached, limit_s=150)
    last_kill = time.monotonic()
    print(nemesis.describe())
    assert len(nemesis.log) >= 4, "too few kills to prove anything"

    took = await all_terminal(store, len(ids), within_s=LIVENESS_S + MARGIN_S + 30)
    print(f"{len(nemesis.log)} kills; all terminal {took:.1f}s after the last one")
    assert time.monotonic() - last_kill <= LIVENESS_S + MARGIN_S, "P-live: too slow to heal"

    report = await check_store(
        store, fleet.history, enqueued=ids, expected=dict.fromkeys(ids, JobState.SUCCEEDED)
    )
    report.assert_clean()
    counts = await store.counts()
    assert counts.total(JobState.RUNNING) == counts.total(JobState.PENDING) == 0
    # Jobs ran more than once only because a kill interrupted them or attempt 1 failed.
    failing = {i for i, spec in zip(ids, specs, strict=True) if spec.payload["fail"]}
    for job_id in report.reexecuted():
        runs = report.executed(job_id)
        interrupted = [r for r in runs[:-1] if r.worker in killed_names and r.end != END_ERR]
        assert job_id in failing or interrupted, f"job {job_id} ran twice without a fault"
    jobs = {job.id: job for job in [await store.get(i) for i in ids]}
    rejected = fleet.check_fenced_effects(
        {job_id: job.lease_token or 0 for job_id, job in jobs.items()}
    )
    print(f"fenced store: {rejected} stale writes rejected")
    if unpooled(database_url) != database_url:
        # Nothing is claiming now (all terminal): no advisory lock may be held.
        assert advisory_locks(unpooled(database_url)) == 0
    if backend == "sqlite":
        assert sqlite_integrity(database_url.removeprefix("sqlite:///")) == "ok"
