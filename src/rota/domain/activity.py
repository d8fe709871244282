"""A queue's and a kind's activity over time: per-minute tallies of the attempts that ended,
their run times and waits as histograms, and their errors grouped by message.

The stores add to the tallies in the statement that ends an attempt (a success or a failure),
fenced on its lease token like that write: one row per (minute, queue, kind, duration bucket)
and one per (minute, queue, kind, error fingerprint), whatever the number of jobs. The charts
read those rows only, never the jobs, so they cost the same at a thousand jobs or ten million.

Durations fall in fixed buckets (1-2-5 steps from 1 ms to 50,000 s): a percentile is read
from the bucket it falls in, linearly between its bounds, so it is an estimate within that
bucket (3 s runs read as 3.5 s at the median, as half of the [2 s, 5 s) bucket).
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rota.domain.errors import InvalidInput
from rota.domain.job import Job
from rota.domain.job_state import JobState

#: The lower bounds of the duration buckets after the first, in microseconds: bucket i holds
#: durations in [BOUNDS[i-1], BOUNDS[i]) (bucket 0 from zero, the last one everything from
#: 50,000 s up). The same numbers as PostgreSQL's width_bucket thresholds.
DURATION_BOUNDS_US: tuple[int, ...] = tuple(
    step * 10**exponent for exponent in range(3, 11) for step in (1, 2, 5)
)
DURATION_BUCKETS = len(DURATION_BOUNDS_US) + 1
_EMPTY: tuple[int, ...] = (0,) * DURATION_BUCKETS

#: The windows the charts offer: how far back, and the width of one bar.
WINDOWS: dict[str, tuple[timedelta, timedelta]] = {
    "1h": (timedelta(hours=1), timedelta(minutes=1)),
    "6h": (timedelta(hours=6), timedelta(minutes=5)),
    "24h": (timedelta(hours=24), timedelta(minutes=20)),
}
MINUTE = timedelta(minutes=1)
MAX_SLOTS = 1000
#: How many error groups a page shows.
TOP_ERRORS = 10
#: An error's fingerprint and the sample kept of it are cut to these many characters.
FINGERPRINT_CHARS = 200
SAMPLE_CHARS = 500


def duration_bucket(microseconds: int) -> int:
    """The bucket of a duration (a negative one counts as zero)."""
    return bisect_right(DURATION_BOUNDS_US, max(0, microseconds))


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """One attempt's end as the tallies count it. ``state`` is the job's state after it:
    succeeded, pending (failed, to be retried) or dead (failed for good)."""

    queue: str
    kind: str
    state: JobState
    #: From its start to its end.
    run_us: int
    #: From the job's due time (run_at) to the attempt's start.
    wait_us: int


def attempt_end(job: Job, state: JobState, at: datetime) -> AttemptEnd:
    """The end at ``at`` of ``job``'s running attempt, leaving the job in ``state``."""
    started = job.started_at or at
    return AttemptEnd(
        job.queue,
        job.kind,
        state,
        run_us=_us(at - started),
        wait_us=_us(started - job.run_at),
    )


def _us(span: timedelta) -> int:
    return span // timedelta(microseconds=1)


#: A tally row's key: (queue, kind, duration bucket).
TallyKey = tuple[str, str, int]


def tally(ends: Iterable[AttemptEnd]) -> dict[TallyKey, list[int]]:
    """Add attempt ends up into rows (succeeded, failed, dead, waited) by (queue, kind,
    bucket), sorted by key (writers lock rows in one order, so two batches never deadlock):
    the first three count the attempts whose run time falls in the bucket, the last those
    whose wait does."""
    rows: dict[TallyKey, list[int]] = {}
    for end in ends:
        run = rows.setdefault((end.queue, end.kind, duration_bucket(end.run_us)), [0, 0, 0, 0])
        if end.state is JobState.SUCCEEDED:
            run[0] += 1
        else:
            run[1] += 1
            if end.state is JobState.DEAD:
                run[2] += 1
        rows.setdefault((end.queue, end.kind, duration_bucket(end.wait_us)), [0, 0, 0, 0])[3] += 1
    return dict(sorted(rows.items()))


def quantile(histogram: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile (0 < q <= 1) of the durations counted in ``histogram``, in seconds,
    read linearly within its bucket; None when it counts nothing. In the last bucket (no upper
    bound) it is that bucket's lower bound."""
    total = sum(histogram)
    if total == 0:
        return None
    rank = q * total
    below = 0
    for index, n in enumerate(histogram):
        if n and below + n >= rank:
            lower = DURATION_BOUNDS_US[index - 1] if index else 0
            if index >= len(DURATION_BOUNDS_US):
                return lower / 1e6
            upper = DURATION_BOUNDS_US[index]
            return (lower + (upper - lower) * max(0.0, rank - below) / n) / 1e6
        below += n
    return None  # unreachable: the loop always finds the rank


@dataclass(frozen=True, slots=True)
class ActivityBucket:
    """What ended during [start, start + width): succeeded attempts, failed ones (retried or
    dead) and of those the ones that made their job dead; all of them by run time and by wait
    (from the job's due time to the attempt's start), as duration-bucket counts."""

    start: datetime
    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    run: tuple[int, ...] = _EMPTY
    wait: tuple[int, ...] = _EMPTY

    def run_quantile(self, q: float) -> float | None:
        return quantile(self.run, q)

    def wait_quantile(self, q: float) -> float | None:
        return quantile(self.wait, q)


@dataclass(frozen=True, slots=True)
class ActivityRow:
    """A store's answer for one (slot, duration bucket): sums over the slot's minutes."""

    slot: int
    bucket: int
    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    waited: int = 0


def check_window(since: datetime, width: timedelta, now: datetime) -> int:
    """How many slots of ``width`` from ``since`` cover up to ``now``. InvalidInput unless
    ``since`` is on a whole minute, ``width`` a positive number of minutes and the slots at
    most MAX_SLOTS."""
    if width <= timedelta(0) or width % MINUTE:
        raise InvalidInput("a bucket must be a positive number of whole minutes")
    if since.second or since.microsecond:
        raise InvalidInput("since must be on a whole minute")
    count = max(0, math.ceil((now - since) / width))
    if count > MAX_SLOTS:
        raise InvalidInput(f"at most {MAX_SLOTS} buckets")
    return count


def assemble(
    rows: Iterable[ActivityRow], since: datetime, width: timedelta, now: datetime
) -> list[ActivityBucket]:
    """The slots from ``since`` up to ``now``, oldest first, empty ones included, from the
    store's rows (rows outside the slots are ignored)."""
    count = check_window(since, width, now)
    sums = [[0, 0, 0] for _ in range(count)]
    runs = [[0] * DURATION_BUCKETS for _ in range(count)]
    waits = [[0] * DURATION_BUCKETS for _ in range(count)]
    for row in rows:
        if not 0 <= row.slot < count or not 0 <= row.bucket < DURATION_BUCKETS:
            continue
        total = sums[row.slot]
        total[0] += row.succeeded
        total[1] += row.failed
        total[2] += row.dead
        runs[row.slot][row.bucket] += row.succeeded + row.failed
        waits[row.slot][row.bucket] += row.waited
    return [
        ActivityBucket(
            since + i * width,
            succeeded=sums[i][0],
            failed=sums[i][1],
            dead=sums[i][2],
            run=tuple(runs[i]),
            wait=tuple(waits[i]),
        )
        for i in range(count)
    ]


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
#: UUIDs, 0x numbers and hex runs of 8 or more with a digit and a letter (digests, ids).
_HEXISH = re.compile(
    r"\b[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b|\b0x[0-9a-fA-F]+\b"
    r"|\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b"
)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_SPACE = re.compile(r"\s+")


def error_fingerprint(message: str) -> str:
    """What errors of one kind share: the message's first line with quoted text, numbers and
    hex or UUID-like ids replaced (``'…'``, ``N``, ``X``), blanks squeezed, cut to
    FINGERPRINT_CHARS. "timeout after 30 s on order 1234" and "... order 99" group together."""
    first = message.strip().split("\n", 1)[0]
    text = _QUOTED.sub("'…'", first)
    text = _HEXISH.sub("X", text)
    text = _NUMBER.sub("N", text)
    return _SPACE.sub(" ", text).strip()[:FINGERPRINT_CHARS]


def error_sample(message: str) -> str:
    """The part of an error message kept to show its group."""
    return message.strip()[:SAMPLE_CHARS]


@dataclass(frozen=True, slots=True)
class ErrorGroup:
    """Failed attempts whose errors share a fingerprint, over a window: how many, when the
    last one ended (its minute), and the latest message as a sample."""

    fingerprint: str
    count: int
    last_at: datetime
    sample: str = field(default="")


def top(groups: Iterable[ErrorGroup], limit: int) -> list[ErrorGroup]:
    """The ``limit`` largest groups, most errors first, ties by fingerprint."""
    return sorted(groups, key=lambda g: (-g.count, g.fingerprint))[: max(0, limit)]
