"""Heartbeats: every held lease renewed in one statement per interval, and handlers stopped
when their lease is lost or may be.

A heartbeat's answer is what keeps a lease, so a slow one is never thrown away: on a machine
starved of CPU every round trip is slow, and cancelling a heartbeat that would have renewed
the leases in time, to send another just as slow, gives up leases the store still grants
(C2, C10). A heartbeat that has not answered within the interval stays in flight, and the
next tick sends another beside it, in case the first is stuck on a dead connection (a
half-open socket answers nothing, ever). Whichever answers first renews the leases, from the
instant it was sent; the others are cancelled then. The local deadline alarms
(``Worker._arm``) stop the handlers when no answer came in time, whatever the heartbeats are
doing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from rota.domain.clock import Clock
from rota.domain.errors import StoreUnavailable
from rota.domain.job import Job
from rota.domain.payload import Progress
from rota.domain.wording import counted, plural
from rota.runtime.execution import Execution, Stop
from rota.runtime.services import bounded
from rota.runtime.storeclock import StoreClock
from rota.store.base import Store
from rota.store.records import Beat

log = logging.getLogger("rota.worker")

#: Heartbeats in flight at once, at most: one slow and the others sent beside it.
MAX_IN_FLIGHT = 3


@dataclass(eq=False, slots=True)
class _Attempt:
    """One heartbeat sent: when, for which executions, with which progress reports."""

    sent: float
    held: list[Execution]
    progress: Mapping[int, Progress]
    task: asyncio.Task[Beat] | None = None
    #: The jobs whose handlers its answer stopped (lease lost).
    lost: list[Job] = field(default_factory=list)


class Heartbeater:
    """Renews every held lease in one statement per interval; stops handlers that lost theirs.

    A lease counts as lost when the store says so, and also when no heartbeat answered for so
    long that the lease may have expired: then another worker may already be running the
    job, so ours stops (any late write would be fenced anyway). Every answer is a reading of
    the store's clock (with nothing held, the tick reads just that): the interval follows the
    store's clock, and is a quarter of it until the rate has been measured once.
    """

    name = "heartbeat"

    def __init__(
        self,
        store: Store,
        clock: Clock,
        store_clock: StoreClock,
        *,
        lease: timedelta,
        heartbeat: timedelta,
        held: Mapping[int, Execution],
        arm: Callable[[Execution], None],
        lease_margin: Callable[[], float],
    ) -> None:
        """``held`` is the worker's live map of the jobs it holds; ``arm`` sets a held job's
        lease alarm to its deadline; ``lease_margin`` is how long after a request was sent
        its lease is surely ours, in local seconds."""
        self._store = store
        self._clock = clock
        self._store_clock = store_clock
        self._lease = lease
        self._heartbeat = heartbeat
        self._held = held
        self._arm = arm
        self._lease_margin = lease_margin
        self._in_flight: list[_Attempt] = []
        #: Set by ``hurry``: the service loop ticks at once instead of waiting out its interval.
        self.nudged = asyncio.Event()

    def hurry(self) -> None:
        """Beat now: a claim answered so late that its leases would run out before the next
        beat (on a machine starved of CPU, a claim's round trip can take most of the lease)."""
        self.nudged.set()

    def interval_s(self) -> float:
        clock = self._store_clock
        interval = clock.local_s(self._heartbeat.total_seconds())
        return interval if clock.measured is not None else interval / 4

    async def read_clock(self) -> None:
        """Read the store's clock (a heartbeat of no lease). Bounded by the lease, not the
        interval: a slow answer is an imprecise reading, which the rate measure weighs as
        such, and still says where the store's clock stands."""
        sent = self._clock.monotonic()
        beat = await bounded(
            self._store.heartbeat([], lease=self._lease), self._lease_margin(), "a clock read"
        )
        self._store_clock.observe(sent, self._clock.monotonic(), beat.now)

    async def tick(self) -> list[Job]:
        """Renew all leases; return the jobs whose handlers it stopped (lease lost).

        StoreUnavailable (or the store's error) when no heartbeat answered within the
        interval: the ones sent stay in flight, and any answer that comes still renews."""
        # First stop whatever may already belong to another worker: after a stall (a paused
        # process, a blocked loop) the lease can be gone without the store having said so.
        overdue = self._expire_overdue(list(self._held.values()))
        held = [execution for execution in self._held.values() if execution.stop is None]
        if not held:
            self.cancel()
            if not overdue:  # a clock reading, unless this tick has jobs to report stopped
                await self.read_clock()
            return overdue
        if len(self._in_flight) >= MAX_IN_FLIGHT:
            stuck = self._in_flight.pop(0)  # the oldest: the likeliest on a dead connection
            _cancel(stuck)
        # Progress rides the beat: at most one write per job per interval, however often a
        # handler reports.
        progress = {
            execution.job.id: report
            for execution in held
            if (report := execution.ctx.unsent_progress()) is not None
        }
        self._send(held, progress)
        waiting = {a.task: a for a in self._in_flight if a.task is not None}
        interval = self.interval_s()
        done, _ = await asyncio.wait(waiting, timeout=interval, return_when=asyncio.FIRST_COMPLETED)
        if not done:
            raise StoreUnavailable(
                f"a heartbeat got no answer within {interval:.1f}s (still waiting for it)"
            )
        for task in done:
            if not task.cancelled() and task.exception() is None:
                return overdue + waiting[task].lost
        error = next(iter(done)).exception()
        if not self._in_flight:
            self._expire_overdue(held)
        raise error or StoreUnavailable("a heartbeat was cancelled")

    def cancel(self) -> None:
        """Stop waiting for the heartbeats in flight."""
        for attempt in self._in_flight:
            _cancel(attempt)
        self._in_flight.clear()

    def expire(self, overdue: list[Execution]) -> list[Job]:
        """Stop handlers whose lease may already belong to another worker."""
        for execution in overdue:
            execution.interrupt(Stop.LEASE_LOST)
        if overdue:
            log.warning(
                "lease may have run out for %s (%s): no successful heartbeat within the "
                "lease; stopping the %s",
                counted(len(overdue), "job"),
                ", ".join(str(execution.job.id) for execution in overdue),
                plural("handler", len(overdue)),
            )
        return [execution.job for execution in overdue]

    def _send(self, held: list[Execution], progress: Mapping[int, Progress]) -> None:
        attempt = _Attempt(self._clock.monotonic(), held, progress)
        attempt.task = asyncio.ensure_future(
            self._store.heartbeat(
                [execution.lease for execution in held],
                lease=self._lease,
                progress=dict(progress) or None,
            )
        )
        self._in_flight.append(attempt)
        # A callback, not the tick: an answer that comes after the tick stopped waiting still
        # renews the leases the moment it arrives.
        attempt.task.add_done_callback(lambda _: self._answered(attempt))

    def _answered(self, attempt: _Attempt) -> None:
        task = attempt.task
        assert task is not None
        failed = task.cancelled() or task.exception() is not None  # retrieved either way
        if attempt not in self._in_flight:
            return  # cancelled: another answered first, or the worker let go of its jobs
        self._in_flight.remove(attempt)
        if failed:
            return
        beat = task.result()
        # Another answer makes the rest redundant: they would renew from earlier instants.
        self.cancel()
        self._store_clock.observe(attempt.sent, self._clock.monotonic(), beat.now)
        lost_ids = {lease.job_id for lease in beat.lost}
        deadline = attempt.sent + self._lease_margin()
        for execution in attempt.held:
            if self._held.get(execution.job.id) is not execution:
                continue  # finished meanwhile: nothing to renew or stop
            if execution.job.id not in lost_ids:
                report = attempt.progress.get(execution.job.id)
                if report is not None:
                    execution.ctx.progress_sent(report)
                if attempt.sent >= execution.renewed_at:
                    execution.renewed_at = attempt.sent
                    execution.deadline = deadline
                    if execution.stop is None:
                        self._arm(execution)
            elif not execution.reporting and execution.stop is None:
                # (A job reporting its outcome: our own final write got there first.)
                attempt.lost.append(execution.job)
                execution.interrupt(Stop.LEASE_LOST)
        if attempt.lost:
            log.warning(
                "lease lost for %s (%s): stopping the %s",
                counted(len(attempt.lost), "job"),
                ", ".join(str(job.id) for job in attempt.lost),
                plural("handler", len(attempt.lost)),
            )

    def _expire_overdue(self, held: list[Execution]) -> list[Job]:
        now = self._clock.monotonic()
        return self.expire(
            [e for e in held if e.deadline <= now and e.stop is None and not e.reporting]
        )


def _cancel(attempt: _Attempt) -> None:
    task = attempt.task
    if task is not None and not task.done():
        task.cancel()
        task.add_done_callback(_consume)


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not warn about it
