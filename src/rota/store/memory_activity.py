"""The memory store's activity tallies: the same per-minute rows the SQL stores keep
(rota.domain.activity), in dicts guarded by the store's lock."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from rota.domain.activity import (
    MINUTE,
    ActivityBucket,
    ActivityRow,
    AttemptEnd,
    ErrorGroup,
    assemble,
    check_window,
    error_fingerprint,
    error_sample,
    tally,
    top,
)

_Where = tuple[str | None, str | None]


def minute_of(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


class ActivityTallies:
    """Rows by (minute, queue, kind, bucket) and error groups by (minute, queue, kind,
    fingerprint). Not thread-safe by itself: the memory store calls it under its lock."""

    def __init__(self) -> None:
        self._rows: dict[tuple[datetime, str, str, int], list[int]] = {}
        #: (count, sample) by (minute, queue, kind, fingerprint); the sample is the latest.
        self._errors: dict[tuple[datetime, str, str, str], tuple[int, str]] = {}

    def add(self, ends: Iterable[AttemptEnd], at: datetime) -> None:
        minute = minute_of(at)
        for (queue, kind, bucket), counts in tally(ends).items():
            row = self._rows.setdefault((minute, queue, kind, bucket), [0, 0, 0, 0])
            for i, n in enumerate(counts):
                row[i] += n

    def add_error(self, queue: str, kind: str, error: str, at: datetime) -> None:
        key = (minute_of(at), queue, kind, error_fingerprint(error))
        count, _ = self._errors.get(key, (0, ""))
        self._errors[key] = (count + 1, error_sample(error))

    def buckets(
        self, since: datetime, width: timedelta, now: datetime, where: _Where
    ) -> list[ActivityBucket]:
        check_window(since, width, now)
        queue, kind = where
        rows = [
            ActivityRow(int((minute - since) / width), bucket, *counts)
            for (minute, q, k, bucket), counts in self._rows.items()
            if since <= minute < now and queue in (None, q) and kind in (None, k)
        ]
        return assemble(rows, since, width, now)

    def top_errors(
        self, since: datetime, now: datetime, where: _Where, limit: int
    ) -> list[ErrorGroup]:
        queue, kind = where
        groups: dict[str, tuple[int, datetime, str]] = {}
        for (minute, q, k, fingerprint), (count, sample) in sorted(self._errors.items()):
            if since <= minute < now and queue in (None, q) and kind in (None, k):
                total, _, _ = groups.get(fingerprint, (0, minute, sample))
                # Sorted by minute first: the last one seen is the latest.
                groups[fingerprint] = (total + count, minute, sample)
        return top(
            (ErrorGroup(fp, n, last, sample) for fp, (n, last, sample) in groups.items()), limit
        )

    def prune(self, older_than: datetime) -> None:
        cutoff = older_than - MINUTE
        self._rows = {key: row for key, row in self._rows.items() if key[0] >= cutoff}
        self._errors = {key: row for key, row in self._errors.items() if key[0] >= cutoff}
