"""Traces through OpenTelemetry, when the application traces: from enqueue to handler.

Spans follow OpenTelemetry's messaging conventions (``messaging.system`` is ``rota``; a job is
the message, its queue the destination; rota's own attributes are ``messaging.rota.*``):

- ``enqueue {kind}`` (PRODUCER, operation type ``create``) when a job is created, as a child
  of the caller's current span. Its context is stored with the job (``Job.trace_context``,
  written by the configured propagator: W3C ``traceparent``/``tracestate`` by default): it is
  the job's creation context. It covers building the job, not the write (the store's client
  instrumentation, or the caller's own span, shows that).
- ``claim {queue}`` (CONSUMER, ``receive``) for each claim that took jobs, a root span linked
  to each claimed job's creation context. Claims that found nothing leave no span: an idle
  worker polls forever, and a span per poll would bury every trace.
- ``execute {kind}`` (CONSUMER, ``process``) around each execution's handler. It is a child of
  the job's creation context, and also linked to it. The conventions require the link and
  allow the parent when one message is processed, which is always the case here; the parent
  puts the HTTP request that enqueued, the enqueue and every attempt's handler (with the
  spans the handler makes) in one trace, which is what users look for. Attributes: queue, job
  id, kind, attempt, worker and outcome (``succeeded``, ``failed``, ``snoozed``,
  ``lease_expired`` or ``interrupted``: stopped from outside by a lost lease, a cancel or a
  shutdown; ``slept`` or ``waited`` when a durable job let go of its worker); a failure
  records the exception, ``error.type`` and an error status.
- ``step {name}`` (INTERNAL) around each step of a durable job that runs (a step answered
  from its checkpoint leaves no span), a child of its execution's span, with the step's name
  and its outcome (``succeeded`` or ``failed``).

Nothing happens, and nothing of OpenTelemetry is imported, unless the application itself
imported ``opentelemetry.trace`` and set a tracer provider (``use_tracer_provider`` gives
rota one of its own instead, for tests or applications that keep theirs out of the global).
Every hook then costs a dictionary lookup and returns its input unchanged.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from rota.domain.clock import SystemClock
from rota.domain.durable import Settled
from rota.domain.errors import Abandon, InvalidJob, Snooze
from rota.domain.job import Job, JobSpec

T = TypeVar("T")

SYSTEM = "rota"
#: The propagation headers kept when what the propagator wrote does not fit in a job.
W3C_HEADERS = ("traceparent", "tracestate")

MESSAGING_SYSTEM = "messaging.system"
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
DESTINATION = "messaging.destination.name"
MESSAGE_ID = "messaging.message.id"
BATCH_COUNT = "messaging.batch.message_count"
CLIENT_ID = "messaging.client.id"
JOB_KIND = "messaging.rota.job.kind"
JOB_ATTEMPT = "messaging.rota.job.attempt"
JOB_OUTCOME = "messaging.rota.job.outcome"
STEP_NAME = "messaging.rota.step.name"
ERROR_TYPE = "error.type"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_clock = SystemClock()
#: A provider given with ``use_tracer_provider``, and the tracer of the last provider seen.
_provider: Any = None
_tracer_of: tuple[Any, Any] | None = None
#: Whether OpenTelemetry said no provider is set while its module variable was None.
_unset_seen = False
_UNKNOWN = object()
_modules = sys.modules


def use_tracer_provider(provider: Any) -> None:
    """Trace with ``provider`` instead of OpenTelemetry's global one; None goes back to the
    global provider."""
    global _provider
    if provider is not None:
        importlib.import_module("opentelemetry.trace")
    _provider = provider


def created(spec: JobSpec) -> JobSpec:
    """``spec`` carrying the context of an ``enqueue`` span made now (the spec itself when not
    tracing, or when the context would not fit in a job)."""
    tracer = _tracer()
    if tracer is None:
        return spec
    from opentelemetry import propagate, trace

    span = tracer.start_span(
        f"enqueue {spec.kind}",
        kind=trace.SpanKind.PRODUCER,
        attributes={
            MESSAGING_SYSTEM: SYSTEM,
            OPERATION_TYPE: "create",
            OPERATION_NAME: "enqueue",
            DESTINATION: spec.queue,
            JOB_KIND: spec.kind,
        },
    )
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    span.end()
    if not carrier:
        return spec
    try:
        return spec.with_trace_context(carrier)
    except InvalidJob:  # e.g. a large baggage: keep the trace, drop the rest
        kept = {name: carrier[name] for name in W3C_HEADERS if name in carrier}
        try:
            return spec.with_trace_context(kept) if kept else spec
        except InvalidJob:
            return spec


def claimed(jobs: Sequence[Job], *, worker: str, queues: Sequence[str], took_s: float) -> None:
    """Record a claim that took ``jobs`` and ended now, after ``took_s`` seconds."""
    tracer = _tracer()
    if tracer is None or not jobs:
        return
    from opentelemetry import context, trace

    links = []
    for job in jobs:
        creation = _creation_span(job)
        if creation is not None:
            links.append(trace.Link(creation, {MESSAGE_ID: str(job.id)}))
    attributes: dict[str, Any] = {
        MESSAGING_SYSTEM: SYSTEM,
        OPERATION_TYPE: "receive",
        OPERATION_NAME: "claim",
        BATCH_COUNT: len(jobs),
        CLIENT_ID: worker,
    }
    if len(queues) == 1:
        attributes[DESTINATION] = queues[0]
    ended = _now_ns()
    span = tracer.start_span(
        f"claim {queues[0]}" if len(queues) == 1 else "claim",
        context=context.Context(),
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
        start_time=ended - int(max(0.0, took_s) * 1e9),
    )
    span.end(end_time=ended)


def execution(awaitable: Awaitable[T], job: Job, worker: str) -> Awaitable[T]:
    """``awaitable`` (the handler's run) inside an ``execute`` span, or itself when not
    tracing."""
    tracer = _tracer()
    if tracer is None:
        return awaitable
    return _executing(tracer, awaitable, job, worker)


async def _executing(tracer: Any, awaitable: Awaitable[T], job: Job, worker: str) -> T:
    from opentelemetry import context, propagate, trace

    creation = _creation_span(job)
    parent = propagate.extract(job.trace_context) if creation is not None else context.Context()
    span = tracer.start_span(
        f"execute {job.kind}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        links=[trace.Link(creation)] if creation is not None else [],
        attributes={
            MESSAGING_SYSTEM: SYSTEM,
            OPERATION_TYPE: "process",
            OPERATION_NAME: "execute",
            DESTINATION: job.queue,
            MESSAGE_ID: str(job.id),
            CLIENT_ID: worker,
            JOB_KIND: job.kind,
            JOB_ATTEMPT: job.attempt,
        },
    )
    return await _awaited_in(span, awaitable)


def step(awaitable: Awaitable[T], job: Job, name: str) -> Awaitable[T]:
    """``awaitable`` (a step's run) inside a ``step`` span, or itself when not tracing."""
    tracer = _tracer()
    if tracer is None:
        return awaitable
    return _stepping(tracer, awaitable, job, name)


async def _stepping(tracer: Any, awaitable: Awaitable[T], job: Job, name: str) -> T:
    span = tracer.start_span(
        f"step {name}",
        attributes={
            MESSAGING_SYSTEM: SYSTEM,
            MESSAGE_ID: str(job.id),
            JOB_KIND: job.kind,
            JOB_ATTEMPT: job.attempt,
            STEP_NAME: name,
        },
    )
    return await _awaited_in(span, awaitable)


async def _awaited_in(span: Any, awaitable: Awaitable[T]) -> T:
    """``awaitable``'s result with ``span`` current, the span ended with how it ended."""
    from opentelemetry import trace

    with trace.use_span(
        span, end_on_exit=True, record_exception=False, set_status_on_exception=False
    ):
        try:
            result = await awaitable
        except BaseException as error:
            _ended_by(span, error)
            raise
        span.set_attribute(JOB_OUTCOME, "succeeded")
        return result


def _ended_by(span: Any, error: BaseException) -> None:
    from opentelemetry.trace import Status, StatusCode

    if isinstance(error, Settled):
        span.set_attribute(JOB_OUTCOME, error.outcome.value)
    elif isinstance(error, Snooze):
        span.set_attribute(JOB_OUTCOME, "snoozed")
    elif isinstance(error, Abandon):
        span.set_attribute(JOB_OUTCOME, "lease_expired")
    elif isinstance(error, asyncio.CancelledError):
        span.set_attribute(JOB_OUTCOME, "interrupted")
    else:
        span.set_attribute(JOB_OUTCOME, "failed")
        span.set_attribute(ERROR_TYPE, _error_type(error))
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, str(error) or type(error).__name__))


def _error_type(error: BaseException) -> str:
    """The conventions' error.type: the exception's full class name (rota's own timeout
    says ``timeout``)."""
    named = getattr(error, "rota_error_type", None)
    if isinstance(named, str):
        return named
    cls = type(error)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _creation_span(job: Job) -> Any:
    """The span context stored with ``job`` (its creation context), or None."""
    if not job.trace_context:
        return None
    from opentelemetry import propagate, trace

    found = trace.get_current_span(propagate.extract(job.trace_context)).get_span_context()
    return found if found.is_valid else None


def _tracer() -> Any:
    """The tracer to use, or None when the application does not trace."""
    global _tracer_of
    provider = _provider
    if provider is None:
        api = _modules.get("opentelemetry.trace")
        if api is None:  # the application never imported OpenTelemetry: it does not trace
            return None
        provider = _global_provider(api)
        if provider is None:
            return None
    cached = _tracer_of
    if cached is None or cached[0] is not provider:
        cached = _tracer_of = (provider, provider.get_tracer("rota"))
    return cached[1]


def _global_provider(api: Any) -> Any:
    """OpenTelemetry's global tracer provider, or None while it is the default (no-op) one.

    ``get_tracer_provider()`` reads the environment on every call until a provider is set,
    which would cost every job microseconds; so once it has answered "none set", the module
    variable it reads is watched instead, and only a provider set since is asked for.
    """
    global _unset_seen
    current = getattr(api, "_TRACER_PROVIDER", _UNKNOWN)
    if current is None and _unset_seen:
        return None
    if current is not None and current is not _UNKNOWN:
        provider = current
    else:
        provider = api.get_tracer_provider()
    if isinstance(provider, (api.ProxyTracerProvider, api.NoOpTracerProvider)):
        _unset_seen = current is None
        return None
    return provider


def _now_ns() -> int:
    elapsed = _clock.now() - _EPOCH
    return (elapsed.days * 86_400 + elapsed.seconds) * 1_000_000_000 + elapsed.microseconds * 1000
