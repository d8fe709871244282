"""T20 / T21: a worker partitioned from PostgreSQL, and a small chaos-proxy fault matrix.

T20: the worker runs in a network namespace of its own and reaches PostgreSQL through a proxy
on the host end of a veth pair; ``ip link set down`` on that end drops every packet (no RST,
no FIN) for twice the lease, then the link comes back. Pass: its handler is stopped before the
lease can be taken over, its late writes are fenced (checker, fenced store), and it takes new
work after the heal. T21: per cell (fault x the statement that triggers it), a worker through
the proxy and one direct; the checker is clean and nothing is left unfinished after the heal.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import Store
from tests.chaos.conftest import CHAOS_OPTIONS, MARGIN_S, LateStop, proxied, through
from tests.support import netns
from tests.support.chaosfleet import ChaosFleet, all_terminal, install_lease_audit, lease_grants
from tests.support.history import CANCELLED, START, check_store, read_events
from tests.support.processes import eventually
from tests.support.proxy import BLACKHOLE, CLOSE_AFTER, LATENCY, PASS, RESET, ChaosProxy

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

LEASE_S = CHAOS_OPTIONS.lease_s
LIVENESS_S = CHAOS_OPTIONS.lease_s + CHAOS_OPTIONS.rescue_s + 5.0


@pytest.fixture
def database_url(pg_url: str) -> str:
    install_lease_audit(pg_url)
    return pg_url


@pytest.fixture
def namespace() -> Iterator[netns.Netns]:
    reason = netns.unavailable()
    if reason:
        pytest.skip(reason)
    made = netns.Netns.create()
    try:
        yield made
    finally:
        made.destroy()


def first_event(fleet: ChaosFleet, job_id: int, event: str, worker: str) -> float | None:
    return next(
        (
            e.wall
            for e in read_events(fleet.history)
            if e.job == job_id and e.event == event and e.worker == worker
        ),
        None,
    )


@pytest.mark.timeout(150)
async def test_a_partitioned_worker_stops_in_time_is_fenced_and_resumes_after_the_heal(
    fleet: ChaosFleet,
    store: Store,
    pg_url: str,
    namespace: netns.Netns,
    proxies: list[ChaosProxy],
) -> None:
    bridge = proxied(pg_url, proxies, listen_host=namespace.host_ip)
    inside = await fleet.start_ready(
        "cut", database_url=through(bridge, pg_url), prefix=namespace.prefix(), concurrency=2
    )
    [long_job, short_job] = [
        r.job
        for r in await store.enqueue(
            [
                JobSpec(kind="long", payload={"s": 4 * LEASE_S}, max_attempts=5),
                JobSpec(kind="work", payload={"s": 2 * LEASE_S}, max_attempts=5),
            ]
        )
    ]
    for job in (long_job, short_job):
        await eventually(lambda j=job: first_event(fleet, j.id, START, "cut"), what="start")
    token = next(e.token for e in read_events(fleet.history) if e.job == long_job.id)
    await eventually(lambda: len(lease_grants(pg_url, long_job.id, token)) >= 2, what="a heartbeat")
    await fleet.start_ready("outside")
    namespace.cut()
    cut_at = time.monotonic()
    await eventually(
        lambda: first_event(fleet, long_job.id, START, "outside"),
        within_s=LIVENESS_S + MARGIN_S,
        what="the job to be taken over outside",
    )
    while time.monotonic() < cut_at + 2 * LEASE_S:  # keep the partition for 2x the lease
        await eventually(lambda: True)
    namespace.heal()
    await store.cancel(long_job.id)  # 12 s more on the outside worker: not needed
    [after] = await store.enqueue([JobSpec(kind="work", payload={"s": 0})] * 1)
    # The healed worker takes work again: give it some of its own (the outside one is busy).
    more = await store.enqueue([JobSpec(kind="work", payload={"s": 0.3}) for _ in range(20)])
    await eventually(
        lambda: any(
            e.worker == "cut" and e.event == START and e.job in {r.job.id for r in more}
            for e in read_events(fleet.history)
        ),
        within_s=60,
        what="the healed worker to take new work",
    )
    ids = [long_job.id, short_job.id, after.job.id, *(r.job.id for r in more)]
    await all_terminal(store, len(ids), within_s=60)
    report = await check_store(store, fleet.history, enqueued=ids)
    report.assert_clean()
    final = {j: await store.get(j) for j in ids}
    fleet.check_fenced_effects(
        {j: job.lease_token or 0 for j, job in final.items() if job.state is JobState.SUCCEEDED}
    )
    assert inside.alive
    stop = first_event(fleet, long_job.id, CANCELLED, "cut")
    claimable = max(lease_grants(pg_url, long_job.id, token))
    print(
        f"partitioned handler stopped {None if stop is None else stop - claimable:.3}s "
        "after the lease became claimable"
    )
    if stop is None or stop >= claimable:
        raise LateStop(f"stopped at {stop}, claimable from {claimable}")


#: A fragment of the statement that triggers each phase's fault.
PHASES = {
    "claim": b"FROM rota_claim",  # rota_claim_all(, rota_claim_fresh( and rota_claim(
    "complete": b"SET state = 'succeeded'",
}
FAULTS = {
    "latency": (LATENCY, {"latency_s": 0.2}),
    "blackhole": (BLACKHOLE, {}),
    "reset": (RESET, {}),
    "close-after-64": (CLOSE_AFTER, {"after_bytes": 64}),
}


CELLS = [
    pytest.param(
        fault,
        phase,
        id=f"{fault}-{phase}",
    )
    for fault in sorted(FAULTS)
    for phase in sorted(PHASES)
]


@pytest.mark.parametrize(("fault", "phase"), CELLS)
@pytest.mark.timeout(90)
async def test_fault_matrix_cell_is_clean_and_heals(
    fleet: ChaosFleet,
    store: Store,
    pg_url: str,
    proxies: list[ChaosProxy],
    phase: str,
    fault: str,
) -> None:
    proxy = proxied(pg_url, proxies)
    faulty = fleet.start("faulty", database_url=through(proxy, pg_url))
    steady = fleet.start("steady", concurrency=4)
    for worker in (faulty, steady):
        await fleet.wait_ready(worker)
    mode, options = FAULTS[fault]
    ids = [
        r.job.id
        for r in await store.enqueue(
            [JobSpec(kind="work", payload={"s": 0.2}, max_attempts=10) for _ in range(40)]
        )
    ]
    proxy.set(mode, match=PHASES[phase], **options)  # type: ignore[arg-type]
    if mode == LATENCY:
        await eventually(lambda: len(read_events(fleet.history)) > 40, what="progress")
    else:
        await eventually(lambda: proxy.faulted > 0, what=f"a {phase} statement to be hit")
    proxy.set(PASS)  # heal: new connections pass; a blackholed one stays dead
    took = await all_terminal(store, len(ids), within_s=LIVENESS_S + MARGIN_S + 15)
    print(f"{fault} x {phase}: all terminal {took:.1f}s after the heal")
    report = await check_store(
        store, fleet.history, enqueued=ids, expected=dict.fromkeys(ids, JobState.SUCCEEDED)
    )
    report.assert_clean()
    final = {j: await store.get(j) for j in ids}
    fleet.check_fenced_effects({j: job.lease_token or 0 for j, job in final.items()})
    # After the heal the faulted worker takes work again (the steady one cannot take it all).
    more = {
        r.job.id
        for r in await store.enqueue([JobSpec(kind="work", payload={"s": 0.5}) for _ in range(16)])
    }

    def resumed() -> bool:
        return any(
            e.worker == "faulty" and e.event == START and e.job in more
            for e in read_events(fleet.history)
        )

    await eventually(resumed, within_s=15, what="the faulted worker to take work again")
