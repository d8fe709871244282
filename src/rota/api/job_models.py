"""Jobs at the API's edge: a job as a detail, a list and a count show it, its attempts, and
why it is not running; and jobs turned into those models."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from rota.api.durable_models import StepOut, SuspensionOut
from rota.api.schemas import StateName
from rota.domain import blame
from rota.domain.job import Attempt, Job
from rota.domain.payload import (
    MAX_PROGRESS_MESSAGE_LENGTH,
    MAX_RESULT_BYTES,
    PREVIEW_BYTES,
    Preview,
    payload_text,
    preview,
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
