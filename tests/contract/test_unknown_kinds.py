"""Rolling deploys on every store: a worker leaves a kind it does not run for a worker that
does, and only jobs no live worker can run end, after a grace period."""

from __future__ import annotations

from datetime import timedelta

from rota.domain.job_state import JobState, unrunnable
from rota.runtime.rescuer import Rescuer
from rota.store import Store, WorkerInfo
from rota.testing import FakeClock
from tests.contract.helpers import LEASE, add

GRACE = timedelta(minutes=10)
ALIVE = timedelta(seconds=30)


def worker(name: str, kinds: tuple[str, ...] | None, queues: tuple[str, ...] = ("default",)):
    return WorkerInfo(name=name, host="h", pid=1, queues=queues, concurrency=4, kinds=kinds)


async def test_a_claim_takes_only_the_kinds_its_worker_runs(store: Store) -> None:
    old = await add(store, "a")
    new = await add(store, "b")
    claimed = await store.claim("old", queues=["default"], limit=10, lease=LEASE, kinds=["a"])
    assert [job.id for job in claimed] == [old.id]
    assert (await store.get(new.id)).state is JobState.PENDING
    assert await store.claim("old", queues=["default"], limit=10, lease=LEASE, kinds=[]) == []
    taken = await store.claim("new", queues=["default"], limit=10, lease=LEASE, kinds=["a", "b"])
    assert [job.id for job in taken] == [new.id]


async def test_an_expired_lease_is_taken_over_only_by_a_worker_that_runs_its_kind(
    store: Store, clock: FakeClock
) -> None:
    job = await add(store, "b", max_attempts=5)
    [first] = await store.claim("new-1", queues=["default"], limit=1, lease=LEASE, kinds=["b"])
    clock.advance(LEASE + timedelta(seconds=1))
    assert await store.claim("old", queues=["default"], limit=1, lease=LEASE, kinds=["a"]) == []
    [again] = await store.claim("new-2", queues=["default"], limit=1, lease=LEASE, kinds=["b"])
    assert (again.id, again.worker) == (first.id, "new-2") and again.id == job.id


async def test_a_job_no_live_worker_runs_ends_dead_after_the_grace(
    store: Store, clock: FakeClock
) -> None:
    await store.register_worker(worker("old", ("a",)))
    stranded = await add(store, "b")
    runnable = await add(store, "a")
    later = await add(store, "b", queue="other")  # no live worker serves "other"
    clock.advance(GRACE - timedelta(seconds=1))
    await store.beat_worker("old")
    assert await store.end_unrunnable(grace=GRACE, alive_within=ALIVE) == []
    clock.advance(timedelta(seconds=2))
    await store.beat_worker("old")
    assert await store.end_unrunnable(grace=GRACE, alive_within=ALIVE) == [stranded.id]
    dead = await store.get(stranded.id)
    assert (dead.state, dead.attempt, dead.last_error) == (JobState.DEAD, 0, unrunnable("b"))
    assert dead.finished_at == clock.now()
    assert (await store.get(runnable.id)).state is JobState.PENDING
    assert (await store.get(later.id)).state is JobState.PENDING
    assert (await store.counts()).total(JobState.DEAD) == 1


async def test_nothing_ends_while_the_fleet_is_down_or_a_live_worker_may_run_the_kind(
    store: Store, clock: FakeClock
) -> None:
    job = await add(store, "b")
    clock.advance(GRACE * 2)
    # No worker at all: the fleet may be down or deploying.
    assert await store.end_unrunnable(grace=GRACE, alive_within=ALIVE) == []
    # A worker gone silent longer than alive_within does not count.
    await store.register_worker(worker("gone", ("a",)))
    clock.advance(ALIVE + timedelta(seconds=1))
    assert await store.end_unrunnable(grace=GRACE, alive_within=ALIVE) == []
    # A live worker that did not list its kinds may run any kind.
    await store.register_worker(worker("quiet", None))
    await store.register_worker(worker("old", ("a",)))
    assert await store.end_unrunnable(grace=GRACE, alive_within=ALIVE) == []
    # A live worker of the new code runs it.
    await store.deregister_worker("quiet")
    await store.register_worker(worker("new", ("a", "b")))
    assert await store.end_unrunnable(grace=GRACE, alive_within=ALIVE) == []
    await store.deregister_worker("new")
    assert await store.end_unrunnable(grace=GRACE, alive_within=ALIVE) == [job.id]


async def test_the_registry_keeps_the_kinds_a_worker_runs(store: Store) -> None:
    await store.register_worker(worker("w", ("a", "b")))
    await store.register_worker(worker("v", None))
    kinds = {info.name: info.kinds for info in await store.list_workers()}
    assert kinds == {"v": None, "w": ("a", "b")}


async def test_the_rescuer_ends_stranded_jobs_and_says_which(
    store: Store, clock: FakeClock
) -> None:
    await store.register_worker(worker("old", ("a",)))
    job = await add(store, "b")
    clock.advance(GRACE + timedelta(seconds=1))
    await store.beat_worker("old")
    rescuer = Rescuer(
        store, interval=timedelta(seconds=60), unrunnable_grace=GRACE, alive_within=ALIVE
    )
    result = await rescuer.tick()
    assert result.unrunnable == [job.id]
    idle = Rescuer(store, interval=timedelta(seconds=60), unrunnable_grace=None)
    assert (await idle.tick()).unrunnable == []
