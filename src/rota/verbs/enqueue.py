"""Enqueueing for the App: specs with the App's kind defaults, checked against its handlers,
passed through its enqueue hooks, written to its store, to the caller's own transaction, or
through the sync bridge. Every entry point that enqueues for an App comes through here: the
library's ``app.enqueue`` and siblings, ``rota enqueue --app``, ``POST /api/jobs`` of
``rota serve`` and ``rota.contrib.asgi``, and the Django backend."""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, TypeAlias, cast

from rota import workflows
from rota.client import job_spec
from rota.domain.errors import InvalidInput
from rota.domain.job import EnqueueResult, Job, JobSpec
from rota.domain.names import check_known_kind
from rota.domain.workflow import Workflow
from rota.store import Store
from rota.verbs.binding import Binding, SyncBridge
from rota.workflows import WorkflowRun

log = logging.getLogger("rota.enqueue")

#: ``hook(spec)``: returns the spec to enqueue instead, or None to keep it; raises to refuse.
BeforeEnqueue: TypeAlias = Callable[[JobSpec], "JobSpec | None"]
#: ``hook(spec, result)``: called once the job is written (or joined the caller's transaction).
AfterEnqueue: TypeAlias = Callable[[JobSpec, EnqueueResult], Any]


class EnqueueHooks:
    """An App's hooks around each job it enqueues (docs/concepts/hooks.md): ``before`` ones, in
    registration order, may replace the spec or refuse it (by raising: ``rota.InvalidInput``
    reads as bad input everywhere, nothing is written); ``after`` ones see what was written.
    Both are plain functions, called inline on every path, sync ones included."""

    def __init__(self) -> None:
        self.before: list[BeforeEnqueue] = []
        self.after: list[AfterEnqueue] = []

    def add(self, where: str, hook: Callable[..., Any]) -> None:
        if not callable(hook) or inspect.iscoroutinefunction(hook):
            raise InvalidInput(
                f"a {where}_enqueue hook must be a plain def (it also runs in sync code)"
            )
        (self.before if where == "before" else self.after).append(hook)

    def __bool__(self) -> bool:
        return bool(self.before or self.after)

    def prepared(self, spec: JobSpec, accepted: frozenset[str] | None) -> JobSpec:
        """``spec`` as the before hooks leave it, its kind checked again if one changed it."""
        for hook in self.before:
            changed = hook(spec)
            if changed is None:
                continue
            if not isinstance(changed, JobSpec):
                raise InvalidInput(
                    f"before_enqueue hook {_name(hook)} returned {type(changed).__name__}; "
                    "return a JobSpec (dataclasses.replace(spec, ...)) or None"
                )
            if changed.kind != spec.kind:
                check_known_kind(changed.kind, accepted)
            spec = changed
        return spec

    def written(self, spec: JobSpec, result: EnqueueResult) -> None:
        """Run the after hooks; one that raises is logged in one line (the job is written)."""
        for hook in self.after:
            try:
                hook(spec, result)
            except Exception as error:
                log.error(
                    "after_enqueue hook %s raised %s: %s (job %d is enqueued)",
                    _name(hook),
                    type(error).__name__,
                    error,
                    result.job.id,
                )


def _name(hook: Callable[..., Any]) -> str:
    return str(getattr(hook, "__qualname__", None) or repr(hook))


class Enqueuer:
    """Writes the App's jobs. ``App.enqueue`` and its siblings say what each verb promises."""

    def __init__(self, binding: Binding) -> None:
        self._binding = binding
        self.hooks = EnqueueHooks()

    def _prepared(self, spec: JobSpec) -> JobSpec:
        if not self.hooks.before:
            return spec
        return self.hooks.prepared(spec, self._binding.registry.accepted_kinds())

    def _written(self, spec: JobSpec, result: EnqueueResult) -> EnqueueResult:
        if self.hooks.after:
            self.hooks.written(spec, result)
        return result

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
        store: Store | None = None,
    ) -> EnqueueResult:
        """``spec`` through the before hooks, written (to ``store``, a caller's own open store
        of the same database, such as the CLI's; else the App's), then the after hooks."""
        spec = self._prepared(spec)
        store = store if store is not None else await self._binding.open()
        if depends_on is not None:
            graph = workflows.graph_after(spec, depends_on, on_parent_failure)
            if connection is not None:
                [job] = await transactional(store).enqueue_workflow_on(connection, graph)
                return self._written(spec, EnqueueResult(job))
            [job] = await store.enqueue_workflow(graph)
            return self._written(spec, EnqueueResult(job))
        if connection is not None:
            [result] = await transactional(store).enqueue_on(connection, [spec])
            return self._written(spec, result)
        [result] = await store.enqueue([spec])
        return self._written(spec, result)

    async def enqueue_many(
        self, specs: Iterable[JobSpec], *, connection: Any = None
    ) -> list[EnqueueResult]:
        accepted = self._binding.registry.accepted_kinds()
        if connection is None and not isinstance(specs, Sequence) and not self.hooks:
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
        if self.hooks.before:  # all prepared before any is written: a refusal writes none
            batch = [self.hooks.prepared(spec, accepted) for spec in batch]
        store = await self._binding.open()
        if connection is not None:
            results = await transactional(store).enqueue_on(connection, batch)
        else:
            results = await store.enqueue(batch)
        for spec, result in zip(batch, results, strict=True):
            self._written(spec, result)
        return results

    def enqueue_sync(
        self,
        spec: JobSpec,
        *,
        connection: Any = None,
        depends_on: Iterable[int] | None = None,
        on_parent_failure: str = "cancel",
    ) -> EnqueueResult:
        spec = self._prepared(spec)
        graph = (
            None
            if depends_on is None
            else workflows.graph_after(spec, depends_on, on_parent_failure)
        )
        if connection is not None:
            joining = transactional(self._binding.sync_store())
            if graph is not None:
                [job] = joining.enqueue_workflow_on_sync(connection, graph)
                return self._written(spec, EnqueueResult(job))
            [joined] = joining.enqueue_on_sync(connection, [spec])
            return self._written(spec, joined)

        async def call(bridge: SyncBridge) -> EnqueueResult:
            store = await bridge.store()
            if graph is not None:
                [job] = await store.enqueue_workflow(graph)
                return EnqueueResult(job)
            [result] = await store.enqueue([spec])
            return result

        return self._written(spec, self._binding.on_bridge(call))

    def check_kinds(self, graph: Workflow) -> Workflow:
        """``graph`` checked (``rota.workflows.checked``), each of its kinds known here, and
        each of its specs as the before hooks leave it."""
        graph = workflows.checked(graph)
        accepted = self._binding.registry.accepted_kinds()
        for spec in graph.specs:
            check_known_kind(spec.kind, accepted)
        if self.hooks.before:
            prepared = [self.hooks.prepared(spec, accepted) for spec in graph.specs]
            graph = workflows.checked(dataclasses.replace(graph, specs=prepared))
        return graph

    def _run_written(self, graph: Workflow, run: WorkflowRun) -> WorkflowRun:
        if self.hooks.after:
            for spec, job in zip(graph.specs, run.jobs, strict=True):
                self.hooks.written(spec, EnqueueResult(job))
        return run

    async def enqueue_workflow(self, graph: Workflow, *, connection: Any = None) -> WorkflowRun:
        graph = self.check_kinds(graph)
        store = await self._binding.open()
        if connection is not None:
            jobs = await transactional(store).enqueue_workflow_on(connection, graph)
            return self._run_written(graph, workflows.run_of(graph, jobs))
        return self._run_written(graph, await workflows.enqueue_workflow(store, graph))

    def enqueue_workflow_sync(self, graph: Workflow, *, connection: Any = None) -> WorkflowRun:
        graph = self.check_kinds(graph)
        if connection is not None:
            store = transactional(self._binding.sync_store())
            run = workflows.run_of(graph, store.enqueue_workflow_on_sync(connection, graph))
            return self._run_written(graph, run)

        async def call(bridge: SyncBridge) -> WorkflowRun:
            return await workflows.enqueue_workflow(await bridge.store(), graph)

        return self._run_written(graph, self._binding.on_bridge(call))


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
