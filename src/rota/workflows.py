"""Workflow use cases for application code: enqueue after other jobs, enqueue a whole graph,
look at one, cancel one. ``App`` forwards to these; the rules are rota.domain.workflow's."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from rota.domain.errors import InvalidJob, WorkflowNotFound
from rota.domain.job import EnqueueResult, Job, JobSpec, JobState, check_known_kind
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
