"""T48: SIGKILL chaos through durable jobs, with an external record, on PostgreSQL and SQLite.

Three worker processes (eight jobs at once each) run jobs of 5 to 20 steps. Every step sleeps
U(0, 100 ms), then records its execution (job, step, lease token) in an external record, on a
connection of its own outside rota's tables, before it returns and is checkpointed; step 2 of
each job also writes a row through ``ctx.transaction()`` in rota's own database. The nemesis
SIGKILLs a random worker about every 2 s (inside steps, between a step's record and its
checkpoint, anywhere) and restarts it 0.5 s later. Lease 3 s, heartbeats and rescues 1 s.

Pass (C11, C12): every job succeeded, with the result its steps sum to; every step has a
checkpoint, and no execution of a step ran under a later lease than the one that checkpointed
it (a committed step never ran again; a step ran again only when its checkpoint had not
committed); each job's ``ctx.transaction()`` row exists exactly once, written under the lease
that checkpointed its step; and the history checker finds nothing lost, no overlap without an
expired lease, one accepted completion.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from rota.domain.durable import StepState
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import Store
from tests.chaos.conftest import BACKENDS, CHAOS_OPTIONS, MARGIN_S, proxied, through
from tests.support import faketime
from tests.support.chaosfleet import MostSucceeded, all_terminal, sqlite_integrity
from tests.support.durablerecord import (
    RECORD_ENV,
    create_record,
    create_tx_table,
    read_record,
    read_tx,
)
from tests.support.history import check_store
from tests.support.nemesis import Fault, Nemesis
from tests.support.processes import Fleet, WorkerProcess, reaped
from tests.support.proxy import BLACKHOLE, PASS, ChaosProxy

pytestmark = [pytest.mark.slow]

APP = "tests.support.durableapp:app"
#: lease + rescue interval + backoff cap (as T4's).
LIVENESS_S = CHAOS_OPTIONS.lease_s + CHAOS_OPTIONS.rescue_s + 5.0
JOBS = {"sqlite": 400, "postgres": 600}
WORKERS = 3


def workload(count: int, rng: random.Random) -> list[JobSpec]:
    return [
        JobSpec(
            kind="steps",
            payload={"steps": rng.randint(5, 20), "s": round(rng.uniform(0.0, 0.1), 3)},
            max_attempts=20,  # several kills may hit one job
        )
        for _ in range(count)
    ]


@pytest.fixture
def record(database_url: str, tmp_path: Path) -> str:
    target = database_url if database_url.startswith("postgresql") else str(tmp_path / "rec.db")
    create_record(target)
    create_tx_table(database_url)
    return target


@pytest.fixture
def durable_fleet(database_url: str, store: Store, tmp_path: Path, record: str) -> Iterator[Fleet]:
    with reaped(Fleet(database_url, store, tmp_path, CHAOS_OPTIONS)) as fleet:
        yield fleet


@pytest.mark.timeout(240)
@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
async def test_killed_workers_never_rerun_a_committed_step_nor_repeat_an_effect(
    durable_fleet: Fleet, store: Store, database_url: str, record: str, seed: int
) -> None:
    fleet = durable_fleet
    backend = "sqlite" if database_url.startswith("sqlite") else "postgres"
    env = {RECORD_ENV: record}
    live = {index: fleet.start(f"w{index}", app=APP, env=env) for index in range(WORKERS)}
    for worker in live.values():
        await fleet.wait_ready(worker)
    nemesis = Nemesis(seed=seed, kinds=["kill"], every_s=2.0, count=40, targets=WORKERS)
    specs = workload(JOBS[backend], nemesis.rng("workload"))
    ids = [result.job.id for result in await store.enqueue(specs)]
    restarts = 0

    async def act(fault: Fault) -> None:
        nonlocal restarts
        victim = live[fault.target]
        victim.kill()
        assert await victim.wait_exit() == -signal.SIGKILL
        if backend == "sqlite":
            assert sqlite_integrity(database_url.removeprefix("sqlite:///")) == "ok"
        await asyncio.sleep(0.5)  # the fault's shape: the process is down for half a second
        restarts += 1
        live[fault.target] = fleet.start(f"w{fault.target}-r{restarts}", app=APP, env=env)

    async with MostSucceeded(store, len(ids)) as most:
        await nemesis.run(act, stop=most.reached, limit_s=90)
    last_kill = time.monotonic()
    print(nemesis.describe())
    assert len(nemesis.log) >= 4, "too few kills to prove anything"
    took = await all_terminal(store, len(ids), within_s=LIVENESS_S + MARGIN_S + 30)
    print(f"{len(nemesis.log)} kills; all terminal {took:.1f}s after the last one")
    assert time.monotonic() - last_kill <= LIVENESS_S + MARGIN_S + 30

    await assert_steps_and_effects(store, ids, specs, record, database_url)

    report = await check_store(
        store, fleet.history, enqueued=ids, expected=dict.fromkeys(ids, JobState.SUCCEEDED)
    )
    report.assert_clean()
    if backend == "sqlite":
        assert sqlite_integrity(database_url.removeprefix("sqlite:///")) == "ok"


#: The workers of the skew and partition run: two with wall clocks off (as T14's), one whose
#: connections to PostgreSQL pass through a proxy the nemesis cuts (as T20's).
SKEWED = {"behind": "-120", "fast": "+120 x1.5"}
CUT = "cut"


@pytest.mark.postgres
@pytest.mark.timeout(240)
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_skewed_clocks_and_cut_connections_never_rerun_a_committed_step(
    durable_fleet: Fleet,
    store: Store,
    database_url: str,
    record: str,
    proxies: list[ChaosProxy],
    tmp_path: Path,
    seed: int,
) -> None:
    """C11 and C12 when workers' clocks are off and one worker's connections go dead: a cut
    worker's handler must stop before its lease can be taken over, its late checkpoints and
    transactions are fenced, and durable sleeps wake by the database's clock."""
    if faketime.library() is None:
        pytest.skip(faketime.INSTALL_HINT)
    fleet = durable_fleet
    proxy = proxied(database_url, proxies)
    clocks = {
        name: faketime.FakeTime(tmp_path / f"{name}.rc", spec) for name, spec in SKEWED.items()
    }

    def launch(name: str, incarnation: int) -> WorkerProcess:
        env = {RECORD_ENV: record, **(clocks[name].env() if name in clocks else {})}
        url = through(proxy, database_url) if name == CUT else None
        return fleet.start(f"{name}-{incarnation}", app=APP, env=env, database_url=url)

    names = [*SKEWED, CUT]
    live = {name: launch(name, 0) for name in names}
    for worker in live.values():
        await fleet.wait_ready(worker)
    nemesis = Nemesis(
        seed=seed,
        kinds=["cut", "kill"],
        every_s=3.0,
        count=20,
        targets=len(names),
        rotate=True,
    )
    rng = nemesis.rng("workload")
    specs = workload(400, rng)
    sleepers = [
        JobSpec(kind="sleep_then", payload={"s": round(rng.uniform(1.0, 5.0), 2)}, max_attempts=20)
        for _ in range(40)
    ]
    ids = [result.job.id for result in await store.enqueue(specs)]
    sleeper_ids = [result.job.id for result in await store.enqueue(sleepers)]
    everything = ids + sleeper_ids
    incarnations = 0

    async def act(fault: Fault) -> None:
        nonlocal incarnations
        if fault.kind == "cut":
            # Every packet dropped, no RST or FIN, for twice the lease; then new connections pass.
            proxy.set(BLACKHOLE)
            await asyncio.sleep(2 * CHAOS_OPTIONS.lease_s)
            proxy.set(PASS)
            return
        name = names[fault.target]
        live[name].kill()
        code = await live[name].wait_exit()
        # Killed, or already gone: a cut worker started while its connections were blackholed
        # gives up after its start's wait for the store and exits 2 saying so (as documented
        # for `rota worker`); either way the next incarnation replaces it.
        assert code == -signal.SIGKILL or (
            code == 2 and "no answer from PostgreSQL" in live[name].stderr()
        ), (code, live[name].stderr()[-2000:])
        await asyncio.sleep(0.5)
        incarnations += 1
        live[name] = launch(name, incarnations)

    async with MostSucceeded(store, len(everything)) as most:
        # At least two of each fault, however fast the jobs go.
        await nemesis.run(act, stop=lambda: most.reached() and len(nemesis.log) >= 4, limit_s=90)
    proxy.set(PASS)
    print(nemesis.describe())
    took = await all_terminal(store, len(everything), within_s=LIVENESS_S + MARGIN_S + 30)
    print(f"{len(nemesis.log)} faults; all terminal {took:.1f}s after the last one")

    await assert_steps_and_effects(store, ids, specs, record, database_url)
    for job_id in sleeper_ids:
        job = await store.get(job_id)
        assert (job.state, job.result) == (JobState.SUCCEEDED, "woke"), job
    report = await check_store(
        store,
        fleet.history,
        enqueued=everything,
        expected=dict.fromkeys(everything, JobState.SUCCEEDED),
    )
    report.assert_clean()


async def assert_steps_and_effects(
    store: Store, ids: list[int], specs: list[JobSpec], record: str, database_url: str
) -> None:
    """Every ``steps`` job succeeded with the sum of its steps; no step ran under a lease later
    than the one that checkpointed it (C11); each job's transaction row landed once, under the
    lease that checkpointed its step (C12)."""
    # Nothing lost: every job succeeded with the sum of its steps.
    for job_id, spec in zip(ids, specs, strict=True):
        job = await store.get(job_id)
        steps = spec.payload["steps"]
        assert (job.state, job.result) == (JobState.SUCCEEDED, steps * (steps + 1) // 2), job

    # C11: no step ran under a lease later than the one that checkpointed it.
    runs: dict[tuple[int, str], list[int]] = defaultdict(list)
    for job_id, step, token, _ in read_record(record):
        runs[(job_id, step)].append(token)
    checkpoints: dict[tuple[int, str], int] = {}
    reruns = 0
    for job_id, spec in zip(ids, specs, strict=True):
        records = await store.steps(job_id)
        assert [s.name for s in records] == [
            f"step-{n}" for n in range(1, spec.payload["steps"] + 1)
        ]
        for step in records:
            assert step.state is StepState.SUCCEEDED and step.token is not None
            checkpoints[(job_id, step.name)] = step.token
            tokens = runs[(job_id, step.name)]
            assert tokens, f"job {job_id} {step.name}: checkpointed but never recorded"
            assert max(tokens) == step.token, (
                f"job {job_id} {step.name} ran under token {max(tokens)} after its checkpoint "
                f"committed under {step.token}"
            )
            assert tokens.count(step.token) == 1
            reruns += len(tokens) - 1
    print(f"{reruns} step executions ran again because their checkpoint had not committed")

    # C12: each job's transaction row landed exactly once, with its step's checkpoint.
    rows = read_tx(database_url)
    by_job: dict[int, list[int]] = defaultdict(list)
    for job_id, token in rows:
        by_job[job_id].append(token)
    for job_id in ids:
        assert by_job[job_id] == [checkpoints[(job_id, "step-2")]], (job_id, by_job[job_id])
    assert len(rows) == len(ids)
