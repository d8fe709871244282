"""T50: durable sleeps and signal waits across a restart of every worker and of PostgreSQL.

A throwaway cluster; three worker processes (eight jobs at once each, 24 slots). 1,000 jobs
sleep 1-30 s; 200 wait for signals: 100 whose signal was sent before they were enqueued, 60
whose signal comes after the restarts, 20 whose signal never comes, and 20 whose early signal
expired before their wait began. Mid-run every worker is stopped (SIGTERM, as a deploy does)
and PostgreSQL restarted (fast) before new workers start.

Pass: every sleeper succeeded; its woken run started no earlier than its recorded wake time
(the database's clock) and no later than lease + poll + the outage after it; it woke once
(twice only when the restart cut its woken run short); and the whole run took far less than
sleepers holding slots would need. Every signalled waiter got its own signal's data (each
signal reached one run); the others timed out with the documented error, caught by the
handler. The history checker is clean.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from rota.domain.durable import StepKind, StepState
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import Store
from tests.chaos.conftest import CHAOS_OPTIONS, MARGIN_S
from tests.support.chaosfleet import all_terminal
from tests.support.history import START, check_store, read_events
from tests.support.postgres import Cluster
from tests.support.processes import Fleet, eventually, reaped

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

APP = "tests.support.durableapp:app"
WORKERS = 3
SLEEPERS = 1000
LONGEST_SLEEP_S = 30.0
EARLY, LATE, NEVER, EXPIRED = 100, 60, 20, 20
WAIT_TIMEOUT_S = 60.0
NEVER_TIMEOUT_S = 8.0
#: How late a woken run may start after its wake time: a lease (a run cut short is rescued),
#: the poll, and the scheduling slack of a busy machine.
WAKE_SLACK_S = CHAOS_OPTIONS.lease_s + CHAOS_OPTIONS.rescue_s + CHAOS_OPTIONS.poll_s + MARGIN_S


@pytest.fixture
def durable_fleet(cluster_url: str, cluster_store: Store, tmp_path: Path) -> Iterator[Fleet]:
    with reaped(Fleet(cluster_url, cluster_store, tmp_path, CHAOS_OPTIONS), tail=30) as fleet:
        yield fleet


def _data(key: str) -> str:
    return json.dumps({"for": key})


@pytest.mark.timeout(300)
async def test_sleepers_and_waiters_ride_out_a_restart_of_everything(
    cluster: Cluster, cluster_store: Store, durable_fleet: Fleet, seed: int
) -> None:
    store, fleet = cluster_store, durable_fleet
    rng = random.Random(seed)
    started = time.monotonic()
    workers = [fleet.start(f"w{index}", app=APP) for index in range(WORKERS)]
    for worker in workers:
        await fleet.wait_ready(worker)

    # Signals sent before anyone waits: kept for the waits to come, or expiring at once.
    for index in range(EARLY):
        await store.signal(
            f"early-{index}", _data(f"early-{index}"), expire_after=timedelta(hours=1)
        )
    for index in range(EXPIRED):
        key = f"expired-{index}"
        await store.signal(key, _data(key), expire_after=timedelta(milliseconds=500))
    now = await store.now()
    waits = {
        **{f"early-{i}": WAIT_TIMEOUT_S for i in range(EARLY)},
        **{f"late-{i}": WAIT_TIMEOUT_S for i in range(LATE)},
        **{f"never-{i}": NEVER_TIMEOUT_S for i in range(NEVER)},
    }
    specs = [
        JobSpec(kind="wait_or_not", payload={"key": key, "timeout": timeout}, max_attempts=20)
        for key, timeout in waits.items()
    ] + [
        # Their waits begin after their early signal expired.
        JobSpec(
            kind="wait_or_not",
            payload={"key": f"expired-{index}", "timeout": NEVER_TIMEOUT_S},
            run_at=now + timedelta(seconds=2),
            max_attempts=20,
        )
        for index in range(EXPIRED)
    ]
    waiter_ids = [r.job.id for r in await store.enqueue(specs)]
    keys = dict(zip(waiter_ids, [s.payload["key"] for s in specs], strict=True))
    sleeps = [round(rng.uniform(1.0, LONGEST_SLEEP_S), 2) for _ in range(SLEEPERS)]
    sleeper_ids = [
        r.job.id
        for r in await store.enqueue(
            [JobSpec(kind="sleep_then", payload={"s": s}, max_attempts=20) for s in sleeps]
        )
    ]
    everything = waiter_ids + sleeper_ids

    # Mid-run: a deploy (every worker stopped gracefully) with PostgreSQL restarted meanwhile.
    # Once far more sleepers are asleep at once than there are slots (a sleep holds none).
    await eventually(
        lambda: _asleep(store, sleeper_ids, at_least=SLEEPERS // 2),
        within_s=20,
        every_s=0.5,
        what=f"{SLEEPERS // 2} sleepers asleep at once beside {WORKERS * CHAOS_OPTIONS.concurrency} slots",
    )
    outage_start = time.monotonic()
    for worker in workers:
        worker.terminate()
    await asyncio.to_thread(cluster.restart, "fast")
    for worker in workers:
        assert await worker.wait_exit() == 0, worker.stderr()
    workers = [fleet.start(f"w{index}-again", app=APP) for index in range(WORKERS)]
    for worker in workers:
        await fleet.wait_ready(worker)
    outage_end = time.monotonic()
    print(f"every worker and PostgreSQL restarted in {outage_end - outage_start:.1f}s")

    for index in range(LATE):
        sent = await store.signal(
            f"late-{index}", _data(f"late-{index}"), expire_after=timedelta(hours=1)
        )
        assert sent.delivered or sent.expires_at is not None

    took = await all_terminal(
        store, len(everything), within_s=LONGEST_SLEEP_S + WAIT_TIMEOUT_S + WAKE_SLACK_S
    )
    elapsed = time.monotonic() - started
    print(f"all terminal {took:.0f}s after the late signals, {elapsed:.0f}s in all")
    # Had each sleeper held one of the 24 slots, the sleeps alone would take this long.
    assert elapsed < sum(sleeps) / (WORKERS * CHAOS_OPTIONS.concurrency)

    await _assert_sleepers(store, fleet, sleeper_ids, (outage_start, outage_end))
    await _assert_waiters(store, keys)
    report = await check_store(
        store,
        fleet.history,
        enqueued=everything,
        expected=dict.fromkeys(everything, JobState.SUCCEEDED),
    )
    report.assert_clean()


async def _asleep(store: Store, ids: list[int], *, at_least: int) -> bool:
    """Whether ``at_least`` of ``ids`` are pending on a sleep that has not woken."""
    count = 0
    for job_id in ids:
        steps = await store.steps(job_id)
        if any(s.kind is StepKind.SLEEP and s.state is StepState.SLEEPING for s in steps):
            count += (await store.get(job_id)).state is JobState.PENDING
            if count >= at_least:
                return True
    return False


async def _assert_sleepers(
    store: Store, fleet: Fleet, ids: list[int], outage: tuple[float, float]
) -> None:
    offset_s = time.time() - time.monotonic()  # the database runs on this machine's clock
    starts: dict[int, list[float]] = defaultdict(list)
    for event in read_events(fleet.history):
        if event.event == START:
            starts[event.job].append(event.mono_ns / 1e9 + offset_s)
    for job_id in ids:
        job = await store.get(job_id)
        assert (job.state, job.result) == (JobState.SUCCEEDED, "woke"), job
        [sleep] = await store.steps(job_id)
        assert sleep.wake_at is not None
        wake = sleep.wake_at.timestamp()
        woken = [at for at in starts[job_id] if at >= wake - 0.005]
        assert woken, f"job {job_id} never ran after its wake time {sleep.wake_at}"
        # Due at its wake time; the time no worker ran between then and the end of its slack
        # does not count (all of the outage for a job that fell due in it, the part of it
        # that fell in its slack for one that fell due just before the deploy began).
        woke_at = wake - offset_s
        down = outage[1] - max(outage[0], woke_at)
        due = wake + down if woke_at <= outage[1] and woke_at + WAKE_SLACK_S >= outage[0] else wake
        late = woken[0] - due
        assert late <= WAKE_SLACK_S, f"job {job_id} woke {late:.1f}s after its time"
        if len(woken) > 1:  # a woken run cut short by the restart, and only then
            first = woken[0] - offset_s
            assert outage[0] - WAKE_SLACK_S <= first <= outage[1], (job_id, woken, outage)


async def _assert_waiters(store: Store, keys: dict[int, str]) -> None:
    delivered: dict[str, int] = {}
    for job_id, key in keys.items():
        job = await store.get(job_id)
        assert job.state is JobState.SUCCEEDED, job
        if key.startswith(("early-", "late-")):
            assert job.result == {"for": key}, (job_id, key, job.result)
            assert key not in delivered, f"{key} reached jobs {delivered[key]} and {job_id}"
            delivered[key] = job_id
        else:  # never sent, or expired before the wait began
            assert job.result == "timed out", (job_id, key, job.result)
