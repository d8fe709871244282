"""Flow control rules: concurrency and rate limits, and fair claiming across tenants.

A claim picks due jobs in claim order (priority, then run_at, then id) within each tenant and,
when fair, takes the tenants in turns, so one tenant's backlog cannot starve another's few
jobs. Every candidate must fit every limit that applies to it: its queue's and its kind's
concurrency (running jobs whose lease is live, cluster-wide), its tenant's concurrency cap, and
its kind's and tenant's rate (starts within a sliding period). A tenant limit with key ``*``
applies to every tenant separately. These functions are pure: backends feed them the counts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from rota.domain.errors import InvalidInput, InvalidJob
from rota.domain.job import Job
from rota.domain.names import validate_name

#: A tenant limit with this key applies to each tenant on its own.
EVERY_TENANT = "*"
MAX_CONCURRENCY = 1_000_000
MAX_RATE = 10_000
MIN_PERIOD = timedelta(seconds=1)
MAX_PERIOD = timedelta(days=1)


class LimitScope(StrEnum):
    """What a limit counts."""

    QUEUE = "queue"  #: running jobs in a queue
    KIND = "kind"  #: running jobs (and starts) of a kind
    TENANT = "tenant"  #: running jobs (and starts) of a tenant


#: The identity of what a limit counts: (scope, queue / kind / tenant name).
Key = tuple[LimitScope, str]


@dataclass(frozen=True, slots=True)
class Limit:
    """At most ``concurrency`` running at once and at most ``rate`` starts per ``period``,
    cluster-wide, for the queue, kind or tenant named ``key``."""

    scope: LimitScope
    key: str
    concurrency: int | None = None
    rate: int | None = None
    period: timedelta | None = None

    def __post_init__(self) -> None:
        try:
            scope = LimitScope(self.scope)
        except ValueError:
            raise InvalidInput("limit scope must be queue, kind or tenant") from None
        object.__setattr__(self, "scope", scope)
        if not (scope is LimitScope.TENANT and self.key == EVERY_TENANT):
            try:
                validate_name(scope.value, self.key)
            except InvalidJob as error:
                raise InvalidInput(f"limit key: {error.reason}") from None
        if self.concurrency is None and self.rate is None:
            raise InvalidInput("a limit needs a concurrency, a rate, or both")
        if self.concurrency is not None and not _is_int_in(self.concurrency, 0, MAX_CONCURRENCY):
            raise InvalidInput(f"concurrency must be between 0 and {MAX_CONCURRENCY}")
        if self.rate is not None:
            if not _is_int_in(self.rate, 1, MAX_RATE):
                raise InvalidInput(f"rate must be between 1 and {MAX_RATE} starts")
            if self.period is None or not MIN_PERIOD <= self.period <= MAX_PERIOD:
                raise InvalidInput("a rate needs a period between 1 second and 1 day")
            if scope is LimitScope.QUEUE:
                raise InvalidInput("rates apply to kinds and tenants, not queues")
        elif self.period is not None:
            raise InvalidInput("a period needs a rate")

    @property
    def ident(self) -> Key:
        return (self.scope, self.key)


def _is_int_in(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def validate_queue(name: object) -> str:
    """``name`` if it is a valid queue name; InvalidInput saying why otherwise."""
    try:
        validate_name("queue", name)
    except InvalidJob as error:
        raise InvalidInput(str(error)) from None
    assert isinstance(name, str)
    return name


def limit_for(limits: Mapping[Key, Limit], scope: LimitScope, name: str) -> Limit | None:
    """The limit that applies to ``name`` in ``scope`` (a tenant falls back to ``*``)."""
    found = limits.get((scope, name))
    if found is None and scope is LimitScope.TENANT:
        found = limits.get((scope, EVERY_TENANT))
    return found


def counted_keys(job: Job) -> list[Key]:
    """What ``job`` counts against when it runs: its queue, its kind and its tenant."""
    keys: list[Key] = [(LimitScope.QUEUE, job.queue), (LimitScope.KIND, job.kind)]
    if job.tenant is not None:
        keys.append((LimitScope.TENANT, job.tenant))
    return keys


class Budget:
    """What one claim may still start, given live running counts and recent starts.

    ``running`` counts running jobs with a live lease per key; ``starts`` lists start instants
    per key (only those within a period matter). Built fresh for every claim, under whatever
    lock the backend uses to serialise limited claims.
    """

    def __init__(
        self,
        limits: Mapping[Key, Limit],
        running: Mapping[Key, int],
        starts: Mapping[Key, Sequence[datetime]],
        now: datetime,
    ) -> None:
        self._limits = limits
        self._running: dict[Key, int] = defaultdict(int, running)
        self._starts: dict[Key, int] = {}
        for key, instants in starts.items():
            scope, name = key
            limit = limit_for(limits, scope, name)
            if limit is not None and limit.rate is not None and limit.period is not None:
                window_start = now - limit.period
                self._starts[key] = sum(1 for instant in instants if instant > window_start)
        self.started: list[Key] = []

    def allows(self, job: Job) -> bool:
        for key in counted_keys(job):
            limit = limit_for(self._limits, *key)
            if limit is None:
                continue
            if limit.concurrency is not None and self._running[key] >= limit.concurrency:
                return False
            if limit.rate is not None and self._starts.get(key, 0) >= limit.rate:
                return False
        return True

    def exhausted(self) -> set[Key]:
        """Keys at their limit already: no job counting against one can start now."""
        full: set[Key] = set()
        for key, count in self._running.items():
            limit = limit_for(self._limits, *key)
            if limit is not None and limit.concurrency is not None and count >= limit.concurrency:
                full.add(key)
        for key, count in self._starts.items():
            limit = limit_for(self._limits, *key)
            if limit is not None and limit.rate is not None and count >= limit.rate:
                full.add(key)
        for ident, limit in self._limits.items():
            if limit.concurrency == 0 and ident[1] != EVERY_TENANT:
                full.add(ident)
        return full

    def take(self, job: Job) -> None:
        """Count ``job`` as started (call only after ``allows``)."""
        for key in counted_keys(job):
            limit = limit_for(self._limits, *key)
            if limit is None:
                continue
            self._running[key] += 1
            if limit.rate is not None:
                self._starts[key] = self._starts.get(key, 0) + 1
                self.started.append(key)


def claim_order(job: Job) -> tuple[int, datetime, int]:
    """The order claims take due jobs in: highest priority, then earliest run_at, then id."""
    return (-job.priority, job.run_at, job.id)


def interleave(candidates: Iterable[Job], *, fair: bool) -> list[Job]:
    """Candidates in the order a claim should consider them.

    Not fair: plain claim order. Fair: in turns, where turn n holds every tenant's n-th job
    (each tenant's jobs in claim order; jobs without a tenant form one more group) and a turn
    is itself in claim order, so a tenant with a huge backlog gets one job per turn like any
    other and priorities still count within a turn.
    """
    ordered = sorted(candidates, key=claim_order)
    if not fair:
        return ordered
    seen: dict[str | None, int] = defaultdict(int)
    turns: list[tuple[int, Job]] = []
    for job in ordered:
        turns.append((seen[job.tenant], job))
        seen[job.tenant] += 1
    turns.sort(key=lambda pair: (pair[0], claim_order(pair[1])))
    return [job for _, job in turns]


def select(
    candidates: Iterable[Job],
    *,
    limit: int,
    budget: Budget | None,
    fair: bool,
    alone: Callable[[Job], bool] = lambda job: False,
) -> list[Job]:
    """Up to ``limit`` jobs to claim: ``interleave`` order, skipping any job a limit forbids.

    A candidate whose attempt must run ``alone`` (``rota.domain.blame``) is claimed alone:
    first in line, it is the whole batch; further back, the batch ends before it (it leads a
    later claim).
    """
    chosen: list[Job] = []
    for job in interleave(candidates, fair=fair):
        if len(chosen) >= limit:
            break
        if budget is not None and not budget.allows(job):
            continue
        lone = alone(job)
        if lone and chosen:
            break
        if budget is not None:
            budget.take(job)
        chosen.append(job)
        if lone:
            break
    return chosen
