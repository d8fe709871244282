"""One trace from an HTTP request through enqueue to the handler, on every backend: a FastAPI
route (traced by OpenTelemetry's ASGI instrumentation) enqueues, a worker of another App on
the same database (another process, in production) runs the job, and every span joins the
request's trace, which an upstream caller started."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import FastAPI
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.trace import SpanKind

from rota import App, JobContext
from tests.contract.conftest import backend, store_url
from tests.support.tracing import Spans, spans

_ = (backend, spans, store_url)  # fixtures: every backend

UPSTREAM_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
UPSTREAM = f"00-{UPSTREAM_TRACE}-00f067aa0ba902b7-01"


def jobs_app(database_url: str, spans: Spans, sent: list[str]) -> App:
    jobs = App(database_url)

    @jobs.job("welcome", queue="mail")
    async def welcome(ctx: JobContext, payload: Any) -> None:
        with spans.provider.get_tracer("shop").start_as_current_span("send welcome mail"):
            sent.append(payload["to"])

    return jobs


async def test_one_trace_runs_from_the_http_request_through_enqueue_to_the_handler(
    store_url: str, spans: Spans
) -> None:
    database_url = store_url
    sent: list[str] = []
    web_jobs = jobs_app(database_url, spans, sent)
    web = FastAPI()

    @web.post("/signup")
    async def signup(body: dict[str, str]) -> dict[str, int]:
        result = await web_jobs.enqueue("welcome", {"to": body["email"]})
        return {"job": result.job.id}

    traced = OpenTelemetryMiddleware(web, tracer_provider=spans.provider)
    transport = httpx.ASGITransport(app=traced)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as api:
        response = await api.post(
            "/signup", json={"email": "ada@example.com"}, headers={"traceparent": UPSTREAM}
        )
    assert response.status_code == 200
    job_id = response.json()["job"]

    # The worker's own App (memory jobs live only in the web App's store).
    worker_jobs = web_jobs if database_url == "memory://" else jobs_app(database_url, spans, sent)
    try:
        async with worker_jobs:
            assert await worker_jobs.worker(name="w-1").run_until_idle() == 1
    finally:
        await web_jobs.close()
    assert sent == ["ada@example.com"]

    [server] = [span for span in spans.finished() if span.kind is SpanKind.SERVER]
    enqueue = spans.one("enqueue welcome")
    execute = spans.one("execute welcome")
    handler = spans.one("send welcome mail")
    trace_ids = {span.context.trace_id for span in (server, enqueue, execute, handler)}
    assert trace_ids == {int(UPSTREAM_TRACE, 16)}
    assert enqueue.parent is not None and enqueue.parent.span_id == server.context.span_id
    assert execute.parent is not None and execute.parent.span_id == enqueue.context.span_id
    assert handler.parent is not None and handler.parent.span_id == execute.context.span_id
    assert (execute.attributes or {})["messaging.message.id"] == str(job_id)
    claim = spans.one("claim mail")
    assert [link.context.span_id for link in claim.links] == [enqueue.context.span_id]
