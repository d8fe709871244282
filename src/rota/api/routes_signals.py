"""POST /api/signals: events for durable jobs that wait for them (``ctx.wait_for``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import Field

from rota.api.body import read_json_object
from rota.api.context import ApiContext
from rota.api.durable_models import SignalOut, signal_out
from rota.api.routes_jobs import json_body
from rota.api.schemas import RequestBody, errors
from rota.domain.durable import MAX_SIGNAL_KEY_LENGTH
from rota.domain.job import MAX_DELAY
from rota.domain.names import NAME_PATTERN
from rota.domain.payload import MAX_RESULT_BYTES
from rota.verbs.signals import counted


class SignalCreate(RequestBody):
    """POST /api/signals: an event for the durable job waiting for ``key``."""

    key: str = Field(
        description="What the event is about, as the waiting job names it: letters, digits "
        "and _ . : -, starting with a letter or digit.",
        json_schema_extra={
            "pattern": f"^{NAME_PATTERN.pattern}$",
            "minLength": 1,
            "maxLength": MAX_SIGNAL_KEY_LENGTH,
        },
    )
    data: Any = Field(
        default=None,
        description=f"Any JSON value of at most {MAX_RESULT_BYTES} bytes, handed to the "
        "waiting handler; null when omitted.",
    )
    expire_after_seconds: float | None = Field(
        default=None,
        description="With no job waiting, keep the signal this long for the next wait on "
        "the key (one microsecond to 100 years; a day when omitted).",
        json_schema_extra={"minimum": 1e-6, "maximum": MAX_DELAY.total_seconds()},
    )


def signals_router(ctx: ApiContext) -> APIRouter:
    router = APIRouter(tags=["signals"])
    settings = ctx.settings

    @router.post(
        "/api/signals",
        response_model=SignalOut,
        responses=errors(400, 401, 403, 413, 415, 503),
        openapi_extra=json_body(SignalCreate),
    )
    async def send_signal(request: Request) -> SignalOut:
        """Send an event to ``key`` (a payment webhook, an approval): the job whose
        ``ctx.wait_for(key)`` began first among those waiting gets ``data``, once, and is due
        at once (``delivered_to``); with none waiting, it is kept for ``expire_after_seconds``
        (a day by default) for the next wait on the key (``expires_at``)."""
        raw = await read_json_object(
            request, max_bytes=settings.max_body_bytes, max_depth=settings.max_json_depth
        )
        body = SignalCreate.model_validate(raw)
        body.check_bounds()
        result = await ctx.operator(request).signal(
            body.key, body.data, expire_after=body.expire_after_seconds
        )
        return signal_out(counted(ctx.metrics, result))

    return router
