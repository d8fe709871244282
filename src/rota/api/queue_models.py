"""Flow control at the API's edge: queue, limit and tenant models, and limit requests turned
into domain Limits.

Like the job and schedule models, requests are strict and document their rules; the domain's
Limit still decides what a valid limit is, and the combinations it refuses are reported here
under the API's field names (``period_seconds``) before it is built.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rota.api.errors import ApiError, quote_input
from rota.api.schemas import ErrorBody, JsonInt, errors
from rota.client import QueueStatus
from rota.domain.errors import InvalidInput, InvalidJob
from rota.domain.flow import (
    EVERY_TENANT,
    MAX_CONCURRENCY,
    MAX_PERIOD,
    MAX_RATE,
    MIN_PERIOD,
    Limit,
    LimitScope,
)
from rota.domain.job_state import JobState
from rota.domain.names import MAX_NAME_LENGTH, NAME_PATTERN, validate_name
from rota.store.records import LimitInfo

#: LimitScope's values, spelled out so the schema can enumerate them.
ScopeName = Literal["queue", "kind", "tenant"]
#: A limit's key: a queue, kind or tenant name, or ``*`` (every tenant, each on its own).
KEY_PATTERN = rf"^(?:{NAME_PATTERN.pattern}|\*)$"

_KEY_SCHEMA: dict[str, Any] = {
    "pattern": KEY_PATTERN,
    "minLength": 1,
    "maxLength": MAX_NAME_LENGTH,
}


class LimitCreate(BaseModel):
    """POST /api/limits: add or replace the limit on one queue, kind or tenant. Give a
    ``concurrency``, a ``rate`` with ``period_seconds``, or both (rates: kinds and tenants)."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        allow_inf_nan=False,
        json_schema_extra={
            # What limit_from_body checks, said in the schema: a concurrency and/or a rate
            # with its period; rates and ``*`` only where they apply.
            "anyOf": [
                {"required": ["concurrency"], "properties": {"concurrency": {"type": "integer"}}},
                {
                    "required": ["rate", "period_seconds"],
                    "properties": {
                        "rate": {"type": "integer"},
                        "period_seconds": {"type": "number"},
                    },
                },
            ],
            "allOf": [
                {
                    "if": {"properties": {"rate": {"type": "null"}}},
                    "then": {"properties": {"period_seconds": {"type": "null"}}},
                    "else": {
                        "required": ["period_seconds"],
                        "properties": {"period_seconds": {"type": "number"}},
                    },
                },
                {
                    "if": {"properties": {"scope": {"const": "queue"}}, "required": ["scope"]},
                    "then": {"properties": {"rate": {"type": "null"}}},
                },
                {
                    "if": {"properties": {"scope": {"not": {"const": "tenant"}}}},
                    "then": {"properties": {"key": {"pattern": f"^{NAME_PATTERN.pattern}$"}}},
                },
            ],
        },
    )

    scope: ScopeName = Field(description="What the limit counts: a queue, a kind or a tenant.")
    key: str = Field(
        description="The queue, kind or tenant name; for tenants, * limits each one separately.",
        json_schema_extra=_KEY_SCHEMA,
    )
    concurrency: JsonInt | None = Field(
        default=None,
        description="At most this many jobs running at once across every worker (0 holds all).",
        json_schema_extra={"minimum": 0, "maximum": MAX_CONCURRENCY},
    )
    rate: JsonInt | None = Field(
        default=None,
        description="At most this many starts per period_seconds.",
        json_schema_extra={"minimum": 1, "maximum": MAX_RATE},
    )
    period_seconds: float | None = Field(
        default=None,
        description="The rate's sliding period.",
        json_schema_extra={
            "minimum": MIN_PERIOD.total_seconds(),
            "maximum": MAX_PERIOD.total_seconds(),
        },
    )


class LimitOut(BaseModel):
    """A limit and its use now: running jobs with a live lease and starts in the current
    period (for the ``*`` tenant limit, summed over every tenant)."""

    scope: ScopeName
    key: str
    concurrency: int | None
    rate: int | None
    period_seconds: float | None
    running: int
    recent_starts: int


class LimitList(BaseModel):
    now: datetime
    limits: list[LimitOut]


class QueueOut(BaseModel):
    """A queue: paused or not, its jobs by state, and its concurrency limit (None without)."""

    name: str
    paused: bool
    #: When the queue was last paused or resumed (None if it never was).
    updated_at: datetime | None
    counts: dict[str, int]
    concurrency: int | None
    #: Jobs counting against the concurrency limit (running with a live lease).
    limit_running: int | None


class QueueList(BaseModel):
    """Every queue with jobs, settings or a limit; ``exact`` is False for estimated counts."""

    now: datetime
    exact: bool
    queues: list[QueueOut]


class TenantRunning(BaseModel):
    tenant: str
    running: int


class TenantRunningList(BaseModel):
    """Jobs running with a live lease per tenant, most first (tenants running none omitted)."""

    now: datetime
    tenants: list[TenantRunning]


def queue_out(queue: QueueStatus) -> QueueOut:
    return QueueOut(
        name=queue.name,
        paused=queue.paused,
        updated_at=queue.updated_at,
        counts={state.value: queue.count(state) for state in JobState},
        concurrency=queue.limit.limit.concurrency if queue.limit is not None else None,
        limit_running=queue.limit.running if queue.limit is not None else None,
    )


def limit_out(info: LimitInfo) -> LimitOut:
    limit = info.limit
    return LimitOut(
        scope=limit.scope.value,
        key=limit.key,
        concurrency=limit.concurrency,
        rate=limit.rate,
        period_seconds=limit.period.total_seconds() if limit.period is not None else None,
        running=info.running,
        recent_starts=info.recent_starts,
    )


def tenants_out(running: dict[str, int]) -> list[TenantRunning]:
    ordered = sorted(running.items(), key=lambda pair: (-pair[1], pair[0]))
    return [TenantRunning(tenant=tenant, running=count) for tenant, count in ordered]


def limit_errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the refusals of a limit route."""
    documented = errors(*codes)
    if 404 in documented:
        documented[404] = {"model": ErrorBody, "description": "No such limit."}
    return documented


def limit_key(scope: LimitScope, key: str) -> str:
    """``key`` if a limit in ``scope`` can have it; ApiError(400) naming ``key`` otherwise."""
    if scope is LimitScope.TENANT and key == EVERY_TENANT:
        return key
    try:
        validate_name(scope.value, key)
    except InvalidJob as error:
        raise ApiError(400, f"key: {error.reason}") from None
    return key


def limit_from_body(body: LimitCreate) -> Limit:
    """The Limit ``body`` asks for; ApiError(400) naming the field otherwise."""
    scope = LimitScope(body.scope)
    key = limit_key(scope, body.key)
    if body.concurrency is None and body.rate is None:
        raise ApiError(400, "concurrency: give concurrency, rate with period_seconds, or both")
    if body.concurrency is not None and not 0 <= body.concurrency <= MAX_CONCURRENCY:
        raise ApiError(400, f"concurrency: must be between 0 and {MAX_CONCURRENCY}")
    period: timedelta | None = None
    if body.rate is not None:
        if scope is LimitScope.QUEUE:
            raise ApiError(400, "rate: rates apply to kinds and tenants, not queues")
        if not 1 <= body.rate <= MAX_RATE:
            raise ApiError(400, f"rate: must be between 1 and {MAX_RATE}")
        if body.period_seconds is None:
            raise ApiError(400, "period_seconds: a rate needs a period")
    elif body.period_seconds is not None:
        raise ApiError(400, "period_seconds: a period needs a rate")
    if body.period_seconds is not None:
        period = _period(body.period_seconds)
    try:
        return Limit(scope, key, body.concurrency, body.rate, period)
    except InvalidInput as error:  # a rule the checks above do not know yet
        raise ApiError(400, quote_input(str(error), 300)) from None


def _period(seconds: float) -> timedelta:
    low, high = MIN_PERIOD.total_seconds(), MAX_PERIOD.total_seconds()
    if not math.isfinite(seconds) or not low <= seconds <= high:
        raise ApiError(400, f"period_seconds: must be between {low:g} and {high:g}")
    return timedelta(seconds=seconds)
