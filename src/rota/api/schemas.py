"""The API's request models and what every route shares: strict bodies, refusals' bodies and
the OpenAPI entries of those refusals.

Requests are strict (no type coercion, unknown fields refused); the domain's JobSpec still
decides what a valid job is, so these models document the rules (pattern, ranges) and the
domain enforces them with messages naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from annotated_types import Ge, Le
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from rota.api.errors import ApiError
from rota.domain.job import (
    MAX_ATTEMPTS_LIMIT,
    MAX_DELAY,
    MAX_PRIORITY,
    MAX_UNIQUE_KEY_LENGTH,
    MIN_PRIORITY,
)
from rota.domain.names import (
    INSTANT_PATTERN,
    MAX_INSTANT_LENGTH,
    MAX_NAME_LENGTH,
    NAME_PATTERN,
    SAFE_YEARS_PATTERN,
)
from rota.domain.schedule import MAX_INTERVAL, MIN_INTERVAL
from rota.domain.workflow import MAX_PARENTS

#: JobState's values, spelled out so the schema can enumerate them (a test pins the match).
StateName = Literal["waiting", "pending", "running", "succeeded", "dead", "cancelled", "held"]
#: What a search term may contain: no control characters, no lone surrogates.
SEARCH_PATTERN = r"^[^\x00-\x1f\x7f\ud800-\udfff]*$"
#: The longest search term and cursor the API reads.
MAX_SEARCH_LENGTH = MAX_UNIQUE_KEY_LENGTH
MAX_CURSOR_LENGTH = 64

_NAME_SCHEMA: dict[str, Any] = {
    "pattern": f"^{NAME_PATTERN.pattern}$",
    "minLength": 1,
    "maxLength": MAX_NAME_LENGTH,
}


def _name(description: str) -> Any:
    return Field(default=None, description=description, json_schema_extra=_NAME_SCHEMA)


def _integral(value: object) -> object:
    """JSON Schema counts 5.0 as an integer; so does the API (5.5 is still refused)."""
    if type(value) is float and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value


#: An integer field of a request: an int, or a float with no fraction.
JsonInt = Annotated[int, BeforeValidator(_integral)]


#: A job id in a request body: a positive bigint.
JobIdInt = Annotated[int, Ge(1), Le(2**63 - 1), BeforeValidator(_integral)]


def check_near_bounds(name: str, value: float, low: object, high: object) -> None:
    """Refuse ``value`` (field ``name``) when it lies outside ``low``..``high`` (either may be
    None) by less than a microsecond, compared as sent: converted to a duration first,
    3153600000.0000005 s would round to exactly 100 years, and -1e-83 s to 0, and pass the
    domain's own check. Anything further out is left to the domain and its own message."""
    if isinstance(low, int | float) and low - 1e-6 < value < low:
        raise ApiError(400, f"{name}: must be at least {low:g}")
    if isinstance(high, int | float) and high < value < high + 1e-6:
        raise ApiError(400, f"{name}: must be at most {high:g}")


class RequestBody(BaseModel):
    """A request body: strict (no coercion, no unknown field, no NaN or infinity)."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    def check_bounds(self) -> None:
        """``check_near_bounds`` on every number against the ``minimum``/``maximum`` its
        field's schema states."""
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            extra = info.json_schema_extra
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if number and isinstance(extra, dict):
                check_near_bounds(name, value, extra.get("minimum"), extra.get("maximum"))


#: Holding a key over time and replacing its holder need a unique_key to hold.
_NEEDS_UNIQUE_KEY: list[Any] = [
    {
        "if": {"required": [field], "properties": {field: condition}},
        "then": {"required": ["unique_key"], "properties": {"unique_key": {"type": "string"}}},
    }
    for field, condition in (
        ("unique_for_seconds", {"type": "number"}),
        ("unique_states", {"type": "array"}),
        ("on_conflict", {"const": "replace"}),
    )
]


#: JobCreate fields that mean nothing for a schedule made with every_seconds: a schedule has no
#: delay, run_at, key, timeout, expiry or parents.
NOT_FOR_SCHEDULES = (
    "delay_seconds",
    "run_at",
    "unique_key",
    "timeout_seconds",
    "expires_at",
    "expire_after_seconds",
    "unique_for_seconds",
    "unique_states",
    "on_conflict",
    "depends_on",
)


class JobCreate(RequestBody):
    """POST /api/jobs: a job to enqueue. Omitted fields take the kind's defaults."""

    model_config = ConfigDict(
        json_schema_extra={
            # What the route checks, said in the schema: run_at or delay_seconds, not both;
            # every_seconds makes a schedule, which has no delay, run_at, key or timeout.
            "allOf": [
                {
                    "not": {
                        "required": ["run_at", "delay_seconds"],
                        "properties": {
                            "run_at": {"type": "string"},
                            "delay_seconds": {"type": "number"},
                        },
                    }
                },
                *_NEEDS_UNIQUE_KEY,
                {
                    "not": {
                        "required": ["expires_at", "expire_after_seconds"],
                        "properties": {
                            "expires_at": {"type": "string"},
                            "expire_after_seconds": {"type": "number"},
                        },
                    }
                },
                {
                    "if": {
                        "required": ["every_seconds"],
                        "properties": {"every_seconds": {"type": "number"}},
                    },
                    "then": {
                        "properties": {field: {"type": "null"} for field in NOT_FOR_SCHEDULES}
                    },
                },
                {
                    "if": {
                        "required": ["on_parent_failure"],
                        "properties": {"on_parent_failure": {"type": "string"}},
                    },
                    "then": {
                        "required": ["depends_on"],
                        "properties": {"depends_on": {"type": "array"}},
                    },
                },
                {
                    # A dependent job is not deduplicated: no unique key with parents.
                    "not": {
                        "required": ["depends_on", "unique_key"],
                        "properties": {
                            "depends_on": {"type": "array"},
                            "unique_key": {"type": "string"},
                        },
                    }
                },
            ]
        }
    )

    kind: str = Field(description="What the job does.", json_schema_extra=_NAME_SCHEMA)
    payload: Any = Field(
        default=None,
        description="Any JSON value of at most 1 MiB and 64 levels, without NUL characters or "
        "lone surrogates in its text; omitted means {}.",
    )
    delay_seconds: float | None = Field(
        default=None,
        description="Due this many seconds from now (>= 0, at most 100 years).",
        json_schema_extra={"minimum": 0, "maximum": MAX_DELAY.total_seconds()},
    )
    run_at: str | None = Field(
        default=None,
        description="Due at this ISO 8601 instant; an explicit UTC offset is required.",
        json_schema_extra={
            "format": "date-time",
            "pattern": "^" + SAFE_YEARS_PATTERN + INSTANT_PATTERN.pattern[len("[0-9]{4}") :] + "$",
            "maxLength": MAX_INSTANT_LENGTH,
        },
    )
    expires_at: str | None = Field(
        default=None,
        description="Never start the job at or after this ISO 8601 instant (an explicit UTC "
        'offset): if it is still waiting then, it ends cancelled with last_error "expired".',
        json_schema_extra={
            "format": "date-time",
            "pattern": "^" + SAFE_YEARS_PATTERN + INSTANT_PATTERN.pattern[len("[0-9]{4}") :] + "$",
            "maxLength": MAX_INSTANT_LENGTH,
        },
    )
    expire_after_seconds: float | None = Field(
        default=None,
        description="Like expires_at, this many seconds from now (one microsecond to 100 years).",
        json_schema_extra={"minimum": 1e-6, "maximum": MAX_DELAY.total_seconds()},
    )
    unique_for_seconds: float | None = Field(
        default=None,
        description="Hold unique_key for this many seconds from this enqueue, also in the "
        "states of unique_states (by default pending, running and succeeded).",
        json_schema_extra={"minimum": 1e-6, "maximum": MAX_DELAY.total_seconds()},
    )
    unique_states: list[StateName] | None = Field(
        default=None,
        description="The states in which a job holds unique_key (pending and running always); "
        "without unique_for_seconds, for good.",
    )
    on_conflict: Literal["skip", "replace"] | None = Field(
        default=None,
        description='"replace": a job still pending that holds unique_key takes this payload '
        "and run_at (200, replaced) instead of only being reported.",
    )
    every_seconds: float | None = Field(
        default=None,
        description="Repeat on this interval (creates a schedule).",
        json_schema_extra={
            "minimum": MIN_INTERVAL.total_seconds(),
            "maximum": MAX_INTERVAL.total_seconds(),
        },
    )
    max_attempts: JsonInt | None = Field(
        default=None, json_schema_extra={"minimum": 1, "maximum": MAX_ATTEMPTS_LIMIT}
    )
    priority: JsonInt | None = Field(
        default=None,
        description="Higher runs first.",
        json_schema_extra={"minimum": MIN_PRIORITY, "maximum": MAX_PRIORITY},
    )
    queue: str | None = _name("The lane the job waits in.")
    tenant: str | None = _name("Whose work this is.")
    unique_key: str | None = Field(
        default=None,
        description="While an active job holds this key, enqueue returns that job instead; "
        "no control characters.",
        json_schema_extra={
            "minLength": 1,
            "maxLength": MAX_UNIQUE_KEY_LENGTH,
            "pattern": SEARCH_PATTERN.replace("*", "+"),
        },
    )
    timeout_seconds: float | None = Field(
        default=None,
        description="Stop the handler after this long (one microsecond to 100 years).",
        json_schema_extra={"minimum": 1e-6, "maximum": MAX_DELAY.total_seconds()},
    )
    depends_on: list[JobIdInt] | None = Field(
        default=None,
        description="Ids of existing jobs this one runs after: it waits (state waiting) "
        "until every one of them succeeded. An unknown id is refused (404); nothing is "
        "written then.",
        min_length=1,
        max_length=MAX_PARENTS,
    )
    on_parent_failure: Literal["cancel", "run"] | None = Field(
        default=None,
        description="When a parent ends dead or cancelled: cancel this job (the default) or "
        "run it anyway. Only with depends_on.",
    )


def _instant_or_now(schema: dict[str, Any]) -> None:
    """The schema of a run_at that may also be "now": the instant's (as JobCreate.run_at)
    or that word."""
    schema.pop("type", None)
    schema["anyOf"] = [
        {"type": "string", "enum": ["now"]},
        {
            "type": "string",
            "format": "date-time",
            "pattern": "^" + SAFE_YEARS_PATTERN + INSTANT_PATTERN.pattern[len("[0-9]{4}") :] + "$",
            "maxLength": MAX_INSTANT_LENGTH,
        },
    ]


class JobReschedule(RequestBody):
    """POST /api/jobs/{job_id}/reschedule: what to change on a pending job; omitted fields
    are kept, and at least one is given."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    run_at: str = Field(
        default=None,  # type: ignore[assignment]  # omitted: kept (null is refused)
        description='Due at this ISO 8601 instant (an explicit UTC offset), or "now".',
        json_schema_extra=_instant_or_now,
    )
    priority: JsonInt = Field(
        default=None,  # type: ignore[assignment]
        description="Higher runs first.",
        json_schema_extra={"minimum": MIN_PRIORITY, "maximum": MAX_PRIORITY},
    )
    queue: str = Field(
        default=None,  # type: ignore[assignment]
        description="Move the job to this queue.",
        json_schema_extra=_NAME_SCHEMA,
    )


class JobFilterBody(RequestBody):
    """Which jobs a bulk action covers; omitted fields do not filter."""

    state: list[StateName] | None = None
    kind: str | None = _name("Only jobs of this kind.")
    queue: str | None = _name("Only jobs in this queue.")
    tenant: str | None = _name("Only this tenant's jobs.")
    schedule: str | None = _name("Only the jobs this schedule enqueued.")
    workflow: JobIdInt | None = Field(
        default=None, description="Only the jobs of this workflow (its first job's id)."
    )
    q: str | None = Field(
        default=None,
        description="A job id or an exact unique key.",
        json_schema_extra={"maxLength": MAX_SEARCH_LENGTH, "pattern": SEARCH_PATTERN},
    )


class Health(BaseModel):
    ok: bool


class ErrorBody(BaseModel):
    """Every refusal: a message naming what was wrong."""

    error: str


_ERROR_TEXT = {
    400: "Invalid input; the message names the field.",
    401: "Authentication required.",
    403: "Refused: read-only mode or a cross-origin request.",
    404: "No such job (or schedule, or workflow).",
    409: "The job's state does not allow this.",
    413: "Request body too large.",
    415: "Content-Type must be application/json.",
    503: "The job store is unavailable; retry after Retry-After seconds.",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the refusals a route can give (every one is ErrorBody JSON)."""
    return {code: {"model": ErrorBody, "description": _ERROR_TEXT[code]} for code in codes}
