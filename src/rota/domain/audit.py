"""The audit log: which operator actions there are, what an entry records, how a listing filters.

An entry says who acted (an identity such as ``token:admin``, ``basic:alice`` or
``cli:deploy``), when (the store's clock), what (an ``AuditAction`` on a target such as
``job:42`` or ``queue:emails``), with which job filter and parameters, and how many jobs it
touched (None for actions on queues, limits and schedules, which touch no job).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from rota.domain.errors import InvalidInput

#: How long entries are kept unless configured otherwise.
DEFAULT_AUDIT_RETENTION = timedelta(days=90)
MAX_IDENTITY_LENGTH = 200
MAX_TARGET_LENGTH = 300
#: An entry's filter and detail together, as JSON text: small, operators' parameters only.
MAX_AUDIT_JSON_BYTES = 8 * 1024


class AuditAction(StrEnum):
    """Every operator action the audit log records (the same strings in the API and SQL)."""

    #: A job enqueued on someone's behalf (the HTTP API, the dashboard's form).
    JOB_CREATE = "job.create"
    JOB_RETRY = "job.retry"
    JOB_CANCEL = "job.cancel"
    JOB_RERUN = "job.rerun"
    JOB_DELETE = "job.delete"
    JOB_RESCHEDULE = "job.reschedule"
    JOB_HOLD = "job.hold"
    JOB_RELEASE = "job.release"
    #: Bulk actions: on every job matching the entry's filter, up to the bulk cap.
    JOBS_RETRY = "jobs.retry"
    JOBS_CANCEL = "jobs.cancel"
    JOBS_PURGE = "jobs.purge"
    JOBS_HOLD = "jobs.hold"
    JOBS_RELEASE = "jobs.release"
    QUEUE_PAUSE = "queue.pause"
    QUEUE_RESUME = "queue.resume"
    LIMIT_SET = "limit.set"
    LIMIT_DELETE = "limit.delete"
    SCHEDULE_CREATE = "schedule.create"
    SCHEDULE_REPLACE = "schedule.replace"
    SCHEDULE_PAUSE = "schedule.pause"
    SCHEDULE_RESUME = "schedule.resume"
    SCHEDULE_DELETE = "schedule.delete"
    SCHEDULE_RUN = "schedule.run"
    WORKFLOW_CANCEL = "workflow.cancel"
    #: A job of a workflow retried or cancelled from its graph, alone or with every job that
    #: runs after it (``detail.downstream``).
    WORKFLOW_NODE_RETRY = "workflow.node.retry"
    WORKFLOW_NODE_CANCEL = "workflow.node.cancel"
    #: An event sent to a key durable jobs wait for (``ctx.wait_for``).
    SIGNAL_SEND = "signal.send"


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """What is written for one action; the store adds the id and the instant."""

    identity: str
    action: AuditAction
    target: str | None = None
    #: The job filter of a bulk action, as JSON-ready fields (only those given).
    filter: dict[str, Any] | None = None
    #: The action's parameters (a reschedule's new run_at, a limit's values...).
    detail: dict[str, Any] | None = None
    #: How many jobs the action touched; None for actions on no job.
    count: int | None = None

    def __post_init__(self) -> None:
        check_identity(self.identity)
        if self.target is not None and not 0 < len(self.target) <= MAX_TARGET_LENGTH:
            raise InvalidInput(f"an audit target has 1 to {MAX_TARGET_LENGTH} characters")
        if self.count is not None and self.count < 0:
            raise InvalidInput("an audit count cannot be negative")
        size = len(json_text(self.filter) or "") + len(json_text(self.detail) or "")
        if size > MAX_AUDIT_JSON_BYTES:
            raise InvalidInput(f"an audit entry's filter and detail exceed {MAX_AUDIT_JSON_BYTES}")


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One recorded action, as stored. ``action`` is text, so entries written by a later
    version with actions this one does not know still read."""

    id: int
    at: datetime
    identity: str
    action: str
    target: str | None = None
    filter: dict[str, Any] | None = None
    detail: dict[str, Any] | None = None
    count: int | None = None


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Which entries a listing returns; ``None`` fields do not filter. ``since`` is
    inclusive, ``until`` exclusive (a ``since`` after ``until`` matches nothing)."""

    action: str | None = None
    identity: str | None = None
    target: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def matches(self, entry: AuditEntry) -> bool:
        return (
            (self.action is None or entry.action == self.action)
            and (self.identity is None or entry.identity == self.identity)
            and (self.target is None or entry.target == self.target)
            and (self.since is None or entry.at >= self.since)
            and (self.until is None or entry.at < self.until)
        )


def check_identity(identity: str) -> str:
    """An identity as the log records it: 1 to MAX_IDENTITY_LENGTH printable characters."""
    if (
        not isinstance(identity, str)
        or not 0 < len(identity) <= MAX_IDENTITY_LENGTH
        or not identity.isprintable()
    ):
        raise InvalidInput(f"an identity has 1 to {MAX_IDENTITY_LENGTH} printable characters")
    return identity


def cli_identity(user: str | None) -> str:
    """The identity of a command-line user: ``cli:<os user>`` (``cli:unknown`` without one),
    unprintable characters replaced so any login name can be recorded."""
    name = "".join(c if c.isprintable() else "?" for c in (user or "unknown"))
    return f"cli:{name}"[:MAX_IDENTITY_LENGTH]


def json_text(value: dict[str, Any] | None) -> str | None:
    """A filter or detail as the stores keep it: compact JSON text (None stays None)."""
    if value is None:
        return None
    return json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False)


def from_json_text(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    value = json.loads(text)
    return value if isinstance(value, dict) else None
