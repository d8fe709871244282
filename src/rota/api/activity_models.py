"""The kind and queue pages' models: activity per bucket over a window, the most frequent
errors, and what holds the queue or kind back now."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from rota.api.job_models import BlockerOut
from rota.domain.activity import DURATION_BUCKETS, ActivityBucket, ErrorGroup

#: rota.domain.activity.WINDOWS' names, spelled out so the schema can enumerate them.
WindowName = Literal["1h", "6h", "24h"]


class ActivityBucketOut(BaseModel):
    """Attempts that ended during [start, start + bucket_seconds). Percentiles are estimates
    read from duration buckets in 1-2-5 steps; null when no attempt ended."""

    start: datetime
    succeeded: int
    failed: int = Field(description="Attempts whose handler failed, retried or not.")
    dead: int = Field(description="Of the failed attempts, those that made their job dead.")
    p50_run_seconds: float | None
    p95_run_seconds: float | None
    p95_wait_seconds: float | None = Field(
        description="From the job's due time to the attempt's start."
    )


class ErrorGroupOut(BaseModel):
    """Failed attempts whose errors share a fingerprint (numbers, quoted text and ids
    replaced), with the latest message as a sample."""

    fingerprint: str
    count: int
    last_at: datetime = Field(description="The minute of the latest one.")
    sample: str


class ActivityOut(BaseModel):
    """A queue's or kind's activity over a window, its most frequent errors (at most 10)
    and what holds all its jobs back now."""

    now: datetime
    name: str
    window: WindowName
    bucket_seconds: int
    buckets: list[ActivityBucketOut]
    totals: ActivityBucketOut = Field(description="The whole window as one bucket.")
    errors: list[ErrorGroupOut]
    held_by: list[BlockerOut]
    counts: dict[str, int] | None = Field(
        default=None,
        description="A queue's jobs by state now (null for a kind); estimates on large "
        "PostgreSQL tables.",
    )


def bucket_out(bucket: ActivityBucket) -> ActivityBucketOut:
    return ActivityBucketOut(
        start=bucket.start,
        succeeded=bucket.succeeded,
        failed=bucket.failed,
        dead=bucket.dead,
        p50_run_seconds=bucket.run_quantile(0.5),
        p95_run_seconds=bucket.run_quantile(0.95),
        p95_wait_seconds=bucket.wait_quantile(0.95),
    )


def totals_out(buckets: list[ActivityBucket], start: datetime) -> ActivityBucketOut:
    """The window's buckets added up into one, starting at ``start``."""
    return bucket_out(
        ActivityBucket(
            start,
            succeeded=sum(b.succeeded for b in buckets),
            failed=sum(b.failed for b in buckets),
            dead=sum(b.dead for b in buckets),
            run=tuple(sum(b.run[i] for b in buckets) for i in range(DURATION_BUCKETS)),
            wait=tuple(sum(b.wait[i] for b in buckets) for i in range(DURATION_BUCKETS)),
        )
    )


def error_out(group: ErrorGroup) -> ErrorGroupOut:
    return ErrorGroupOut(
        fingerprint=group.fingerprint,
        count=group.count,
        last_at=group.last_at,
        sample=group.sample,
    )
