"""RetryPolicy: how long to wait before the next attempt after a failure."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from rota.domain.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff: ``base * factor**(attempt-1)``, capped at ``cap``.

    ``jitter`` (0..1) spreads each delay uniformly over ``delay * (1 ± jitter)`` so jobs that
    failed together do not all come back together; it never exceeds ``cap``.
    """

    base: timedelta = timedelta(seconds=1)
    factor: float = 2.0
    cap: timedelta = timedelta(hours=1)
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if self.base < timedelta(0):
            raise InvalidInput("retry base must not be negative")
        if self.cap < self.base:
            raise InvalidInput("retry cap must be at least the base delay")
        if self.factor < 1:
            raise InvalidInput("retry factor must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise InvalidInput("retry jitter must be between 0 and 1")

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> timedelta:
        """The wait after failed ``attempt`` (1-based) before the next one may start."""
        exponent = max(0, attempt - 1)
        cap_s = self.cap.total_seconds()
        base_s = self.base.total_seconds()
        try:
            seconds = min(cap_s, base_s * self.factor**exponent)
        except OverflowError:  # a huge attempt number: the cap applies anyway
            seconds = cap_s
        if self.jitter:
            seconds *= 1 + self.jitter * (2 * rand() - 1)
        return timedelta(seconds=min(cap_s, max(0.0, seconds)))

    def bounds(self, attempt: int) -> tuple[timedelta, timedelta]:
        """The smallest and largest delay ``delay(attempt)`` can return."""
        low = self.delay(attempt, lambda: 0.0)
        high = self.delay(attempt, lambda: 1.0)
        return low, high


#: How soon a lost database connection is tried again: 50 ms, doubling up to a 0.5 s cap,
#: jittered so that a fleet does not reconnect in lockstep. A refused connection costs the
#: server next to nothing, so the cap can be short: it bounds how long after the database
#: accepts connections again a worker still waits before its next attempt (its claims then
#: resume within the cap plus one connection set-up).
RECONNECT_BACKOFF = RetryPolicy(
    base=timedelta(milliseconds=50),
    factor=2.0,
    cap=timedelta(milliseconds=500),
    jitter=0.5,
)
