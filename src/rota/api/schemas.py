"""The API's request and response models: what /openapi.json documents for every route.

Requests are strict (no type coercion, unknown fields refused); the domain's JobSpec still
decides what a valid job is, so these models document the rules (pattern, ranges) and the
domain enforces them with messages naming the field.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from annotated_types import Ge, Le
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from rota.api.durable_models import StepOut, SuspensionOut
from rota.api.errors import ApiError
from rota.domain import blame
from rota.domain.job import (
    MAX_ATTEMPTS_LIMIT,
    MAX_DELAY,
    MAX_PRIORITY,
    MAX_UNIQUE_KEY_LENGTH,
    MIN_PRIORITY,
    Attempt,
    Job,
)
from rota.domain.names import (
    INSTANT_PATTERN,
    MAX_INSTANT_LENGTH,
    MAX_NAME_LENGTH,
    NAME_PATTERN,
    SAFE_YEARS_PATTERN,
)
from rota.domain.payload import (
    MAX_PROGRESS_MESSAGE_LENGTH,
    MAX_RESULT_BYTES,
    PREVIEW_BYTES,
    Preview,
    payload_text,
    preview,
)
from rota.domain.schedule import MAX_INTERVAL, MIN_INTERVAL
from rota.domain.workflow import MAX_PARENTS
from rota.store.records import ThroughputBucket, WorkerInfo

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


class JobFields(BaseModel):
    """What a job's detail and a list both show; instants are ISO 8601 in UTC."""

    id: int
    kind: str
    queue: str
    state: StateName
    priority: int
    run_at: datetime
    attempt: int
    max_attempts: int
    tenant: str | None
    unique_key: str | None
    worker: str | None
    lease_until: datetime | None
    lease_token: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    schedule: str | None
    slot_at: datetime | None
    timeout_seconds: float | None
    #: No attempt starts at or after this instant (null: the job never expires).
    expires_at: datetime | None = None
    #: Expired leases under which its handler had started; above 0 it is a crash suspect.
    crashes: int
    #: Why the job is a crash suspect and when it runs alone, or null.
    quarantine: str | None
    progress: float | None = Field(
        description="How far the running attempt said it is, from 0 to 1 (as of its last "
        "heartbeat); null before it reports, and cleared when an attempt starts.",
        json_schema_extra={"minimum": 0, "maximum": 1},
    )
    progress_message: str | None = Field(
        description=f"The message of that report, at most {MAX_PROGRESS_MESSAGE_LENGTH} "
        "characters.",
    )
    workflow: int | None = Field(
        description="The workflow the job belongs to (GET /api/workflows/{id}); null outside "
        "workflows."
    )
    waiting_on: int = Field(
        description="How many of its parents it still waits for (a waiting job runs at 0)."
    )
    heartbeats: int = Field(
        default=0,
        description="Heartbeats that renewed the lease of its latest attempt (0 since its "
        "last claim until the first).",
    )
    last_heartbeat_at: datetime | None = Field(
        default=None,
        description="The store's instant of the latest attempt's last heartbeat; null before "
        "its first.",
    )


class JobOut(JobFields):
    """A job as the API shows it, with its whole payload, last error and result."""

    last_error: str | None
    payload: Any
    result: Any = Field(
        description="What the handler returned (any JSON value up to the worker's cap, "
        f"16 MiB by default; over {MAX_RESULT_BYTES} bytes it is stored apart from the "
        "job's row), kept with a succeeded job; null when it returned nothing, and for jobs "
        "that did not succeed."
    )


#: rota.domain.blockers.Blocked's values, spelled out so the schema can enumerate them.
BlockedName = Literal[
    "held",
    "waiting_on_parents",
    "not_due",
    "queue_paused",
    "queue_limit",
    "kind_limit",
    "tenant_limit",
    "kind_rate",
    "tenant_rate",
    "no_worker",
    "no_worker_for_kind",
]


class BlockerOut(BaseModel):
    """One reason a waiting or pending job is not running, as of the response's ``now``."""

    reason: BlockedName
    message: str
    certain: bool = Field(
        description="False when it may not apply to this job alone (a rate limit on every "
        "tenant is counted across all of them)."
    )


def _blocked_by() -> Any:
    return Field(
        default_factory=list,
        description="Why a waiting or pending job is not running (queue paused, a limit "
        "full, not due, parents unfinished, no live worker for its queue); empty for a due "
        "job that only waits for a free worker slot, and for jobs in other states.",
    )


class JobSummary(JobFields):
    """A job in a list: bounded previews of its payload (JSON text) and last error, each with
    a flag saying it was cut; ``GET /api/jobs/{id}`` has the whole values."""

    blocked_by: list[BlockerOut] = _blocked_by()

    payload_preview: str = Field(
        description=f"At most {PREVIEW_BYTES} bytes of the payload's JSON."
    )
    payload_truncated: bool
    last_error_preview: str | None = Field(description=f"At most {PREVIEW_BYTES} bytes.")
    last_error_truncated: bool
    result_preview: str | None = Field(
        description=f"At most {PREVIEW_BYTES} bytes of the result's JSON; null without one."
    )
    result_truncated: bool


class JobCreated(JobOut):
    """The enqueued job; ``duplicate`` means a job already held the unique key (200), and
    ``replaced`` that it took this payload and run_at (``on_conflict: "replace"``)."""

    duplicate: bool
    replaced: bool = False


class AttemptOut(BaseModel):
    attempt: int
    token: int
    worker: str | None
    started_at: datetime
    finished_at: datetime | None
    outcome: str
    error: str | None
    traceback: str | None
    heartbeats: int = Field(
        default=0,
        description="Heartbeats that renewed this attempt's lease (so far, while it runs).",
    )
    last_heartbeat_at: datetime | None = Field(
        default=None,
        description="The store's instant of its last heartbeat; null when none came.",
    )
    lease_until: datetime | None = Field(
        default=None,
        description="For an attempt whose lease expired (outcome lease_expired), when it ran "
        "out; null otherwise.",
    )


#: How much of a payload or result a job's own answer carries; more is fetched on its own.
DETAIL_PREVIEW_BYTES = 64 * 1024
#: How many characters of them the store reads for it: one more than fits, so that a longer
#: value shows as cut.
DETAIL_PREVIEW_CHARS = DETAIL_PREVIEW_BYTES + 1


def detail_values(job: Job) -> dict[str, Any]:
    """The payload and result fields of JobDetail for ``job`` (whole values, or Previews of
    DETAIL_PREVIEW_CHARS characters as Store.get_preview reads them): whole up to
    DETAIL_PREVIEW_BYTES of JSON, their first part beyond."""
    fields: dict[str, Any] = {}
    for name, value in (("payload", job.payload), ("result", job.result)):
        if value is None:
            continue
        text, cut = preview(payload_text(value), DETAIL_PREVIEW_BYTES)
        if cut:
            fields.update({name: None, f"{name}_truncated": True, f"{name}_preview": text})
        elif isinstance(value, Preview):  # read whole: under the cut
            fields[name] = json.loads(value.text)
    return fields


class JobDetail(JobOut):
    """A job with every attempt, oldest first, and the store's ``now`` for relative times; a
    durable job's steps, sleeps and waits too, and why it is not running when it sleeps or
    waits (``suspended``)."""

    now: datetime
    attempts: list[AttemptOut]
    payload_truncated: bool = Field(
        default=False,
        description=f"True when the payload's JSON is over {DETAIL_PREVIEW_BYTES} bytes: then "
        "payload is null and payload_preview its first part; GET /api/jobs/{id}/payload has "
        "it whole.",
    )
    payload_preview: str | None = None
    result_truncated: bool = Field(
        default=False,
        description=f"As payload_truncated, for a result over {DETAIL_PREVIEW_BYTES} bytes "
        "(GET /api/jobs/{id}/result).",
    )
    result_preview: str | None = None
    blocked_by: list[BlockerOut] = _blocked_by()
    steps: list[StepOut] = Field(default_factory=list)
    suspended: SuspensionOut | None = None


class JobList(BaseModel):
    """One page of jobs, newest first; pass ``next_cursor`` back to read the next page."""

    now: datetime
    jobs: list[JobSummary]
    next_cursor: str | None


class JobCount(BaseModel):
    """How many jobs match (at most the bulk cap); ``capped`` means more match than that."""

    count: int
    capped: bool


class StateCounts(BaseModel):
    """Jobs per state matching a filter (every state present, zeros included)."""

    counts: dict[str, int]
    exact: bool = Field(description="False when the store answered from estimates.")
    estimated: list[str] = Field(
        description="States whose count is an estimate: more jobs matched than are counted one "
        "by one (ApiSettings.exact_count_up_to, 1000 by default) and the store keeps no count "
        "of them."
    )


class BulkResult(BaseModel):
    count: int


class WorkerOut(BaseModel):
    name: str
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    started_at: datetime | None
    beat_at: datetime | None
    heartbeat_age_seconds: float | None
    running: int
    alive: bool


class WorkerList(BaseModel):
    now: datetime
    workers: list[WorkerOut]


class CountsOut(BaseModel):
    by_state: dict[str, int]
    by_queue: dict[str, dict[str, int]]
    exact: bool


class BucketOut(BaseModel):
    start: datetime
    succeeded: int
    dead: int
    cancelled: int


class ThroughputOut(BaseModel):
    bucket_seconds: int
    buckets: list[BucketOut]


class ReplicaOut(BaseModel):
    """The read replica the counts, lists and details come from."""

    replaying: bool = Field(description="False when the read database is not a replica.")
    lag_seconds: float | None = Field(
        description="How stale its answers may be: 0 when it has replayed everything the "
        "primary had written; null when that cannot be told."
    )


class Stats(BaseModel):
    now: datetime
    counts: CountsOut
    oldest_due_age_seconds: float | None
    workers_alive: int
    workers_total: int
    throughput: ThroughputOut
    #: Present only when reads go to a replica.
    replica: ReplicaOut | None = None


class DashboardConfig(BaseModel):
    """What the dashboard needs to know about this server."""

    demo: bool
    #: Whether this request's identity can change nothing (read-only mode, or a read token).
    read_only: bool
    kinds: list[str] | None
    login: bool
    #: Who the dashboard acts as: the name the audit log records for its actions.
    identity: str
    #: Its role: admin, operator (no deletes, limits or schedule changes) or read-only.
    role: str = "admin"


class Health(BaseModel):
    ok: bool


class ErrorBody(BaseModel):
    """Every refusal: a message naming what was wrong."""

    error: str


class EdgeOut(BaseModel):
    """Job ``child`` runs after job ``parent``."""

    parent: int
    child: int
    on_parent_failure: Literal["cancel", "run"]


class WorkflowCounts(BaseModel):
    """A workflow's id and how many of its jobs are in each state."""

    id: int
    by_state: dict[str, int]
    total: int = Field(description="How many jobs the workflow has.")
    finished: bool


class WorkflowOut(WorkflowCounts):
    """One page of a workflow: its jobs by id with their states (previews, as in lists), the
    edges into them, and how many of all its jobs are in each state."""

    now: datetime
    jobs: list[JobSummary]
    edges: list[EdgeOut] = Field(
        description="The edges into this page's jobs, in (child, parent) order, at most "
        "1,000: a job's parents beyond them are paged by GET /api/jobs/{id}/parents."
    )
    edges_truncated: bool = Field(description="True when more edges lead into this page's jobs.")
    next_cursor: str | None = Field(description="Pass back as cursor for the next page.")


class GraphNode(BaseModel):
    """A job of a workflow as its graph draws it."""

    id: int
    kind: str
    state: str
    waiting_on: int = Field(description="How many parents it still waits on.")


class WorkflowGraph(WorkflowCounts):
    """A workflow's jobs by id, at most ``limit`` of them, and the edges into them: what the
    dashboard draws. ``shown`` of ``total`` jobs are here."""

    nodes: list[GraphNode]
    edges: list[EdgeOut] = Field(
        description="The edges into these jobs, in (child, parent) order; a job's parents "
        "beyond 1,000 may be left out (edges_truncated)."
    )
    edges_truncated: bool = Field(description="True when some edges into these jobs are left out.")
    shown: int = Field(description="How many of them are in nodes (the first by id).")


class RelatedOut(BaseModel):
    """A job's parent or child: its id, its state, and the edge's on_parent_failure."""

    id: int
    state: str
    on_parent_failure: Literal["cancel", "run"]


class RelatedPage(BaseModel):
    """One page of a job's parents or children by id."""

    jobs: list[RelatedOut]
    next_cursor: str | None


def job_out(job: Job) -> dict[str, Any]:
    """The fields of JobOut for ``job``."""
    return {
        "id": job.id,
        "kind": job.kind,
        "queue": job.queue,
        "state": job.state.value,
        "priority": job.priority,
        "run_at": job.run_at,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "tenant": job.tenant,
        "unique_key": job.unique_key,
        "worker": job.worker,
        "lease_until": job.lease_until,
        "lease_token": job.lease_token,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "last_error": job.last_error,
        "schedule": job.schedule,
        "slot_at": job.slot_at,
        "timeout_seconds": job.timeout.total_seconds() if job.timeout is not None else None,
        "expires_at": job.expires_at,
        "crashes": job.crashes,
        "quarantine": blame.quarantine(job),
        "progress": job.progress,
        "progress_message": job.progress_message,
        "workflow": job.workflow,
        "waiting_on": job.waiting_on,
        "heartbeats": job.heartbeats,
        "last_heartbeat_at": job.last_heartbeat_at,
        "payload": job.payload,
        "result": job.result,
    }


def job_summary(job: Job, blocked_by: list[BlockerOut] | None = None) -> JobSummary:
    """``job`` as a list shows it: previews instead of the payload, last error and result."""
    fields = job_out(job)
    payload, payload_cut = preview(payload_text(fields.pop("payload")))
    error, error_cut = preview(fields.pop("last_error"))
    stored = fields.pop("result")
    result, result_cut = preview(None if stored is None else payload_text(stored))
    assert payload is not None
    return JobSummary(
        **fields,
        payload_preview=payload,
        payload_truncated=payload_cut,
        last_error_preview=error,
        last_error_truncated=error_cut,
        result_preview=result,
        result_truncated=result_cut,
        blocked_by=blocked_by or [],
    )


def attempt_out(attempt: Attempt) -> AttemptOut:
    return AttemptOut(
        attempt=attempt.attempt,
        token=attempt.token,
        worker=attempt.worker,
        started_at=attempt.started_at,
        finished_at=attempt.finished_at,
        outcome=attempt.outcome.value,
        error=attempt.error,
        traceback=attempt.traceback,
        heartbeats=attempt.heartbeats,
        last_heartbeat_at=attempt.last_heartbeat_at,
        lease_until=attempt.lease_until,
    )


def worker_out(info: WorkerInfo, now: datetime, heartbeat: timedelta) -> WorkerOut:
    age = info.heartbeat_age(now)
    return WorkerOut(
        name=info.name,
        host=info.host,
        pid=info.pid,
        queues=list(info.queues),
        concurrency=info.concurrency,
        started_at=info.started_at,
        beat_at=info.beat_at,
        heartbeat_age_seconds=age.total_seconds() if age is not None else None,
        running=info.running,
        alive=info.is_alive(now, heartbeat),
    )


def bucket_out(bucket: ThroughputBucket) -> BucketOut:
    return BucketOut(
        start=bucket.start,
        succeeded=bucket.succeeded,
        dead=bucket.dead,
        cancelled=bucket.cancelled,
    )


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
