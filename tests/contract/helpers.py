"""Small conveniences for contract tests."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from rota.domain.job import Job, JobSpec
from rota.store import Store
from rota.testing import FakeClock

LEASE = timedelta(seconds=30)


async def add(store: Store, kind: str = "a", **fields: Any) -> Job:
    """Enqueue one job and return it."""
    [result] = await store.enqueue([JobSpec(kind=kind, **fields)])
    return result.job


async def claim_one(
    store: Store,
    worker: str = "w",
    *,
    queues: tuple[str, ...] = ("default",),
    lease: timedelta = LEASE,
) -> Job | None:
    jobs = await store.claim(worker, queues=queues, limit=1, lease=lease)
    return jobs[0] if jobs else None


async def claimed(store: Store, worker: str = "w", **fields: Any) -> Job:
    """A job enqueued (with ``fields``) and claimed by ``worker``."""
    await add(store, **fields)
    job = await claim_one(store, worker)
    assert job is not None
    return job


async def reclaimed(store: Store, clock: FakeClock) -> tuple[Job, Job]:
    """A job claimed by A, whose lease expired and which B then claimed."""
    await add(store)
    a = await claim_one(store, "A", lease=timedelta(seconds=5))
    clock.advance(timedelta(seconds=6))
    b = await claim_one(store, "B")
    assert a is not None and b is not None
    return a, b
