"""The API's request and response models: what /openapi.json documents for every route.

Requests are strict (no type coercion, unknown fields refused); the domain's JobSpec still
decides what a valid job is, so these models document the rules (pattern, ranges) and the
domain enforces them with messages naming the field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rota.domain.job import (
    MAX_ATTEMPTS_LIMIT,
    MAX_NAME_LENGTH,
    MAX_PRIORITY,
    MAX_UNIQUE_KEY_LENGTH,
    MIN_PRIORITY,
    NAME_PATTERN,
    Attempt,
    Job,
)
from rota.store.base import ThroughputBucket, WorkerInfo

#: JobState's values, spelled out so the schema can enumerate them (a test pins the match).
StateName = Literal["pending", "running", "succeeded", "dead", "cancelled"]
#: The longest search term, cursor and run_at text the API reads.
MAX_SEARCH_LENGTH = MAX_UNIQUE_KEY_LENGTH
MAX_CURSOR_LENGTH = 64
MAX_INSTANT_LENGTH = 64

_NAME_SCHEMA: dict[str, Any] = {
    "pattern": f"^{NAME_PATTERN.pattern}$",
    "minLength": 1,
    "maxLength": MAX_NAME_LENGTH,
}


def _name(description: str) -> Any:
    return Field(default=None, description=description, json_schema_extra=_NAME_SCHEMA)


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


class JobCreate(_Request):
    """POST /api/jobs: a job to enqueue. Omitted fields take the kind's defaults."""

    kind: str = Field(description="What the job does.", json_schema_extra=_NAME_SCHEMA)
    payload: Any = Field(default=None, description="Any JSON value; omitted means {}.")
    delay_seconds: float | None = Field(
        default=None,
        description="Due this many seconds from now (>= 0).",
        json_schema_extra={"minimum": 0},
    )
    run_at: str | None = Field(
        default=None,
        description="Due at this ISO 8601 instant; an explicit UTC offset is required.",
        json_schema_extra={"format": "date-time", "maxLength": MAX_INSTANT_LENGTH},
    )
    every_seconds: float | None = Field(
        default=None,
        description="Repeat on this interval (creates a schedule).",
        json_schema_extra={"exclusiveMinimum": 0},
    )
    max_attempts: int | None = Field(
        default=None, json_schema_extra={"minimum": 1, "maximum": MAX_ATTEMPTS_LIMIT}
    )
    priority: int | None = Field(
        default=None,
        description="Higher runs first.",
        json_schema_extra={"minimum": MIN_PRIORITY, "maximum": MAX_PRIORITY},
    )
    queue: str | None = _name("The lane the job waits in.")
    tenant: str | None = _name("Whose work this is.")
    unique_key: str | None = Field(
        default=None,
        description="While an active job holds this key, enqueue returns that job instead.",
        json_schema_extra={"minLength": 1, "maxLength": MAX_UNIQUE_KEY_LENGTH},
    )
    timeout_seconds: float | None = Field(
        default=None,
        description="Stop the handler after this long.",
        json_schema_extra={"exclusiveMinimum": 0},
    )


class JobFilterBody(_Request):
    """Which jobs a bulk action covers; omitted fields do not filter."""

    state: list[StateName] | None = None
    kind: str | None = _name("Only jobs of this kind.")
    queue: str | None = _name("Only jobs in this queue.")
    tenant: str | None = _name("Only this tenant's jobs.")
    q: str | None = Field(
        default=None,
        description="A job id or an exact unique key.",
        json_schema_extra={"maxLength": MAX_SEARCH_LENGTH},
    )


class JobOut(BaseModel):
    """A job as the API shows it; instants are ISO 8601 in UTC."""

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
    last_error: str | None
    schedule: str | None
    slot_at: datetime | None
    timeout_seconds: float | None
    payload: Any


class JobCreated(JobOut):
    """The enqueued job; ``duplicate`` means an active job already held the unique key (200)."""

    duplicate: bool


class AttemptOut(BaseModel):
    attempt: int
    token: int
    worker: str | None
    started_at: datetime
    finished_at: datetime | None
    outcome: str
    error: str | None
    traceback: str | None


class JobDetail(JobOut):
    """A job with every attempt, oldest first, and the store's ``now`` for relative times."""

    now: datetime
    attempts: list[AttemptOut]


class JobList(BaseModel):
    """One page of jobs, newest first; pass ``next_cursor`` back to read the next page."""

    now: datetime
    jobs: list[JobOut]
    next_cursor: str | None


class JobCount(BaseModel):
    """How many jobs match (at most the bulk cap); ``capped`` means more match than that."""

    count: int
    capped: bool


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
    read_only: bool
    kinds: list[str] | None
    login: bool


class Health(BaseModel):
    ok: bool


class ErrorBody(BaseModel):
    """Every refusal: a message naming what was wrong."""

    error: str


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
        "payload": job.payload,
    }


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
    )


def worker_out(info: WorkerInfo, now: datetime, alive_within_seconds: float) -> WorkerOut:
    age = (now - info.beat_at).total_seconds() if info.beat_at is not None else None
    return WorkerOut(
        name=info.name,
        host=info.host,
        pid=info.pid,
        queues=list(info.queues),
        concurrency=info.concurrency,
        started_at=info.started_at,
        beat_at=info.beat_at,
        heartbeat_age_seconds=age,
        running=info.running,
        alive=age is not None and age <= alive_within_seconds,
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
    404: "No such job.",
    409: "The job's state does not allow this.",
    413: "Request body too large.",
    415: "Content-Type must be application/json.",
    503: "The job store is unavailable; retry after Retry-After seconds.",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the refusals a route can give (every one is ErrorBody JSON)."""
    return {code: {"model": ErrorBody, "description": _ERROR_TEXT[code]} for code in codes}
