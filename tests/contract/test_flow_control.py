"""Flow control in the claim: paused queues, concurrency and rate limits, fair tenants."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from rota.domain.flow import EVERY_TENANT, Limit, LimitScope
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import Store
from rota.testing import FakeClock
from tests.contract.helpers import LEASE, claim_one


async def claim(
    store: Store,
    limit: int = 10,
    *,
    queues: tuple[str, ...] = ("default",),
    fair: bool = True,
    worker: str = "w",
) -> list[int]:
    jobs = await store.claim(worker, queues=list(queues), limit=limit, lease=LEASE, fair=fair)
    return [job.id for job in jobs]


async def test_a_paused_queue_gives_nothing_until_resumed(store: Store) -> None:
    await store.enqueue([JobSpec(kind="a", queue="mail") for _ in range(3)])
    running = await store.claim("w", queues=["mail"], limit=1, lease=LEASE)
    info = await store.pause_queue("mail")
    assert (info.name, info.paused) == ("mail", True)
    assert await claim(store, queues=("mail",)) == []
    await store.complete(running[0].lease)  # running jobs carry on
    assert [q.name for q in await store.list_queues() if q.paused] == ["mail"]
    await store.resume_queue("mail")
    assert len(await claim(store, queues=("mail",))) == 2
    assert [q.paused for q in await store.list_queues()] == [False]


async def test_a_queue_concurrency_limit_counts_live_leases_only(
    store: Store, clock: FakeClock
) -> None:
    await store.set_limit(Limit(LimitScope.QUEUE, "default", concurrency=2))
    await store.enqueue([JobSpec(kind="a") for _ in range(5)])
    first = await store.claim("w", queues=["default"], limit=10, lease=timedelta(seconds=5))
    assert len(first) == 2
    assert await claim(store) == []
    await store.complete(first[0].lease)
    assert len(await claim(store)) == 1
    clock.advance(timedelta(seconds=6))  # the other first lease expired: it no longer counts
    assert len(await claim(store)) >= 1


async def test_a_kind_limit_holds_under_eight_concurrent_claimers(store: Store) -> None:
    await store.set_limit(Limit(LimitScope.KIND, "pdf", concurrency=3))
    await store.enqueue(
        [JobSpec(kind="pdf") for _ in range(40)] + [JobSpec(kind="mail") for _ in range(10)]
    )
    batches = await asyncio.gather(*(claim(store, 4, worker=f"w{i}") for i in range(8)))
    claimed = [job_id for batch in batches for job_id in batch]
    assert len(claimed) == len(set(claimed))
    running = [await store.get(job_id) for job_id in claimed]
    assert sum(1 for job in running if job.kind == "pdf") == 3
    assert sum(1 for job in running if job.kind == "mail") == 10


async def test_a_limit_for_every_tenant_caps_each_tenant(store: Store) -> None:
    await store.set_limit(Limit(LimitScope.TENANT, EVERY_TENANT, concurrency=1))
    await store.enqueue(
        [JobSpec(kind="a", tenant="acme") for _ in range(3)]
        + [JobSpec(kind="a", tenant="globex") for _ in range(3)]
        + [JobSpec(kind="a")]
    )
    jobs = [await store.get(job_id) for job_id in await claim(store)]
    assert sorted(str(job.tenant) for job in jobs) == ["None", "acme", "globex"]
    assert await store.running_by_tenant() == {"acme": 1, "globex": 1}


async def test_a_rate_limit_holds_over_a_sliding_window(store: Store, clock: FakeClock) -> None:
    await store.set_limit(Limit(LimitScope.KIND, "api", rate=3, period=timedelta(minutes=1)))
    await store.enqueue([JobSpec(kind="api") for _ in range(8)])
    first = await store.claim("w", queues=["default"], limit=10, lease=LEASE)
    assert len(first) == 3
    assert await store.complete_many([job.lease for job in first]) == []
    assert await claim(store) == [], "finished jobs still count as starts in the window"
    clock.advance(timedelta(seconds=59))
    assert await claim(store) == []
    clock.advance(timedelta(seconds=2))
    assert len(await claim(store)) == 3
    [info] = await store.list_limits()
    assert (info.limit.key, info.recent_starts, info.running) == ("api", 3, 3)


async def test_a_tenant_rate_limit_applies_per_tenant(store: Store, clock: FakeClock) -> None:
    await store.set_limit(
        Limit(LimitScope.TENANT, EVERY_TENANT, rate=2, period=timedelta(seconds=10))
    )
    await store.enqueue(
        [JobSpec(kind="a", tenant="acme") for _ in range(5)]
        + [JobSpec(kind="a", tenant="globex") for _ in range(5)]
    )
    jobs = [await store.get(job_id) for job_id in await claim(store)]
    assert sorted(str(job.tenant) for job in jobs) == ["acme", "acme", "globex", "globex"]
    clock.advance(timedelta(seconds=11))
    assert len(await claim(store)) == 4


async def test_fair_claims_interleave_tenants_behind_a_backlog(store: Store) -> None:
    backlog = await store.enqueue([JobSpec(kind="a", tenant="big") for _ in range(50)])
    newcomer = await store.enqueue([JobSpec(kind="a", tenant="small", priority=p) for p in (0, 5)])
    fair = await claim(store, 4)
    assert {newcomer[0].job.id, newcomer[1].job.id} <= set(fair)
    assert set(fair) & {result.job.id for result in backlog}


async def test_unfair_claims_take_plain_claim_order(store: Store) -> None:
    backlog = await store.enqueue([JobSpec(kind="a", tenant="big") for _ in range(10)])
    await store.enqueue([JobSpec(kind="a", tenant="small")])
    unfair = await claim(store, 4, fair=False)
    assert unfair == [result.job.id for result in backlog[:4]]


async def test_priorities_still_order_work_within_a_tenant(store: Store) -> None:
    low = await store.enqueue([JobSpec(kind="a", tenant="t", priority=0) for _ in range(3)])
    high = await store.enqueue([JobSpec(kind="a", tenant="t", priority=9)])
    job = await claim_one(store)
    assert job is not None
    assert job.id == high[0].job.id
    assert job.id not in {result.job.id for result in low}


async def test_limits_can_be_listed_replaced_and_removed(store: Store) -> None:
    await store.set_limit(Limit(LimitScope.KIND, "pdf", concurrency=3))
    await store.set_limit(Limit(LimitScope.KIND, "pdf", concurrency=5))
    await store.set_limit(Limit(LimitScope.QUEUE, "mail", concurrency=1))
    listed = [(i.limit.scope, i.limit.key, i.limit.concurrency) for i in await store.list_limits()]
    assert listed == [(LimitScope.KIND, "pdf", 5), (LimitScope.QUEUE, "mail", 1)]
    assert await store.delete_limit(LimitScope.KIND, "pdf") is True
    assert await store.delete_limit(LimitScope.KIND, "pdf") is False
    assert [i.limit.key for i in await store.list_limits()] == ["mail"]


async def test_a_zero_concurrency_limit_holds_a_kind_while_others_flow(store: Store) -> None:
    await store.set_limit(Limit(LimitScope.KIND, "held", concurrency=0))
    await store.enqueue([JobSpec(kind="held"), JobSpec(kind="free")])
    jobs = [await store.get(job_id) for job_id in await claim(store)]
    assert [job.kind for job in jobs] == ["free"]
    assert (await store.counts()).by_state[JobState.PENDING] == 1


async def test_a_fair_claim_fills_its_batch_from_many_small_tenants(store: Store) -> None:
    """Many tenants with a job or two each: a fair claim takes one from each of as many
    tenants as the batch asks for, not only from as many as one walk used to visit."""
    await store.enqueue([JobSpec(kind="a", tenant=f"t{i:03d}") for i in range(300)])
    jobs = [await store.get(job_id) for job_id in await claim(store, 200)]
    assert len(jobs) == 200
    assert len({job.tenant for job in jobs}) == 200
    assert len(await claim(store, 200)) == 100


async def test_a_due_tenant_behind_many_idle_tenants_is_reached(store: Store) -> None:
    """Claims walk a bounded number of tenants; those with only future jobs must not hide a
    tenant with due work behind them for ever."""
    await store.enqueue(
        [JobSpec(kind="a", tenant=f"t{i:03d}", delay=timedelta(hours=1)) for i in range(150)]
    )
    [due] = await store.enqueue([JobSpec(kind="a", tenant="zzz")])
    for _ in range(5):
        if due.job.id in await claim(store):
            return
    raise AssertionError("the due tenant was never reached")
