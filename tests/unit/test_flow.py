"""Flow-control rules: limits, budgets and fair interleaving of tenants."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rota.domain.errors import InvalidInput
from rota.domain.flow import EVERY_TENANT, Budget, Limit, LimitScope, interleave, select
from rota.domain.job import Job
from rota.domain.job_state import JobState

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def job(
    id: int,
    *,
    tenant: str | None = None,
    kind: str = "k",
    queue: str = "default",
    priority: int = 0,
    age_s: int = 0,
) -> Job:
    return Job(
        id=id,
        kind=kind,
        queue=queue,
        payload={},
        state=JobState.PENDING,
        priority=priority,
        run_at=NOW - timedelta(seconds=age_s),
        attempt=0,
        max_attempts=3,
        created_at=NOW,
        tenant=tenant,
    )


def test_unfair_order_is_claim_order() -> None:
    jobs = [job(1, age_s=1), job(2, priority=5), job(3, age_s=9), job(4, age_s=9)]
    assert [j.id for j in interleave(jobs, fair=False)] == [2, 3, 4, 1]


def test_fair_order_takes_tenants_in_turns_with_priorities_inside_each() -> None:
    a = [job(i, tenant="a", age_s=100 - i) for i in range(1, 6)]
    b = [job(10, tenant="b", priority=1), job(11, tenant="b", priority=9)]
    none = [job(20)]
    order = [j.id for j in interleave([*a, *b, *none], fair=True)]
    # Turn 1: b's best (11, priority 9), then a's oldest (1) and the tenantless job (20), both
    # priority 0, by run_at; turn 2: b's second (10, priority 1), a's second; then a alone.
    assert order == [11, 1, 20, 10, 2, 3, 4, 5]


def test_a_new_tenant_is_not_starved_by_a_huge_backlog() -> None:
    backlog = [job(i, tenant="big", age_s=10_000 - i) for i in range(1, 2001)]
    newcomer = [job(5000 + i, tenant="new") for i in range(3)]
    chosen = select([*backlog, *newcomer], limit=8, budget=None, fair=True)
    assert sum(1 for j in chosen if j.tenant == "new") == 3


def test_concurrency_limits_count_running_jobs_and_this_claim() -> None:
    limits = {
        (LimitScope.KIND, "pdf"): Limit(LimitScope.KIND, "pdf", concurrency=3),
        (LimitScope.QUEUE, "slow"): Limit(LimitScope.QUEUE, "slow", concurrency=1),
    }
    budget = Budget(limits, {(LimitScope.KIND, "pdf"): 1}, {}, NOW)
    jobs = [job(i, kind="pdf") for i in range(1, 6)] + [job(9, queue="slow"), job(10, queue="slow")]
    chosen = select(jobs, limit=10, budget=budget, fair=False)
    assert [j.id for j in chosen] == [1, 2, 9]


def test_a_limit_for_every_tenant_caps_each_tenant_separately() -> None:
    limits = {
        (LimitScope.TENANT, EVERY_TENANT): Limit(LimitScope.TENANT, EVERY_TENANT, concurrency=2)
    }
    budget = Budget(limits, {(LimitScope.TENANT, "a"): 2}, {}, NOW)
    jobs = [job(1, tenant="a"), job(2, tenant="b"), job(3, tenant="b"), job(4, tenant="b"), job(5)]
    assert sorted(j.id for j in select(jobs, limit=10, budget=budget, fair=True)) == [2, 3, 5]


def test_rates_count_starts_inside_the_sliding_period_only() -> None:
    limit = Limit(LimitScope.KIND, "api", rate=3, period=timedelta(minutes=1))
    starts = {(LimitScope.KIND, "api"): [NOW - timedelta(seconds=90), NOW - timedelta(seconds=30)]}
    budget = Budget({limit.ident: limit}, {}, starts, NOW)
    chosen = select([job(i, kind="api") for i in range(5)], limit=5, budget=budget, fair=False)
    assert len(chosen) == 2
    assert budget.started == [(LimitScope.KIND, "api")] * 2


@pytest.mark.parametrize(
    "fields",
    [
        {"scope": "queue", "key": "q"},
        {"scope": "planet", "key": "q", "concurrency": 1},
        {"scope": "kind", "key": "bad key", "concurrency": 1},
        {"scope": "kind", "key": "*", "concurrency": 1},
        {"scope": "kind", "key": "k", "concurrency": -1},
        {"scope": "kind", "key": "k", "concurrency": True},
        {"scope": "kind", "key": "k", "rate": 5},
        {"scope": "kind", "key": "k", "rate": 5, "period": timedelta(milliseconds=10)},
        {"scope": "kind", "key": "k", "rate": 0, "period": timedelta(seconds=1)},
        {"scope": "queue", "key": "q", "rate": 5, "period": timedelta(seconds=1)},
        {"scope": "kind", "key": "k", "concurrency": 1, "period": timedelta(seconds=1)},
    ],
)
def test_bad_limits_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        Limit(**fields)  # type: ignore[arg-type]


@given(
    st.lists(st.tuples(st.sampled_from(["a", "b", "c", None]), st.integers(-2, 2)), max_size=40),
    st.integers(0, 3),
    st.integers(1, 20),
)
def test_select_never_exceeds_any_limit(
    specs: list[tuple[str | None, int]], cap: int, limit: int
) -> None:
    jobs = [job(i + 1, tenant=t, priority=p, kind=f"k{i % 2}") for i, (t, p) in enumerate(specs)]
    limits = {
        (LimitScope.KIND, "k0"): Limit(LimitScope.KIND, "k0", concurrency=cap),
        (LimitScope.TENANT, EVERY_TENANT): Limit(
            LimitScope.TENANT, EVERY_TENANT, concurrency=cap + 1
        ),
    }
    chosen = select(jobs, limit=limit, budget=Budget(limits, {}, {}, NOW), fair=True)
    assert len(chosen) <= limit
    assert sum(1 for j in chosen if j.kind == "k0") <= cap
    for tenant in ("a", "b", "c"):
        assert sum(1 for j in chosen if j.tenant == tenant) <= cap + 1
