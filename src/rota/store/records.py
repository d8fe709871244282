"""The values the Store contract takes and returns: job filters, pages and their cursors,
counts, throughput buckets, queue, limit and worker information (store/base.py)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rota.domain.audit import AuditEntry
from rota.domain.errors import InvalidCursor, InvalidInput
from rota.domain.flow import Limit
from rota.domain.job import Job
from rota.domain.job_state import JobState
from rota.domain.lease import Lease
from rota.domain.names import validate_name
from rota.domain.schedule_state import Schedule

MAX_PAGE_SIZE = 500
MAX_BULK = 10_000
#: How many edges one page of a workflow carries at most (Store.workflow with a limit): the
#: parents of a job beyond them are paged by Store.related.
MAX_PAGE_EDGES = 1_000
#: A worker is alive while its last heartbeat is at most this many heartbeat intervals old.
ALIVE_BEATS = 3


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs a list or bulk action covers; ``None`` fields do not filter."""

    states: frozenset[JobState] | None = None
    kind: str | None = None
    queue: str | None = None
    tenant: str | None = None
    schedule: str | None = None
    #: The workflow's id (its first job's): only the jobs of that workflow.
    workflow: int | None = None
    #: A job id or an exact unique key.
    search: str | None = None

    @property
    def search_id(self) -> int | None:
        """The search term as a job id, when it is one."""
        # ASCII only: str.isdigit() also accepts superscripts and other scripts' digits.
        search = self.search
        if search is not None and search.isascii() and search.isdigit() and len(search) < 19:
            return int(search)
        return None


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a job list, newest first, and the cursor of the next page (None at the end)."""

    jobs: list[Job]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class AuditPage:
    """One page of audit entries, newest first, and the cursor of the next (None at the end)."""

    entries: list[AuditEntry]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class SchedulePage:
    """One page of schedules by name, and the cursor of the next page (None at the end)."""

    schedules: list[Schedule]
    next_cursor: str | None


#: A job list's keyset cursor: the id of the last job on the page, in ASCII digits. Any such
#: text is a valid position, so the API can describe its cursors exactly.
JOB_CURSOR_PATTERN = re.compile(r"[0-9]{1,18}")


def encode_cursor(last_id: int) -> str:
    """The keyset cursor after ``last_id``: the id itself."""
    return str(last_id)


def decode_cursor(cursor: str) -> int:
    """The job id a cursor points after; InvalidCursor for anything else."""
    if JOB_CURSOR_PATTERN.fullmatch(cursor) is None:
        raise InvalidCursor("cursor is not valid")
    return int(cursor)


def encode_schedule_cursor(last_name: str) -> str:
    """The keyset cursor of schedules after ``last_name``: the name itself."""
    return last_name


def decode_schedule_cursor(cursor: str) -> str:
    """The schedule name a cursor points after (any valid name is a position in the order);
    InvalidCursor for anything else."""
    try:
        validate_name("cursor", cursor)
    except InvalidInput:
        raise InvalidCursor("cursor is not valid") from None
    return cursor


def check_schedule_listing(after: str | None, limit: int | None, due_first: bool) -> None:
    """Refuse (InvalidInput) what ``Store.list_schedules`` cannot answer."""
    if limit is not None and limit < 1:
        raise InvalidInput("limit must be at least 1")
    if due_first and after is not None:
        raise InvalidInput("schedules due first come in one page: no cursor")


@dataclass(frozen=True, slots=True)
class Counts:
    """Job counts by state, overall and per queue, and the run_at of the oldest due job.

    ``exact`` is False when a backend answered from estimates (large PostgreSQL tables).
    """

    by_state: dict[JobState, int]
    by_queue: dict[str, dict[JobState, int]]
    oldest_due_at: datetime | None = None
    exact: bool = True

    def total(self, state: JobState) -> int:
        return self.by_state.get(state, 0)


@dataclass(frozen=True, slots=True)
class Counted:
    """How many jobs match a filter: ``n`` exactly, or about ``n`` when ``estimated`` (more
    jobs matched than the store counts one by one: see ``Store.count_or_estimate``)."""

    n: int
    estimated: bool = False


@dataclass(frozen=True, slots=True)
class ThroughputBucket:
    """Jobs that reached a terminal state during [start, start + bucket)."""

    start: datetime
    succeeded: int = 0
    dead: int = 0
    cancelled: int = 0


MAX_BUCKETS = 1000


def bucketize(
    finished: Iterable[tuple[datetime, JobState, int]],
    since: datetime,
    bucket: timedelta,
    now: datetime,
) -> list[ThroughputBucket]:
    """Add up (finished_at, state, count) triples into buckets from ``since`` up to ``now``.

    Raises InvalidInput for a non-positive bucket or more than MAX_BUCKETS buckets.
    """
    if bucket <= timedelta(0):
        raise InvalidInput("bucket must be positive")
    count = max(0, math.ceil((now - since) / bucket))
    if count > MAX_BUCKETS:
        raise InvalidInput(f"at most {MAX_BUCKETS} buckets")
    tallies = [[0, 0, 0] for _ in range(count)]
    column = {JobState.SUCCEEDED: 0, JobState.DEAD: 1, JobState.CANCELLED: 2}
    for finished_at, state, n in finished:
        if state in column and since <= finished_at < now:
            tallies[int((finished_at - since) / bucket)][column[state]] += n
    return [
        ThroughputBucket(since + i * bucket, succeeded=s, dead=d, cancelled=c)
        for i, (s, d, c) in enumerate(tallies)
    ]


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue's settings (queues without settings are simply not paused)."""

    name: str
    paused: bool = False
    updated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class LimitInfo:
    """A limit and how much of it is in use: running jobs with a live lease, and starts in
    the current period (for ``*`` tenant limits, summed over every tenant)."""

    limit: Limit
    running: int = 0
    recent_starts: int = 0


@dataclass(frozen=True, slots=True)
class RescueResult:
    """What a rescue pass did: expired leases made dead (see ``Store.rescue``) or pending again."""

    dead: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    #: Pending jobs cancelled as expired (``Store.expire``), by the rescuer that called both.
    expired: list[int] = field(default_factory=list)
    #: Pending jobs ended dead because no live worker runs their kind (``Store.end_unrunnable``).
    unrunnable: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Beat:
    """What a heartbeat did: the leases it found lost, and the store's clock as it renewed the
    others (their lease_until is ``now`` + the lease), for a worker to measure its own clock
    against."""

    lost: list[Lease]
    now: datetime


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker's row in the registry."""

    name: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    started_at: datetime | None = None
    beat_at: datetime | None = None
    running: int = 0
    #: The kinds the worker runs; None when it did not say (it may run any kind).
    kinds: tuple[str, ...] | None = None
    #: The worker's own heartbeat interval; None for one that did not record it (registered
    #: before migration 026).
    heartbeat: timedelta | None = None

    def heartbeat_age(self, now: datetime) -> timedelta | None:
        """How long ago, by the store's clock ``now``, the worker last beat (None: never)."""
        return None if self.beat_at is None else now - self.beat_at

    def is_alive(self, now: datetime, heartbeat: timedelta) -> bool:
        """Whether the worker beat within ALIVE_BEATS of its own heartbeat intervals before
        ``now`` (the store's clock): one late beat, under load, does not make a worker look
        gone. ``heartbeat`` stands in for the interval of a worker that did not record one."""
        age = self.heartbeat_age(now)
        return age is not None and age <= ALIVE_BEATS * (self.heartbeat or heartbeat)


def kinds_by_queue(
    workers: Iterable[tuple[Iterable[str], Iterable[str] | None]],
) -> dict[str, set[str] | None]:
    """The kinds the live ``workers`` (their queues and listed kinds) run, by queue: None for a
    queue one of whose workers did not list its kinds (it may run any). For end_unrunnable."""
    served: dict[str, set[str] | None] = {}
    for queues, kinds in workers:
        for queue in queues:
            known = served.setdefault(queue, set())
            if known is None or kinds is None:
                served[queue] = None
            else:
                known.update(kinds)
    return served
