"""Why a job that should run is not running: what holds back a waiting or pending job.

A pending job is claimed once it is due, its queue is not paused, every limit that applies to
it has room (rota.domain.flow) and some live worker claims from its queue. ``blockers`` names
each of those that fails, given a snapshot of the flow-control state, so an operator sees at a
glance "queue paused" or "kind limit full" instead of guessing. It is an explanation, not a
promise: the state moves on, and a job with no blocker simply waits for a free worker slot
behind jobs of higher priority. These functions are pure; the API feeds them the store's state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from rota.domain.flow import EVERY_TENANT, Key, Limit, LimitScope, counted_keys, limit_for
from rota.domain.job import Job
from rota.domain.job_state import JobState
from rota.domain.wording import counted


class Blocked(StrEnum):
    """What holds a job back (the same strings in the API)."""

    HELD = "held"  #: an operator holds it (``hold``): no claim takes it until released
    WAITING_ON_PARENTS = "waiting_on_parents"  #: a workflow job whose parents have not finished
    NOT_DUE = "not_due"  #: run_at is after the store's now (a delay, or a retry's backoff)
    QUEUE_PAUSED = "queue_paused"
    QUEUE_LIMIT = "queue_limit"  #: the queue's concurrency limit is full
    KIND_LIMIT = "kind_limit"  #: the kind's concurrency limit is full
    TENANT_LIMIT = "tenant_limit"  #: the tenant's concurrency cap is full
    KIND_RATE = "kind_rate"  #: the kind's rate limit used its starts for the period
    TENANT_RATE = "tenant_rate"  #: the tenant's rate limit used its starts for the period
    NO_WORKER = "no_worker"  #: no live worker claims from the job's queue
    #: the live workers of the job's queue all listed their kinds, none of them the job's
    NO_WORKER_FOR_KIND = "no_worker_for_kind"


@dataclass(frozen=True, slots=True)
class Blocker:
    """One reason a job is not running. ``certain`` is False when the snapshot cannot tell
    for this job alone (a rate limit on every tenant is counted across all of them)."""

    reason: Blocked
    message: str
    certain: bool = True


@dataclass(frozen=True, slots=True)
class LimitUse:
    """A limit and its use now: running jobs with a live lease and starts in its period (for
    the ``*`` tenant limit, both summed over every tenant)."""

    limit: Limit
    running: int = 0
    recent_starts: int = 0


@dataclass(frozen=True, slots=True)
class FlowSnapshot:
    """The flow-control state a claim decides by, read once for any number of jobs."""

    paused_queues: frozenset[str] = frozenset()
    limits: Mapping[Key, LimitUse] = field(default_factory=dict)
    #: Jobs running with a live lease per tenant (for the ``*`` tenant concurrency cap).
    tenant_running: Mapping[str, int] = field(default_factory=dict)
    #: Queues some live worker claims from; None when unknown (then never a blocker).
    served_queues: frozenset[str] | None = None
    #: The kinds the live workers of each served queue run; a queue is absent, or None, when
    #: one of its workers did not list its kinds (it may run any).
    served_kinds: Mapping[str, frozenset[str] | None] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        *,
        paused_queues: Iterable[str] = (),
        limits: Iterable[LimitUse] = (),
        tenant_running: Mapping[str, int] | None = None,
        served_queues: Iterable[str] | None = None,
        served_kinds: Mapping[str, Iterable[str] | None] | None = None,
    ) -> FlowSnapshot:
        return cls(
            paused_queues=frozenset(paused_queues),
            limits={use.limit.ident: use for use in limits},
            tenant_running=dict(tenant_running or {}),
            served_queues=None if served_queues is None else frozenset(served_queues),
            served_kinds={
                queue: None if kinds is None else frozenset(kinds)
                for queue, kinds in (served_kinds or {}).items()
            },
        )

    @property
    def needs_tenant_running(self) -> bool:
        """Whether a concurrency cap on every tenant makes per-tenant running counts matter."""
        every = self.limits.get((LimitScope.TENANT, EVERY_TENANT))
        return every is not None and every.limit.concurrency is not None


def is_held(job: Job) -> bool:
    """Whether ``job`` is in a state ``blockers`` explains: waiting, pending or held."""
    return job.state in (JobState.WAITING, JobState.PENDING, JobState.HELD)


def blockers(job: Job, now: datetime, flow: FlowSnapshot) -> list[Blocker]:
    """Every reason ``job`` (waiting, pending or held) is not running at ``now``, the store's
    clock, most basic first; empty for a due job nothing holds back, and for jobs in other
    states. A held job says so first, then what would still hold it back once released."""
    if not is_held(job):
        return []
    found: list[Blocker] = []
    if job.state is JobState.HELD:
        found.append(
            Blocker(Blocked.HELD, "held by an operator: no worker claims it until released")
        )
    if job.state is JobState.WAITING or (job.state is JobState.HELD and job.waiting_on > 0):
        found.append(
            Blocker(
                Blocked.WAITING_ON_PARENTS,
                f"waiting on {counted(job.waiting_on, 'parent job')} to finish",
            )
        )
    elif job.run_at > now:
        found.append(
            Blocker(
                Blocked.NOT_DUE,
                "waiting out its retry backoff" if job.attempt > 0 else "not due yet",
            )
        )
    if job.queue in flow.paused_queues:
        found.append(Blocker(Blocked.QUEUE_PAUSED, f"queue {job.queue} is paused"))
    for scope, name in counted_keys(job):
        found.extend(_limit_blockers(flow, scope, name))
    if flow.served_queues is not None and job.queue not in flow.served_queues:
        found.append(Blocker(Blocked.NO_WORKER, f"no live worker claims from queue {job.queue}"))
    elif (kinds := flow.served_kinds.get(job.queue)) is not None and job.kind not in kinds:
        found.append(
            Blocker(
                Blocked.NO_WORKER_FOR_KIND,
                f"no live worker of queue {job.queue} runs kind {job.kind} (a deploy pending?)",
            )
        )
    return found


_CONCURRENCY = {
    LimitScope.QUEUE: Blocked.QUEUE_LIMIT,
    LimitScope.KIND: Blocked.KIND_LIMIT,
    LimitScope.TENANT: Blocked.TENANT_LIMIT,
}
_RATE = {LimitScope.KIND: Blocked.KIND_RATE, LimitScope.TENANT: Blocked.TENANT_RATE}


def _limit_blockers(flow: FlowSnapshot, scope: LimitScope, name: str) -> list[Blocker]:
    limits = {ident: use.limit for ident, use in flow.limits.items()}
    limit = limit_for(limits, scope, name)
    if limit is None:
        return []
    use = flow.limits[limit.ident]
    every = limit.key == EVERY_TENANT
    label = f"{scope.value} {name}"
    found = []
    if limit.concurrency is not None:
        running = flow.tenant_running.get(name, 0) if every else use.running
        if running >= limit.concurrency:
            cap = "each tenant's cap" if every else "its limit"
            found.append(
                Blocker(
                    _CONCURRENCY[scope],
                    f"{label} is at {cap}: {running} of {limit.concurrency} running",
                )
            )
    if limit.rate is not None and limit.period is not None and scope in _RATE:
        period = _period_text(limit.period.total_seconds())
        # Starts on every tenant are counted together: below the rate, no tenant can have
        # used its own; at or above it, this one may have.
        if use.recent_starts >= limit.rate:
            if every:
                message = (
                    f"tenant {name} may have used its {limit.rate} starts per {period} "
                    f"({use.recent_starts} across every tenant)"
                )
            else:
                message = f"{label} used its {limit.rate} starts per {period}"
            found.append(Blocker(_RATE[scope], message, certain=not every))
    return found


def _period_text(seconds: float) -> str:
    names = {1: "second", 60: "minute", 3600: "hour", 86400: "day"}
    whole = int(seconds)
    if whole == seconds and whole in names:
        return names[whole]
    return f"{seconds:g} s"


def queue_blockers(queue: str, flow: FlowSnapshot, *, waiting: int = 0) -> list[Blocker]:
    """What holds back the jobs of ``queue`` as a whole now: paused, its concurrency limit
    full, no live worker claiming from it, and ``waiting`` jobs waiting on their parents.
    Limits of a kind or tenant hold back only some of its jobs: each job's own ``blockers``
    names them."""
    found: list[Blocker] = []
    if waiting:
        found.append(Blocker(Blocked.WAITING_ON_PARENTS, f"{waiting} waiting on their parent jobs"))
    if queue in flow.paused_queues:
        found.append(Blocker(Blocked.QUEUE_PAUSED, f"queue {queue} is paused"))
    found.extend(_limit_blockers(flow, LimitScope.QUEUE, queue))
    if flow.served_queues is not None and queue not in flow.served_queues:
        found.append(Blocker(Blocked.NO_WORKER, f"no live worker claims from queue {queue}"))
    return found


def kind_blockers(kind: str, flow: FlowSnapshot) -> list[Blocker]:
    """What holds back the jobs of ``kind`` as a whole now: its concurrency or rate limit
    used up, or no live worker that runs it (every live worker listed its kinds, none this
    one)."""
    found = _limit_blockers(flow, LimitScope.KIND, kind)
    served = flow.served_queues
    if served is not None and not any(
        (kinds := flow.served_kinds.get(queue)) is None or kind in kinds for queue in served
    ):
        found.append(Blocker(Blocked.NO_WORKER_FOR_KIND, f"no live worker runs kind {kind}"))
    return found
