"""Workflows on SQLite: writing a graph of jobs and reading it back. What happens when a
workflow job's state changes is the 012_workflows triggers' work, inside the statement that
changed it."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from typing import Any

from rota.domain.job import Job
from rota.domain.job_state import UNFINISHED_STATES, JobState, Outcome
from rota.domain.transitions import in_list
from rota.domain.workflow import Workflow, plan, resolve
from rota.store.records import MAX_PAGE_EDGES
from rota.store.sqlite.claims import end_attempts
from rota.store.sqlite.counts import count_inserted
from rota.store.sqlite.rows import (
    JOB_COLUMNS,
    LIST_COLUMNS,
    chunks,
    duration_us,
    job_from_row,
    marks,
    to_us,
)

_INSERT = f"""
INSERT INTO rota_jobs (kind, queue, payload, state, priority, run_at, attempt, max_attempts,
                       tenant, timeout_us, created_at, trace_context, workflow, waiting_on,
                       blocked_by, last_error, finished_at, schedule, slot_at)
VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
RETURNING {JOB_COLUMNS}
"""


def enqueue_workflow(
    conn: sqlite3.Connection, graph: Workflow, at: datetime
) -> tuple[list[Job], datetime | None]:
    """Write ``graph`` (already checked) in the caller's write transaction: its jobs, their
    edges, and its existing parents' workflow id; InvalidJob for an unknown parent."""
    parent_ids = graph.parent_ids
    parents: dict[int, tuple[JobState, int | None]] = {}
    for part in chunks(parent_ids):
        for job_id, state, workflow in conn.execute(
            f"SELECT id, state, workflow FROM rota_jobs WHERE id IN ({marks(len(part))})", part
        ):
            parents[job_id] = (JobState(state), workflow)
    planned, satisfied = plan(graph, {job_id: p[0] for job_id, p in parents.items()})
    (next_id,) = conn.execute(
        "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'rota_jobs'), 0) + 1"
    ).fetchone()
    ids = list(range(next_id, next_id + len(graph.specs)))
    workflow = next((parents[i][1] for i in parent_ids if parents[i][1] is not None), None)
    workflow = workflow or (parent_ids[0] if parent_ids else ids[0])
    for part in chunks(parent_ids):
        conn.execute(
            f"UPDATE rota_jobs SET workflow = ? WHERE workflow IS NULL "
            f"AND id IN ({marks(len(part))})",
            [workflow, *part],
        )
    at_us = to_us(at)
    jobs: list[Job] = []
    earliest: datetime | None = None
    for spec, item, expected in zip(graph.specs, resolve(planned, ids), ids, strict=True):
        cancelled = item.state is JobState.CANCELLED
        row = conn.execute(
            _INSERT,
            (
                spec.kind,
                spec.queue,
                spec.payload_json,
                str(item.state),
                spec.priority,
                to_us(spec.due_at(at)),
                spec.max_attempts,
                spec.tenant,
                None if spec.timeout is None else duration_us(spec.timeout),
                at_us,
                None if spec.trace_context is None else json.dumps(spec.trace_context),
                workflow,
                item.waiting_on,
                item.blocked_by,
                item.error,
                at_us if cancelled else None,
                spec.schedule,  # a scheduled graph's first job holds its slot
                None if spec.slot_at is None else to_us(spec.slot_at),
            ),
        ).fetchone()
        job = job_from_row(row)
        if job.id != expected:  # AUTOINCREMENT hands out sqlite_sequence + 1 in order
            raise RuntimeError(f"planned job id {expected}, got {job.id}")
        if job.state is JobState.PENDING:
            earliest = job.run_at if earliest is None else min(earliest, job.run_at)
        jobs.append(job)
    conn.executemany(
        "INSERT INTO rota_job_deps (parent_id, child_id, on_parent_failure, satisfied) "
        "VALUES (?, ?, ?, ?)",
        [
            (
                edge.parent_id if edge.parent_id is not None else ids[edge.parent_node or 0],
                ids[edge.child],
                edge.on_parent_failure,
                int(done),
            )
            for edge, done in zip(graph.edges, satisfied, strict=True)
        ],
    )
    count_inserted(conn, jobs)
    return jobs, earliest


def parent_results(conn: sqlite3.Connection, job_id: int) -> dict[int, Any]:
    """Each parent's id and result (None: it stored none) of job ``job_id``."""
    rows = conn.execute(
        "SELECT p.id, coalesce(p.result, (SELECT r.result FROM rota_results AS r "
        "WHERE r.job_id = p.id AND r.token = p.lease_token)) FROM rota_job_deps AS d JOIN rota_jobs AS p "
        "ON p.id = d.parent_id WHERE d.child_id = ? ORDER BY p.id",
        (job_id,),
    )
    return {parent: None if text is None else json.loads(text) for parent, text in rows}


def workflow_page(
    conn: sqlite3.Connection, workflow_id: int, after: int, limit: int, *, previews: bool
) -> tuple[list[Job], list[tuple[int, int, str]]]:
    """One page of a workflow's jobs by id, and the edges into them (at most
    MAX_PAGE_EDGES + 1): Store.workflow with a limit."""
    columns = LIST_COLUMNS if previews else JOB_COLUMNS
    jobs = [
        job_from_row(row, previews=previews)
        for row in conn.execute(
            f"SELECT {columns} FROM rota_jobs WHERE workflow = ? AND id > ? ORDER BY id LIMIT ?",
            (workflow_id, after, limit),
        )
    ]
    if not jobs:
        return [], []
    edges = conn.execute(
        "SELECT d.parent_id, d.child_id, d.on_parent_failure FROM rota_jobs AS c "
        "JOIN rota_job_deps AS d ON d.child_id = c.id JOIN rota_jobs AS p ON p.id = d.parent_id "
        "WHERE c.workflow = ? AND c.id BETWEEN ? AND ? AND p.workflow = ? "
        "ORDER BY d.child_id, d.parent_id LIMIT ?",
        (workflow_id, jobs[0].id, jobs[-1].id, workflow_id, MAX_PAGE_EDGES + 1),
    ).fetchall()
    return jobs, [(parent, child, policy) for parent, child, policy in edges]


def workflow_states(conn: sqlite3.Connection, workflow_id: int) -> dict[JobState, int]:
    rows = conn.execute(
        "SELECT state, count(*) FROM rota_jobs WHERE workflow = ? GROUP BY state", (workflow_id,)
    )
    return {JobState(state): n for state, n in rows}


_PARENTS = (
    "SELECT d.parent_id, j.state, d.on_parent_failure FROM rota_job_deps AS d "
    "JOIN rota_jobs AS j ON j.id = d.parent_id WHERE d.child_id = ? AND d.parent_id > ? "
    "ORDER BY d.parent_id LIMIT ?"
)
_CHILDREN = (
    "SELECT d.child_id, j.state, d.on_parent_failure FROM rota_job_deps AS d "
    "JOIN rota_jobs AS j ON j.id = d.child_id WHERE d.parent_id = ? AND d.child_id > ? "
    "ORDER BY d.child_id LIMIT ?"
)


def related(
    conn: sqlite3.Connection, job_id: int, parents: bool, after: int, limit: int
) -> list[tuple[int, JobState, str]]:
    """A page of the job's parents (or children): (id, state, the edge's policy)."""
    rows = conn.execute(_PARENTS if parents else _CHILDREN, (job_id, after, limit))
    return [(int(found), JobState(state), str(policy)) for found, state, policy in rows]


def workflow(
    conn: sqlite3.Connection, workflow_id: int
) -> tuple[list[Job], list[tuple[int, int, str]]]:
    """The jobs of a workflow by id, and the edges between them (parent, child, policy)."""
    jobs = [
        job_from_row(row)
        for row in conn.execute(
            f"SELECT {JOB_COLUMNS} FROM rota_jobs WHERE workflow = ? ORDER BY id", (workflow_id,)
        )
    ]
    edges = [
        (parent, child, policy)
        for parent, child, policy in conn.execute(
            "SELECT d.parent_id, d.child_id, d.on_parent_failure FROM rota_job_deps AS d "
            "JOIN rota_jobs AS c ON c.id = d.child_id JOIN rota_jobs AS p ON p.id = d.parent_id "
            "WHERE c.workflow = ? AND p.workflow = ? ORDER BY d.child_id, d.parent_id",
            (workflow_id, workflow_id),
        )
    ]
    return jobs, edges


_UNFINISHED = in_list(UNFINISHED_STATES)


def cancel_workflow(conn: sqlite3.Connection, workflow_id: int, at: datetime) -> int:
    """Cancel every unfinished job of the workflow; how many there were."""
    rows = conn.execute(
        "SELECT id, state, lease_token FROM rota_jobs WHERE workflow = ? "
        f"AND state IN ({_UNFINISHED}) ORDER BY id",
        (workflow_id,),
    ).fetchall()
    at_us = to_us(at)
    conn.execute(
        "UPDATE rota_jobs SET state = 'cancelled', lease_until = NULL, finished_at = ? "
        f"WHERE workflow = ? AND state IN ({_UNFINISHED})",
        (at_us, workflow_id),
    )
    tokens = [token for _, state, token in rows if state == "running" and token is not None]
    end_attempts(conn, tokens, at_us, Outcome.CANCELLED)
    return len(rows)
