"""Schedules at the API's edge: request and response models, and requests turned into specs.

Like the job models, requests are strict and document their rules; the domain's ScheduleSpec
and Rule still decide what a valid schedule is, and their refusals are reported under the
API's field names (``every_seconds``, ``jitter_seconds``, ``grace_seconds``).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Literal
from zoneinfo import available_timezones

from pydantic import BaseModel, ConfigDict, Field

from rota.api.errors import ApiError, quote_input
from rota.api.schemas import (
    NOT_FOR_SCHEDULES,
    ErrorBody,
    JobCreate,
    JsonInt,
    RequestBody,
    StateName,
    errors,
)
from rota.client import Client
from rota.domain.errors import InvalidSchedule, StateConflict
from rota.domain.job import MAX_ATTEMPTS_LIMIT, MAX_PRIORITY, MIN_PRIORITY
from rota.domain.names import MAX_NAME_LENGTH, NAME_PATTERN
from rota.domain.schedule import (
    MAX_GRACE,
    MAX_INTERVAL,
    MAX_JITTER,
    MAX_MISFIRE_LIMIT,
    MIN_INTERVAL,
    Misfire,
    Overlap,
    Rule,
    ScheduleSpec,
)
from rota.domain.schedule_cron import MAX_CRON_LENGTH, MAX_TIMEZONE_LENGTH
from rota.domain.schedule_state import Schedule, schedule_fields
from rota.operator import Operator

#: How many upcoming runs each schedule shows.
PREVIEW = 5
#: The API's names for ScheduleSpec and Rule fields it receives under another name.
API_FIELD_NAMES = {
    "every": "every_seconds",
    "jitter": "jitter_seconds",
    "grace": "grace_seconds",
    "rule": "cron",
}
#: Names tried for a schedule made from POST /api/jobs with every_seconds: "<base>",
#: "<base>-2", ... up to this suffix.
MAX_NAME_SUFFIX = 100

_NAME_SCHEMA: dict[str, Any] = {
    "pattern": f"^{NAME_PATTERN.pattern}$",
    "minLength": 1,
    "maxLength": MAX_NAME_LENGTH,
}

MisfireName = Literal["latest", "skip", "all"]
OverlapName = Literal["skip", "allow"]


def _zones() -> list[str]:
    """Every IANA zone a cron schedule accepts."""
    zones = []
    for zone in sorted(available_timezones()):
        try:
            Rule.cron("@daily", zone)
        except InvalidSchedule:
            continue
        zones.append(zone)
    return zones


def _one_rule(schema: dict[str, Any]) -> None:
    """The schema says what the routes check: a cron rule (with a known zone) or an interval
    (without a zone), never both or neither."""
    schema["properties"]["timezone"]["anyOf"][0]["enum"] = _zones()
    schema["oneOf"] = [
        {
            "title": "cron",
            "required": ["cron"],
            "properties": {"cron": {"type": "string"}, "every_seconds": {"type": "null"}},
        },
        {
            "title": "interval",
            "required": ["every_seconds"],
            "properties": {
                "every_seconds": {"type": "number"},
                "cron": {"type": "null"},
                "timezone": {"type": "null"},
            },
        },
    ]


class ScheduleEdit(RequestBody):
    """POST /api/schedules/{name}/edit: a schedule's whole new definition (what is left out
    takes its default, as on creation). Give ``cron`` or ``every_seconds``."""

    model_config = ConfigDict(json_schema_extra=_one_rule)

    kind: str = Field(description="The kind of job each run is.", json_schema_extra=_NAME_SCHEMA)
    cron: str | None = Field(
        default=None,
        description="5-field cron expression, or @hourly, @daily, @weekly, @monthly, @yearly.",
        json_schema_extra={
            "minLength": 1,
            "maxLength": MAX_CRON_LENGTH,
            "pattern": r"^\s*(?:@[A-Za-z]+|[0-9A-Za-z*/,#-]+(?:\s+[0-9A-Za-z*/,#-]+){4})\s*$",
        },
    )
    every_seconds: float | None = Field(
        default=None,
        description="An interval instead of cron (absolute time, DST or not).",
        json_schema_extra={
            "minimum": MIN_INTERVAL.total_seconds(),
            "maximum": MAX_INTERVAL.total_seconds(),
        },
    )
    timezone: str | None = Field(
        default=None,
        description="IANA zone the cron expression reads; default UTC.",
        json_schema_extra={"minLength": 1, "maxLength": MAX_TIMEZONE_LENGTH},
    )
    payload: Any = Field(default=None, description="Every run's payload; omitted means {}.")
    queue: str | None = Field(default=None, json_schema_extra=_NAME_SCHEMA)
    priority: JsonInt | None = Field(
        default=None, json_schema_extra={"minimum": MIN_PRIORITY, "maximum": MAX_PRIORITY}
    )
    tenant: str | None = Field(default=None, json_schema_extra=_NAME_SCHEMA)
    max_attempts: JsonInt | None = Field(
        default=None, json_schema_extra={"minimum": 1, "maximum": MAX_ATTEMPTS_LIMIT}
    )
    jitter_seconds: float | None = Field(
        default=None,
        description="Delay every run by a fixed offset below this, derived from the name.",
        json_schema_extra={"minimum": 0, "maximum": MAX_JITTER.total_seconds()},
    )
    misfire: MisfireName | None = Field(
        default=None, description="Missed runs: latest (default), skip, or all."
    )
    misfire_limit: JsonInt | None = Field(
        default=None, json_schema_extra={"minimum": 1, "maximum": MAX_MISFIRE_LIMIT}
    )
    grace_seconds: float | None = Field(
        default=None,
        description="How late a run may start under misfire=skip.",
        json_schema_extra={"minimum": 0, "maximum": MAX_GRACE.total_seconds()},
    )
    overlap: OverlapName | None = Field(
        default=None, description="While the previous run is active: skip (default) or allow."
    )


class ScheduleCreate(ScheduleEdit):
    """POST /api/schedules: a recurring schedule. Give ``cron`` or ``every_seconds``."""

    name: str = Field(description="Unique name of the schedule.", json_schema_extra=_NAME_SCHEMA)

    @classmethod
    def named(cls, name: str, edit: ScheduleEdit) -> ScheduleCreate:
        """The definition ``edit`` (already validated) under ``name``."""
        return cls.model_construct(name=name, **dict(edit))


class ScheduleOut(BaseModel):
    """A schedule: its definition, its next nominal runs, and its last run's outcome."""

    name: str
    kind: str
    queue: str
    priority: int
    tenant: str | None
    max_attempts: int
    payload: Any
    every_seconds: float | None
    cron: str | None
    timezone: str
    description: str
    jitter_seconds: float
    misfire: MisfireName
    misfire_limit: int
    grace_seconds: float
    overlap: OverlapName
    #: Each slot writes a whole workflow, built by code on the App (``kind`` is then the
    #: schedule's name); run now needs the process that defines it.
    workflow: bool = False
    paused: bool
    #: What resuming does with the slots that fall due while paused (set by the last pause).
    missed: Literal["queue", "drop"]
    next_run_at: datetime
    #: next_run_at plus the jitter offset: when the next run is enqueued.
    due_at: datetime
    next_runs: list[datetime]
    last_run_at: datetime | None
    last_job_id: int | None
    #: The state of the last run's job (None before the first run, or once it was pruned).
    last_outcome: StateName | None
    created_at: datetime
    updated_at: datetime


class ScheduleList(BaseModel):
    """One page of schedules; pass ``next_cursor`` back to read the next page."""

    now: datetime
    schedules: list[ScheduleOut]
    next_cursor: str | None


def schedule_out(schedule: Schedule) -> ScheduleOut:
    return ScheduleOut(**schedule_fields(schedule, upcoming=PREVIEW))


def schedule_errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the refusals of a schedule route."""
    documented = errors(*codes)
    texts = {404: "No such schedule.", 409: "A schedule of that name already exists."}
    for code, text in texts.items():
        if code in documented:
            documented[code] = {"model": ErrorBody, "description": text}
    return documented


def invalid(error: InvalidSchedule) -> ApiError:
    """The 400 for a refused definition, naming the field as the API spells it."""
    field = API_FIELD_NAMES.get(error.field, error.field)
    return ApiError(400, f"{field}: {quote_input(error.reason, 300)}")


def spec_from_body(client: Client, body: ScheduleCreate) -> ScheduleSpec:
    """The ScheduleSpec ``body`` asks for, with the kind's defaults; ApiError(400) otherwise."""
    body.check_bounds()
    if (body.cron is None) == (body.every_seconds is None):
        raise ApiError(400, "cron: give cron or every_seconds (one of them)")
    if body.every_seconds is not None and body.timezone is not None:
        raise ApiError(400, "timezone: applies only to cron schedules")
    defaults = client.spec(body.kind)  # InvalidJob naming "kind" for a bad kind
    try:
        if body.every_seconds is not None:
            rule = Rule.every(_seconds("every_seconds", body.every_seconds))
        else:
            assert body.cron is not None
            rule = Rule.cron(body.cron, "UTC" if body.timezone is None else body.timezone)
        return ScheduleSpec(
            name=body.name,
            kind=body.kind,
            rule=rule,
            payload={} if body.payload is None else body.payload,
            queue=defaults.queue if body.queue is None else body.queue,
            priority=defaults.priority if body.priority is None else body.priority,
            tenant=body.tenant,
            max_attempts=defaults.max_attempts if body.max_attempts is None else body.max_attempts,
            jitter=_seconds("jitter_seconds", body.jitter_seconds or 0),
            misfire=Misfire(body.misfire or Misfire.LATEST),
            misfire_limit=100 if body.misfire_limit is None else body.misfire_limit,
            grace=(
                timedelta(minutes=1)
                if body.grace_seconds is None
                else _seconds("grace_seconds", body.grace_seconds)
            ),
            overlap=Overlap(body.overlap or Overlap.SKIP),
        )
    except InvalidSchedule as error:
        raise invalid(error) from None


def _seconds(field: str, value: float) -> timedelta:
    """``value`` seconds, already checked near its bounds (``RequestBody.check_bounds``: no
    value outside rounds into them); the domain checks the bounds themselves."""
    try:
        return timedelta(seconds=value)
    except (OverflowError, ValueError):
        raise ApiError(400, f"{field}: is out of range") from None


# ---------------------------------------------------------------- POST /api/jobs every_seconds


async def create_every_schedule(client: Client, body: JobCreate, operator: Operator) -> ScheduleOut:
    """POST /api/jobs with ``every_seconds``: a schedule running ``kind`` on that interval,
    first run now. Named after the kind and interval (``email-every-10s``), with ``-2``,
    ``-3``... when the name is taken; 409 when every candidate is."""
    for field in NOT_FOR_SCHEDULES:
        if getattr(body, field) is not None:
            raise ApiError(400, f"{field}: cannot be combined with every_seconds")
    assert body.every_seconds is not None
    # Built from fields JobCreate already validated; the name is chosen below.
    request = ScheduleCreate.model_construct(
        name="placeholder",
        kind=body.kind,
        every_seconds=body.every_seconds,
        payload=body.payload,
        queue=body.queue,
        priority=body.priority,
        tenant=body.tenant,
        max_attempts=body.max_attempts,
    )
    spec = spec_from_body(client, request)
    base = f"{body.kind[: MAX_NAME_LENGTH - 40]}-every-{_seconds_text(body.every_seconds)}s"
    for suffix in range(1, MAX_NAME_SUFFIX + 1):
        name = base if suffix == 1 else f"{base}-{suffix}"
        try:
            created = await operator.create_schedule(replace(spec, name=name))
        except StateConflict:
            continue
        return schedule_out(created)
    raise ApiError(409, f"schedules {base} to {base}-{MAX_NAME_SUFFIX} all exist")


def _seconds_text(seconds: float) -> str:
    """``10``, ``2.5``: digits and at most one dot, so the name stays a valid name."""
    return f"{seconds:.6f}".rstrip("0").rstrip(".")
