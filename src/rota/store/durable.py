"""The durable verbs of the Store contract: step checkpoints, sleeps, waits, signals and
effects committed under the lease (C11, C12). ``Store`` includes them (store/base.py).

Every verb that takes a lease is fenced like ``complete``: it writes only while the job is
running under that lease's token, and raises ``LeaseLost`` having written nothing otherwise.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any, Protocol

from rota.domain.durable import SignalResult, Step, WaitOutcome
from rota.domain.lease import Lease


class Effects(Protocol):
    """A transaction on the store's own database that commits only under the lease
    (``Store.effects``). The handler writes through ``connection``; one of the ``commit_*``
    verbs then ends it, or leaving ``Store.effects``' block without one rolls it back."""

    @property
    def connection(self) -> Any:
        """The connection whose transaction this is: a psycopg AsyncConnection on
        PostgreSQL, ``rota.store.sqlite.durable.EffectsConnection`` on SQLite. Do not commit
        or roll it back yourself."""
        ...

    async def commit_step(
        self, name: str, *, result: str | None, duration: timedelta, now: datetime | None = None
    ) -> None:
        """Lock the job's row under the lease's token, write step ``name``'s checkpoint as
        ``checkpoint`` does, and commit: the handler's writes and the checkpoint land
        together or not at all. LeaseLost (everything rolled back) when the lease is lost."""
        ...

    async def commit_completion(self, *, result: str | None, now: datetime | None = None) -> None:
        """Lock the job's row under the lease's token, mark the job succeeded with
        ``result`` as ``complete_many`` does, and commit, all or nothing; LeaseLost (rolled
        back) when the lease is lost."""
        ...


class DurableVerbs(Protocol):
    """What every backend guarantees for durable jobs (rota.domain.durable)."""

    async def steps(self, job_id: int) -> list[Step]:
        """The job's records (steps, sleeps, waits) in the order each was first written; empty
        for a job that has none or does not exist."""
        ...

    async def checkpoint(
        self,
        lease: Lease,
        name: str,
        *,
        result: str | None,
        duration: timedelta = timedelta(0),
        now: datetime | None = None,
    ) -> None:
        """Record that step ``name`` succeeded with ``result`` (JSON text; None for null) after
        running ``duration``, in one statement fenced on the lease (C11): LeaseLost, nothing
        written, unless the job is running under that token, and a claim of the job waits for
        the write (so a checkpoint that committed is seen by every later claim). A step that
        already succeeded keeps its first result."""
        ...

    async def fail_step(
        self,
        lease: Lease,
        name: str,
        *,
        error: str,
        traceback: str | None = None,
        duration: timedelta = timedelta(0),
        retry_in: timedelta | None = None,
        now: datetime | None = None,
    ) -> None:
        """Record a failure of step ``name`` (attempts + 1, its error), fenced (LeaseLost).
        With ``retry_in``, in the same transaction the attempt ends as failed with that error
        and is given back: the job is pending again at now + retry_in (the step has attempts
        of its own, so the job's are not used)."""
        ...

    async def sleep(
        self,
        lease: Lease,
        name: str,
        *,
        until: datetime | None = None,
        delay: timedelta | None = None,
        now: datetime | None = None,
    ) -> datetime | None:
        """A durable sleep named ``name``, fenced (LeaseLost, nothing written). Its wake time
        is recorded on its first call (``until``, or now + ``delay``) and kept by every later
        one. Once the wake time has come (<= now) the sleep is recorded as slept and None
        returned: carry on. Otherwise, in one transaction, the job becomes pending at the wake
        time with its attempt given back (an attempt ending "slept") and its lease ends; the
        wake time is returned and the caller must stop the handler, holding nothing."""
        ...

    async def wait_for(
        self,
        lease: Lease,
        name: str,
        key: str,
        *,
        timeout: timedelta,  # noqa: ASYNC109 (the wait's deadline, not ours)
        now: datetime | None = None,
    ) -> WaitOutcome:
        """A wait named ``name`` for a signal to ``key``, fenced (LeaseLost, nothing
        written). A wait that received or timed out says so again (RECEIVED with the data,
        TIMED_OUT). Otherwise the oldest unexpired signal kept for ``key`` is taken (deleted:
        it reaches this wait only) and RECEIVED returned; failing that, a wait past its
        deadline (recorded on its first call: now + ``timeout``) is recorded TIMED_OUT, and
        one before it makes the job pending at the deadline, attempt given back (an attempt
        ending "waited"), lease ended, and returns WAITING: the caller must stop the handler.
        Serialised with ``signal`` on the key, so a signal and a wait that start together
        always meet."""
        ...

    async def signal(
        self,
        key: str,
        data: str | None,
        *,
        expire_after: timedelta,
        now: datetime | None = None,
    ) -> SignalResult:
        """Send ``data`` (JSON text; None for null) to ``key``: delivered to the wait for it
        that began first among those still waiting (of a pending, held or running job), which
        records it as received and, when pending, becomes due now (on PostgreSQL, workers are
        woken by NOTIFY at once); a held job is due now too, so it runs with the signal as soon
        as it is released, and wakes no worker before. Each signal reaches one wait, once.
        With no wait, it is kept until now + ``expire_after`` for the next wait on ``key``,
        then dropped."""
        ...

    async def prune_durable(self, *, older_than: datetime, now: datetime | None = None) -> int:
        """Delete the records of jobs that no longer exist (deleted, purged or pruned) whose
        first write was before ``older_than``, and kept signals whose expiry has passed;
        return how many rows went. Records of existing jobs are never deleted."""
        ...

    def effects(
        self, lease: Lease, *, idle_timeout: timedelta | None = None
    ) -> AbstractAsyncContextManager[Effects]:
        """A transaction on the store's database whose commit is fenced on the lease (C12):
        ``Effects.commit_step`` or ``commit_completion`` lock the job's row under the token
        inside it, so a stale worker's transaction rolls back whole with LeaseLost. Leaving
        the block without a commit rolls back. ``idle_timeout`` (PostgreSQL): the server ends
        the transaction once it sits idle that long (a worker stopped inside it then holds
        no lock past its lease). The memory store has no database: InvalidInput."""
        ...
