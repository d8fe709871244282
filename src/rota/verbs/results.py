"""``app.results``: wait for jobs to finish and take what their handlers returned."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Iterable
from datetime import timedelta
from typing import Any

from rota.domain.job import Job
from rota.verbs.binding import Binding, SyncBridge


class Results:
    """``await app.results.get(job_id)``, ``gather(ids)``, ``as_completed(ids)``."""

    def __init__(self, binding: Binding) -> None:
        self._binding = binding

    async def get(
        self,
        job_id: int,
        *,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109 (raised as ResultTimeout)
    ) -> Any:
        """Wait until the job finishes and return what its handler returned (None for None).

        Raises JobFailed (it went dead; ``.error`` is its last error), JobCancelled,
        JobNotFound, or ResultTimeout (a TimeoutError) once ``timeout`` (seconds or a
        timedelta; None waits for ever) passes: the job itself carries on. On PostgreSQL the
        wait is woken by a notification when the job finishes; on SQLite it polls.
        """
        return await (await self._binding.waiter()).result(job_id, timeout=timeout)

    async def gather(
        self,
        job_ids: Iterable[int],
        *,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109 (raised as ResultTimeout)
    ) -> list[Any]:
        """Wait for every job; their results in the order given, with one query per wake-up
        for all of them. Raises as ``get`` does, as soon as one job is seen to fail."""
        return await (await self._binding.waiter()).results(job_ids, timeout=timeout)

    async def as_completed(
        self,
        job_ids: Iterable[int],
        *,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109 (raised as ResultTimeout)
    ) -> AsyncGenerator[Job, None]:
        """Each job as it finishes (succeeded, dead or cancelled), in the order seen:
        ``job.result``, ``job.state`` and ``job.last_error`` say how it ended. ``timeout``
        bounds the whole iteration (ResultTimeout)."""
        waiter = await self._binding.waiter()
        async with contextlib.aclosing(waiter.as_completed(job_ids, timeout=timeout)) as jobs:
            async for job in jobs:
                yield job

    def get_sync(self, job_id: int, *, timeout: timedelta | float | None = None) -> Any:
        """``get`` for synchronous code (Django, Flask)."""

        async def call(bridge: SyncBridge) -> Any:
            return await (await bridge.waiter()).result(job_id, timeout=timeout)

        return self._binding.on_bridge(call)
