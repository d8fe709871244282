"""Why a job is not running (rota.domain.blockers): each reason from a flow snapshot, pure."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import get_args

from rota.api.job_models import BlockedName
from rota.domain.blockers import (
    Blocked,
    FlowSnapshot,
    LimitUse,
    blockers,
    kind_blockers,
    queue_blockers,
)
from rota.domain.flow import Limit, LimitScope
from rota.domain.job import Job
from rota.domain.job_state import JobState

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
SERVED = FlowSnapshot.of(served_queues=["default", "mail"])


def job(**fields: object) -> Job:
    base = Job(
        id=1,
        kind="email",
        queue="default",
        payload={},
        state=JobState.PENDING,
        priority=0,
        run_at=NOW,
        attempt=0,
        max_attempts=3,
        created_at=NOW,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def reasons(j: Job, flow: FlowSnapshot = SERVED) -> list[Blocked]:
    return [b.reason for b in blockers(j, NOW, flow)]


def test_the_api_names_every_reason_the_domain_has() -> None:
    assert set(get_args(BlockedName)) == {reason.value for reason in Blocked}


def test_a_due_job_nothing_holds_back_has_no_blocker() -> None:
    assert reasons(job()) == []
    assert reasons(job(state=JobState.RUNNING), FlowSnapshot.of(paused_queues=["default"])) == []


def test_not_due_says_whether_it_is_a_delay_or_a_retry_backoff() -> None:
    later = NOW + timedelta(minutes=5)
    [delayed] = blockers(job(run_at=later), NOW, SERVED)
    [backoff] = blockers(job(run_at=later, attempt=1), NOW, SERVED)
    assert (delayed.reason, delayed.message) == (Blocked.NOT_DUE, "not due yet")
    assert (backoff.reason, backoff.message) == (Blocked.NOT_DUE, "waiting out its retry backoff")


def test_a_waiting_job_waits_on_its_parents() -> None:
    [waiting] = blockers(job(state=JobState.WAITING, waiting_on=2), NOW, SERVED)
    assert waiting.reason is Blocked.WAITING_ON_PARENTS
    assert waiting.message == "waiting on 2 parent jobs to finish"


def test_a_held_job_says_so_first_then_what_would_hold_it_once_released() -> None:
    assert reasons(job(state=JobState.HELD)) == [Blocked.HELD]
    later = job(state=JobState.HELD, run_at=NOW + timedelta(hours=1))
    assert reasons(later) == [Blocked.HELD, Blocked.NOT_DUE]
    child = job(state=JobState.HELD, waiting_on=2, queue="elsewhere")
    assert reasons(child) == [Blocked.HELD, Blocked.WAITING_ON_PARENTS, Blocked.NO_WORKER]


def test_a_paused_queue_and_a_queue_without_live_workers_are_named() -> None:
    flow = FlowSnapshot.of(paused_queues=["mail"], served_queues=["default"])
    found = blockers(job(queue="mail"), NOW, flow)
    assert [(b.reason, b.message) for b in found] == [
        (Blocked.QUEUE_PAUSED, "queue mail is paused"),
        (Blocked.NO_WORKER, "no live worker claims from queue mail"),
    ]
    assert reasons(job(), FlowSnapshot.of(served_queues=[])) == [Blocked.NO_WORKER]
    assert reasons(job(), FlowSnapshot()) == [], "workers unknown: not a reason"


def test_full_concurrency_limits_are_named_and_limits_with_room_are_not() -> None:
    flow = FlowSnapshot.of(
        served_queues=["default"],
        limits=[
            LimitUse(Limit(LimitScope.QUEUE, "default", concurrency=4), running=4),
            LimitUse(Limit(LimitScope.KIND, "email", concurrency=2), running=2),
            LimitUse(Limit(LimitScope.TENANT, "acme", concurrency=5), running=1),
        ],
    )
    found = blockers(job(tenant="acme"), NOW, flow)
    assert [(b.reason, b.message) for b in found] == [
        (Blocked.QUEUE_LIMIT, "queue default is at its limit: 4 of 4 running"),
        (Blocked.KIND_LIMIT, "kind email is at its limit: 2 of 2 running"),
    ]


def test_a_cap_on_every_tenant_counts_this_tenants_running_jobs() -> None:
    every = LimitUse(Limit(LimitScope.TENANT, "*", concurrency=2), running=7)
    flow = FlowSnapshot.of(
        served_queues=["default"], limits=[every], tenant_running={"acme": 2, "beta": 5}
    )
    assert flow.needs_tenant_running
    [full] = blockers(job(tenant="acme"), NOW, flow)
    assert (full.reason, full.message) == (
        Blocked.TENANT_LIMIT,
        "tenant acme is at each tenant's cap: 2 of 2 running",
    )
    assert reasons(job(tenant="gamma"), flow) == []
    assert reasons(job(), flow) == [], "a job without a tenant counts against no tenant cap"


def test_used_rate_limits_are_named_and_one_on_every_tenant_is_uncertain() -> None:
    minute = timedelta(minutes=1)
    flow = FlowSnapshot.of(
        served_queues=["default"],
        limits=[
            LimitUse(Limit(LimitScope.KIND, "email", rate=10, period=minute), recent_starts=10),
            LimitUse(Limit(LimitScope.TENANT, "*", rate=3, period=minute), recent_starts=4),
        ],
    )
    kind, tenant = blockers(job(tenant="acme"), NOW, flow)
    assert (kind.reason, kind.message, kind.certain) == (
        Blocked.KIND_RATE,
        "kind email used its 10 starts per minute",
        True,
    )
    assert (tenant.reason, tenant.certain) == (Blocked.TENANT_RATE, False)
    assert (
        tenant.message
        == "tenant acme may have used its 3 starts per minute (4 across every tenant)"
    )
    quiet = FlowSnapshot.of(
        served_queues=["default"],
        limits=[LimitUse(Limit(LimitScope.TENANT, "*", rate=3, period=minute), recent_starts=2)],
    )
    assert reasons(job(tenant="acme"), quiet) == [], "below the rate in total: below it for each"


def test_a_tenants_own_limit_takes_precedence_over_the_every_tenant_one() -> None:
    flow = FlowSnapshot.of(
        served_queues=["default"],
        limits=[
            LimitUse(Limit(LimitScope.TENANT, "*", concurrency=1), running=3),
            LimitUse(Limit(LimitScope.TENANT, "acme", concurrency=10), running=3),
        ],
        tenant_running={"acme": 3},
    )
    assert reasons(job(tenant="acme"), flow) == []
    assert reasons(job(tenant="beta"), replace(flow, tenant_running={"beta": 1})) == [
        Blocked.TENANT_LIMIT
    ]


def test_a_queue_is_held_back_by_its_pause_its_limit_its_workers_and_its_waiting_jobs() -> None:
    assert queue_blockers("default", SERVED) == []
    full = FlowSnapshot.of(
        paused_queues=["default"],
        limits=[LimitUse(Limit(LimitScope.QUEUE, "default", concurrency=2), running=2)],
        served_queues=["mail"],
    )
    assert [(b.reason, b.message) for b in queue_blockers("default", full, waiting=3)] == [
        (Blocked.WAITING_ON_PARENTS, "3 waiting on their parent jobs"),
        (Blocked.QUEUE_PAUSED, "queue default is paused"),
        (Blocked.QUEUE_LIMIT, "queue default is at its limit: 2 of 2 running"),
        (Blocked.NO_WORKER, "no live worker claims from queue default"),
    ]
    # A kind's limit holds back only that kind's jobs, not the queue.
    kind_full = FlowSnapshot.of(
        limits=[LimitUse(Limit(LimitScope.KIND, "email", concurrency=1), running=1)],
        served_queues=["default"],
    )
    assert queue_blockers("default", kind_full) == []


def test_a_kind_is_held_back_by_its_limits_and_by_no_live_worker_running_it() -> None:
    assert kind_blockers("email", SERVED) == []
    rated = FlowSnapshot.of(
        limits=[
            LimitUse(
                Limit(LimitScope.KIND, "email", rate=5, period=timedelta(minutes=1)),
                recent_starts=5,
            )
        ],
        served_queues=["default", "mail"],
        served_kinds={"default": ["pdf"], "mail": ["sms"]},
    )
    assert [(b.reason, b.message) for b in kind_blockers("email", rated)] == [
        (Blocked.KIND_RATE, "kind email used its 5 starts per minute"),
        (Blocked.NO_WORKER_FOR_KIND, "no live worker runs kind email"),
    ]
    # A worker that did not list its kinds may run any.
    anyone = FlowSnapshot.of(served_queues=["default"], served_kinds={"default": None})
    assert kind_blockers("email", anyone) == []
