"""Workflow use cases for application code: enqueue after other jobs, enqueue a whole graph,
look at one, cancel one, retry or cancel one of its jobs and what follows it. ``App`` forwards
to these; the rules are rota.domain.workflow's."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from rota.domain.errors import InvalidJob, NotFound, StateConflict, WorkflowNotFound
from rota.domain.job import EnqueueResult, Job, JobSpec
from rota.domain.job_state import JobState
from rota.domain.names import check_known_kind
from rota.domain.workflow import Edge, ScheduledRun, Workflow, WorkflowBuilder, check_policy
from rota.store.base import Store


@dataclass(frozen=True, slots=True)
class WorkflowRun:
    """A workflow as stored: its id, its jobs by id, and its edges (parent, child,
    on_parent_failure)."""

    id: int
    jobs: list[Job]
    edges: list[tuple[int, int, str]]

    @property
    def job_ids(self) -> list[int]:
        return [job.id for job in self.jobs]

    @property
    def is_finished(self) -> bool:
        return all(job.state.is_terminal for job in self.jobs)

    def count(self, state: JobState) -> int:
        return sum(1 for job in self.jobs if job.state is state)


def parent_list(depends_on: object) -> list[int]:
    """``depends_on`` as a list of job ids; InvalidJob for anything else."""
    if isinstance(depends_on, str | bytes) or not isinstance(depends_on, Iterable):
        raise InvalidJob("depends_on", "must be a list of job ids")
    ids: list[int] = []
    for item in depends_on:
        if isinstance(item, bool) or not isinstance(item, int) or item <= 0:
            raise InvalidJob("depends_on", "must be a list of job ids")
        ids.append(item)
    if not ids:
        raise InvalidJob("depends_on", "must name at least one job")
    return ids


def graph_after(
    spec: JobSpec, depends_on: Iterable[int], on_parent_failure: str = "cancel"
) -> Workflow:
    """The one-job graph of ``spec`` running once every job of ``depends_on`` succeeded;
    InvalidJob for a bad list or policy."""
    parents = parent_list(depends_on)
    check_policy(on_parent_failure)
    graph = Workflow()
    graph.add(spec, after=parents, on_parent_failure=on_parent_failure)
    return graph


async def enqueue_after(
    store: Store, spec: JobSpec, depends_on: Iterable[int], on_parent_failure: str = "cancel"
) -> EnqueueResult:
    """Enqueue ``spec`` to run once every job of ``depends_on`` succeeded (see
    ``Store.enqueue_workflow``). InvalidJob for an unknown parent; nothing is written then."""
    [job] = await store.enqueue_workflow(graph_after(spec, depends_on, on_parent_failure))
    return EnqueueResult(job)


def checked(graph: object) -> Workflow:
    """``graph`` if it is a Workflow; InvalidJob otherwise."""
    if not isinstance(graph, Workflow):
        raise InvalidJob("workflow", "must be a rota.Workflow (see rota.chain, group, chord)")
    return graph


async def enqueue_workflow(store: Store, graph: Workflow) -> WorkflowRun:
    """Write the whole graph in one transaction; its workflow id and jobs (in the graph's
    order) and edges."""
    return run_of(graph, await store.enqueue_workflow(checked(graph)))


def run_of(graph: Workflow, jobs: list[Job]) -> WorkflowRun:
    """The WorkflowRun of ``graph`` written as ``jobs`` (in the graph's order)."""
    ids = [job.id for job in jobs]
    edges = [_edge(edge, ids) for edge in graph.edges]
    return WorkflowRun(jobs[0].workflow or ids[0], jobs, edges)


def checking_kinds(builder: WorkflowBuilder, accepted: Collection[str] | None) -> WorkflowBuilder:
    """``builder`` whose graphs are refused (InvalidInput) when a job's kind is not in
    ``accepted`` (None: any kind), as ``app.workflows.enqueue`` refuses them."""

    def build(run: ScheduledRun) -> Workflow:
        graph = builder(run)
        if isinstance(graph, Workflow):
            for spec in graph.specs:
                check_known_kind(spec.kind, accepted)
        return graph

    return build


def _edge(edge: Edge, ids: list[int]) -> tuple[int, int, str]:
    parent = edge.parent_id if edge.parent_id is not None else ids[edge.parent_node or 0]
    return parent, ids[edge.child], edge.on_parent_failure


async def get_workflow(store: Store, workflow_id: int) -> WorkflowRun:
    """The workflow's jobs and edges; WorkflowNotFound when no job belongs to it."""
    jobs, edges = await store.workflow(workflow_id)
    if not jobs:
        raise WorkflowNotFound(workflow_id)
    return WorkflowRun(workflow_id, jobs, edges)


async def cancel_workflow(store: Store, workflow_id: int) -> int:
    """Cancel every unfinished job of the workflow; how many. WorkflowNotFound."""
    await get_workflow(store, workflow_id)
    return await store.cancel_workflow(workflow_id)


# ------------------------------------------------------------------ one node and what follows it


class NotInWorkflow(NotFound):
    """The job exists but belongs to another workflow (or to none)."""

    def __init__(self, workflow_id: int, job_id: int) -> None:
        super().__init__(f"job {job_id} is not a job of workflow {workflow_id}")


async def downstream(
    store: Store, workflow_id: int, job_id: int, *, with_children: bool = True
) -> list[Job]:
    """The job (first) and, ``with_children``, every job of the workflow that runs after it,
    directly or not, by id. WorkflowNotFound, JobNotFound, NotInWorkflow."""
    run = await get_workflow(store, workflow_id)
    by_id = {job.id: job for job in run.jobs}
    if job_id not in by_id:
        await store.get(job_id)  # JobNotFound when there is no such job at all
        raise NotInWorkflow(workflow_id, job_id)
    if not with_children:
        return [by_id[job_id]]
    children: dict[int, list[int]] = {}
    for parent, child, _ in run.edges:
        children.setdefault(parent, []).append(child)
    seen = {job_id}
    todo = [job_id]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in seen and child in by_id:
                seen.add(child)
                todo.append(child)
    return [by_id[ident] for ident in sorted(seen)]


async def _states(store: Store, workflow_id: int, ids: set[int]) -> dict[int, JobState]:
    jobs, _ = await store.workflow(workflow_id)
    return {job.id: job.state for job in jobs if job.id in ids}


async def retry_downstream(
    store: Store, workflow_id: int, job_id: int, *, with_children: bool = True
) -> int:
    """Retry the job and, ``with_children``, every dead or cancelled job that runs after it
    (parents before children, so the children a parent's end cancelled are re-armed by its
    retry and wait for it); how many of them are no longer dead or cancelled. StateConflict
    when none of them was."""
    chosen = await downstream(store, workflow_id, job_id, with_children=with_children)
    failed = {job.id for job in chosen if job.state in (JobState.DEAD, JobState.CANCELLED)}
    if not failed:
        raise StateConflict(
            f"job {job_id} {'and what runs after it are' if with_children else 'is'} "
            "not dead or cancelled: nothing to retry"
        )
    for ident in sorted(failed):
        try:
            await store.retry(ident)
        except StateConflict:
            continue  # re-armed by its parent's retry, or changed meanwhile
    after = await _states(store, workflow_id, failed)
    return sum(1 for state in after.values() if state not in (JobState.DEAD, JobState.CANCELLED))


async def cancel_downstream(
    store: Store, workflow_id: int, job_id: int, *, with_children: bool = True
) -> int:
    """Cancel the job and, ``with_children``, every unfinished job that runs after it; how
    many were. StateConflict when none of them was unfinished."""
    chosen = await downstream(store, workflow_id, job_id, with_children=with_children)
    active = {job.id for job in chosen if not job.state.is_terminal}
    if not active:
        raise StateConflict(
            f"job {job_id} {'and what runs after it have' if with_children else 'has'} "
            "already finished: nothing to cancel"
        )
    for ident in sorted(active):
        try:
            await store.cancel(ident)
        except StateConflict:
            continue  # cancelled with its parent, or finished meanwhile
    after = await _states(store, workflow_id, active)
    return sum(1 for state in after.values() if state is JobState.CANCELLED)
