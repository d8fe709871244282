"""Results: waiting from application code until jobs finish, and what they returned.

A wait tells the store which jobs it waits for (``Store.expect_finished``: on PostgreSQL only
the writes finishing those jobs NOTIFY), asks about every job it still waits on in one query
(``Store.get_many``), then sleeps until the store says some job finished
(``Store.watch_finished``: LISTEN/NOTIFY on PostgreSQL, an in-process hook on the memory store)
or a poll interval passes. Where the store
pushes nothing (SQLite: other processes' completions cannot be heard) the interval starts
short and doubles up to ``POLL_CAP_S``; where it pushes, the interval is only a safety net
(``PUSHED_POLL_S``) for a notification lost with a connection. Waiting on a thousand jobs is
one query per wake-up, not a thousand.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Iterable
from datetime import timedelta
from typing import Any

from rota.domain.errors import (
    InvalidInput,
    JobCancelled,
    JobFailed,
    JobNotFound,
    ResultTimeout,
)
from rota.domain.job import Job
from rota.domain.job_state import JobState
from rota.store.base import Store

log = logging.getLogger("rota.results")

#: The first poll interval after a look that found jobs still running.
FIRST_POLL_S = 0.01
#: The longest poll interval where the store pushes nothing (SQLite).
POLL_CAP_S = 0.25
#: The poll interval where the store pushes terminal transitions: a safety net only.
PUSHED_POLL_S = 5.0


def outcome(job: Job) -> Any:
    """A finished job's result; JobFailed (dead, with its last error) or JobCancelled."""
    if job.state is JobState.SUCCEEDED:
        return job.result
    if job.state is JobState.DEAD:
        raise JobFailed(job.id, job.last_error, job)
    if job.state is JobState.CANCELLED:
        raise JobCancelled(job.id, job)
    raise InvalidInput(f"job {job.id} has not finished: it is {job.state}")


def timeout_seconds(timeout: timedelta | float | None) -> float | None:
    """A wait's timeout in seconds (None: no limit); InvalidInput for a negative one."""
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise InvalidInput("timeout must be a timedelta or a number of seconds")
    else:
        seconds = float(timeout)
    if not seconds >= 0:
        raise InvalidInput("timeout must not be negative")
    return seconds


class ResultWaiter:
    """Waits for jobs of one store, on one event loop; one watch of the store serves every
    wait. ``close()`` ends the watch."""

    def __init__(
        self,
        store: Store,
        *,
        poll_cap_s: float = POLL_CAP_S,
        pushed_poll_s: float = PUSHED_POLL_S,
    ) -> None:
        self._store = store
        self._poll_cap_s = poll_cap_s
        self._pushed_poll_s = pushed_poll_s
        self._waits: set[asyncio.Event] = set()
        self._watcher: asyncio.Task[None] | None = None

    async def result(self, job_id: int, *, timeout: timedelta | float | None = None) -> Any:
        """Wait until the job finishes and return its result (None if it returned None).

        Raises JobFailed (dead; ``.error`` is its last error), JobCancelled, JobNotFound,
        or ResultTimeout (a TimeoutError) when ``timeout`` passes first: the job carries on.
        """
        async with contextlib.aclosing(self.as_completed([job_id], timeout=timeout)) as jobs:
            async for job in jobs:
                return outcome(job)
        raise AssertionError("as_completed ended before the job finished")  # pragma: no cover

    async def results(
        self, job_ids: Iterable[int], *, timeout: timedelta | float | None = None
    ) -> list[Any]:
        """Wait until every job finishes; their results in the order of ``job_ids``.

        Raises JobFailed or JobCancelled as soon as one job is seen to end so (the others
        carry on), JobNotFound, or ResultTimeout naming the jobs still unfinished.
        """
        wanted = list(job_ids)
        finished: dict[int, Any] = {}
        async with contextlib.aclosing(self.as_completed(wanted, timeout=timeout)) as jobs:
            async for job in jobs:
                finished[job.id] = outcome(job)
        return [finished[job_id] for job_id in wanted]

    async def as_completed(
        self, job_ids: Iterable[int], *, timeout: timedelta | float | None = None
    ) -> AsyncGenerator[Job, None]:
        """Each job as it is seen finished (succeeded, dead or cancelled), in that order;
        one query per wake-up for all the jobs not yet seen finished.

        ``timeout`` bounds the whole iteration (the time the caller spends between items
        included); ResultTimeout names the jobs still unfinished. JobNotFound for an id that
        names no job (or one pruned meanwhile).
        """
        outstanding = dict.fromkeys(job_ids)
        limit_s = timeout_seconds(timeout)
        loop = asyncio.get_running_loop()
        deadline = None if limit_s is None else loop.time() + limit_s
        woken = asyncio.Event()
        self._waits.add(woken)
        try:
            if outstanding and self._store.pushes_finished:
                # Before the first look: a job finishing after it is then reported. (A write
                # already under way as we ask may still finish it unreported: the safety-net
                # poll catches that.) The watch starts after, so its first wake-up, once it
                # listens, comes after this and is never lost to the look's clear().
                await self._store.expect_finished(list(outstanding))
            self._watch()
            delay = FIRST_POLL_S
            while outstanding:
                woken.clear()  # before the look: a finish during it wakes the next wait
                jobs = await self._store.get_many(list(outstanding))
                found = {job.id: job for job in jobs}
                for job_id in outstanding:
                    if job_id not in found:
                        raise JobNotFound(job_id)
                done = sorted(
                    (job for job in jobs if job.is_terminal),
                    key=lambda job: (job.finished_at is None, job.finished_at, job.id),
                )
                for job in done:
                    del outstanding[job.id]
                    yield job
                if not outstanding:
                    return
                # Every look happens, a timeout of 0 included; only the sleeps are bounded.
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    raise ResultTimeout(list(outstanding), limit_s or 0.0)
                if self._store.pushes_finished:
                    delay = self._pushed_poll_s
                elif done:
                    delay = FIRST_POLL_S
                sleep_s = delay if remaining is None else min(delay, remaining)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), sleep_s)
                delay = min(delay * 2, self._poll_cap_s)
        finally:
            self._waits.discard(woken)

    def _watch(self) -> None:
        """Start the one watch of the store that wakes every wait (once, where it pushes)."""
        if self._watcher is not None and not self._watcher.done():
            return
        if not self._store.pushes_finished:
            return
        loop = asyncio.get_running_loop()

        def on_finished() -> None:
            # Called from any thread (the memory store's finishing one, the lock held):
            # only schedule the wake-up, and never fail the caller's write.
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(self._wake)

        self._watcher = asyncio.create_task(self._run_watch(on_finished), name="rota-results")

    async def _run_watch(self, on_finished: Any) -> None:
        try:
            await self._store.watch_finished(on_finished)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # waits fall back to their poll interval
            log.warning("watching for finished jobs failed; waits poll instead: %s", error)

    def _wake(self) -> None:
        for woken in self._waits:
            woken.set()

    async def close(self) -> None:
        """End the watch of the store (waits in progress fall back to polling)."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
