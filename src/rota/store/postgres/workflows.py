"""Workflows on PostgreSQL: writing a graph of jobs in one transaction, as a sans-I/O flow
(see ``enqueue.py``). What happens when a workflow job's state changes is the trigger of
012_workflows, inside the statement that changed it."""

from __future__ import annotations

from datetime import datetime

from rota.domain.job import Job
from rota.domain.job_state import JobState
from rota.domain.workflow import Workflow, plan, resolve
from rota.store.postgres.enqueue import Flow, trace_context_json
from rota.store.postgres.queries import query
from rota.store.postgres.rows import row_to_job, us


def enqueue_workflow_flow(graph: Workflow, now: datetime | None) -> Flow:
    """The statements that write ``graph`` (already checked); run in one transaction.
    InvalidJob (from ``plan``) for an unknown parent, before anything is written."""
    parent_ids = graph.parent_ids
    parents: dict[int, tuple[JobState, int | None]] = {}
    if parent_ids:
        rows = yield query("workflow_parents"), {"ids": parent_ids}
        parents = {job_id: (JobState(state), workflow) for job_id, state, workflow in rows}
    planned, satisfied = plan(graph, {job_id: p[0] for job_id, p in parents.items()})
    [(ids,)] = yield query("workflow_reserve_ids"), {"count": len(graph.specs)}
    workflow = next((parents[i][1] for i in parent_ids if parents[i][1] is not None), None)
    workflow = workflow or (parent_ids[0] if parent_ids else ids[0])
    if parent_ids:
        yield query("workflow_adopt"), {"workflow": workflow, "ids": parent_ids}
    items = resolve(planned, ids)
    specs = graph.specs
    rows = yield (
        query("workflow_insert"),
        {
            "now": now,
            "workflow": workflow,
            "id": ids,
            "kind": [s.kind for s in specs],
            "queue": [s.queue for s in specs],
            "payload": [s.payload_json for s in specs],
            "state": [str(item.state) for item in items],
            "priority": [s.priority for s in specs],
            "run_at": [s.run_at for s in specs],
            "delay_us": [us(s.delay) if s.delay is not None else 0 for s in specs],
            "max_attempts": [s.max_attempts for s in specs],
            "tenant": [s.tenant for s in specs],
            "timeout_us": [us(s.timeout) if s.timeout is not None else None for s in specs],
            "trace_context": [trace_context_json(s) for s in specs],
            "waiting_on": [item.waiting_on for item in items],
            "blocked_by": [item.blocked_by for item in items],
            "last_error": [item.error for item in items],
            "schedule": [s.schedule for s in specs],
            "slot_at": [s.slot_at for s in specs],
        },
    )
    if graph.edges:
        yield (
            query("workflow_edges_insert"),
            {
                "parent": [
                    e.parent_id if e.parent_id is not None else ids[e.parent_node or 0]
                    for e in graph.edges
                ],
                "child": [ids[e.child] for e in graph.edges],
                "policy": [e.on_parent_failure for e in graph.edges],
                "satisfied": satisfied,
            },
        )
    jobs: list[Job] = sorted((row_to_job(row) for row in rows), key=lambda job: job.id)
    return jobs
