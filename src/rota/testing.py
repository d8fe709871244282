"""Helpers for testing code that uses rota: a fake clock, an isolated store, inline runs.

Shipped to users. ``isolated(app)`` points an App (one defined at module level included) at a
fresh in-memory store driven by a ``FakeClock`` and puts it back afterwards; ``drain`` runs
every due job through a real worker; ``run_job`` runs one job of a kind on a store of its own.
The pytest plugin (``rota.pytest_plugin``, registered through an entry point) wraps these in
the ``rota_app``, ``rota_clock`` and ``rota_database_url`` fixtures.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from rota.domain.errors import InvalidInput

if TYPE_CHECKING:
    from rota.app import App
    from rota.domain.job import Job

__all__ = ["FakeClock", "Isolation", "drain", "drain_sync", "isolated", "run_job"]

T = TypeVar("T")


class FakeClock:
    """A Clock that moves only when told to.

    ``now()`` and ``monotonic()`` read the fake time; ``await sleep(s)`` returns once
    ``advance()`` has moved the clock at least ``s`` forward, so code that waits can be driven
    step by step without real delays. ``set()`` may move time backwards (to test clock steps).
    """

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware start")
        self._now = start.astimezone(UTC)
        self._mono = 0.0
        self._lock = threading.Lock()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, delta: timedelta | float) -> datetime:
        """Move time forward by ``delta`` and wake every sleeper whose time has come."""
        seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
        if seconds < 0:
            raise ValueError("advance() moves forward; use set() to move backwards")
        with self._lock:
            self._now += timedelta(seconds=seconds)
            self._mono += seconds
            woken: list[asyncio.Future[None]] = []
            while self._sleepers and self._sleepers[0][0] <= self._mono:
                woken.append(heapq.heappop(self._sleepers)[2])
            now = self._now
        for future in woken:
            _resolve(future)
        return now

    def set(self, instant: datetime) -> None:
        """Jump the wall clock to ``instant`` (forwards or backwards); monotonic time stays."""
        if instant.tzinfo is None:
            raise ValueError("FakeClock.set needs a timezone-aware instant")
        with self._lock:
            self._now = instant.astimezone(UTC)

    async def sleep(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if seconds <= 0:
                future.set_result(None)
            else:
                heapq.heappush(self._sleepers, (self._mono + seconds, next(self._order), future))
        await future


def _resolve(future: asyncio.Future[None]) -> None:
    loop = future.get_loop()

    def settle() -> None:
        if not future.done():
            future.set_result(None)

    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        settle()
    else:
        loop.call_soon_threadsafe(settle)


async def drain(app: App, *, max_jobs: int | None = None, concurrency: int = 10) -> int:
    """Run every due job of ``app`` inline, through the real worker, until none is due.

    Returns how many jobs were started. Jobs that the handlers enqueue, and failed jobs whose
    retry is due at once, run too; jobs due later (a ``delay``, a retry's backoff, a
    ``Snooze``) wait until the clock reaches them and ``drain`` is called again. Schedules are
    not fired here: ``await app.schedules.scheduler().tick()`` turns their due slots into jobs first.
    The App opens on first use; pair it with ``isolated(app)`` or ``App("memory://",
    clock=FakeClock())``.
    """
    from rota.runtime.worker_settings import WorkerSettings

    await app.open()
    worker = app.worker(WorkerSettings(name="rota-testing", concurrency=concurrency))
    return await worker.run_until_idle(max_jobs=max_jobs)


def drain_sync(app: App, *, max_jobs: int | None = None, concurrency: int = 10) -> int:
    """``drain`` for synchronous tests (Flask, Django views), on memory:// and SQLite.

    Refused inside a running event loop, where ``await drain(app)`` is the way, and on
    PostgreSQL, whose connection pool belongs to the event loop that opened it.
    """
    if app.database.scheme in ("postgresql", "postgres"):
        raise InvalidInput("drain_sync() runs on memory:// and SQLite: use await drain(app)")
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(drain(app, max_jobs=max_jobs, concurrency=concurrency))
    raise InvalidInput("drain_sync() was called inside a running event loop: use await drain(app)")


async def run_job(
    app: App,
    kind: str,
    payload: Any = None,
    *,
    max_attempts: int | None = None,
    timeout: timedelta | float | None = None,  # noqa: ASYNC109 (the job's timeout, not ours)
    queue: str | None = None,
    tenant: str | None = None,
) -> Job:
    """Run one ``kind`` job now, through the real worker, and return it as that run left it.

    The job lives in an in-memory store of its own (read by ``app``'s clock), so no other job
    runs beside it and ``app``'s own store is not touched: ``state`` is ``succeeded``,
    ``pending`` (an error with attempts left, or a ``Snooze``; ``attempt`` then says whether
    one was used) or ``dead`` (``Permanent``, the last attempt), with
    ``last_error``. The kind, payload and options are validated as ``app.enqueue`` would (InvalidJob); jobs the
    handler enqueues through ``app`` go to ``app``'s store.
    """
    from rota.runtime.worker import Worker
    from rota.runtime.worker_settings import WorkerSettings
    from rota.store.memory import MemoryStore

    spec = app.spec(
        kind, payload, max_attempts=max_attempts, timeout=timeout, queue=queue, tenant=tenant
    )
    store = MemoryStore(clock=app.clock)
    await store.migrate()
    [enqueued] = await store.enqueue([spec])
    worker = Worker(
        store,
        app.registry,
        WorkerSettings(name="rota-testing", concurrency=1),
        clock=app.clock,
        hooks=app.hooks,
    )
    await worker.run_until_idle(max_jobs=1)
    return await store.get(enqueued.job.id)


def isolated(
    app: App, *, database_url: str = "memory://", clock: FakeClock | None = None
) -> Isolation:
    """Point ``app`` at a fresh store read by a FakeClock for a ``with`` block, then back.

    ``with isolated(app) as clock:`` (or ``async with``) gives the App a new, empty, migrated
    store at ``database_url`` (``memory://`` unless told; a SQLite file works too) and
    ``clock`` (a new FakeClock unless given), which the block receives. On exit the store is
    closed and the App gets back its own URL, clock and ``auto_migrate``, so the next test
    can isolate it again. Kinds and schedules defined on the App stay. Raises InvalidInput if
    the App's store is already open (close it first), and, for ``with``, on a PostgreSQL URL:
    a PostgreSQL store belongs to the event loop that opened it, so use ``async with`` there.
    """
    return Isolation(app, database_url=database_url, clock=clock or FakeClock())


class Isolation:
    """The context manager ``isolated()`` returns; see there."""

    def __init__(self, app: App, *, database_url: str, clock: FakeClock) -> None:
        self.app = app
        self.database_url = database_url
        self.clock = clock
        self._saved: list[tuple[str, Any, bool | None]] = []

    def _enter(self) -> FakeClock:
        app = self.app
        saved = (app.database_url, app.clock, app.database.auto_migrate)
        try:
            app.with_database(self.database_url).with_clock(self.clock)
        except InvalidInput:
            raise InvalidInput(
                "isolated() needs an App whose store is not open: await app.close() first"
            ) from None
        # A fresh store has no schema yet, whatever the App does with its own database.
        app.database.auto_migrate = True
        self._saved.append(saved)
        return self.clock

    def _restore(self) -> None:
        database_url, clock, auto_migrate = self._saved.pop()
        self.app.with_database(database_url).with_clock(clock)
        self.app.database.auto_migrate = auto_migrate

    def __enter__(self) -> FakeClock:
        if self.database_url.split(":", 1)[0].lower() in ("postgresql", "postgres"):
            raise InvalidInput(
                "a PostgreSQL store belongs to the event loop that opened it: "
                "use `async with isolated(app, ...)`"
            )
        return self._enter()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            _run_blocking(self.app.close())
        finally:
            self._restore()

    async def __aenter__(self) -> FakeClock:
        return self._enter()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.app.close()
        finally:
            self._restore()


def _run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to the end from synchronous code, even inside a running loop's thread (a
    sync fixture of an async test): then on a loop of its own in another thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(asyncio.run(coro))
        except BaseException as error:  # handed to the caller's thread below
            errors.append(error)

    thread = threading.Thread(target=run, name="rota-testing-close")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return results[0]
