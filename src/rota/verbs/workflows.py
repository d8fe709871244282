"""``app.workflows``: graphs of jobs written, read and cancelled whole."""

from __future__ import annotations

from typing import Any

from rota import workflows
from rota.domain.workflow import Workflow
from rota.verbs.binding import Binding
from rota.verbs.enqueue import Enqueuer
from rota.workflows import WorkflowRun


class Workflows:
    """``await app.workflows.enqueue(graph)``, ``get(id)``, ``cancel(id)``."""

    def __init__(self, binding: Binding, enqueuer: Enqueuer) -> None:
        self._binding = binding
        self._enqueuer = enqueuer

    async def enqueue(self, graph: Workflow, *, connection: Any = None) -> WorkflowRun:
        """Write a whole graph of jobs (``rota.Workflow``, ``chain``, ``group``, ``chord``)
        in one transaction, checked before anything is written: at most MAX_WORKFLOW_JOBS
        jobs, no unique keys, parents known, kinds this App has handlers for (InvalidJob
        otherwise). Returns its workflow id, jobs and edges. With ``connection`` (a psycopg
        AsyncConnection) the graph joins that connection's transaction, as in
        ``App.enqueue``."""
        return await self._enqueuer.enqueue_workflow(graph, connection=connection)

    def enqueue_sync(self, graph: Workflow, *, connection: Any = None) -> WorkflowRun:
        """``enqueue`` for synchronous code (Django, Flask); with ``connection`` (a sync
        psycopg Connection) the graph joins that connection's transaction. Bad input raises
        before anything is written."""
        return self._enqueuer.enqueue_workflow_sync(graph, connection=connection)

    async def get(self, workflow_id: int) -> WorkflowRun:
        """The workflow's jobs (with their states) and edges. WorkflowNotFound."""
        return await workflows.get_workflow(await self._binding.open(), workflow_id)

    async def cancel(self, workflow_id: int) -> int:
        """Cancel every job of the workflow that has not finished; how many. WorkflowNotFound."""
        return await workflows.cancel_workflow(await self._binding.open(), workflow_id)
