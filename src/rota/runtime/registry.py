"""Registry: which handler runs each kind, and the kind's defaults (queue, retries, timeout)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeAlias

from rota.domain.errors import InvalidInput, InvalidJob
from rota.domain.job import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    JobSpec,
)
from rota.domain.retry import RetryPolicy

if TYPE_CHECKING:
    from rota.runtime.context import JobContext

Handler: TypeAlias = Callable[["JobContext", Any], Any]
AsyncHandler: TypeAlias = Callable[["JobContext", Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class KindConfig:
    """A registered kind: its handler and what its jobs get unless enqueued otherwise."""

    kind: str
    handler: Handler
    is_async: bool
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    timeout: timedelta | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)


class Registry:
    """Kinds and their handlers. Handlers are registered by code, never looked up by name from
    data: a worker leaves a job of a kind it does not know for a worker that runs it, and the
    rescuer ends it only when no live worker does (``Store.end_unrunnable``)."""

    def __init__(self) -> None:
        self._kinds: dict[str, KindConfig] = {}

    def register(
        self,
        kind: str,
        handler: Handler,
        *,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        timeout: timedelta | float | None = None,
        retry: RetryPolicy | None = None,
    ) -> KindConfig:
        """Register ``handler`` for ``kind``; InvalidInput for a bad option or a second handler."""
        if isinstance(timeout, bool):
            raise InvalidInput(f"cannot register kind {kind!r}: timeout must be seconds")
        if isinstance(timeout, int | float):
            timeout = timedelta(seconds=timeout)
        try:
            # Validate every option exactly as an enqueue would.
            JobSpec(
                kind=kind,
                queue=queue,
                priority=priority,
                max_attempts=max_attempts,
                timeout=timeout,
            )
        except InvalidJob as error:
            raise InvalidInput(f"cannot register kind {kind!r}: {error}") from None
        if kind in self._kinds:
            raise InvalidInput(f"kind {kind!r} already has a handler")
        if not callable(handler):
            raise InvalidInput(f"handler for {kind!r} is not callable")
        config = KindConfig(
            kind=kind,
            handler=handler,
            is_async=_is_async(handler),
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            timeout=timeout,
            retry=retry or RetryPolicy(),
        )
        self._kinds[kind] = config
        return config

    def get(self, kind: str) -> KindConfig | None:
        return self._kinds.get(kind)

    def retry_of(self, kind: str) -> RetryPolicy:
        """The retry policy of ``kind`` (the default one for a kind not registered)."""
        config = self._kinds.get(kind)
        return config.retry if config is not None else RetryPolicy()

    def kinds(self) -> list[str]:
        return sorted(self._kinds)

    def accepted_kinds(self) -> frozenset[str] | None:
        """The kinds an enqueue through this registry may name: the registered ones, or None
        (any kind) while none is registered, for code that only enqueues."""
        return frozenset(self._kinds) or None

    def queues(self) -> list[str]:
        """The queues the registered kinds use, for a worker that was given none."""
        return sorted({config.queue for config in self._kinds.values()}) or [DEFAULT_QUEUE]

    def __contains__(self, kind: object) -> bool:
        return kind in self._kinds

    def __len__(self) -> int:
        return len(self._kinds)


def _is_async(handler: Callable[..., Any]) -> bool:
    call = getattr(handler, "__call__", None)  # noqa: B004 (callable objects with async __call__)
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)
