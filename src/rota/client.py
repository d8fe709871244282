"""Client: enqueue and query jobs from application code (the use cases next to the worker)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rota.domain.errors import InvalidJob
from rota.domain.job import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    Attempt,
    EnqueueResult,
    Job,
    JobSpec,
)
from rota.store.base import MAX_BULK, Counts, JobFilter, Page, Store, WorkerInfo


@dataclass(frozen=True, slots=True)
class KindDefaults:
    """What a kind's registration says about its jobs unless the enqueue says otherwise."""

    queue: str = DEFAULT_QUEUE
    priority: int = 0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    timeout: timedelta | None = None


def _no_defaults(kind: str) -> KindDefaults | None:
    return None


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

    async def list_jobs(
        self, filter: JobFilter | None = None, *, cursor: str | None = None, limit: int = 50
    ) -> Page:
        return await self.store.list_jobs(filter or JobFilter(), cursor=cursor, limit=limit)

    async def retry(self, job_id: int, *, max_attempts: int | None = None) -> Job:
        return await self.store.retry(job_id, max_attempts=max_attempts)

    async def cancel(self, job_id: int) -> Job:
        return await self.store.cancel(job_id)

    async def bulk_retry(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        return await self.store.bulk_retry(filter, limit=limit)

    async def bulk_cancel(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        return await self.store.bulk_cancel(filter, limit=limit)

    async def counts(self) -> Counts:
        return await self.store.counts()

    async def workers(self) -> list[WorkerInfo]:
        return await self.store.list_workers()


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
) -> JobSpec:
    """A validated JobSpec; ``defaults`` fill what is not given (None payload means {}).

    ``delay`` and ``timeout`` accept seconds as a number. Raises InvalidJob naming the field.
    """
    base = defaults or KindDefaults()
    return JobSpec(
        kind=kind,
        payload={} if payload is None else payload,
        queue=base.queue if queue is None else queue,
        priority=base.priority if priority is None else priority,
        run_at=run_at,
        delay=_seconds(delay, "delay"),
        max_attempts=base.max_attempts if max_attempts is None else max_attempts,
        tenant=tenant,
        unique_key=unique_key,
        timeout=base.timeout if timeout is None else _seconds(timeout, "timeout"),
    )


def _seconds(value: timedelta | float | None, field: str) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidJob(field, "must be a number of seconds or a timedelta")
    try:
        return timedelta(seconds=value)
    except (OverflowError, ValueError):
        raise InvalidJob(field, "is out of range") from None
