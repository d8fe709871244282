"""The /api/schedules routes: list, create, read, edit, pause, resume, run now, delete.

Mutations are POSTs, so the security middleware applies the same rules as to every other
mutation (authentication, same origin, read-only mode, JSON content type) before a route runs.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request, Response

from rota.api.body import read_json_object
from rota.api.context import ApiContext
from rota.api.errors import ApiError, job_error_message
from rota.api.job_models import JobCreated, job_out
from rota.api.paging import PageLimit
from rota.api.routes_jobs import json_body
from rota.api.schedule_models import (
    ScheduleCreate,
    ScheduleEdit,
    ScheduleList,
    ScheduleOut,
    schedule_errors,
    schedule_out,
    spec_from_body,
)
from rota.domain.errors import InvalidJob
from rota.domain.names import MAX_NAME_LENGTH, NAME_PATTERN, check_known_kind
from rota.domain.schedule import ScheduleSpec
from rota.domain.schedule_state import Schedule

ScheduleName = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        pattern=f"^{NAME_PATTERN.pattern}$",
        description="The schedule's name.",
    ),
]


async def rendered(schedules: list[Schedule]) -> list[ScheduleOut]:
    """The schedules as the API shows them. Their next runs come from the process's memo of
    cron answers (computed once per slot), but a rule seen for the first time can take a
    tenth of a second to answer: off the loop, so other requests are not held up meanwhile."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_RENDERER, lambda: [schedule_out(s) for s in schedules])


#: One thread renders schedules, whatever the number of requests: each more thread that
#: computes would take the GIL from the loop (and from in-process workers) in turn.
_RENDERER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rota-schedules")


def checked_spec(ctx: ApiContext, body: ScheduleCreate) -> ScheduleSpec:
    """The schedule ``body`` defines, or one 400 naming every problem of its kind and its rule
    at once ("kind: ...; cron: ..."), so a form is put right in one go, not one field a time."""
    problems: list[str] = []
    try:
        check_known_kind(body.kind, ctx.kinds)
    except InvalidJob as error:
        problems.append(job_error_message(error))
    spec = None
    try:
        spec = spec_from_body(ctx.client, body)
    except InvalidJob as error:
        problems.append(job_error_message(error))
    except ApiError as error:
        if error.status != 400:
            raise
        problems.append(error.message)
    if problems or spec is None:
        raise ApiError(400, "; ".join(dict.fromkeys(problems)))
    return spec


def schedules_router(ctx: ApiContext) -> APIRouter:
    router = APIRouter(tags=["schedules"])
    settings = ctx.settings

    @router.get(
        "/api/schedules", response_model=ScheduleList, responses=schedule_errors(400, 401, 503)
    )
    async def list_schedules(
        cursor: Annotated[
            str | None,
            Query(
                min_length=1,
                max_length=MAX_NAME_LENGTH,
                pattern=f"^{NAME_PATTERN.pattern}$",
                description="next_cursor of the previous page (the last name on it).",
            ),
        ] = None,
        limit: PageLimit = 50,
        order: Annotated[
            Literal["name", "due"],
            Query(
                description="name: all schedules, by keyset pages; due: unpaused ones, "
                "soonest due first, one page (no cursor)."
            ),
        ] = "name",
    ) -> ScheduleList:
        """Schedules by name, one keyset page at a time (or the soonest due), each with its
        next runs and its last run's outcome."""
        page = await ctx.reads.list_schedules(
            cursor=cursor or None, limit=limit, due_first=order == "due"
        )
        return ScheduleList(
            now=await ctx.now(),
            schedules=await rendered(page.schedules),
            next_cursor=page.next_cursor,
        )

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
        spec = checked_spec(ctx, ScheduleCreate.model_validate(raw))
        [created] = await rendered([await ctx.operator(request).create_schedule(spec)])
        return created

    @router.get(
        "/api/schedules/{name}",
        response_model=ScheduleOut,
        responses=schedule_errors(400, 401, 404, 503),
    )
    async def get_schedule(name: ScheduleName) -> ScheduleOut:
        """One schedule, with its next runs and its last run's outcome."""
        [schedule] = await rendered(
            [await ctx.read_one(lambda source: source.store.get_schedule(name))]
        )
        return schedule

    @router.post(
        "/api/schedules/{name}/edit",
        response_model=ScheduleOut,
        responses=schedule_errors(400, 401, 403, 404, 413, 415, 503),
        openapi_extra=json_body(ScheduleEdit),
    )
    async def edit_schedule(name: ScheduleName, request: Request) -> ScheduleOut:
        """Replace the schedule's definition with the body's (fields left out take their
        defaults, as on creation; 404 when there is no such schedule). Paused or not and its
        run history stay; its next run stays unless the rule changed, and then is the new
        rule's first slot from now (never a slot already fired)."""
        raw = await read_json_object(
            request, max_bytes=settings.max_body_bytes, max_depth=settings.max_json_depth
        )
        spec = checked_spec(ctx, ScheduleCreate.named(name, ScheduleEdit.model_validate(raw)))
        [edited] = await rendered([await ctx.operator(request).edit_schedule(spec)])
        return edited

    @router.post(
        "/api/schedules/{name}/pause",
        status_code=204,
        response_class=Response,
        responses=schedule_errors(400, 401, 403, 404, 415, 503),
    )
    async def pause_schedule(
        name: ScheduleName,
        request: Request,
        missed: Annotated[
            Literal["queue", "drop"],
            Query(
                description="What the resume does with the slots that fall due while paused: "
                "queue (they fire as the misfire policy allows, at most misfire_limit) or drop "
                "(none fires; the first slot after the resume does)."
            ),
        ] = "queue",
    ) -> Response:
        """Stop firing the schedule until it is resumed; the pause survives deploys."""
        await ctx.operator(request).pause_schedule(name, missed=missed)
        return Response(status_code=204)

    @router.post(
        "/api/schedules/{name}/resume",
        status_code=204,
        response_class=Response,
        responses=schedule_errors(400, 401, 403, 404, 415, 503),
    )
    async def resume_schedule(name: ScheduleName, request: Request) -> Response:
        """Fire the schedule again. The slots that fell due while it was paused fire as its
        misfire policy allows (latest: one run) if it was paused with missed=queue, and none
        does if with missed=drop (its first slot after now fires next); each slot at most once."""
        await ctx.operator(request).resume_schedule(name)
        return Response(status_code=204)

    @router.post(
        "/api/schedules/{name}/run",
        response_model=JobCreated,
        responses=schedule_errors(400, 401, 403, 404, 415, 503),
    )
    async def run_schedule(name: ScheduleName, request: Request) -> JobCreated:
        """Enqueue a run now, outside the schedule's slots; its next run does not move.
        ``duplicate`` means a run for this very instant existed already."""
        result = await ctx.operator(request).trigger_schedule(name)
        return JobCreated(**job_out(result.job), duplicate=result.duplicate)

    @router.post(
        "/api/schedules/{name}/delete",
        status_code=204,
        response_class=Response,
        responses=schedule_errors(400, 401, 403, 404, 415, 503),
    )
    async def delete_schedule(name: ScheduleName, request: Request) -> Response:
        """Delete the schedule; the jobs it already enqueued stay."""
        await ctx.operator(request).delete_schedule(name)
        return Response(status_code=204)

    return router
