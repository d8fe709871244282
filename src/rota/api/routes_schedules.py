"""The /api/schedules routes: list, create, read, pause, resume, run now, delete.

Mutations are POSTs, so the security middleware applies the same rules as to every other
mutation (authentication, same origin, read-only mode, JSON content type) before a route runs.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from rota.api.body import read_json_object
from rota.api.context import ApiContext
from rota.api.errors import ApiError, quote_input
from rota.api.routes_jobs import json_body
from rota.api.schedule_models import (
    ScheduleCreate,
    ScheduleList,
    ScheduleOut,
    schedule_errors,
    schedule_out,
    spec_from_body,
)
from rota.api.schemas import JobCreated, job_out
from rota.domain.job import MAX_NAME_LENGTH, NAME_PATTERN

ScheduleName = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        pattern=f"^{NAME_PATTERN.pattern}$",
        description="The schedule's name.",
    ),
]


def schedules_router(ctx: ApiContext) -> APIRouter:
    router = APIRouter(tags=["schedules"])
    settings = ctx.settings
    store = ctx.client.store

    @router.get("/api/schedules", response_model=ScheduleList, responses=schedule_errors(401, 503))
    async def list_schedules() -> ScheduleList:
        """Every schedule by name, with its next runs and its last run's outcome."""
        listed = await ctx.reads.store.list_schedules()
        return ScheduleList(now=await ctx.now(), schedules=[schedule_out(s) for s in listed])

    @router.post(
        "/api/schedules",
        status_code=201,
        response_model=ScheduleOut,
        responses=schedule_errors(400, 401, 403, 409, 413, 415, 503),
        openapi_extra=json_body(ScheduleCreate),
    )
    async def create_schedule(request: Request) -> ScheduleOut:
        """Create a schedule (409 when the name is taken). Its first run is its first slot
        from now; an interval schedule's first run is now."""
        raw = await read_json_object(
            request, max_bytes=settings.max_body_bytes, max_depth=settings.max_json_depth
        )
        body = ScheduleCreate.model_validate(raw)
        if ctx.kinds is not None and body.kind not in ctx.kinds:
            raise ApiError(400, f"kind: unknown kind {quote_input(body.kind)!r}")
        spec = spec_from_body(ctx.client, body)
        return schedule_out(await store.create_schedule(spec))

    @router.get(
        "/api/schedules/{name}",
        response_model=ScheduleOut,
        responses=schedule_errors(400, 401, 404, 503),
    )
    async def get_schedule(name: ScheduleName) -> ScheduleOut:
        """One schedule, with its next runs and its last run's outcome."""
        return schedule_out(await ctx.read_one(lambda source: source.store.get_schedule(name)))

    @router.post(
        "/api/schedules/{name}/pause",
        status_code=204,
        response_class=Response,
        responses=schedule_errors(400, 401, 403, 404, 415, 503),
    )
    async def pause_schedule(name: ScheduleName) -> Response:
        """Stop firing the schedule until it is resumed; the pause survives deploys."""
        await store.pause_schedule(name)
        return Response(status_code=204)

    @router.post(
        "/api/schedules/{name}/resume",
        status_code=204,
        response_class=Response,
        responses=schedule_errors(400, 401, 403, 404, 415, 503),
    )
    async def resume_schedule(name: ScheduleName) -> Response:
        """Fire the schedule again; missed runs follow its misfire policy (latest: one run)."""
        await store.resume_schedule(name)
        return Response(status_code=204)

    @router.post(
        "/api/schedules/{name}/run",
        response_model=JobCreated,
        responses=schedule_errors(400, 401, 403, 404, 415, 503),
    )
    async def run_schedule(name: ScheduleName) -> JobCreated:
        """Enqueue a run now, outside the schedule's slots; its next run does not move.
        ``duplicate`` means a run for this very instant existed already."""
        result = await store.trigger_schedule(name)
        return JobCreated(**job_out(result.job), duplicate=result.duplicate)

    @router.post(
        "/api/schedules/{name}/delete",
        status_code=204,
        response_class=Response,
        responses=schedule_errors(400, 401, 403, 404, 415, 503),
    )
    async def delete_schedule(name: ScheduleName) -> Response:
        """Delete the schedule; the jobs it already enqueued stay."""
        await store.delete_schedule(name)
        return Response(status_code=204)

    return router
