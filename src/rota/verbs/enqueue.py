"""Enqueueing for the App: specs with the App's kind defaults, checked against its handlers,
written to its store, to the caller's own transaction, or through the sync bridge."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol, cast

from rota import workflows
from rota.client import job_spec
from rota.domain.errors import InvalidInput
from rota.domain.job import EnqueueResult, Job, JobSpec, check_known_kind
from rota.domain.workflow import Workflow
from rota.store import Store
from rota.verbs.binding import Binding, SyncBridge
from rota.workflows import WorkflowRun


class Enqueuer:
    """Writes the App's jobs. ``App.enqueue`` and its siblings say what each verb promises."""

    def __init__(self, binding: Binding) -> None:
        self._binding = binding

    def spec(self, kind: str, payload: Any = None, **options: Any) -> JobSpec:
        """A validated JobSpec with the App's defaults for ``kind``. Once the App has
        handlers, a kind without one is refused (InvalidJob naming the known kinds)."""
        registry = self._binding.registry
        config = registry.get(kind)
        if config is None:  # refused, unless the App has no handlers at all
            check_known_kind(kind, registry.accepted_kinds())
            return job_spec(kind, payload, **options)
        defaults = self._binding.defaults_of(kind, config)
        return job_spec(kind, payload, defaults=defaults, **options)

    async def enqueue(
        self,
        spec: JobSpec,
        *,
        connection: Any = None,
        depends_on: Iterable[int] | None = None,
        on_parent_failure: str = "cancel",
    ) -> EnqueueResult:
        store = await self._binding.open()
        if depends_on is not None:
            graph = workflows.graph_after(spec, depends_on, on_parent_failure)
            if connection is not None:
                [job] = await transactional(store).enqueue_workflow_on(connection, graph)
                return EnqueueResult(job)
            [job] = await store.enqueue_workflow(graph)
            return EnqueueResult(job)
        if connection is not None:
            [result] = await transactional(store).enqueue_on(connection, [spec])
            return result
        [result] = await store.enqueue([spec])
        return result

    async def enqueue_many(
        self, specs: Iterable[JobSpec], *, connection: Any = None
    ) -> list[EnqueueResult]:
        accepted = self._binding.registry.accepted_kinds()
        if connection is None and not isinstance(specs, Sequence):
            store = await self._binding.open()
            stream = getattr(store, "enqueue_stream", None)
            if stream is not None:
                # Made one by one (a generator): the store may write early specs while later
                # ones are being made; a bad spec midway still leaves nothing written.
                streamed: list[EnqueueResult] = await stream(_known(specs, accepted))
                return streamed
        batch = list(specs)
        for spec in batch:
            check_known_kind(spec.kind, accepted)
        store = await self._binding.open()
        if connection is not None:
            return await transactional(store).enqueue_on(connection, batch)
        return await store.enqueue(batch)

    def enqueue_sync(
        self,
        spec: JobSpec,
        *,
        connection: Any = None,
        depends_on: Iterable[int] | None = None,
        on_parent_failure: str = "cancel",
    ) -> EnqueueResult:
        graph = (
            None
            if depends_on is None
            else workflows.graph_after(spec, depends_on, on_parent_failure)
        )
        if connection is not None:
            joining = transactional(self._binding.sync_store())
            if graph is not None:
                [job] = joining.enqueue_workflow_on_sync(connection, graph)
                return EnqueueResult(job)
            [joined] = joining.enqueue_on_sync(connection, [spec])
            return joined

        async def call(bridge: SyncBridge) -> EnqueueResult:
            store = await bridge.store()
            if graph is not None:
                [job] = await store.enqueue_workflow(graph)
                return EnqueueResult(job)
            [result] = await store.enqueue([spec])
            return result

        return self._binding.on_bridge(call)

    def check_kinds(self, graph: Workflow) -> Workflow:
        """``graph`` checked (``rota.workflows.checked``), each of its kinds known here."""
        graph = workflows.checked(graph)
        accepted = self._binding.registry.accepted_kinds()
        for spec in graph.specs:
            check_known_kind(spec.kind, accepted)
        return graph

    async def enqueue_workflow(self, graph: Workflow, *, connection: Any = None) -> WorkflowRun:
        self.check_kinds(graph)
        store = await self._binding.open()
        if connection is not None:
            jobs = await transactional(store).enqueue_workflow_on(connection, graph)
            return workflows.run_of(graph, jobs)
        return await workflows.enqueue_workflow(store, graph)

    def enqueue_workflow_sync(self, graph: Workflow, *, connection: Any = None) -> WorkflowRun:
        self.check_kinds(graph)
        if connection is not None:
            store = transactional(self._binding.sync_store())
            return workflows.run_of(graph, store.enqueue_workflow_on_sync(connection, graph))

        async def call(bridge: SyncBridge) -> WorkflowRun:
            return await workflows.enqueue_workflow(await bridge.store(), graph)

        return self._binding.on_bridge(call)


class TransactionalStore(Protocol):
    """A store that can write on the caller's own psycopg connection (PostgreSQL)."""

    async def enqueue_on(
        self, connection: Any, specs: Sequence[JobSpec]
    ) -> list[EnqueueResult]: ...

    def enqueue_on_sync(self, connection: Any, specs: Sequence[JobSpec]) -> list[EnqueueResult]: ...

    async def enqueue_workflow_on(self, connection: Any, graph: Workflow) -> list[Job]: ...

    def enqueue_workflow_on_sync(self, connection: Any, graph: Workflow) -> list[Job]: ...


def transactional(store: Store) -> TransactionalStore:
    """``store`` as one that writes on a caller's connection; InvalidInput if it cannot."""
    if not hasattr(store, "enqueue_on"):
        raise InvalidInput("enqueueing on your own connection needs a PostgreSQL database")
    return cast(TransactionalStore, store)


def _known(specs: Iterable[JobSpec], accepted: frozenset[str] | None) -> Iterator[JobSpec]:
    """``specs``, each checked as it is taken (``check_known_kind``)."""
    for spec in specs:
        check_known_kind(spec.kind, accepted)
        yield spec
