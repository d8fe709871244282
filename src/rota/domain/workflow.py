"""Workflows: jobs that depend on jobs. The graph a caller builds, its checks, and the plan
of each new job's starting state given its parents' states.

A job with parents starts ``waiting`` and becomes ``pending`` (claimable) once every edge to a
parent is satisfied: the parent succeeded, or it ended dead or cancelled on an edge whose
``on_parent_failure`` is ``"run"``. On a ``"cancel"`` edge (the default) a parent that ends
dead or cancelled cancels the child, with a reason naming that parent; retrying that parent
puts the child back to waiting, and its edges that its end satisfied wait again for its new
outcome (to every child not running or succeeded: see REOPENED_STATES). A parent deleted before its end (or a finished one deleted
while a retried child still waits for it) counts as one that ended without succeeding: its
"cancel" children are cancelled with a reason naming it, its "run" children no longer wait for
it, and nothing can re-arm them. Stores count the unsatisfied edges of each job
(``Job.waiting_on``) and update only the direct children of the job whose state changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from rota.domain.errors import InvalidJob, ParentNotFound
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState

#: The most jobs one workflow call may write: a fan-in of MAX_PARENTS and its callback fit
#: twice over, and the call stays one transaction of bounded size.
MAX_WORKFLOW_JOBS = 20_000
#: The most parents one job may have.
MAX_PARENTS = 10_000
#: What a child does when a parent ends dead or cancelled.
ON_PARENT_FAILURE = ("cancel", "run")
#: The children whose satisfied edge to a parent counts again when that parent is retried
#: (or re-armed): those that have not started since (a pending one waits again) and those a
#: retry may run again. A running or succeeded child keeps the run it has.
REOPENED_STATES = frozenset((JobState.WAITING, JobState.PENDING, JobState.DEAD, JobState.CANCELLED))


def check_policy(value: object) -> str:
    """``value`` if it is an on_parent_failure policy; InvalidJob otherwise."""
    if value not in ON_PARENT_FAILURE:
        raise InvalidJob("on_parent_failure", 'must be "cancel" or "run"')
    return str(value)


def cancel_reason(parent_id: int, state: JobState) -> str:
    """The last_error of a job cancelled because its parent ended dead or cancelled."""
    return f"cancelled: parent job {parent_id} ended {state}"


def deleted_reason(parent_id: int) -> str:
    """The last_error of a waiting job cancelled because its parent was deleted."""
    return f"cancelled: parent job {parent_id} was deleted"


@dataclass(frozen=True, slots=True)
class Node:
    """A job of a Workflow under construction: its position in the graph."""

    index: int


#: A parent: a node of the same graph, or the id of a job that already exists.
Parent = Node | int


@dataclass(frozen=True, slots=True)
class Edge:
    """Job ``child`` (a node index) runs after ``parent``: a node index (``parent_node``) or
    an existing job's id (``parent_id``), exactly one of the two."""

    child: int
    parent_node: int | None = None
    parent_id: int | None = None
    on_parent_failure: str = "cancel"


@dataclass(slots=True)
class Workflow:
    """A graph of jobs written in one atomic call (``app.workflows.enqueue``).

    ``add`` a spec with the parents it runs ``after`` (nodes added before it, or ids of jobs
    that exist); a node can only name nodes added earlier, so a graph has no cycle by
    construction, and a node has at most MAX_PARENTS parents. ``check`` refuses (InvalidJob)
    an empty graph, more than MAX_WORKFLOW_JOBS jobs, and jobs with a unique key or a schedule (a dependent job is not
    deduplicated).
    """

    specs: list[JobSpec] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)

    def add(
        self,
        spec: JobSpec,
        *,
        after: Iterable[Parent] = (),
        on_parent_failure: str = "cancel",
    ) -> Node:
        policy = check_policy(on_parent_failure)
        if not isinstance(spec, JobSpec):
            raise InvalidJob("spec", "must be a JobSpec")
        index = len(self.specs)
        seen: set[tuple[str, int]] = set()
        edges: list[Edge] = []
        for parent in after:
            if isinstance(parent, Node):
                if not 0 <= parent.index < index:
                    raise InvalidJob("depends_on", "a node may only follow nodes added before it")
                ident = ("node", parent.index)
                edge = Edge(index, parent_node=parent.index, on_parent_failure=policy)
            elif isinstance(parent, int) and not isinstance(parent, bool) and parent > 0:
                ident = ("job", parent)
                edge = Edge(index, parent_id=parent, on_parent_failure=policy)
            else:
                raise InvalidJob("depends_on", "parents must be job ids or workflow nodes")
            if ident not in seen:
                seen.add(ident)
                edges.append(edge)
        if len(edges) > MAX_PARENTS:
            raise InvalidJob("depends_on", f"a job may have at most {MAX_PARENTS} parents")
        self.specs.append(spec)
        self.edges.extend(edges)
        return Node(index)

    def check(self) -> Workflow:
        if not self.specs:
            raise InvalidJob("workflow", "has no jobs")
        if len(self.specs) > MAX_WORKFLOW_JOBS:
            raise InvalidJob("workflow", f"may have at most {MAX_WORKFLOW_JOBS} jobs")
        for spec in self.specs:
            if spec.unique_key is not None:
                raise InvalidJob("unique_key", "jobs of a workflow cannot have a unique key")
            if spec.schedule is not None:
                raise InvalidJob("schedule", "jobs of a workflow cannot belong to a schedule")
        return self

    @property
    def parent_ids(self) -> list[int]:
        """The existing jobs this graph depends on, without repeats, in order."""
        return list(dict.fromkeys(e.parent_id for e in self.edges if e.parent_id is not None))


def chain(*specs: JobSpec) -> Workflow:
    """Each job runs after the one before it."""
    graph = Workflow()
    previous: list[Parent] = []
    for spec in specs:
        previous = [graph.add(spec, after=previous)]
    return graph


def group(*specs: JobSpec) -> Workflow:
    """Jobs that run independently of each other (a fan-out)."""
    graph = Workflow()
    for spec in specs:
        graph.add(spec)
    return graph


def chord(
    header: Sequence[JobSpec], callback: JobSpec, *, on_parent_failure: str = "cancel"
) -> Workflow:
    """The ``header`` jobs, then ``callback`` once all of them finished (a fan-in)."""
    graph = Workflow()
    nodes = [graph.add(spec) for spec in header]
    graph.add(callback, after=nodes, on_parent_failure=on_parent_failure)
    return graph


@dataclass(frozen=True, slots=True)
class Planned:
    """A new job's starting state: waiting on ``waiting_on`` edges, pending, or cancelled
    because ``blocked_by`` ended dead or cancelled (``error`` says so)."""

    state: JobState
    waiting_on: int
    blocked_by: int | None = None
    blocked_state: JobState | None = None
    error: str | None = None


def satisfied_at_start(edge: Edge, parent: JobState) -> bool:
    """Whether an edge to a parent already in state ``parent`` is satisfied when written."""
    if parent is JobState.SUCCEEDED:
        return True
    return parent in (JobState.DEAD, JobState.CANCELLED) and edge.on_parent_failure == "run"


def plan(graph: Workflow, parents: Mapping[int, JobState]) -> tuple[list[Planned], list[bool]]:
    """Each node's starting state and each edge's ``satisfied`` flag, given the states of the
    existing parents (every id in ``graph.parent_ids``; ParentNotFound names one missing).
    Nodes are planned in order, so a node cancelled at the start cancels its own children."""
    missing = [job_id for job_id in graph.parent_ids if job_id not in parents]
    if missing:
        raise ParentNotFound(missing[0])
    by_child: dict[int, list[int]] = {}
    for number, edge in enumerate(graph.edges):
        by_child.setdefault(edge.child, []).append(number)
    planned: list[Planned] = []
    satisfied = [False] * len(graph.edges)
    for index in range(len(graph.specs)):
        waiting = 0
        blocked: tuple[int, JobState] | None = None
        for number in by_child.get(index, []):
            edge = graph.edges[number]
            if edge.parent_id is not None:
                state, ident = parents[edge.parent_id], edge.parent_id
            else:
                assert edge.parent_node is not None
                state, ident = planned[edge.parent_node].state, -edge.parent_node - 1
            if satisfied_at_start(edge, state):
                satisfied[number] = True
                continue
            waiting += 1
            if blocked is None and state in (JobState.DEAD, JobState.CANCELLED):
                blocked = (ident, state)
        if blocked is not None:
            planned.append(Planned(JobState.CANCELLED, waiting, blocked[0], blocked[1]))
        elif waiting:
            planned.append(Planned(JobState.WAITING, waiting))
        else:
            planned.append(Planned(JobState.PENDING, 0))
    return planned, satisfied


def resolve(planned: list[Planned], ids: Sequence[int]) -> list[Planned]:
    """``planned`` with node references (negative ``blocked_by``) turned into the new jobs'
    ids, and the cancellation reasons written."""
    resolved: list[Planned] = []
    for item in planned:
        if item.blocked_by is None or item.blocked_state is None:
            resolved.append(item)
            continue
        parent = item.blocked_by if item.blocked_by > 0 else ids[-item.blocked_by - 1]
        error = cancel_reason(parent, item.blocked_state)
        resolved.append(Planned(item.state, item.waiting_on, parent, item.blocked_state, error))
    return resolved


# ---------------------------------------------------------------- workflows started by schedules


@dataclass(frozen=True, slots=True)
class ScheduledRun:
    """What a workflow schedule's builder is given for one slot: the schedule's name, the
    slot's instant and the schedule's payload (editable at run time like any schedule's)."""

    schedule: str
    slot_at: datetime
    payload: Any


#: Builds the graph a workflow schedule writes for one slot. It is code registered on the App
#: (``app.schedule(name, workflow=builder)``), keyed by the schedule's name, never looked up
#: by a name read from data; the store calls it inside the transaction that claims the slot,
#: so it must be quick and do no I/O.
WorkflowBuilder = Callable[[ScheduledRun], "Workflow"]


def unknown_workflow(schedule: str) -> str:
    """Why a workflow schedule cannot be run here: this process has no builder for it."""
    return (
        f"schedule {schedule!r} starts a workflow whose builder this process does not define; "
        "run it from the App that defines it"
    )


def slot_graph(
    builder: WorkflowBuilder, schedule: str, payload: Any, slot_at: datetime
) -> Workflow:
    """The graph of one slot, checked, its first job carrying the slot (schedule, slot_at):
    the unique (schedule, slot) key that makes a slot get one graph. Whatever goes wrong in
    the builder (it raised, or returned something that is not a valid Workflow) is raised as
    InvalidJob naming the schedule, so a firer can skip the slot and go on with the others."""
    try:
        graph = builder(ScheduledRun(schedule, slot_at, payload))
        if not isinstance(graph, Workflow):
            raise InvalidJob("workflow", "the builder must return a rota.Workflow")
        graph.check()
    except InvalidJob as error:
        raise InvalidJob("workflow", f"schedule {schedule!r}: {error}") from None
    except Exception as error:  # user code: any failure of it skips this slot only
        raise InvalidJob(
            "workflow", f"schedule {schedule!r}: its builder raised {type(error).__name__}: {error}"
        ) from None
    head = replace(graph.specs[0], schedule=schedule, slot_at=slot_at)
    return Workflow(specs=[head, *graph.specs[1:]], edges=list(graph.edges))


def workflow_outcome(states: Iterable[JobState]) -> JobState | None:
    """How a workflow stands, for the schedule that started it (its last outcome, and what
    overlap=skip checks): running while any job of it is unfinished, then dead if any job
    ended dead, cancelled if any was cancelled, else succeeded; None for no jobs (pruned)."""
    seen = set(states)
    if not seen:
        return None
    if any(not state.is_terminal for state in seen):
        return JobState.RUNNING
    for state in (JobState.DEAD, JobState.CANCELLED):
        if state in seen:
            return state
    return JobState.SUCCEEDED
