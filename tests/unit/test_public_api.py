"""The public surface of ``import rota``: pinned, so any change to it is deliberate."""

from __future__ import annotations

import rota

PUBLIC = [
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


def test_the_public_names_are_exactly_these() -> None:
    assert rota.__all__ == PUBLIC


def test_every_public_name_exists() -> None:
    missing = [name for name in rota.__all__ if not hasattr(rota, name)]
    assert missing == []


def test_the_handler_signals_are_not_rota_errors() -> None:
    # Permanent and Snooze travel from user code to the worker, never out of rota.
    assert not issubclass(rota.Permanent, rota.RotaError)
    assert not issubclass(rota.Snooze, rota.RotaError)
    assert issubclass(rota.LeaseLost, rota.RotaError)
    assert issubclass(rota.InvalidJob, ValueError)
