"""Operational routes: workers, stats for the overview, dashboard config, /metrics, /healthz."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from rota.api.context import ApiContext
from rota.api.gauges import StoreGauges
from rota.api.overview_models import (
    CountsOut,
    DashboardConfig,
    ReplicaOut,
    Stats,
    ThroughputOut,
    WorkerList,
    bucket_out,
    worker_out,
)
from rota.api.schemas import Health, errors
from rota.api.security import principal_of

THROUGHPUT_BUCKET = timedelta(minutes=1)
THROUGHPUT_BUCKETS = 60


def misc_router(ctx: ApiContext) -> APIRouter:
    router = APIRouter()
    client = ctx.client
    gauges = StoreGauges(client, ctx.metrics, ctx.settings, reads=ctx.reads)

    @router.get(
        "/api/workers", response_model=WorkerList, responses=errors(401, 503), tags=["workers"]
    )
    async def list_workers() -> WorkerList:
        """Registered workers, their heartbeat age and running jobs, and whether they are alive."""
        # From the primary even with a replica: a lagging copy of the heartbeats would show
        # live workers as dead, and the registry is a small table.
        workers = await client.workers()
        now = await ctx.now()
        return WorkerList(now=now, workers=[worker_out(w, now, ctx.heartbeat) for w in workers])

    @router.get("/api/stats", response_model=Stats, responses=errors(401, 503), tags=["stats"])
    async def stats() -> Stats:
        """Counts by state and queue, the oldest due job's age, workers alive, the last
        hour's finished jobs per minute, and, when these are read from a replica, how far
        it trails the primary."""
        now = await ctx.now()
        replica = await _replica_out(ctx)
        counts = await ctx.reads.store.counts(now=now)
        workers = await client.workers()  # the primary's, as for /api/workers
        # Buckets start on whole minutes so successive polls draw the same bars; the last one
        # is the current, partial minute (nothing can have finished after now).
        until = now.replace(second=0, microsecond=0) + THROUGHPUT_BUCKET
        since = until - THROUGHPUT_BUCKETS * THROUGHPUT_BUCKET
        buckets = await ctx.reads.store.throughput(since=since, bucket=THROUGHPUT_BUCKET, now=until)
        oldest = counts.oldest_due_at
        views = [worker_out(w, now, ctx.heartbeat) for w in workers]
        return Stats(
            now=now,
            counts=CountsOut(
                by_state={state.value: n for state, n in counts.by_state.items()},
                by_queue={
                    queue: {state.value: n for state, n in per_state.items()}
                    for queue, per_state in sorted(counts.by_queue.items())
                },
                exact=counts.exact,
            ),
            oldest_due_age_seconds=(
                max(0.0, (now - oldest).total_seconds()) if oldest is not None else None
            ),
            workers_alive=sum(1 for view in views if view.alive),
            workers_total=len(views),
            throughput=ThroughputOut(
                bucket_seconds=int(THROUGHPUT_BUCKET.total_seconds()),
                buckets=[bucket_out(b) for b in buckets],
            ),
            replica=replica,
        )

    @router.get(
        "/api/config", response_model=DashboardConfig, responses=errors(401), tags=["dashboard"]
    )
    async def config(request: Request) -> DashboardConfig:
        """What the dashboard shows: demo presets, whether this identity may change anything
        (read-only mode or a read-only token), the accepted kinds, and who it acts as."""
        principal = principal_of(request.scope)
        return DashboardConfig(
            demo=ctx.demo,
            read_only=ctx.settings.read_only or not principal.can_write,
            kinds=sorted(ctx.kinds) if ctx.kinds is not None else None,
            login=ctx.authenticator.login_enabled,
            identity=principal.identity,
            role=principal.role.value,
        )

    @router.get(
        "/metrics",
        response_class=Response,
        responses={
            200: {
                "content": {"text/plain": {"schema": {"type": "string"}}},
                "description": "Prometheus text format.",
            },
            **errors(401, 503),
        },
        tags=["operations"],
    )
    async def metrics() -> Response:
        """Prometheus metrics; store-derived gauges are refreshed at most every few seconds."""
        await gauges.refresh()
        return Response(generate_latest(ctx.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @router.get("/healthz", response_model=Health, tags=["operations"])
    async def healthz() -> Health:
        """Liveness: the process serves requests. Needs no credentials and reads no secrets."""
        return Health(ok=True)

    return router


async def _replica_out(ctx: ApiContext) -> ReplicaOut | None:
    """How far the read replica trails, measured before the reads it qualifies."""
    if ctx.replica is None:
        return None
    lag = await ctx.replica.lag()
    seconds = None if lag.behind is None else lag.behind.total_seconds()
    return ReplicaOut(replaying=lag.replaying, lag_seconds=seconds)
