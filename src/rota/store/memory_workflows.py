"""The memory store's workflows (store/base.py): writing a graph, reading it back, and the
edges that hold a child until its parents end, settled, re-armed and dropped as jobs move.

A mixin of ``MemoryStore`` (memory.py): each verb holds its lock throughout, awaiting nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from rota.domain.job import EnqueueResult, Job, JobSpec, previewed
from rota.domain.job_state import JobState, Outcome
from rota.domain.transitions import HELD_BACK
from rota.domain.workflow import (
    REOPENED_STATES,
    Workflow,
    cancel_reason,
    deleted_reason,
    plan,
    resolve,
)
from rota.store.records import MAX_PAGE_EDGES


@dataclass(slots=True)
class _Dep:
    """A workflow edge: ``child`` runs after ``parent``; ``satisfied`` once it may."""

    parent: int
    child: int
    policy: str
    satisfied: bool


class MemoryWorkflows:
    """The workflow verbs and edge bookkeeping of ``MemoryStore`` (which provides what is
    declared here)."""

    _lock: threading.RLock
    _jobs: dict[int, Job]
    _next_id: int
    _wakeups: list[Callable[[datetime | None], None]]
    _children: dict[int, list[_Dep]]
    _parents: dict[int, list[_Dep]]
    _blocked_by: dict[int, int]

    if TYPE_CHECKING:

        def _announce(self, run_at: datetime) -> None: ...
        def _finish(
            self,
            job: Job,
            at: datetime,
            state: JobState,
            outcome: Outcome,
            error: str | None = None,
            trace: str | None = None,
        ) -> None: ...
        def _insert(
            self, specs: Sequence[JobSpec], at: datetime
        ) -> tuple[list[EnqueueResult], datetime | None]: ...
        def _now(self, now: datetime | None) -> datetime: ...

    async def enqueue_workflow(self, graph: Workflow, *, now: datetime | None = None) -> list[Job]:
        graph.check()
        with self._lock:
            jobs, earliest = self._write_workflow(graph, self._now(now))
            callbacks = list(self._wakeups) if earliest is not None else []
        for callback in callbacks:
            callback(earliest)
        return jobs

    def _write_workflow(self, graph: Workflow, at: datetime) -> tuple[list[Job], datetime | None]:
        """Write ``graph`` (already checked; the lock held): its jobs in the graph's order and
        the earliest run_at of those pending."""
        parents = {
            job_id: self._jobs[job_id].state for job_id in graph.parent_ids if job_id in self._jobs
        }
        planned, satisfied = plan(graph, parents)
        ids = list(range(self._next_id, self._next_id + len(graph.specs)))
        existing = [self._jobs[job_id] for job_id in graph.parent_ids]
        workflow = next((j.workflow for j in existing if j.workflow is not None), None)
        workflow = workflow or (existing[0].id if existing else ids[0])
        for job in existing:
            if job.workflow is None:
                self._jobs[job.id] = replace(job, workflow=workflow)
        results, _ = self._insert(graph.specs, at)
        jobs: list[Job] = []
        for result, item in zip(results, resolve(planned, ids), strict=True):
            job = replace(
                result.job, state=item.state, waiting_on=item.waiting_on, workflow=workflow
            )
            if item.state is JobState.CANCELLED:
                job = replace(job, finished_at=at, last_error=item.error)
                assert item.blocked_by is not None
                self._blocked_by[job.id] = item.blocked_by
            self._jobs[job.id] = job
            jobs.append(job)
        for edge, done in zip(graph.edges, satisfied, strict=True):
            parent = edge.parent_id if edge.parent_id is not None else ids[edge.parent_node or 0]
            row = _Dep(parent, ids[edge.child], edge.on_parent_failure, done)
            self._children.setdefault(parent, []).append(row)
            self._parents.setdefault(ids[edge.child], []).append(row)
        pending = [job.run_at for job in jobs if job.state is JobState.PENDING]
        return jobs, min(pending, default=None)

    async def parent_results(self, job_id: int) -> dict[int, object]:
        with self._lock:
            return {
                e.parent: self._jobs[e.parent].result
                for e in self._parents.get(job_id, [])
                if e.parent in self._jobs
            }

    async def workflow(
        self,
        workflow_id: int,
        *,
        after: int | None = None,
        limit: int | None = None,
        previews: bool = False,
    ) -> tuple[list[Job], list[tuple[int, int, str]]]:
        with self._lock:
            every = sorted(
                (j for j in self._jobs.values() if j.workflow == workflow_id), key=lambda j: j.id
            )
            members = {j.id for j in every}
            jobs = every
            if limit is not None:
                jobs = [j for j in every if after is None or j.id > after][: max(1, limit)]
            edges = [
                (e.parent, e.child, e.policy)
                for j in jobs
                for e in sorted(self._parents.get(j.id, []), key=lambda e: e.parent)
                if e.parent in members
            ]
            if limit is not None:
                edges = edges[: MAX_PAGE_EDGES + 1]
            return [previewed(j) for j in jobs] if previews else jobs, edges

    async def workflow_states(self, workflow_id: int) -> dict[JobState, int]:
        with self._lock:
            found: dict[JobState, int] = {}
            for job in self._jobs.values():
                if job.workflow == workflow_id:
                    found[job.state] = found.get(job.state, 0) + 1
            return found

    async def related(
        self, job_id: int, *, parents: bool, after: int | None = None, limit: int = 50
    ) -> list[tuple[int, JobState, str]]:
        with self._lock:
            deps = (self._parents if parents else self._children).get(job_id, [])
            found = sorted(
                (e.parent if parents else e.child, e.policy)
                for e in deps
                if (e.parent if parents else e.child) in self._jobs
            )
            return [
                (other, self._jobs[other].state, policy)
                for other, policy in found
                if after is None or other > after
            ][: max(1, limit)]

    async def cancel_workflow(self, workflow_id: int, *, now: datetime | None = None) -> int:
        with self._lock:
            at = self._now(now)
            unfinished = sorted(
                j.id
                for j in self._jobs.values()
                if j.workflow == workflow_id and not j.state.is_terminal
            )
            for job_id in unfinished:
                job = self._jobs[job_id]
                if not job.state.is_terminal:  # else: cancelled with a parent just now
                    self._finish(job, at, JobState.CANCELLED, Outcome.CANCELLED)
            return len(unfinished)

    def _parent_ended(self, parent: int, state: JobState, at: datetime) -> None:
        """Settle the edges to ``parent``'s children now that it ended in ``state`` (the
        lock held): the direct children only; a cancelled child settles its own in turn."""
        failed = state is not JobState.SUCCEEDED
        for edge in self._children.get(parent, []):
            child = self._jobs.get(edge.child)
            if edge.satisfied or child is None:
                continue
            if not failed or edge.policy == "run":
                edge.satisfied = True
                child = replace(child, waiting_on=child.waiting_on - 1)
                if child.state is JobState.WAITING and child.waiting_on == 0:
                    child = replace(child, state=JobState.PENDING)
                    self._jobs[child.id] = child
                    self._announce(child.run_at)
                else:
                    self._jobs[child.id] = child
            elif child.state in HELD_BACK:
                self._blocked_by[child.id] = parent
                self._finish(
                    child, at, JobState.CANCELLED, Outcome.CANCELLED, cancel_reason(parent, state)
                )

    def _orphan_children(self, doomed: set[int], at: datetime) -> None:
        """The jobs ``doomed`` are about to be deleted (the lock held): each edge by which one
        still holds a child up stops counting; a waiting child on a "cancel" edge is cancelled
        naming the deleted parent, and one whose last such edge it was becomes pending, as if
        the parent had ended dead or cancelled. Children deleted with them are left alone."""
        for parent in sorted(doomed):
            for edge in self._children.get(parent, []):
                child = self._jobs.get(edge.child)
                if edge.satisfied or child is None or child.id in doomed:
                    continue
                edge.satisfied = True
                child = replace(child, waiting_on=child.waiting_on - 1)
                self._jobs[child.id] = child
                if self._blocked_by.get(child.id) == parent:
                    del self._blocked_by[child.id]  # nothing can re-arm it any more
                if child.state not in HELD_BACK:
                    continue
                if edge.policy == "cancel":
                    self._finish(
                        child, at, JobState.CANCELLED, Outcome.CANCELLED, deleted_reason(parent)
                    )
                elif child.waiting_on == 0 and child.state is JobState.WAITING:
                    self._jobs[child.id] = replace(child, state=JobState.PENDING)
                    self._announce(child.run_at)

    def _forget_edges(self, job_id: int) -> None:
        """Drop a pruned job's edges, both ways (what ON DELETE CASCADE does in SQL)."""
        for edge in self._children.pop(job_id, []):
            self._parents[edge.child].remove(edge)
        for edge in self._parents.pop(job_id, []):
            self._children[edge.parent].remove(edge)
        self._blocked_by.pop(job_id, None)

    def _rearm_children(self, parent: int) -> None:
        """``parent`` was retried: the jobs its end cancelled wait again, unless another of
        their parents has ended dead or cancelled too (then that one blocks them); and the
        edges its end settled wait again for its new outcome (``_reopen_edges``)."""
        self._reopen_edges(parent)
        for edge in self._children.get(parent, []):
            child = self._jobs.get(edge.child)
            if child is None or self._blocked_by.get(child.id) != parent:
                continue
            if child.state is not JobState.CANCELLED:
                continue
            other = next(
                (
                    e.parent
                    for e in self._parents.get(child.id, [])
                    if e.parent != parent
                    and not e.satisfied
                    and e.policy == "cancel"
                    and e.parent in self._jobs
                    and self._jobs[e.parent].state in (JobState.DEAD, JobState.CANCELLED)
                ),
                None,
            )
            if other is not None:
                self._blocked_by[child.id] = other
                continue
            del self._blocked_by[child.id]
            self._jobs[child.id] = replace(
                child, state=JobState.WAITING, finished_at=None, last_error=None
            )
            self._rearm_children(child.id)

    def _reopen_edges(self, parent: int) -> None:
        """``parent`` runs again: each settled edge to a child that has not started since
        (waiting or pending) or may be retried (dead or cancelled) counts again, and a pending
        child waits. A running or succeeded child keeps its run."""
        for edge in self._children.get(parent, []):
            child = self._jobs.get(edge.child)
            if not edge.satisfied or child is None or child.state not in REOPENED_STATES:
                continue
            edge.satisfied = False
            state = JobState.WAITING if child.state is JobState.PENDING else child.state
            self._jobs[child.id] = replace(child, waiting_on=child.waiting_on + 1, state=state)
