"""The /api/workflows routes: a workflow's jobs and edges, and cancelling it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from rota import workflows
from rota.api.blockers import blocked_by
from rota.api.context import ApiContext
from rota.api.schemas import BulkResult, EdgeOut, WorkflowOut, errors, job_summary
from rota.domain.job import JobState

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
    async def get_workflow(workflow_id: WorkflowId) -> WorkflowOut:
        """Every job of the workflow (by id, with its state and how many parents it still
        waits on), its edges, and its jobs counted by state."""
        run = await workflows.get_workflow(ctx.client.store, workflow_id)
        now = await ctx.now()
        reasons = await blocked_by(ctx, run.jobs, now)
        return WorkflowOut(
            id=run.id,
            now=now,
            jobs=[job_summary(job, why) for job, why in zip(run.jobs, reasons, strict=True)],
            edges=[
                EdgeOut(parent=parent, child=child, on_parent_failure=policy)  # type: ignore[arg-type]
                for parent, child, policy in run.edges
            ],
            by_state={state.value: run.count(state) for state in JobState},
            finished=run.is_finished,
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
