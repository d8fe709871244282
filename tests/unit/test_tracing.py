"""OpenTelemetry spans for enqueue, claim and execution, with the messaging conventions'
attributes and errors recorded; and nothing at all when the application does not trace."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.semconv._incubating.attributes import messaging_attributes as semconv
from opentelemetry.trace import SpanKind, StatusCode

from rota import App, JobContext, Permanent, Snooze
from rota.domain.job import JobSpec
from rota.observability import tracing
from rota.testing import FakeClock
from tests.support.tracing import Spans, spans

_ = spans  # the fixture
REPO = Path(__file__).resolve().parents[2]


def attributes(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_enqueue_claim_and_execute_make_one_trace_under_the_callers_span(
    app: App, spans: Spans
) -> None:
    @app.job("email", queue="mail")
    async def email(ctx: JobContext, payload: Any) -> None:
        with spans.provider.get_tracer("handler").start_as_current_span("send"):
            pass

    tracer = spans.provider.get_tracer("caller")
    with tracer.start_as_current_span("signup") as caller:
        job = (await app.enqueue("email", {"to": "ada@example.com"})).job
    assert job.trace_context is not None and "traceparent" in job.trace_context
    assert await app.worker(name="w-1").run_until_idle() == 1

    enqueue, claim = spans.one("enqueue email"), spans.one("claim mail")
    execute, send = spans.one("execute email"), spans.one("send")
    trace_id = caller.get_span_context().trace_id
    assert {span.context.trace_id for span in (enqueue, execute, send)} == {trace_id}
    assert (
        enqueue.parent is not None and enqueue.parent.span_id == caller.get_span_context().span_id
    )
    assert execute.parent is not None and execute.parent.span_id == enqueue.context.span_id
    assert send.parent is not None and send.parent.span_id == execute.context.span_id
    # The claim is a trace of its own, linked to the job's creation context; so is the
    # execution (the conventions' link, beside the parent).
    assert claim.parent is None and claim.context.trace_id != trace_id
    assert [link.context.span_id for link in claim.links] == [enqueue.context.span_id]
    assert [link.context.span_id for link in execute.links] == [enqueue.context.span_id]

    assert (enqueue.kind, claim.kind, execute.kind) == (
        SpanKind.PRODUCER,
        SpanKind.CONSUMER,
        SpanKind.CONSUMER,
    )
    assert attributes(enqueue) == {
        "messaging.system": "rota",
        "messaging.operation.type": "create",
        "messaging.operation.name": "enqueue",
        "messaging.destination.name": "mail",
        "messaging.rota.job.kind": "email",
    }
    assert attributes(claim) == {
        "messaging.system": "rota",
        "messaging.operation.type": "receive",
        "messaging.operation.name": "claim",
        "messaging.destination.name": "mail",
        "messaging.batch.message_count": 1,
        "messaging.client.id": "w-1",
    }
    assert attributes(execute) == {
        "messaging.system": "rota",
        "messaging.operation.type": "process",
        "messaging.operation.name": "execute",
        "messaging.destination.name": "mail",
        "messaging.message.id": str(job.id),
        "messaging.client.id": "w-1",
        "messaging.rota.job.kind": "email",
        "messaging.rota.job.attempt": 1,
        "messaging.rota.job.outcome": "succeeded",
    }
    assert execute.status.status_code is StatusCode.UNSET
    assert claim.start_time is not None and claim.end_time is not None
    assert claim.start_time <= claim.end_time


def test_the_attribute_names_are_the_conventions() -> None:
    assert tracing.MESSAGING_SYSTEM == semconv.MESSAGING_SYSTEM
    assert tracing.OPERATION_TYPE == semconv.MESSAGING_OPERATION_TYPE
    assert tracing.OPERATION_NAME == semconv.MESSAGING_OPERATION_NAME
    assert tracing.DESTINATION == semconv.MESSAGING_DESTINATION_NAME
    assert tracing.MESSAGE_ID == semconv.MESSAGING_MESSAGE_ID
    assert tracing.BATCH_COUNT == semconv.MESSAGING_BATCH_MESSAGE_COUNT
    assert tracing.CLIENT_ID == semconv.MESSAGING_CLIENT_ID
    types = {value.value for value in semconv.MessagingOperationTypeValues}
    assert {"create", "receive", "process"} <= types


async def test_failures_are_recorded_on_the_execution_span(
    app: App, clock: FakeClock, spans: Spans
) -> None:
    @app.job("broken", max_attempts=1)
    async def broken(ctx: JobContext, payload: Any) -> None:
        raise ValueError("bad input 42")

    @app.job("refused")
    async def refused(ctx: JobContext, payload: Any) -> None:
        raise Permanent("never")

    @app.job("slow", timeout=0.01, max_attempts=1)
    async def slow(ctx: JobContext, payload: Any) -> None:
        await asyncio.Event().wait()

    @app.job("later")
    async def later(ctx: JobContext, payload: Any) -> None:
        raise Snooze(60)

    for kind in ("broken", "refused", "slow", "later"):
        await app.enqueue(kind)
    await app.worker().run_until_idle()

    broken_span = spans.one("execute broken")
    assert broken_span.status.status_code is StatusCode.ERROR
    assert broken_span.status.description == "bad input 42"
    assert attributes(broken_span)["error.type"] == "ValueError"
    assert attributes(broken_span)["messaging.rota.job.outcome"] == "failed"
    [event] = broken_span.events
    assert event.name == "exception"
    assert (event.attributes or {})["exception.type"] == "ValueError"

    refused_span = spans.one("execute refused")
    assert attributes(refused_span)["error.type"] == "rota.domain.errors.Permanent"
    slow_span = spans.one("execute slow")
    assert attributes(slow_span)["error.type"] == "timeout"
    assert slow_span.status.status_code is StatusCode.ERROR

    later_span = spans.one("execute later")
    assert attributes(later_span)["messaging.rota.job.outcome"] == "snoozed"
    assert later_span.status.status_code is StatusCode.UNSET
    assert "error.type" not in attributes(later_span)


async def test_a_sync_handlers_spans_are_children_of_its_execution(app: App, spans: Spans) -> None:
    @app.job("report")
    def report(ctx: JobContext, payload: Any) -> None:
        with spans.provider.get_tracer("handler").start_as_current_span("render"):
            pass

    await app.enqueue("report")
    await app.worker().run_until_idle()
    execute, render = spans.one("execute report"), spans.one("render")
    assert render.parent is not None and render.parent.span_id == execute.context.span_id


async def test_a_job_enqueued_outside_a_trace_starts_its_own(app: App, spans: Spans) -> None:
    @app.job("tick")
    async def tick(ctx: JobContext, payload: Any) -> None:
        return None

    # A job built without rota's helpers (or fired by a schedule) carries no context.
    [result] = await app.enqueue_many([JobSpec(kind="tick")])
    assert result.job.trace_context is None
    await app.worker().run_until_idle()
    execute = spans.one("execute tick")
    assert execute.parent is None and execute.links == ()


async def test_a_trace_context_too_large_for_a_job_keeps_only_the_w3c_headers(
    app: App, spans: Spans
) -> None:
    from opentelemetry import baggage, context

    token = context.attach(baggage.set_baggage("note", "x" * 5000))
    try:
        with spans.provider.get_tracer("caller").start_as_current_span("big"):
            job = (await app.enqueue("email")).job
    finally:
        context.detach(token)
    assert job.trace_context is not None
    assert set(job.trace_context) == {"traceparent"}


async def test_nothing_is_traced_without_a_tracer_provider(app: App) -> None:
    # OpenTelemetry is imported here (by this test module), but no provider is set.
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    spec = app.spec("email")
    assert spec.trace_context is None

    async def handler_run() -> None:
        return None

    awaitable = handler_run()
    job = (await app.enqueue("email")).job
    assert tracing.execution(awaitable, job, "w") is awaitable
    await awaitable
    tracing.claimed([job], worker="w", queues=["default"], took_s=0.0)


def run_python(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``script`` in a fresh interpreter, with only rota on its path."""
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )


def test_without_opentelemetry_installed_jobs_run_and_nothing_of_it_is_imported(
    tmp_path: Path,
) -> None:
    script = textwrap.dedent(
        """
        import asyncio, sys
        sys.modules["opentelemetry"] = None  # as if the package were not installed
        import rota

        app = rota.App("memory://")
        ran = []

        @app.job("email")
        async def email(ctx, payload):
            ran.append(payload)

        async def main():
            async with app:
                job = (await app.enqueue("email", {"to": "ada"})).job
                assert job.trace_context is None
                assert await app.worker().run_until_idle() == 1
                assert (await app.jobs.get(job.id)).state.value == "succeeded"

        asyncio.run(main())
        assert ran == [{"to": "ada"}]
        imported = [name for name in sys.modules if name.startswith("opentelemetry.")]
        assert imported == [], imported
        print("ok")
        """
    )
    result = run_python(script, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_rota_itself_never_imports_opentelemetry(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import asyncio, sys
        import rota
        from rota.observability import tracing

        app = rota.App("memory://")

        @app.job("email")
        async def email(ctx, payload):
            return None

        async def main():
            async with app:
                await app.enqueue("email")
                await app.worker().run_until_idle()

        asyncio.run(main())
        print(sorted(name for name in sys.modules if name.startswith("opentelemetry")))
        """
    )
    result = run_python(script, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


class FakeTraceModule:
    """opentelemetry.trace as far as rota reads it: a provider variable and its getter."""

    ProxyTracerProvider = trace.ProxyTracerProvider
    NoOpTracerProvider = trace.NoOpTracerProvider

    def __init__(self) -> None:
        self._TRACER_PROVIDER: Any = None
        self.asked = 0

    def get_tracer_provider(self) -> Any:
        self.asked += 1
        return self._TRACER_PROVIDER or trace.ProxyTracerProvider()


def test_a_global_provider_set_after_the_first_jobs_is_used_and_not_asked_for_each_job(
    monkeypatch: pytest.MonkeyPatch, spans: Spans
) -> None:
    fake = FakeTraceModule()
    monkeypatch.setattr(tracing, "_unset_seen", False)
    for _ in range(3):
        assert tracing._global_provider(fake) is None
    assert fake.asked == 1  # "none set" is asked once, then the variable is watched
    fake._TRACER_PROVIDER = spans.provider  # what trace.set_tracer_provider does
    assert tracing._global_provider(fake) is spans.provider
    fake._TRACER_PROVIDER = trace.NoOpTracerProvider()
    assert tracing._global_provider(fake) is None
