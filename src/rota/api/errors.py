"""How the API says no: ApiError, and the handlers that turn every failure into JSON.

Every 4xx and 5xx body is ``{"error": "<message>"}``. Messages never carry secrets: a
StoreUnavailable's own text (which may name a database URL) is logged without being echoed,
and text taken from the request is cut short and made encodable before it is repeated.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from rota.domain.errors import (
    InvalidInput,
    InvalidJob,
    MigrationsPending,
    NotFound,
    StateConflict,
    StoreUnavailable,
)

log = logging.getLogger("rota.api")

#: The API's names for JobSpec fields that it receives under another name.
API_FIELD_NAMES = {
    "delay": "delay_seconds",
    "timeout": "timeout_seconds",
    "expire_after": "expire_after_seconds",
    "unique_for": "unique_for_seconds",
}
STORE_RETRY_AFTER_SECONDS = 5


class ApiError(Exception):
    """A refusal with an HTTP status and a message safe to show to the caller."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


def quote_input(text: str, limit: int = 64) -> str:
    """Request-supplied ``text`` cut to ``limit`` characters and safe to encode as UTF-8."""
    cut = text if len(text) <= limit else text[:limit] + "..."
    return cut.encode("utf-8", "backslashreplace").decode("utf-8")


def error_response(
    status: int, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=dict(headers or {}))


def describe_validation(errors: Iterable[Mapping[str, Any]]) -> str:
    """One line naming the first offending field of a pydantic / FastAPI validation failure."""
    for error in errors:
        loc = [str(part) for part in error.get("loc", ()) if part not in ("body", "query", "path")]
        field = quote_input(".".join(loc)) if loc else "request"
        if error.get("type") == "extra_forbidden":
            return f"{field}: unknown field"
        if error.get("type") == "missing":
            return f"{field}: is required"
        return f"{field}: {error.get('msg', 'is invalid')}"
    return "request is invalid"


def job_error_message(error: InvalidJob) -> str:
    return f"{API_FIELD_NAMES.get(error.field, error.field)}: {error.reason}"


def allowed_methods(app: FastAPI, scope: Mapping[str, Any]) -> list[str]:
    """Every method some route serves at the request's path (HEAD wherever GET is), sorted."""
    # A path the API documents as it is (``/api/jobs/count``) allows what it documents: a
    # route with a parameter there (``DELETE /api/jobs/{job_id}``) only matches it by accident.
    documented = app.openapi().get("paths", {}).get(scope.get("path"))
    if documented is not None:
        methods = {method.upper() for method in documented}
    else:
        methods = {
            method
            for method in ("GET", "POST", "PUT", "PATCH", "DELETE")
            if any(
                route.matches({**scope, "method": method})[0] is Match.FULL
                for route in app.router.routes
            )
        }
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


def install_error_handlers(app: FastAPI) -> None:
    """Map domain errors and framework refusals to JSON statuses; nothing surfaces as a trace."""

    async def on_api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return error_response(exc.status, exc.message, exc.headers)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        messages = {404: "not found", 405: "method not allowed"}
        message = messages.get(exc.status_code) or str(exc.detail)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Starlette names only the first route that matched the path; a path served by a
            # GET and a POST route allows both.
            headers["Allow"] = ", ".join(allowed_methods(request.app, request.scope))
        return error_response(exc.status_code, message, headers)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError | ValidationError)
        return error_response(400, describe_validation(exc.errors()))

    async def on_invalid(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, InvalidJob):
            return error_response(400, job_error_message(exc))
        return error_response(400, quote_input(str(exc), 300))

    async def on_not_found(request: Request, exc: Exception) -> JSONResponse:
        return error_response(404, quote_input(str(exc), 300))

    async def on_conflict(request: Request, exc: Exception) -> JSONResponse:
        return error_response(409, quote_input(str(exc), 600))

    async def on_unavailable(request: Request, exc: Exception) -> JSONResponse:
        # The store's message may name the database URL: log the type only, echo nothing.
        log.warning("store unavailable (%s) serving %s", type(exc).__name__, request.url.path)
        if isinstance(exc, MigrationsPending):
            return error_response(
                503,
                "the database schema is out of date: run `rota migrate`",
                {"Retry-After": str(STORE_RETRY_AFTER_SECONDS)},
            )
        return error_response(
            503,
            "the job store is unavailable; retry later",
            {"Retry-After": str(STORE_RETRY_AFTER_SECONDS)},
        )

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        # A bug, not an input problem: the server logs the traceback; the caller learns nothing
        # about internals (an exception's text may hold connection details).
        return error_response(500, "internal error")

    app.add_exception_handler(Exception, on_unexpected)
    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(ValidationError, on_validation)
    app.add_exception_handler(InvalidInput, on_invalid)
    app.add_exception_handler(NotFound, on_not_found)
    app.add_exception_handler(StateConflict, on_conflict)
    app.add_exception_handler(StoreUnavailable, on_unavailable)
    app.add_exception_handler(MigrationsPending, on_unavailable)
