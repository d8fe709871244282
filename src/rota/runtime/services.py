"""Background services: each loop is an interval and a ``tick()`` that tests call directly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol, TypeVar

from rota.domain.clock import Clock
from rota.domain.errors import StoreUnavailable

T = TypeVar("T")

log = logging.getLogger("rota.worker")


class Service(Protocol):
    """A periodic job of the worker process (heartbeats, rescue, schedules, registry)."""

    name: str

    def interval_s(self) -> float:
        """Seconds to wait after a tick before the next one."""
        ...

    async def tick(self) -> object:
        """Do one round of work. Exceptions are logged and the loop goes on."""
        ...


class ErrorLog:
    """Logs a failing loop's errors at most once per ``every_s`` (an outage is one story,
    not one line per tick per worker)."""

    def __init__(self, clock: Clock, every_s: float = 10.0) -> None:
        self._clock = clock
        self._every_s = every_s
        self._last = -1e18
        self._suppressed = 0

    def error(self, message: str, *args: object) -> None:
        now = self._clock.monotonic()
        if now - self._last >= self._every_s:
            extra = f" ({self._suppressed} similar messages suppressed)" if self._suppressed else ""
            log.warning(message + extra, *args)
            self._last = now
            self._suppressed = 0
        else:
            self._suppressed += 1

    def recovered(self, what: str) -> None:
        if self._last > -1e18:
            log.info("%s recovered", what)
        self._last = -1e18
        self._suppressed = 0


async def run_service(service: Service, stop: asyncio.Event, clock: Clock) -> None:
    """Tick ``service`` every interval until ``stop`` is set; errors back off with jitter."""
    errors = ErrorLog(clock)
    failures = 0
    while not stop.is_set():
        try:
            await service.tick()
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a loop must survive anything its tick raises
            failures += 1
            errors.error("%s failed: %s", service.name, error)
            wait = min(10.0, 0.2 * 2 ** min(failures, 6)) * (0.5 + random.random())
        else:
            if failures:
                errors.recovered(service.name)
            failures = 0
            wait = service.interval_s()
        nudged: asyncio.Event | None = getattr(service, "nudged", None)
        if nudged is None:
            await wait_or_stop(stop, wait)
        else:  # a service that can be told to tick early (the schedule firer)
            await wait_or_stop(stop, wait, nudged)
            nudged.clear()


async def bounded(call: Awaitable[T], seconds: float, what: str) -> T:
    """Await a store call for at most ``seconds``; StoreUnavailable if it has not answered.

    A call on a half-open connection can hang until TCP gives up, and cancelling it can wait
    again for the server to confirm. So this stops waiting at once and lets the cancelled
    call wind down in the background: the caller's loop never stalls on a dead socket.
    """
    task = asyncio.ensure_future(call)
    try:
        done, _ = await asyncio.wait({task}, timeout=max(0.0, seconds))
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        task.add_done_callback(_consume)
        raise StoreUnavailable(f"{what} got no answer within {seconds:.1f}s")
    return task.result()


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not warn about it


async def wait_or_stop(
    stop: asyncio.Event, seconds: float, nudged: asyncio.Event | None = None
) -> None:
    """Wait ``seconds`` or until ``stop`` (or ``nudged``) is set, whichever comes first; at
    no wait, still let the loop's other tasks run once (a store may answer without a wait)."""
    if seconds <= 0 or stop.is_set():
        await asyncio.sleep(0)
        return
    if nudged is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=seconds)
        return
    if nudged.is_set():
        return
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(nudged.wait())]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


async def woken(event: asyncio.Event, *, within_s: float) -> None:
    """Wait for ``event`` or ``within_s`` seconds, in the waiting task itself: a wake-up
    reaches the claim loop in one step of the event loop, where waiting on a task per event
    (``first_of``) takes three."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within_s):
            await event.wait()


async def first_of(waiters: Sequence[Awaitable[object]], within_s: float | None = None) -> None:
    """Wait for the first of ``waiters`` or ``within_s`` seconds; cancel the rest."""
    tasks = [asyncio.ensure_future(waiter) for waiter in waiters]
    try:
        await asyncio.wait(tasks, timeout=within_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
