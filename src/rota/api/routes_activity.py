"""The kind and queue pages' route: a window of activity from the per-minute tallies (never
the jobs), the most frequent errors, and what holds the queue or kind back now.

A queue or kind nobody has used is no error: its page shows empty charts, as GET /api/queues
lists a queue only once it has jobs or settings and a pause may come before its first job.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query

from rota.api.activity_models import (
    ActivityOut,
    WindowName,
    bucket_out,
    error_out,
    totals_out,
)
from rota.api.blockers import blockers_out, flow_snapshot
from rota.api.context import ApiContext
from rota.api.schemas import errors
from rota.domain.activity import MINUTE, TOP_ERRORS, WINDOWS
from rota.domain.blockers import kind_blockers, queue_blockers
from rota.domain.job_state import JobState
from rota.domain.names import MAX_NAME_LENGTH, NAME_PATTERN

Name = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        pattern=f"^{NAME_PATTERN.pattern}$",
        description="The queue's or kind's name.",
    ),
]
Window = Annotated[
    WindowName,
    Query(description="How far back: the last hour (1-minute bars), 6 h (5 min), 24 h (20 min)."),
]


def activity_router(ctx: ApiContext) -> APIRouter:
    router = APIRouter()

    async def window_of(
        now: datetime, window: WindowName, queue: str | None, kind: str | None
    ) -> ActivityOut:
        span, width = WINDOWS[window]
        # Bars start on whole minutes so successive polls draw the same bars; the last one
        # holds the current, partial minute.
        until = now.replace(second=0, microsecond=0) + MINUTE
        since = until - span
        store = ctx.reads.store
        buckets = await store.activity(since=since, bucket=width, queue=queue, kind=kind, now=until)
        groups = await store.top_errors(
            since=since, queue=queue, kind=kind, limit=TOP_ERRORS, now=until
        )
        return ActivityOut(
            now=now,
            name=queue or kind or "",
            window=window,
            bucket_seconds=int(width.total_seconds()),
            buckets=[bucket_out(b) for b in buckets],
            totals=totals_out(buckets, since),
            errors=[error_out(g) for g in groups],
            held_by=[],
        )

    @router.get(
        "/api/queues/{name}/activity",
        response_model=ActivityOut,
        responses=errors(400, 401, 503),
        tags=["queues"],
    )
    async def queue_activity(name: Name, window: Window = "1h") -> ActivityOut:
        """The queue's attempts per bar over the window (successes, failures, deaths, p50
        and p95 run time, p95 wait from due to start), its 10 most frequent errors, its
        jobs by state, and what holds all its jobs back now: paused, its concurrency limit
        full, no live worker claiming from it, jobs waiting on their parents."""
        now = await ctx.now()
        out = await window_of(now, window, name, None)
        counts = await ctx.reads.store.counts(now=now)
        by_state = counts.by_queue.get(name, {})
        flow = await flow_snapshot(ctx, now)
        waiting = by_state.get(JobState.WAITING, 0)
        out.held_by = blockers_out(queue_blockers(name, flow, waiting=waiting))
        out.counts = {state.value: by_state.get(state, 0) for state in JobState}
        return out

    @router.get(
        "/api/kinds/{name}/activity",
        response_model=ActivityOut,
        responses=errors(400, 401, 503),
        tags=["kinds"],
    )
    async def kind_activity(name: Name, window: Window = "1h") -> ActivityOut:
        """The kind's attempts per bar over the window, across its queues, as for a queue;
        its 10 most frequent errors; and what holds all its jobs back now: its concurrency
        or rate limit used up, or no live worker running it."""
        now = await ctx.now()
        out = await window_of(now, window, None, name)
        out.held_by = blockers_out(kind_blockers(name, await flow_snapshot(ctx, now)))
        return out

    return router
