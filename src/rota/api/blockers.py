"""Why jobs are not running, at the API's edge: the flow-control state read once per request
(rota.domain.blockers decides), only when a waiting or pending job is there to explain.

A list page costs at most four small reads on top of its own: paused queues, limits with
their use, running jobs per tenant (only under a cap on every tenant) and the workers
registry. Lists and counts come from the read side (a replica, when one is configured), the
workers from the primary, as on GET /api/workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from rota.api.context import ApiContext
from rota.api.job_models import BlockerOut
from rota.domain.blockers import Blocker, FlowSnapshot, LimitUse, blockers, is_held
from rota.domain.job import Job
from rota.store.records import kinds_by_queue


async def flow_snapshot(ctx: ApiContext, now: datetime) -> FlowSnapshot:
    """The store's flow-control state as of ``now`` (its clock)."""
    store = ctx.reads.store
    queues = await store.list_queues()
    limits = await store.list_limits(now=now)
    workers = await ctx.client.workers()
    live = [worker for worker in workers if worker.is_alive(now, ctx.heartbeat)]
    flow = FlowSnapshot.of(
        served_kinds=kinds_by_queue((worker.queues, worker.kinds) for worker in live),
        paused_queues=[queue.name for queue in queues if queue.paused],
        limits=[LimitUse(info.limit, info.running, info.recent_starts) for info in limits],
        served_queues=[
            queue
            for worker in workers
            if worker.is_alive(now, ctx.heartbeat)
            for queue in worker.queues
        ],
    )
    if flow.needs_tenant_running:
        flow = replace(flow, tenant_running=await store.running_by_tenant(now=now))
    return flow


async def blocked_by(ctx: ApiContext, jobs: Sequence[Job], now: datetime) -> list[list[BlockerOut]]:
    """For each of ``jobs``, why it is not running at ``now``; no read at all when none of
    them is waiting or pending."""
    if not any(is_held(job) for job in jobs):
        return [[] for _ in jobs]
    flow = await flow_snapshot(ctx, now)
    return [blockers_out(blockers(job, now, flow)) for job in jobs]


def blockers_out(found: Sequence[Blocker]) -> list[BlockerOut]:
    """The API's form of ``found``."""
    return [BlockerOut(reason=b.reason.value, message=b.message, certain=b.certain) for b in found]
