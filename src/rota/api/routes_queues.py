"""The flow-control routes: queues (list, pause, resume), limits (list, set, delete) and the
jobs each tenant is running.

Mutations are POSTs, so the security middleware applies the same rules as to every other
mutation (authentication, same origin, read-only mode, JSON content type) before a route runs.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from rota.api.body import read_json_object
from rota.api.context import ApiContext
from rota.api.errors import ApiError
from rota.api.queue_models import (
    KEY_PATTERN,
    LimitCreate,
    LimitList,
    LimitOut,
    QueueList,
    ScopeName,
    TenantRunningList,
    limit_errors,
    limit_from_body,
    limit_key,
    limit_out,
    queue_out,
    tenants_out,
)
from rota.api.routes_jobs import json_body
from rota.api.schemas import errors
from rota.domain.flow import EVERY_TENANT, LimitScope
from rota.domain.names import MAX_NAME_LENGTH, NAME_PATTERN
from rota.store.records import LimitInfo

QueueName = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        pattern=f"^{NAME_PATTERN.pattern}$",
        description="The queue's name.",
    ),
]
Scope = Annotated[ScopeName, Path(description="What the limit counts.")]
LimitKey = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        pattern=KEY_PATTERN,
        description="The queue, kind or tenant name (* for the every-tenant limit).",
    ),
]


def queues_router(ctx: ApiContext) -> APIRouter:
    router = APIRouter()
    settings = ctx.settings
    client = ctx.client

    @router.get(
        "/api/queues", response_model=QueueList, responses=errors(401, 503), tags=["queues"]
    )
    async def list_queues() -> QueueList:
        """Every queue with jobs, settings or a limit: paused or not, its jobs by state, and
        its concurrency limit."""
        listed = await ctx.reads.queues()
        return QueueList(
            now=await ctx.now(),
            exact=all(queue.exact for queue in listed),
            queues=[queue_out(queue) for queue in listed],
        )

    @router.post(
        "/api/queues/{name}/pause",
        status_code=204,
        response_class=Response,
        responses=errors(400, 401, 403, 415, 503),
        tags=["queues"],
    )
    async def pause_queue(name: QueueName, request: Request) -> Response:
        """Stop every worker claiming from the queue until it is resumed; running jobs
        finish. A queue may be paused before it has jobs."""
        await ctx.operator(request).pause_queue(name)
        return Response(status_code=204)

    @router.post(
        "/api/queues/{name}/resume",
        status_code=204,
        response_class=Response,
        responses=errors(400, 401, 403, 415, 503),
        tags=["queues"],
    )
    async def resume_queue(name: QueueName, request: Request) -> Response:
        """Let workers claim from the queue again."""
        await ctx.operator(request).resume_queue(name)
        return Response(status_code=204)

    @router.get(
        "/api/limits", response_model=LimitList, responses=errors(401, 503), tags=["limits"]
    )
    async def list_limits() -> LimitList:
        """Every limit by scope and key, with its running jobs and starts in its period."""
        listed = await ctx.reads.limits()
        return LimitList(now=await ctx.now(), limits=[limit_out(info) for info in listed])

    @router.post(
        "/api/limits",
        status_code=201,
        response_model=LimitOut,
        responses=limit_errors(400, 401, 403, 413, 415, 503),
        openapi_extra=json_body(LimitCreate),
        tags=["limits"],
    )
    async def set_limit(request: Request) -> LimitOut:
        """Add the limit, or replace the one with the same scope and key (starts already
        counted against its rate are kept)."""
        raw = await read_json_object(
            request, max_bytes=settings.max_body_bytes, max_depth=settings.max_json_depth
        )
        limit = limit_from_body(LimitCreate.model_validate(raw))
        await ctx.operator(request).set_limit(limit)
        for info in await client.limits():
            if info.limit.ident == limit.ident:
                return limit_out(info)
        # Removed again between the two statements: report what was set.
        return limit_out(LimitInfo(limit))

    @router.post(
        "/api/limits/{scope}/{key}/delete",
        status_code=204,
        response_class=Response,
        responses=limit_errors(400, 401, 403, 404, 415, 503),
        tags=["limits"],
    )
    async def delete_limit(scope: Scope, key: LimitKey, request: Request) -> Response:
        """Remove the limit; jobs it held back become claimable."""
        target = LimitScope(scope)
        if key == EVERY_TENANT and target is not LimitScope.TENANT:
            # ``*`` means every tenant; no queue or kind limit can have that key.
            raise ApiError(404, f"limit on {target.value} {key!r} not found")
        if not await ctx.operator(request).delete_limit(target, limit_key(target, key)):
            raise ApiError(404, f"limit on {target.value} {key!r} not found")
        return Response(status_code=204)

    @router.get(
        "/api/tenants/running",
        response_model=TenantRunningList,
        responses=errors(401, 503),
        tags=["limits"],
    )
    async def tenants_running() -> TenantRunningList:
        """Jobs running with a live lease per tenant, most first."""
        running = await ctx.reads.running_by_tenant()
        return TenantRunningList(now=await ctx.now(), tenants=tenants_out(running))

    return router
