"""create_app: one FastAPI application serving the JSON API, /metrics and the dashboard."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from importlib import metadata
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rota.api.context import ApiContext
from rota.api.errors import install_error_handlers
from rota.api.gate import RequestGate
from rota.api.queue_models import LimitCreate
from rota.api.routes_activity import activity_router
from rota.api.routes_audit import audit_router
from rota.api.routes_jobs import jobs_router
from rota.api.routes_misc import misc_router
from rota.api.routes_pages import login_page, pages_router
from rota.api.routes_queues import queues_router
from rota.api.routes_schedules import schedules_router
from rota.api.routes_signals import SignalCreate, signals_router
from rota.api.routes_workflows import workflows_router
from rota.api.schedule_models import ScheduleCreate, ScheduleEdit
from rota.api.schemas import JobCreate, JobFilterBody, JobReschedule
from rota.api.security import Authenticator, SecurityMiddleware
from rota.api.settings import ApiSettings
from rota.api.shares import ReadShare
from rota.client import Client
from rota.domain.clock import Clock, SystemClock
from rota.domain.names import validate_name
from rota.domain.workflow import WorkflowBuilder
from rota.observability.metrics import Metrics
from rota.store.replica import ReadReplica
from rota.verbs.enqueue import Enqueuer

#: Request bodies the routes parse themselves; their schemas are added to the document.
_REQUEST_MODELS = (
    JobCreate,
    JobFilterBody,
    JobReschedule,
    ScheduleCreate,
    ScheduleEdit,
    LimitCreate,
    SignalCreate,
)


def create_app(
    client: Client,
    *,
    settings: ApiSettings,
    metrics: Metrics | None = None,
    kinds: Collection[str] | None = None,
    demo: bool = False,
    replica: ReadReplica | None = None,
    workflows: Mapping[str, WorkflowBuilder] | None = None,
    clock: Clock | None = None,
    enqueuer: Enqueuer | None = None,
) -> FastAPI:
    """The API and dashboard for ``client``'s store.

    ``kinds`` limits POST /api/jobs to those kinds (None: any valid kind name); ``demo`` shows
    the dashboard's preset buttons; with ``replica`` (a streaming replica of the store), the
    read routes answer from it and /api/stats says how far it trails; ``workflows`` (the App's
    ``workflow_builders()``) lets "run now" start a workflow schedule; with ``enqueuer``
    (``app.enqueuer``) ``POST /api/jobs`` enqueues through the App, its enqueue hooks
    included; ``clock`` times each
    identity's read rate (real time by default). Binding is the caller's business: call
    ``check_bind``.
    """
    if kinds is not None:
        for kind in kinds:
            validate_name("kind", kind)
    authenticator = Authenticator(settings)
    ctx = ApiContext(
        client=client,
        settings=settings,
        metrics=metrics or Metrics(),
        kinds=frozenset(kinds) if kinds is not None else None,
        demo=demo,
        authenticator=authenticator,
        reads=Client(replica.store) if replica is not None else client,
        replica=replica,
        workflows=dict(workflows or {}),
        enqueuer=enqueuer,
    )
    # Swagger UI and ReDoc load scripts from a CDN and inline, which our CSP forbids.
    app = FastAPI(title="rota", version=_version(), docs_url=None, redoc_url=None)
    install_error_handlers(app)
    app.include_router(jobs_router(ctx))
    app.include_router(schedules_router(ctx))
    app.include_router(queues_router(ctx))
    app.include_router(activity_router(ctx))
    app.include_router(workflows_router(ctx))
    app.include_router(signals_router(ctx))
    app.include_router(audit_router(ctx))
    app.include_router(misc_router(ctx))
    app.include_router(pages_router(ctx))
    # Inside the security middleware: a request is authenticated before the gate reads its
    # body, so an anonymous client cannot make the server buffer bodies.
    app.add_middleware(
        RequestGate, limit=settings.max_concurrent_requests, max_body=settings.max_body_bytes
    )
    # Outside the gate: a read over its identity's share is refused before it queues.
    app.add_middleware(
        ReadShare,
        concurrent=settings.max_reads_per_identity,
        per_second=settings.read_rate_per_identity,
        monotonic=(clock or SystemClock()).monotonic,
    )
    app.add_middleware(
        SecurityMiddleware,
        settings=settings,
        authenticator=authenticator,
        now=client.store.now,
        login_page=login_page,
    )

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented override hook
    app.add_middleware(HeadAsGet)
    return app


class HeadAsGet:
    """HEAD is GET without the body (RFC 9110 9.3.2): FastAPI routes declare GET only."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)


def _document(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document, with the hand-parsed request bodies described and FastAPI's 422
    replaced by our 400 (validation failures are answered with 400 and ErrorBody)."""
    document = get_openapi(title=app.title, version=app.version, routes=app.routes)
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for model in _REQUEST_MODELS:
        schemas[model.__name__] = model.model_json_schema(
            ref_template="#/components/schemas/{model}"
        )
    for path, path_item in document.get("paths", {}).items():
        for method, operation in path_item.items():
            responses = operation.get("responses", {})
            responses.pop("422", None)
            if method == "get" and path != "/healthz":  # rota.api.shares
                responses.setdefault("429", _TOO_MANY_READS)
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    return document


#: Every read may be refused when its identity is over its share (rota.api.shares).
_TOO_MANY_READS = {
    "description": "This identity has too many reads in flight or started too many this "
    "second; Retry-After says when to try again.",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
}


def _version() -> str:
    try:
        return metadata.version("rota")
    except metadata.PackageNotFoundError:
        return "0.0.0"
