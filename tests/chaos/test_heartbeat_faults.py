"""T5 / T9: a worker whose heartbeats fail must stop its handlers before another worker could
take the job over, and anything that still overlaps must be fenced.

Worker A reaches PostgreSQL through a chaos proxy, holds a long job and heartbeats it; then
the proxy (a) blackholes its connections (half-open: nothing answers, nothing is refused),
(b) resets them (RST, and new connections too), or (c) delays every packet past the
heartbeat interval. Worker B, on a direct connection, takes the job over once the lease
expires. Every lease the store grants is recorded by a trigger with its DB time, so the test
knows the instant from which B could claim: A's handler must have been told to stop before
it (the plan's bound is the lease less a safety margin after the last successful heartbeat
was sent). Several A workers run side by side, one job each, so one run measures several
trials. The history checker then proves any remaining overlap was fenced.
"""

from __future__ import annotations

import pytest

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import JobFilter, Store
from tests.chaos.conftest import CHAOS_OPTIONS, LateStop, proxied, through
from tests.support.chaosfleet import ChaosFleet, install_lease_audit, lease_grants
from tests.support.history import CANCELLED, START, check_store, read_events
from tests.support.processes import eventually
from tests.support.proxy import BLACKHOLE, LATENCY, RESET, ChaosProxy

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

TRIALS = 4
LEASE_S = CHAOS_OPTIONS.lease_s
HEARTBEAT_S = CHAOS_OPTIONS.heartbeat_s


@pytest.fixture
def database_url(pg_url: str) -> str:
    install_lease_audit(pg_url)
    return pg_url


async def stop_lateness(
    fleet: ChaosFleet, store: Store, proxies: list[ChaosProxy], mode: str, **fault: float
) -> list[float]:
    """Per trial: seconds from the DB instant B could first claim to A's handler stop
    (negative: stopped in time)."""
    url = fleet.database_url
    trials = []
    for index in range(TRIALS):
        proxy = proxied(url, proxies)
        worker = fleet.start(f"a{index}", database_url=through(proxy, url), concurrency=1)
        trials.append((proxy, worker))
    for _, worker in trials:
        await fleet.wait_ready(worker)
    jobs = [
        result.job
        for result in await store.enqueue(
            [JobSpec(kind="long", payload={"s": 60}, max_attempts=5) for _ in trials]
        )
    ]

    def starts() -> dict[int, tuple[str, int]]:
        return {e.job: (e.worker, e.token) for e in read_events(fleet.history) if e.event == START}

    first = await eventually(
        lambda: (found := starts()) and len(found) == len(jobs) and found,
        what="every long job to start on an A worker",
    )

    def heartbeated() -> bool:
        return all(len(lease_grants(url, job.id, first[job.id][1])) >= 2 for job in jobs)

    await eventually(heartbeated, within_s=10, what="a successful heartbeat of every job")
    await fleet.start_ready("b", concurrency=8)
    for proxy, _ in trials:
        proxy.set(mode, **fault)  # type: ignore[arg-type]

    def taken_over() -> bool:
        later = [e for e in read_events(fleet.history) if e.event == START and e.worker == "b"]
        return len({e.job for e in later}) == len(jobs)

    await eventually(taken_over, within_s=LEASE_S + 30, what="B to take every job over")

    def stops() -> dict[int, float]:
        return {
            e.job: e.wall
            for e in read_events(fleet.history)
            if e.event == CANCELLED and e.token == first[e.job][1]
        }

    stopped = await eventually(
        lambda: (found := stops()) and len(found) == len(jobs) and found,
        within_s=30,
        what="every A handler to be stopped",
    )
    lateness = []
    for job in jobs:
        claimable_from = max(lease_grants(url, job.id, first[job.id][1]))
        lateness.append(round(stopped[job.id] - claimable_from, 3))
    for proxy, _ in trials:
        proxy.heal()
    await store.enqueue([JobSpec(kind="work", payload={"s": 0}) for _ in range(4)])
    return lateness


async def finish_and_check(fleet: ChaosFleet, store: Store) -> None:
    """Cancel the long jobs (they would run 60 s on B), let the rest finish, then check the
    history: whatever overlapped must have been fenced."""

    async def all_done() -> bool:
        counts = await store.counts()
        return counts.total(JobState.RUNNING) + counts.total(JobState.PENDING) == 0

    jobs = (await store.list_jobs(JobFilter())).jobs
    for job in jobs:
        if job.kind == "long" and not job.is_terminal:
            await store.cancel(job.id)
    await eventually(all_done, within_s=30, what="every job terminal")
    report = await check_store(store, fleet.history, enqueued=[job.id for job in jobs])
    report.assert_clean()


@pytest.mark.parametrize(
    ("mode", "fault"),
    [
        pytest.param(
            BLACKHOLE,
            {},
            id="blackhole",
        ),
        pytest.param(
            RESET,
            {},
            id="reset",
        ),
        pytest.param(
            LATENCY,
            {"latency_s": 2.5 * HEARTBEAT_S},
            id="latency",
        ),
    ],
)
@pytest.mark.timeout(180)
async def test_a_worker_whose_heartbeats_fail_stops_its_handler_before_the_lease_can_be_taken(
    fleet: ChaosFleet,
    store: Store,
    proxies: list[ChaosProxy],
    mode: str,
    fault: dict[str, float],
) -> None:
    lateness = await stop_lateness(fleet, store, proxies, mode, **fault)
    print(f"{mode}: handler stop minus DB claimable instant per trial: {lateness}")
    await finish_and_check(fleet, store)
    if max(lateness) >= 0:
        raise LateStop(f"handlers stopped after B could claim: {lateness}")
