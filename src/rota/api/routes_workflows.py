"""The /api/workflows routes: a workflow's jobs and edges, and cancelling it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from rota.api.blockers import blocked_by
from rota.api.context import ApiContext
from rota.api.paging import IdCursor, PageLimit
from rota.api.schemas import BulkResult, EdgeOut, WorkflowOut, errors, job_summary
from rota.domain.errors import WorkflowNotFound
from rota.domain.job import JobState
from rota.store.base import MAX_PAGE_EDGES, decode_cursor, encode_cursor

#: Workflow ids are job ids: PostgreSQL bigints.
MAX_WORKFLOW_ID = 2**63 - 1
WorkflowId = Annotated[int, Path(ge=1, le=MAX_WORKFLOW_ID)]


def workflows_router(ctx: ApiContext) -> APIRouter:
    router = APIRouter(tags=["workflows"])

    @router.get(
        "/api/workflows/{workflow_id}",
        response_model=WorkflowOut,
        responses=errors(400, 401, 404, 503),
    )
    async def get_workflow(
        workflow_id: WorkflowId, cursor: IdCursor = None, limit: PageLimit = 100
    ) -> WorkflowOut:
        """One page of the workflow's jobs by id (each with its state and how many parents it
        still waits on), the edges into them, and all its jobs counted by state."""
        store = ctx.client.store
        states = await store.workflow_states(workflow_id)
        if not states:
            raise WorkflowNotFound(workflow_id)
        after = decode_cursor(cursor) if cursor else None
        jobs, edges = await store.workflow(workflow_id, after=after, limit=limit + 1, previews=True)
        page = jobs[:limit]
        if len(jobs) > limit:
            edges = [edge for edge in edges if edge[1] <= page[-1].id]
        now = await ctx.now()
        reasons = await blocked_by(ctx, page, now)
        return WorkflowOut(
            id=workflow_id,
            now=now,
            jobs=[job_summary(job, why) for job, why in zip(page, reasons, strict=True)],
            edges=[
                EdgeOut(parent=parent, child=child, on_parent_failure=policy)  # type: ignore[arg-type]
                for parent, child, policy in edges[:MAX_PAGE_EDGES]
            ],
            edges_truncated=len(edges) > MAX_PAGE_EDGES,
            by_state={state.value: states.get(state, 0) for state in JobState},
            total=sum(states.values()),
            finished=all(state.is_terminal for state in states),
            next_cursor=encode_cursor(page[-1].id) if len(jobs) > limit else None,
        )

    @router.post(
        "/api/workflows/{workflow_id}/cancel",
        response_model=BulkResult,
        responses=errors(400, 401, 403, 404, 415, 503),
    )
    async def cancel_workflow(workflow_id: WorkflowId, request: Request) -> BulkResult:
        """Cancel every job of the workflow that has not finished; how many were."""
        return BulkResult(count=await ctx.operator(request).cancel_workflow(workflow_id))

    return router
