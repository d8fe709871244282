"""The /api/jobs routes: list, count, enqueue, read, retry, cancel, delete, and the bulk verbs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import StringConstraints
from starlette.exceptions import HTTPException as StarletteHTTPException

from rota.api.blockers import blocked_by
from rota.api.body import read_json_object
from rota.api.context import ApiContext
from rota.api.durable_models import step_out, suspension_out
from rota.api.filters import filter_from_body, filter_from_query, restrict
from rota.api.job_models import (
    DETAIL_PREVIEW_CHARS,
    BulkResult,
    JobCount,
    JobCreated,
    JobDetail,
    JobList,
    JobOut,
    StateCounts,
    attempt_out,
    detail_values,
    job_out,
    job_summary,
)
from rota.api.paging import IdCursor, PageLimit
from rota.api.schedule_models import ScheduleOut, create_every_schedule
from rota.api.schemas import (
    MAX_SEARCH_LENGTH,
    SEARCH_PATTERN,
    JobCreate,
    JobFilterBody,
    JobReschedule,
    errors,
)
from rota.api.workflow_models import RelatedOut, RelatedPage
from rota.client import Client
from rota.domain.durable import Step, suspension
from rota.domain.errors import InvalidJob
from rota.domain.job import Attempt, Job
from rota.domain.job_state import JobState
from rota.domain.names import MAX_NAME_LENGTH, NAME_PATTERN, check_known_kind, parse_instant
from rota.domain.payload import payload_text
from rota.domain.transitions import MOVES
from rota.operator import Operator
from rota.store.records import MAX_BULK, JobFilter, decode_cursor, encode_cursor

#: Job ids are PostgreSQL bigints; anything larger cannot name a job.
MAX_JOB_ID = 2**63 - 1
#: The states each bulk verb acts on (``GET /api/jobs/count?action=``).
_ACTED_ON: dict[str, frozenset[JobState]] = {
    "retry": MOVES["retry"].sources,
    "cancel": MOVES["cancel"].sources,
    "delete": MOVES["purge"].sources,
    "hold": MOVES["hold"].sources,
    "release": MOVES["release_held"].sources,
}
BulkAction = Literal["retry", "cancel", "delete", "hold", "release"]
#: An Operator's bulk verb: (filter, *, limit) -> how many jobs it changed.
BulkCall = Callable[..., Awaitable[int]]


def json_body(model: type[Any]) -> dict[str, Any]:
    """The OpenAPI requestBody for routes that parse their JSON body themselves."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


_STATE_NAMES = "|".join(state.value for state in JobState)
StateList = Annotated[
    str, StringConstraints(pattern=f"^(?:{_STATE_NAMES})(?:,(?:{_STATE_NAMES}))*$")
]
States = Annotated[
    list[StateList] | None,
    Query(description="Job states; repeat the parameter or separate with commas."),
]
Name = Annotated[
    str | None,
    Query(min_length=1, max_length=MAX_NAME_LENGTH, pattern=f"^{NAME_PATTERN.pattern}$"),
]
Search = Annotated[
    str | None,
    Query(
        max_length=MAX_SEARCH_LENGTH,
        # Checked by parse_search (the regex engine of validation has no surrogates).
        json_schema_extra={"pattern": SEARCH_PATTERN},
        description="A job id or exact unique key.",
    ),
]
JobId = Annotated[int, Path(ge=1, le=MAX_JOB_ID)]
ScheduleFilter = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        pattern=f"^{NAME_PATTERN.pattern}$",
        description="Only the jobs this schedule enqueued.",
    ),
]
WorkflowFilter = Annotated[
    int | None,
    Query(ge=1, le=MAX_JOB_ID, description="Only the jobs of this workflow (its first job's id)."),
]


def jobs_router(ctx: ApiContext) -> APIRouter:
    router = APIRouter(tags=["jobs"])
    settings = ctx.settings
    client = ctx.client

    @router.get("/api/jobs", response_model=JobList, responses=errors(400, 401, 503))
    async def list_jobs(
        state: States = None,
        kind: Name = None,
        queue: Name = None,
        tenant: Name = None,
        q: Search = None,
        schedule: ScheduleFilter = None,
        workflow: WorkflowFilter = None,
        cursor: IdCursor = None,
        limit: PageLimit = 50,
    ) -> JobList:
        """Jobs matching the filters, newest first, one keyset page at a time; each with
        bounded previews of its payload and last error (the job's own route has their first
        64 KiB; GET /api/jobs/{id}/payload and /result have them whole)."""
        job_filter = filter_from_query(
            states=state,
            kind=kind,
            queue=queue,
            tenant=tenant,
            q=q,
            schedule=schedule,
            workflow=workflow,
        )
        page = await ctx.reads.list_jobs(
            job_filter, cursor=cursor or None, limit=limit, previews=True
        )
        now = await ctx.now()
        reasons = await blocked_by(ctx, page.jobs, now)
        return JobList(
            now=now,
            jobs=[job_summary(job, why) for job, why in zip(page.jobs, reasons, strict=True)],
            next_cursor=page.next_cursor,
        )

    @router.post(
        "/api/jobs",
        status_code=201,
        response_model=JobCreated | ScheduleOut,
        responses={
            200: {
                "model": JobCreated,
                "description": "A job held the unique key (and took this payload and run_at "
                'with on_conflict "replace").',
            },
            **errors(400, 401, 403, 404, 409, 413, 415, 503),
        },
        openapi_extra=json_body(JobCreate),
    )
    async def create_job(request: Request, response: Response) -> JobCreated | ScheduleOut:
        """Enqueue a job (201), or return the active job holding its unique key (200). With
        ``every_seconds``, create a schedule of the kind on that interval instead (201, the
        schedule; named like ``email-every-10s``, first run now)."""
        raw = await read_json_object(
            request, max_bytes=settings.max_body_bytes, max_depth=settings.max_json_depth
        )
        body = JobCreate.model_validate(raw)
        body.check_bounds()
        check_known_kind(body.kind, ctx.kinds)
        if body.on_parent_failure is not None and body.depends_on is None:
            raise InvalidJob("on_parent_failure", "is only meaningful with depends_on")
        if body.every_seconds is not None:
            if body.depends_on is not None:
                raise InvalidJob("depends_on", "a schedule's jobs cannot depend on other jobs")
            ctx.require_admin(request, "create a schedule")
            return await create_every_schedule(client, body, ctx.operator(request))
        spec = client.spec(
            body.kind,
            body.payload,
            delay=body.delay_seconds,
            run_at=None if body.run_at is None else parse_instant("run_at", body.run_at),
            priority=body.priority,
            queue=body.queue,
            tenant=body.tenant,
            unique_key=body.unique_key,
            max_attempts=body.max_attempts,
            timeout=body.timeout_seconds,
            expires_at=None
            if body.expires_at is None
            else parse_instant("expires_at", body.expires_at),
            expire_after=body.expire_after_seconds,
            unique_for=body.unique_for_seconds,
            unique_states=body.unique_states,
            on_conflict=body.on_conflict or "skip",
        )
        # Recorded with the identity that asked: the dashboard's form and any API client.
        operator = ctx.operator(request)
        if ctx.enqueuer is not None:  # the App's own path, its enqueue hooks included
            result = await ctx.enqueuer.enqueue(
                spec,
                depends_on=body.depends_on,
                on_parent_failure=body.on_parent_failure or "cancel",
                store=client.store,
            )
            await operator.record_enqueue(result)
        else:
            result = await operator.enqueue(
                spec,
                depends_on=body.depends_on,
                on_parent_failure=body.on_parent_failure or "cancel",
            )
        if result.duplicate:
            response.status_code = 200
        return JobCreated(
            **job_out(result.job), duplicate=result.duplicate, replaced=result.replaced
        )

    @router.get("/api/jobs/count", response_model=JobCount, responses=errors(400, 401, 503))
    async def count_jobs(
        state: States = None,
        kind: Name = None,
        queue: Name = None,
        tenant: Name = None,
        q: Search = None,
        schedule: ScheduleFilter = None,
        workflow: WorkflowFilter = None,
        action: Annotated[
            BulkAction | None,
            Query(description="Count only the jobs this bulk verb would act on."),
        ] = None,
    ) -> JobCount:
        """How many jobs match, up to the bulk cap: what a bulk action would cover."""
        job_filter = filter_from_query(
            states=state,
            kind=kind,
            queue=queue,
            tenant=tenant,
            q=q,
            schedule=schedule,
            workflow=workflow,
        )
        if action is not None:
            job_filter = restrict(job_filter, _ACTED_ON[action])
        count = await ctx.reads.store.count_jobs(job_filter, limit=MAX_BULK + 1)
        return JobCount(count=min(count, MAX_BULK), capped=count > MAX_BULK)

    @router.get("/api/jobs/counts", response_model=StateCounts, responses=errors(400, 401, 503))
    async def state_counts(
        kind: Name = None, queue: Name = None, tenant: Name = None, q: Search = None
    ) -> StateCounts:
        """Jobs per state matching the filters, for the state tabs of a job list. By queue or
        overall: the store's maintained counts (cheap at millions of jobs). With a kind, tenant
        or search: each state counted exactly up to a threshold (1000 by default), and past it
        exactly where the store keeps the number, else estimated: ``estimated`` names those
        states, whose count is an estimate (the dashboard says "about")."""
        job_filter = filter_from_query(states=None, kind=kind, queue=queue, tenant=tenant, q=q)
        if job_filter.kind is None and job_filter.tenant is None and job_filter.search is None:
            counts = await ctx.reads.store.counts()
            by_state = (
                counts.by_state
                if job_filter.queue is None
                else counts.by_queue.get(job_filter.queue, {})
            )
            return StateCounts(
                counts={state.value: by_state.get(state, 0) for state in JobState},
                exact=counts.exact,
                estimated=[],
            )
        found = {
            state.value: await ctx.reads.store.count_or_estimate(
                replace(job_filter, states=frozenset({state})),
                exact_up_to=settings.exact_count_up_to,
            )
            for state in JobState
        }
        return StateCounts(
            counts={state: counted.n for state, counted in found.items()},
            exact=True,
            estimated=[state for state, counted in found.items() if counted.estimated],
        )

    def _bulk_route(
        verb: Callable[[Operator], BulkCall],
    ) -> Callable[[Request], Awaitable[BulkResult]]:
        async def bulk(request: Request) -> BulkResult:
            job_filter = await _filter_body(request)
            return BulkResult(count=await verb(ctx.operator(request))(job_filter, limit=MAX_BULK))

        return bulk

    # The bulk verbs: each acts on up to the bulk cap of the jobs matching the filter in its
    # body, in the states it acts on (confirm the scope with GET /api/jobs/count?action=),
    # and answers how many it changed.
    bulk_verbs: dict[str, tuple[Callable[[Operator], BulkCall], str]] = {
        "retry": (
            lambda op: op.bulk_retry,
            "Retry up to the bulk cap of dead or cancelled jobs matching the filter.",
        ),
        "cancel": (
            lambda op: op.bulk_cancel,
            "Cancel up to the bulk cap of waiting, pending, held or running jobs matching the "
            "filter.",
        ),
        "delete": (
            lambda op: op.purge,
            "Delete (purge) up to the bulk cap of finished jobs matching the filter, with their "
            "history; confirm the scope first with ``GET /api/jobs/count?action=delete``.",
        ),
        "hold": (
            lambda op: op.bulk_hold,
            "Hold up to the bulk cap of waiting or pending jobs matching the filter: no worker "
            "claims them until released. The answer says how many were held.",
        ),
        "release": (
            lambda op: op.bulk_release,
            "Release up to the bulk cap of held jobs matching the filter: each waits again while "
            "parents are left, else is pending at its own time. The answer says how many.",
        ),
    }
    for action, (verb, description) in bulk_verbs.items():
        router.add_api_route(
            f"/api/jobs/bulk/{action}",
            _bulk_route(verb),
            methods=["POST"],
            name=f"bulk_{action}",
            description=description,
            response_model=BulkResult,
            responses=errors(400, 401, 403, 413, 415, 503),
            openapi_extra=json_body(JobFilterBody),
        )

    @router.get(
        "/api/jobs/{job_id}", response_model=JobDetail, responses=errors(400, 401, 404, 503)
    )
    async def get_job(job_id: JobId) -> JobDetail:
        """One job with every attempt (worker, token, outcome, error, traceback), and why it
        is not running when it is waiting or pending; a durable job's steps (state,
        attempts, duration, a preview of each result), and when it sleeps until or what
        it waits for."""

        async def read(source: Client) -> tuple[Job, list[Attempt], list[Step]]:
            # The payload and result cut in the store's SQL: a 900 KB payload is not read
            # whole to show its first 64 KiB (GET .../payload and .../result read them whole).
            job = await source.store.get_preview(job_id, chars=DETAIL_PREVIEW_CHARS)
            return job, await source.attempts(job_id), await source.steps(job_id)

        job, attempts, steps = await ctx.read_one(read)
        now = await ctx.now()
        [why] = await blocked_by(ctx, [job], now)
        return JobDetail(
            **(job_out(job) | detail_values(job)),
            now=now,
            attempts=[attempt_out(a) for a in attempts],
            blocked_by=why,
            steps=[step_out(step) for step in steps],
            suspended=suspension_out(suspension(job, steps)),
        )

    @router.get(
        "/api/jobs/{job_id}/payload",
        response_class=Response,
        responses={200: {"content": {"application/json": {}}}, **errors(400, 401, 404, 503)},
    )
    async def get_payload(job_id: JobId) -> Response:
        """The job's payload, whole, as its JSON (the job's answer cuts one over 64 KiB)."""
        job = await ctx.read_one(lambda source: source.get(job_id))
        return Response(payload_text(job.payload), media_type="application/json")

    @router.get(
        "/api/jobs/{job_id}/result",
        response_class=Response,
        responses={200: {"content": {"application/json": {}}}, **errors(400, 401, 404, 503)},
    )
    async def get_result(job_id: JobId) -> Response:
        """The job's result, whole, as its JSON (null without one)."""
        job = await ctx.read_one(lambda source: source.get(job_id))
        return Response(payload_text(job.result), media_type="application/json")

    @router.get(
        "/api/jobs/{job_id}/parents",
        response_model=RelatedPage,
        responses=errors(400, 401, 404, 503),
    )
    async def get_parents(
        job_id: JobId, cursor: IdCursor = None, limit: PageLimit = 50
    ) -> RelatedPage:
        """One page of the jobs this job runs after, by id, each with its state."""
        return await _related(job_id, parents=True, cursor=cursor, limit=limit)

    @router.get(
        "/api/jobs/{job_id}/children",
        response_model=RelatedPage,
        responses=errors(400, 401, 404, 503),
    )
    async def get_children(
        job_id: JobId, cursor: IdCursor = None, limit: PageLimit = 50
    ) -> RelatedPage:
        """One page of the jobs that run after this job, by id, each with its state."""
        return await _related(job_id, parents=False, cursor=cursor, limit=limit)

    async def _related(
        job_id: int, *, parents: bool, cursor: str | None, limit: int
    ) -> RelatedPage:
        after = decode_cursor(cursor) if cursor else None

        async def read(source: Client) -> list[tuple[int, JobState, str]]:
            await source.get(job_id)  # 404 for no such job
            return await source.store.related(job_id, parents=parents, after=after, limit=limit + 1)

        found = await ctx.read_one(read)
        page = found[:limit]
        return RelatedPage(
            jobs=[
                RelatedOut(id=other, state=state.value, on_parent_failure=policy)  # type: ignore[arg-type]
                for other, state, policy in page
            ],
            next_cursor=encode_cursor(page[-1][0]) if len(found) > limit else None,
        )

    @router.post(
        "/api/jobs/{job_id}/retry",
        status_code=204,
        response_class=Response,
        responses=errors(400, 401, 403, 404, 409, 415, 503),
    )
    async def retry_job(job_id: JobId, request: Request) -> Response:
        """A dead or cancelled job becomes pending now with its attempts reset (waiting, if its
        parents have not all succeeded), and the dependents its end cancelled wait again
        (409 otherwise)."""
        await ctx.operator(request).retry(job_id)
        return Response(status_code=204)

    @router.post(
        "/api/jobs/{job_id}/cancel",
        response_model=JobOut,
        responses=errors(400, 401, 403, 404, 409, 415, 503),
    )
    async def cancel_job(job_id: JobId, request: Request) -> JobOut:
        """A waiting, pending, held or running job becomes cancelled (409 when it already
        finished);
        its waiting dependents are cancelled with it."""
        return JobOut(**job_out(await ctx.operator(request).cancel(job_id)))

    @router.post(
        "/api/jobs/{job_id}/hold",
        response_model=JobOut,
        responses=errors(400, 401, 403, 404, 409, 415, 503),
    )
    async def hold_job(job_id: JobId, request: Request) -> JobOut:
        """A waiting or pending job becomes held: no worker claims it until it is released.
        It keeps its run_at, unique key and parents (409 in any other state: a running job
        cannot be held, cancel it instead)."""
        return JobOut(**job_out(await ctx.operator(request).hold(job_id)))

    @router.post(
        "/api/jobs/{job_id}/release",
        response_model=JobOut,
        responses=errors(400, 401, 403, 404, 409, 415, 503),
    )
    async def release_job(job_id: JobId, request: Request) -> JobOut:
        """A held job goes back where it was: waiting while parents are left, else pending,
        due at its run_at (409 unless it is held)."""
        return JobOut(**job_out(await ctx.operator(request).release(job_id)))

    @router.post(
        "/api/jobs/{job_id}/rerun",
        response_model=JobOut,
        responses=errors(400, 401, 403, 404, 409, 415, 503),
    )
    async def rerun_job(job_id: JobId, request: Request) -> JobOut:
        """Run a succeeded job again now: a new attempt series (attempt back to 0), its earlier
        attempts kept (409 in any other state, or while an active job holds its unique key)."""
        return JobOut(**job_out(await ctx.operator(request).rerun(job_id)))

    @router.post(
        "/api/jobs/{job_id}/reschedule",
        response_model=JobOut,
        responses=errors(400, 401, 403, 404, 409, 413, 415, 503),
        openapi_extra=json_body(JobReschedule),
    )
    async def reschedule_job(job_id: JobId, request: Request) -> JobOut:
        """Change a pending job's run_at (``"now"``: due at once), priority or queue; 409 when
        it is running (a claim that came first wins: the job is reported, not changed) or
        finished."""
        raw = await read_json_object(
            request, max_bytes=settings.max_body_bytes, max_depth=settings.max_json_depth
        )
        body = JobReschedule.model_validate(raw)
        run_at: datetime | Literal["now"] | None = None
        if body.run_at == "now":
            run_at = "now"
        elif body.run_at is not None:
            run_at = parse_instant("run_at", body.run_at)
        job = await ctx.operator(request).reschedule(
            job_id, run_at=run_at, priority=body.priority, queue=body.queue
        )
        return JobOut(**job_out(job))

    @router.delete("/api/jobs/count", include_in_schema=False)
    @router.delete("/api/jobs/counts", include_in_schema=False)
    async def delete_count() -> None:
        """Starlette would route this to ``DELETE /api/jobs/{job_id}`` (a 400 for the id
        "count"); the count's path allows GET only, so its answer is 405."""
        raise StarletteHTTPException(405)

    @router.delete(
        "/api/jobs/{job_id}",
        status_code=204,
        response_class=Response,
        responses=errors(400, 401, 403, 404, 409, 503),
    )
    async def delete_job(job_id: JobId, request: Request) -> Response:
        """Delete a pending or finished job and its attempt history (409 while it runs:
        cancel it first)."""
        await ctx.operator(request).delete(job_id)
        return Response(status_code=204)

    async def _filter_body(request: Request) -> JobFilter:
        raw = await read_json_object(
            request, max_bytes=settings.max_body_bytes, max_depth=settings.max_json_depth
        )
        return filter_from_body(JobFilterBody.model_validate(raw))

    return router
