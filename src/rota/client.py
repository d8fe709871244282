"""Client: enqueue and query jobs from application code (the use cases next to the worker)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from rota.domain.durable import (
    DEFAULT_SIGNAL_EXPIRY,
    SignalResult,
    Step,
    check_duration,
    check_signal_key,
)
from rota.domain.errors import InvalidInput, InvalidJob
from rota.domain.flow import EVERY_TENANT, Limit, LimitScope, validate_queue
from rota.domain.job import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    Attempt,
    EnqueueResult,
    Job,
    JobEdit,
    JobSpec,
)
from rota.domain.job_state import JobState
from rota.domain.names import validate_name
from rota.domain.payload import encode_result
from rota.observability import tracing
from rota.store.base import Store
from rota.store.records import (
    MAX_BULK,
    MAX_PAGE_SIZE,
    Counts,
    JobFilter,
    LimitInfo,
    Page,
    QueueInfo,
    SchedulePage,
    WorkerInfo,
    decode_schedule_cursor,
    encode_schedule_cursor,
)


@dataclass(frozen=True, slots=True)
class KindDefaults:
    """What a kind's registration says about its jobs unless the enqueue says otherwise."""

    queue: str = DEFAULT_QUEUE
    priority: int = 0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    timeout: timedelta | None = None


#: What a kind without a registration gets: one shared instance, not one per spec.
NO_DEFAULTS = KindDefaults()


def _no_defaults(kind: str) -> KindDefaults | None:
    return None


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """A queue as operators see it: paused or not, its jobs by state, and its concurrency
    limit with the jobs counting against it (None without one).

    ``exact`` is False when the counts are estimates (large PostgreSQL tables).
    """

    name: str
    paused: bool
    counts: dict[JobState, int]
    limit: LimitInfo | None = None
    updated_at: datetime | None = None
    exact: bool = True

    def count(self, state: JobState) -> int:
        return self.counts.get(state, 0)


class Client:
    """Enqueue jobs and read or steer them. Safe to share between tasks."""

    def __init__(
        self,
        store: Store,
        *,
        defaults: Callable[[str], KindDefaults | None] = _no_defaults,
    ) -> None:
        self.store = store
        self._defaults = defaults

    def spec(self, kind: str, payload: Any = None, **options: Any) -> JobSpec:
        """A validated JobSpec with the kind's registered defaults; see ``job_spec``."""
        return job_spec(kind, payload, defaults=self._defaults(kind), **options)

    async def enqueue(self, kind: str, payload: Any = None, **options: Any) -> EnqueueResult:
        """Enqueue one job; see ``spec`` for the options. Returns the job and whether an
        active job already held its unique key (then nothing new was inserted)."""
        [result] = await self.store.enqueue([self.spec(kind, payload, **options)])
        return result

    async def enqueue_many(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """Enqueue many jobs atomically, in one round trip where the backend allows."""
        return await self.store.enqueue(specs)

    async def get(self, job_id: int) -> Job:
        return await self.store.get(job_id)

    async def attempts(self, job_id: int) -> list[Attempt]:
        return await self.store.attempts(job_id)

    async def steps(self, job_id: int) -> list[Step]:
        """A durable job's records (steps, sleeps, waits), in the order they began."""
        return await self.store.steps(job_id)

    async def signal(
        self, key: str, data: Any = None, *, expire_after: timedelta | float | None = None
    ) -> SignalResult:
        """Send ``data`` (JSON, at most 64 KiB) to the job waiting for ``key``
        (``ctx.wait_for``); with none waiting it is kept for ``expire_after`` (a day by
        default) for the next wait. InvalidInput (nothing sent) for a bad key or data."""
        check_signal_key(key)
        expire = (
            DEFAULT_SIGNAL_EXPIRY
            if expire_after is None
            else check_duration(expire_after, "expire_after")
        )
        try:
            text = encode_result(data)
        except InvalidJob as error:
            raise InvalidInput(f"signal data: {error.reason}") from None
        return await self.store.signal(key, text, expire_after=expire)

    async def list_jobs(
        self,
        filter: JobFilter | None = None,
        *,
        cursor: str | None = None,
        limit: int = 50,
        previews: bool = False,
    ) -> Page:
        return await self.store.list_jobs(
            filter or JobFilter(), cursor=cursor, limit=limit, previews=previews
        )

    async def list_schedules(
        self, *, cursor: str | None = None, limit: int = 50, due_first: bool = False
    ) -> SchedulePage:
        """Schedules by name, one keyset page at a time; ``due_first``: the unpaused ones
        soonest due, in one page (with a cursor: the empty page after it). InvalidCursor,
        InvalidInput."""
        after = decode_schedule_cursor(cursor) if cursor else None
        if not 1 <= limit <= MAX_PAGE_SIZE:
            raise InvalidInput(f"limit must be between 1 and {MAX_PAGE_SIZE}")
        if due_first and after is not None:
            return SchedulePage([], None)  # the soonest due come in one page: none after it
        listed = await self.store.list_schedules(after=after, limit=limit + 1, due_first=due_first)
        page = listed[:limit]
        more = len(listed) > limit and not due_first
        return SchedulePage(page, encode_schedule_cursor(page[-1].name) if more else None)

    async def retry(self, job_id: int, *, max_attempts: int | None = None) -> Job:
        return await self.store.retry(job_id, max_attempts=max_attempts)

    async def cancel(self, job_id: int) -> Job:
        return await self.store.cancel(job_id)

    async def bulk_retry(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        return await self.store.bulk_retry(filter, limit=limit)

    async def bulk_cancel(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        return await self.store.bulk_cancel(filter, limit=limit)

    async def hold(self, job_id: int) -> Job:
        """Hold a waiting or pending job: no worker claims it until ``release``. JobNotFound;
        StateConflict in any other state (a running job cannot be held: cancel it)."""
        return await self.store.hold(job_id)

    async def release(self, job_id: int) -> Job:
        """Put a held job back: waiting while parents are left, else pending at its run_at.
        JobNotFound; StateConflict unless it is held."""
        return await self.store.release_held(job_id)

    async def bulk_hold(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        """Hold up to ``limit`` waiting or pending jobs matching ``filter``; how many."""
        return await self.store.bulk_hold(filter, limit=limit)

    async def bulk_release(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        """Release up to ``limit`` held jobs matching ``filter``; how many."""
        return await self.store.bulk_release_held(filter, limit=limit)

    async def rerun(self, job_id: int) -> Job:
        """Run a succeeded job again: a new attempt series, earlier attempts kept in its
        history. JobNotFound; StateConflict in any other state or while another active job
        holds its unique key."""
        return await self.store.rerun(job_id)

    async def delete(self, job_id: int) -> Job:
        """Remove a pending or finished job with its history; returns it as it was.
        JobNotFound; JobRunning while a worker holds it (cancel first)."""
        return await self.store.delete(job_id)

    async def reschedule(
        self,
        job_id: int,
        *,
        run_at: datetime | Literal["now"] | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> Job:
        """Change a pending job's run_at (``"now"``: due at once), priority and/or queue; what
        is not given is kept. InvalidJob naming the field (nothing changes); JobNotFound;
        JobRunning when a worker claimed it, even a moment before; StateConflict once it
        finished."""
        edit = JobEdit(
            run_at=None if run_at == "now" else run_at,
            run_now=run_at == "now",
            priority=priority,
            queue=queue,
        )
        return await self.store.reschedule(job_id, edit)

    async def purge(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        """Delete up to ``limit`` finished jobs matching ``filter``; returns how many."""
        return await self.store.purge(filter, limit=limit)

    async def counts(self) -> Counts:
        return await self.store.counts()

    async def workers(self) -> list[WorkerInfo]:
        return await self.store.list_workers()

    # ------------------------------------------------------------------ flow control

    async def pause_queue(self, name: str) -> QueueInfo:
        """Stop claims from queue ``name`` cluster-wide until it is resumed; running jobs
        finish. A queue may be paused before it has any jobs. InvalidInput for a bad name."""
        return await self.store.pause_queue(validate_queue(name))

    async def resume_queue(self, name: str) -> QueueInfo:
        """Let workers claim from queue ``name`` again. InvalidInput for a bad name."""
        return await self.store.resume_queue(validate_queue(name))

    async def queues(self) -> list[QueueStatus]:
        """Every queue that has jobs, settings or a concurrency limit, by name."""
        settings = {info.name: info for info in await self.store.list_queues()}
        counts = await self.store.counts()
        limits = {
            info.limit.key: info
            for info in await self.store.list_limits()
            if info.limit.scope is LimitScope.QUEUE
        }
        names = sorted(settings.keys() | counts.by_queue.keys() | limits.keys())
        statuses = []
        for name in names:
            info = settings.get(name)
            statuses.append(
                QueueStatus(
                    name=name,
                    paused=info is not None and info.paused,
                    counts=dict(counts.by_queue.get(name, {})),
                    limit=limits.get(name),
                    updated_at=info.updated_at if info is not None else None,
                    exact=counts.exact,
                )
            )
        return statuses

    async def set_limit(self, limit: Limit) -> Limit:
        """Add ``limit``, or replace the limit with its scope and key; see ``limit_spec``."""
        await self.store.set_limit(limit)
        return limit

    async def delete_limit(self, scope: LimitScope | str, key: str) -> bool:
        """Remove the limit for (scope, key); False if there was none. InvalidInput for a
        scope or key no limit can have."""
        target, name = limit_target(scope, key)
        return await self.store.delete_limit(target, name)

    async def limits(self) -> list[LimitInfo]:
        """Every limit with its current use (running jobs, starts in the current period)."""
        return await self.store.list_limits()

    async def running_by_tenant(self) -> dict[str, int]:
        """Jobs running with a live lease, per tenant (jobs without a tenant not counted)."""
        return await self.store.running_by_tenant()


def job_spec(
    kind: str,
    payload: Any = None,
    *,
    defaults: KindDefaults | None = None,
    delay: timedelta | float | None = None,
    run_at: datetime | None = None,
    priority: int | None = None,
    queue: str | None = None,
    tenant: str | None = None,
    unique_key: str | None = None,
    max_attempts: int | None = None,
    timeout: timedelta | float | None = None,
    expires_at: datetime | None = None,
    expire_after: timedelta | float | None = None,
    unique_for: timedelta | float | None = None,
    unique_states: Iterable[JobState | str] | None = None,
    on_conflict: str = "skip",
) -> JobSpec:
    """A validated JobSpec; ``defaults`` fill what is not given (None payload means {}).

    ``delay``, ``timeout``, ``expire_after`` and ``unique_for`` accept seconds as a number.
    Raises InvalidJob naming the field.
    """
    base = defaults or NO_DEFAULTS
    chosen_timeout = base.timeout
    # The common spec (enqueue_many makes one per job) names none of the other options, and
    # JobSpec is given none of them to take and check; the rest are converted in their order
    # (the first bad one is the one named).
    options: dict[str, Any] = {}
    if not (
        run_at is None
        and delay is None
        and unique_key is None
        and timeout is None
        and expires_at is None
        and expire_after is None
        and unique_for is None
        and unique_states is None
        and on_conflict == "skip"
    ):
        options["run_at"] = run_at
        options["delay"] = _seconds(delay, "delay")
        options["unique_key"] = unique_key
        if timeout is not None:
            chosen_timeout = _seconds(timeout, "timeout")
        options["expires_at"] = expires_at
        options["expire_after"] = _seconds(expire_after, "expire_after")
        options["unique_for"] = _seconds(unique_for, "unique_for")
        options["unique_states"] = _states(unique_states)
        options["on_conflict"] = on_conflict
    spec = JobSpec(
        kind=kind,
        payload={} if payload is None else payload,
        queue=base.queue if queue is None else queue,
        priority=base.priority if priority is None else priority,
        max_attempts=base.max_attempts if max_attempts is None else max_attempts,
        tenant=tenant,
        timeout=chosen_timeout,
        **options,
    )
    return tracing.created(spec)


def limit_spec(
    *,
    kind: str | None = None,
    queue: str | None = None,
    tenant: str | None = None,
    concurrency: int | None = None,
    rate: int | None = None,
    per: timedelta | float | None = None,
) -> Limit:
    """A validated Limit on exactly one of ``kind``, ``queue`` or ``tenant`` (``"*"``: each
    tenant separately): at most ``concurrency`` running at once, at most ``rate`` starts
    ``per`` period (a timedelta or seconds), or both.

    Raises InvalidInput saying what is wrong: no target or several, neither a concurrency
    nor a rate, a rate without ``per`` (or the reverse), a rate on a queue, out-of-range values.
    """
    scope, name = limit_selected(kind=kind, queue=queue, tenant=tenant)
    if concurrency is None and rate is None:
        raise InvalidInput("give a limit a concurrency, a rate (with per), or both")
    if rate is not None and per is None:
        raise InvalidInput("a rate needs per: how long the period is, e.g. timedelta(minutes=1)")
    if per is not None and rate is None:
        raise InvalidInput("per needs a rate: how many starts the period allows")
    try:
        period = _seconds(per, "per")
    except InvalidJob as error:
        raise InvalidInput(str(error)) from None
    return Limit(scope, name, concurrency=concurrency, rate=rate, period=period)


def limit_selected(
    *, kind: str | None = None, queue: str | None = None, tenant: str | None = None
) -> tuple[LimitScope, str]:
    """(scope, key) for the one of ``kind``, ``queue`` or ``tenant`` given; InvalidInput
    unless exactly one is."""
    given = [
        (scope, name)
        for scope, name in (
            (LimitScope.KIND, kind),
            (LimitScope.QUEUE, queue),
            (LimitScope.TENANT, tenant),
        )
        if name is not None
    ]
    if len(given) != 1:
        raise InvalidInput("a limit applies to exactly one of kind, queue or tenant")
    return given[0]


def limit_target(scope: LimitScope | str, key: str) -> tuple[LimitScope, str]:
    """(scope, key) if a limit could have them; InvalidInput saying why otherwise."""
    try:
        target = LimitScope(scope)
    except ValueError:
        raise InvalidInput("limit scope must be queue, kind or tenant") from None
    if not (target is LimitScope.TENANT and key == EVERY_TENANT):
        try:
            validate_name(target.value, key)
        except InvalidJob as error:
            raise InvalidInput(f"limit key: {error.reason}") from None
    return target, key


def _states(states: Iterable[JobState | str] | None) -> frozenset[JobState] | None:
    if states is None:
        return None
    if isinstance(states, str):
        raise InvalidJob("unique_states", "must be a collection of job states")
    try:
        return frozenset(JobState(state) for state in states)
    except (TypeError, ValueError):
        names = ", ".join(state.value for state in JobState)
        raise InvalidJob("unique_states", f"must be job states ({names})") from None


def _seconds(value: timedelta | float | None, field: str) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidJob(field, "must be a number of seconds or a timedelta")
    try:
        seconds = timedelta(seconds=value)
    except (OverflowError, ValueError):
        raise InvalidJob(field, "is out of range") from None
    if value < 0 and not seconds:
        # Rounding to microseconds never turns a negative value into an accepted zero.
        return -timedelta(microseconds=1)
    return seconds
