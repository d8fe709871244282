"""rota: a distributed job scheduler for Python.

Jobs run now, at a time, or on a schedule; workers on any number of hosts claim them with
leases and heartbeats, are fenced out by a token when stale, and retry failures with backoff.
"""

from rota.app import App
from rota.client import QueueStatus
from rota.domain.durable import SignalResult, Step
from rota.domain.errors import (
    ConnectionFailed,
    InvalidInput,
    InvalidJob,
    InvalidSchedule,
    JobCancelled,
    JobFailed,
    JobNotFound,
    JobRunning,
    LeaseLost,
    MigrationsPending,
    ParentNotFound,
    Permanent,
    ResultTimeout,
    RotaError,
    ScheduleNotFound,
    Snooze,
    StateConflict,
    StepFailed,
    StoreUnavailable,
    WaitTimeout,
    WorkflowNotFound,
)
from rota.domain.flow import Limit, LimitScope
from rota.domain.job import Attempt, EnqueueResult, Job, JobSpec
from rota.domain.job_state import JobState
from rota.domain.lease import Lease
from rota.domain.retry import RetryPolicy
from rota.domain.schedule import Misfire, Overlap, Rule, ScheduleSpec
from rota.domain.schedule_state import Schedule
from rota.domain.workflow import Node, ScheduledRun, Workflow, chain, chord, group
from rota.runtime.context import JobContext
from rota.runtime.hooks import JobResult
from rota.runtime.worker import Worker
from rota.runtime.worker_settings import WorkerSettings
from rota.store import JobFilter
from rota.store.records import LimitInfo, QueueInfo
from rota.workflows import WorkflowRun

__version__ = "0.1.0"

__all__ = [
    "App",
    "Attempt",
    "ConnectionFailed",
    "EnqueueResult",
    "InvalidInput",
    "InvalidJob",
    "InvalidSchedule",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobFailed",
    "JobFilter",
    "JobNotFound",
    "JobResult",
    "JobRunning",
    "JobSpec",
    "JobState",
    "Lease",
    "LeaseLost",
    "Limit",
    "LimitInfo",
    "LimitScope",
    "MigrationsPending",
    "Misfire",
    "Node",
    "Overlap",
    "ParentNotFound",
    "Permanent",
    "QueueInfo",
    "QueueStatus",
    "ResultTimeout",
    "RetryPolicy",
    "RotaError",
    "Rule",
    "Schedule",
    "ScheduleNotFound",
    "ScheduleSpec",
    "ScheduledRun",
    "SignalResult",
    "Snooze",
    "StateConflict",
    "Step",
    "StepFailed",
    "StoreUnavailable",
    "WaitTimeout",
    "Worker",
    "WorkerSettings",
    "Workflow",
    "WorkflowNotFound",
    "WorkflowRun",
    "__version__",
    "chain",
    "chord",
    "group",
]
