"""The store's clock as one worker sees it: where it stands and how fast it runs against the
worker's own monotonic clock.

Leases and due times are decided by the store's clock; a worker can only wait on its own.
Each claim and heartbeat answer carries the store's ``now``: paired with the local monotonic
instants at which the request was sent and its answer came, it is a reading. From readings the
worker knows the store's now at any local instant (so a due time becomes a local timer without
the local wall clock), and the rate of the store's clock per local second. A local clock that
runs slow (a VM starved of ticks, libfaketime ``x0.2``) would otherwise send heartbeats late
and keep running handlers whose leases the store already gave away; one that runs fast would
fence itself out early. When the rate strays from 1 by more than the tolerance, local waits
for lease deadlines and heartbeats are scaled to it.

Until then, a local clock that surely runs fast is followed at the highest rate its readings
allow, however slow their answers (``_surely_fast``). The measured rate is the median of slopes between readings at least ``min_baseline_s`` store
seconds apart, each slope kept only when the requests' round trips make it precise to half the
tolerance, so a step of the store's clock (or one slow answer) moves it little. Local waits
follow the larger of it and the latest slope: a local clock that has just slowed down is
followed at the next heartbeat, not once it is the median (erring that way only shortens
waits: heartbeats come sooner, a deadline passes earlier).
"""

from __future__ import annotations

import logging
import statistics
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from rota.domain.clock import Clock
from rota.observability.metrics import Metrics

log = logging.getLogger("rota.worker")

#: How far the rate may stray from 1 before local waits follow the store's clock.
DEFAULT_TOLERANCE = 0.05


@dataclass(frozen=True, slots=True)
class Reading:
    """The store's clock read once: ``store`` fell between the local instants ``sent`` and
    ``received`` (monotonic seconds)."""

    sent: float
    received: float
    store: datetime

    @property
    def local(self) -> float:
        return (self.sent + self.received) / 2

    @property
    def round_trip(self) -> float:
        return max(0.0, self.received - self.sent)


class StoreClock:
    """Readings of the store's clock and what follows from them; see the module docstring."""

    def __init__(
        self,
        clock: Clock,
        *,
        metrics: Metrics | None = None,
        tolerance: float = DEFAULT_TOLERANCE,
        min_baseline_s: float = 1.0,
        keep: int = 32,
    ) -> None:
        self._clock = clock
        self._metrics = metrics
        self._tolerance = tolerance
        self._min_baseline_s = min_baseline_s
        self._readings: deque[Reading] = deque(maxlen=keep)
        self._latest: Reading | None = None
        self._measured: float | None = None
        self._rate = 1.0
        self._warned = False

    @property
    def measured(self) -> float | None:
        """The store's seconds per local second, once readings far enough apart exist."""
        return self._measured

    @property
    def rate(self) -> float:
        """The rate local waits follow: the larger of the measured rate and the latest slope
        when it strays from 1 by more than the tolerance, else exactly 1."""
        return self._rate

    def observe(
        self, sent: float, received: float, store_now: datetime, *, for_rate: bool = True
    ) -> None:
        """Add a reading: ``store_now`` came in answer to a request sent at local ``sent``.
        Readings at a steady cadence (heartbeats) measure the rate; any reading (a claim's
        too) says where the store's clock stands."""
        reading = Reading(sent, received, store_now)
        self._latest = reading
        if not for_rate:
            return
        self._keep(reading)
        slopes = self._slopes()
        if not slopes:
            self._rate = self._surely_fast(reading) or 1.0
            return
        measured = self._measured = statistics.median(slopes)
        if self._metrics is not None:
            self._metrics.clock_rate.set(measured)
        followed = max(measured, slopes[-1])
        self._rate = followed if abs(followed - 1.0) > self._tolerance else 1.0
        if abs(measured - 1.0) > self._tolerance and not self._warned:
            self._warned = True
            log.warning(
                "this worker's monotonic clock runs at %.2gx the store's (the store's clock "
                "moves %.3g s per local second): lease deadlines and heartbeats now follow the "
                "store's clock; check the host's time keeping",
                1 / measured,
                measured,
            )

    def _keep(self, reading: Reading) -> None:
        """Keep ``reading`` for measuring, the readings spread at least a quarter of the
        minimum baseline apart: of two closer than that, the more precise stays. Frequent
        readings (a quarter interval apart until the first measure) would otherwise fill the
        buffer with a span too short for the baselines that slow answers need."""
        readings = self._readings
        if len(readings) >= 2 and (
            self._baseline(readings[-2], readings[-1]) < self._min_baseline_s / 4
        ):
            if reading.round_trip <= readings[-1].round_trip:
                readings[-1] = reading
            return
        readings.append(reading)

    def _surely_fast(self, latest: Reading) -> float | None:
        """Before any precise slope: the highest rate the readings up to ``latest`` allow,
        when even that is below 1 by more than the tolerance (a local clock running fast), else
        None. Between an earlier reading and ``latest`` the store's clock moved ``baseline``
        while the local one moved at least from the earlier answer to the later request, so
        ``baseline`` over that span bounds the rate from above whatever the round trips: a
        starved machine's slow answers, too imprecise for a measure, still tell a clock five
        times fast from one in step. Following the bound, waits stay no longer than the
        store's time allows (a deadline passes no later than it should), where staying at 1
        would give leases up five times too early."""
        bound: float | None = None
        for old in self._readings:
            local = latest.sent - old.received
            baseline = self._baseline(old, latest)
            if old is latest or local <= 0 or baseline <= 0:
                continue
            slope = baseline / local
            bound = slope if bound is None else min(bound, slope)
        return bound if bound is not None and bound < 1.0 - self._tolerance else None

    def local_s(self, store_s: float) -> float:
        """The local seconds that ``store_s`` seconds of the store's clock take."""
        return store_s / self._rate

    def now(self) -> datetime | None:
        """The store's now, extrapolated from the latest reading; None before any reading."""
        last = self._latest
        if last is None:
            return None
        elapsed = (self._clock.monotonic() - last.local) * self._rate
        return last.store + timedelta(seconds=elapsed)

    @property
    def uncertainty_s(self) -> float:
        """How far the store's now may be from ``now()``: the latest reading's round trip.
        The store read its clock somewhere within it (a transaction's now() at its start,
        the answer after its commit), and ``now()`` takes the middle."""
        return self._latest.round_trip if self._latest is not None else 0.0

    def delay_s(self, due_at: datetime) -> float | None:
        """Local seconds until the store's clock reaches ``due_at``; None before any reading."""
        now = self.now()
        if now is None:
            return None
        return self.local_s((due_at - now).total_seconds())

    def _slopes(self) -> list[float]:
        """Rates between readings far and precise enough apart, oldest first: from each
        reading, to the first later one that makes a precise enough slope with it (a longer
        baseline makes the same round trips a smaller error, so a noisy pair is not the end of
        it)."""
        readings = list(self._readings)
        slopes: list[float] = []
        for index, old in enumerate(readings):
            for new in readings[index + 1 :]:
                baseline = self._baseline(old, new)
                local = new.local - old.local
                if baseline < self._min_baseline_s or local <= 0:
                    continue
                if (old.round_trip + new.round_trip) / 2 / local > self._tolerance / 2:
                    continue  # too imprecise to tell a stray rate from a slow answer
                slopes.append(baseline / local)
                break
        return slopes

    @staticmethod
    def _baseline(old: Reading, new: Reading) -> float:
        return (new.store - old.store).total_seconds()
