"""The nemesis: faults scheduled from a seed, so any failing run replays exactly.

A test builds a ``Nemesis`` from ``chaos_seed()`` (``ROTA_CHAOS_SEED`` when set, otherwise a
fresh random seed), which prints the seed first thing. The plan (which fault, when, on whom)
comes only from that seed: the same seed gives the same plan. ``run`` executes the plan with
the test's fault functions, bounded in count and time, and keeps a log of what it did.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

SEED_ENV = "ROTA_CHAOS_SEED"


def chaos_seed() -> int:
    """The seed of this run: ``ROTA_CHAOS_SEED`` if set, else a fresh one; printed either way."""
    text = os.environ.get(SEED_ENV)
    seed = int(text) if text else random.SystemRandom().randrange(2**32)
    print(f"chaos seed: {SEED_ENV}={seed}")
    return seed


@dataclass(frozen=True, slots=True)
class Fault:
    """One planned fault: ``kind`` at ``at_s`` seconds after the start, on ``target``."""

    at_s: float
    kind: str
    target: int


@dataclass
class Nemesis:
    """Plans ``count`` faults drawn from ``kinds`` about every ``every_s`` seconds (jittered by
    ``jitter``, a fraction) on ``targets`` targets, from ``seed``."""

    seed: int
    kinds: Sequence[str]
    every_s: float
    count: int
    targets: int = 1
    jitter: float = 0.25
    rotate: bool = False
    log: list[tuple[float, Fault]] = field(default_factory=list)

    def plan(self) -> list[Fault]:
        rng = random.Random(self.seed)
        faults: list[Fault] = []
        at = 0.0
        for index in range(self.count):
            at += self.every_s * (1 + rng.uniform(-self.jitter, self.jitter))
            kind = self.kinds[index % len(self.kinds)] if self.rotate else rng.choice(self.kinds)
            faults.append(Fault(round(at, 3), kind, rng.randrange(self.targets)))
        return faults

    def rng(self, salt: str) -> random.Random:
        """A generator for the test's own choices, also derived from the seed."""
        return random.Random(f"{self.seed}:{salt}")

    async def run(
        self,
        act: Callable[[Fault], Awaitable[None]],
        *,
        stop: Callable[[], bool] = lambda: False,
        limit_s: float | None = None,
    ) -> list[tuple[float, Fault]]:
        """Inject each planned fault at its time with ``act``; stop early when ``stop()`` is
        true or ``limit_s`` has passed. Returns (monotonic time, fault) of what was done."""
        start = time.monotonic()
        for fault in self.plan():
            if limit_s is not None and fault.at_s > limit_s:
                break
            while (wait := start + fault.at_s - time.monotonic()) > 0:
                if stop():
                    return self.log
                await asyncio.sleep(min(wait, 0.1))
            if stop():
                break
            await act(fault)
            self.log.append((time.monotonic(), fault))
        return self.log

    def describe(self) -> str:
        return f"seed {self.seed}: " + ", ".join(
            f"{fault.kind}@{fault.at_s:g}s->{fault.target}" for _, fault in self.log
        )
