"""Small conveniences for contract tests."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from rota.domain.job import Job, JobSpec
from rota.store import Store

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
