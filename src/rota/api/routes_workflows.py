"""The /api/workflows routes: a workflow's jobs and edges (a page at a time, or as a graph of
at most MAX_GRAPH_NODES jobs), cancelling it, and retrying or cancelling one of its jobs with
or without every job that runs after it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request

from rota.api.blockers import blocked_by
from rota.api.context import ApiContext
from rota.api.job_models import BulkResult, job_summary
from rota.api.paging import IdCursor, PageLimit
from rota.api.schemas import errors
from rota.api.workflow_models import EdgeOut, GraphNode, WorkflowGraph, WorkflowOut
from rota.domain.errors import WorkflowNotFound
from rota.domain.job import Job
from rota.domain.job_state import JobState
from rota.store.base import Store
from rota.store.records import MAX_PAGE_EDGES, decode_cursor, encode_cursor

#: Workflow ids are job ids: PostgreSQL bigints.
MAX_WORKFLOW_ID = 2**63 - 1
WorkflowId = Annotated[int, Path(ge=1, le=MAX_WORKFLOW_ID)]
NodeId = Annotated[int, Path(ge=1, le=MAX_WORKFLOW_ID)]
#: The most jobs one graph answer holds; a larger workflow is drawn from its first ones by id.
MAX_GRAPH_NODES = 2_000
#: Jobs read per store call while building a graph (fewer when a page's edges overflow).
GRAPH_PAGE = 250
Downstream = Annotated[
    bool, Query(description="Also every job of the workflow that runs after this one.")
]


async def graph_jobs(
    store: Store, workflow_id: int, limit: int
) -> tuple[list[Job], list[tuple[int, int, str]], bool]:
    """The workflow's first ``limit`` jobs by id, the edges into them, and whether some edges
    were left out: read a page at a time, a page halved while its edges overflow."""
    jobs: list[Job] = []
    edges: list[tuple[int, int, str]] = []
    truncated = False
    after: int | None = None
    size = GRAPH_PAGE
    while len(jobs) < limit:
        want = min(size, limit - len(jobs))
        page, into = await store.workflow(workflow_id, after=after, limit=want)
        if len(into) > MAX_PAGE_EDGES and want > 1:
            size = max(1, want // 2)
            continue
        truncated = truncated or len(into) > MAX_PAGE_EDGES
        jobs.extend(page)
        edges.extend(into[:MAX_PAGE_EDGES])
        if len(page) < want:
            break
        after = page[-1].id
        size = min(GRAPH_PAGE, size * 2)
    return jobs, edges, truncated


async def workflow_counts(store: Store, workflow_id: int) -> dict[str, Any]:
    """The fields of WorkflowCounts; WorkflowNotFound when no job belongs to the workflow."""
    states = await store.workflow_states(workflow_id)
    if not states:
        raise WorkflowNotFound(workflow_id)
    return {
        "id": workflow_id,
        "by_state": {state.value: states.get(state, 0) for state in JobState},
        "total": sum(states.values()),
        "finished": all(state.is_terminal for state in states),
    }


#: The verbs on one job of a workflow: path segment, summary, description.
NODE_VERBS = (
    (
        "retry",
        "Retry Node",
        "Retry a dead or cancelled job of the workflow; with `downstream`, every dead or "
        "cancelled job that runs after it too, parents first (the children a parent's end "
        "cancelled wait for it again). How many were retried; 409 when none could be, 404 for "
        "a job of another workflow.",
    ),
    (
        "cancel",
        "Cancel Node",
        'Cancel an unfinished job of the workflow (its waiting children on "cancel" edges with '
        "it); with `downstream`, every unfinished job that runs after it too. How many were "
        "cancelled; 409 when none had anything left to cancel, 404 for a job of another "
        "workflow.",
    ),
)


def node_verb(ctx: ApiContext, verb: str) -> Callable[..., Awaitable[BulkResult]]:
    """The endpoint retrying or cancelling one job of a workflow (and what follows it)."""

    async def endpoint(
        workflow_id: WorkflowId, job_id: NodeId, request: Request, downstream: Downstream = False
    ) -> BulkResult:
        operator = ctx.operator(request)
        act = operator.retry_node if verb == "retry" else operator.cancel_node
        return BulkResult(count=await act(workflow_id, job_id, downstream=downstream))

    return endpoint


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
        counts = await workflow_counts(store, workflow_id)
        after = decode_cursor(cursor) if cursor else None
        jobs, edges = await store.workflow(workflow_id, after=after, limit=limit + 1, previews=True)
        page = jobs[:limit]
        if len(jobs) > limit:
            edges = [edge for edge in edges if edge[1] <= page[-1].id]
        now = await ctx.now()
        reasons = await blocked_by(ctx, page, now)
        return WorkflowOut(
            **counts,
            now=now,
            jobs=[job_summary(job, why) for job, why in zip(page, reasons, strict=True)],
            edges=[
                EdgeOut(parent=parent, child=child, on_parent_failure=policy)  # type: ignore[arg-type]
                for parent, child, policy in edges[:MAX_PAGE_EDGES]
            ],
            edges_truncated=len(edges) > MAX_PAGE_EDGES,
            next_cursor=encode_cursor(page[-1].id) if len(jobs) > limit else None,
        )

    @router.get(
        "/api/workflows/{workflow_id}/graph",
        response_model=WorkflowGraph,
        responses=errors(400, 401, 404, 503),
    )
    async def get_graph(
        workflow_id: WorkflowId,
        limit: Annotated[int, Query(ge=1, le=MAX_GRAPH_NODES)] = MAX_GRAPH_NODES,
    ) -> WorkflowGraph:
        """The workflow as a graph: its first ``limit`` jobs by id (at most 2,000) with their
        kind and state, the edges into them, and all its jobs counted by state."""
        store = ctx.client.store
        counts = await workflow_counts(store, workflow_id)
        jobs, edges, truncated = await graph_jobs(store, workflow_id, limit)
        return WorkflowGraph(
            **counts,
            nodes=[
                GraphNode(
                    id=job.id, kind=job.kind, state=job.state.value, waiting_on=job.waiting_on
                )
                for job in jobs
            ],
            edges=[
                EdgeOut(parent=parent, child=child, on_parent_failure=policy)  # type: ignore[arg-type]
                for parent, child, policy in edges
            ],
            edges_truncated=truncated,
            shown=len(jobs),
        )

    @router.post(
        "/api/workflows/{workflow_id}/cancel",
        response_model=BulkResult,
        responses=errors(400, 401, 403, 404, 415, 503),
    )
    async def cancel_workflow(workflow_id: WorkflowId, request: Request) -> BulkResult:
        """Cancel every job of the workflow that has not finished; how many were."""
        return BulkResult(count=await ctx.operator(request).cancel_workflow(workflow_id))

    for verb, summary, doc in NODE_VERBS:
        router.add_api_route(
            f"/api/workflows/{{workflow_id}}/nodes/{{job_id}}/{verb}",
            node_verb(ctx, verb),
            methods=["POST"],
            response_model=BulkResult,
            responses=errors(400, 401, 403, 404, 409, 415, 503),
            name=f"{verb}_node",
            summary=summary,
            description=doc,
        )

    return router
