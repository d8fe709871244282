"""``app.jobs``: one job read and acted on by id, and the job list."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from rota.domain.job import Attempt, Job
from rota.store import JobFilter, Page
from rota.store.records import MAX_BULK
from rota.verbs.binding import Binding


class Jobs:
    """The App's jobs: ``await app.jobs.get(job_id)``, ``app.jobs.retry(job_id)``..."""

    def __init__(self, binding: Binding) -> None:
        self._binding = binding

    async def get(self, job_id: int) -> Job:
        """The job as it is now. JobNotFound."""
        return await (await self._binding.opened_client()).get(job_id)

    async def attempts(self, job_id: int) -> list[Attempt]:
        """Every recorded execution of the job, oldest first (empty for an unknown id)."""
        return await (await self._binding.opened_client()).attempts(job_id)

    def get_sync(self, job_id: int) -> Job:
        """``get`` for synchronous code (Django, Flask)."""
        return self._binding.with_client_sync(lambda client: client.get(job_id))

    def attempts_sync(self, job_id: int) -> list[Attempt]:
        """``attempts`` for synchronous code."""
        return self._binding.with_client_sync(lambda client: client.attempts(job_id))

    async def list(
        self, filter: JobFilter | None = None, *, cursor: str | None = None, limit: int = 50
    ) -> Page:
        """A page of jobs matching ``filter``, newest first; ``cursor`` from the previous page's
        ``next_cursor`` (keyset paging)."""
        client = await self._binding.opened_client()
        return await client.list_jobs(filter, cursor=cursor, limit=limit)

    async def retry(self, job_id: int, *, max_attempts: int | None = None) -> Job:
        """Run a dead or cancelled job again, now, with its attempts reset (``max_attempts``
        raised if given). StateConflict for a job in another state."""
        client = await self._binding.opened_client()
        return await client.retry(job_id, max_attempts=max_attempts)

    async def cancel(self, job_id: int) -> Job:
        """Cancel a pending or running job (a running handler is told through its context).
        StateConflict once it finished."""
        return await (await self._binding.opened_client()).cancel(job_id)

    async def hold(self, job_id: int) -> Job:
        """Hold a waiting or pending job: no worker claims it until ``release``. It keeps its
        run_at, unique key and parents. StateConflict in any other state (a running job
        cannot be held: cancel it)."""
        return await (await self._binding.opened_client()).hold(job_id)

    async def release(self, job_id: int) -> Job:
        """Put a held job back where it was: waiting while parents are left, else pending,
        due at its run_at. StateConflict unless it is held."""
        return await (await self._binding.opened_client()).release(job_id)

    async def hold_matching(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        """Hold up to ``limit`` waiting or pending jobs matching ``filter``; how many."""
        return await (await self._binding.opened_client()).bulk_hold(filter, limit=limit)

    async def release_matching(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        """Release up to ``limit`` held jobs matching ``filter``; how many."""
        return await (await self._binding.opened_client()).bulk_release(filter, limit=limit)

    async def rerun(self, job_id: int) -> Job:
        """Run a succeeded job again, now: its attempt counter starts over (the new series has
        all of max_attempts) and its earlier attempts stay in its history. StateConflict for
        any other state, or while another active job holds its unique key."""
        return await (await self._binding.opened_client()).rerun(job_id)

    async def delete(self, job_id: int) -> Job:
        """Remove a pending or finished job and its attempt history; returns the job as it
        was. JobNotFound; JobRunning while a worker holds it: cancel it first."""
        return await (await self._binding.opened_client()).delete(job_id)

    async def reschedule(
        self,
        job_id: int,
        *,
        run_at: datetime | Literal["now"] | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> Job:
        """Change a pending job's run_at (``"now"`` pulls it forward), priority and/or queue;
        fenced against a concurrent claim: JobRunning if a worker took it first (nothing
        changes). InvalidJob for bad values; StateConflict once it finished."""
        client = await self._binding.opened_client()
        return await client.reschedule(job_id, run_at=run_at, priority=priority, queue=queue)

    async def purge(self, filter: JobFilter | None = None, *, limit: int = MAX_BULK) -> int:
        """Delete up to ``limit`` finished (succeeded, dead, cancelled) jobs matching
        ``filter`` (all finished jobs without one), with their history; returns how many."""
        client = await self._binding.opened_client()
        return await client.purge(filter or JobFilter(), limit=limit)
