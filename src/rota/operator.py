"""Operator: the operator verbs behind the API, the dashboard and the CLI, each one recorded.

Every verb that changes jobs, queues, limits, schedules or workflows on an operator's behalf
goes through an ``Operator`` bound to the identity that acts (``token:admin``,
``basic:alice``, ``cli:deploy``...). A verb that succeeds appends one audit entry: who, what,
on which target or filter, with which parameters, and how many jobs it touched; a verb that
raises (not found, conflict, bad input) records nothing. The entry is written right after the
action, in its own statement: if that write fails, the error reaches the caller, though the
action itself stands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from rota import workflows
from rota.client import Client
from rota.domain.audit import AuditAction, AuditRecord, check_identity
from rota.domain.durable import SignalResult
from rota.domain.errors import InvalidInput
from rota.domain.flow import Limit, LimitScope
from rota.domain.job import EnqueueResult, Job, JobSpec
from rota.domain.schedule import ScheduleSpec
from rota.domain.schedule_state import Missed, Schedule
from rota.domain.workflow import WorkflowBuilder
from rota.store.records import MAX_BULK, JobFilter, QueueInfo


def filter_fields(filter: JobFilter) -> dict[str, Any]:
    """A job filter as an audit entry shows it: the fields given, states sorted."""
    fields: dict[str, Any] = {}
    if filter.states is not None:
        fields["states"] = sorted(state.value for state in filter.states)
    for name in ("kind", "queue", "tenant", "schedule", "search"):
        value = getattr(filter, name)
        if value is not None:
            fields[name] = value
    return fields


class Operator:
    """The operator verbs on ``client``'s store, acting as ``identity``."""

    def __init__(
        self,
        client: Client,
        identity: str,
        *,
        workflows: Mapping[str, WorkflowBuilder] | None = None,
    ) -> None:
        self.client = client
        self.store = client.store
        self.identity = check_identity(identity)
        #: Builders of workflow schedules, by name, for ``trigger_schedule``.
        self.workflows = dict(workflows or {})

    async def _record(
        self,
        action: AuditAction,
        target: str | None = None,
        *,
        filter: JobFilter | None = None,
        detail: dict[str, Any] | None = None,
        count: int | None = None,
    ) -> None:
        await self.store.record_audit(
            AuditRecord(
                identity=self.identity,
                action=action,
                target=target,
                filter=None if filter is None else filter_fields(filter),
                detail=detail or None,
                count=count,
            )
        )

    # ------------------------------------------------------------------ one job

    async def enqueue(
        self,
        spec: JobSpec,
        *,
        depends_on: Sequence[int] | None = None,
        on_parent_failure: str = "cancel",
    ) -> EnqueueResult:
        """Enqueue ``spec`` (after ``depends_on``, see ``workflows.enqueue_after``). A job that
        already held the unique key is recorded too, as touching no job (count 0)."""
        if depends_on is None:
            [result] = await self.client.enqueue_many([spec])
        else:
            result = await workflows.enqueue_after(self.store, spec, depends_on, on_parent_failure)
        await self.record_enqueue(result)
        return result

    async def record_enqueue(self, result: EnqueueResult) -> None:
        """Record an enqueue made elsewhere (the App's path, with its hooks) as this identity's."""
        job = result.job
        await self._record(
            AuditAction.JOB_CREATE,
            f"job:{job.id}",
            detail={"kind": job.kind, "queue": job.queue, "duplicate": result.duplicate},
            count=0 if result.duplicate else 1,
        )

    async def retry(self, job_id: int, *, max_attempts: int | None = None) -> Job:
        job = await self.client.retry(job_id, max_attempts=max_attempts)
        detail = None if max_attempts is None else {"max_attempts": max_attempts}
        await self._record(AuditAction.JOB_RETRY, f"job:{job_id}", detail=detail, count=1)
        return job

    async def cancel(self, job_id: int) -> Job:
        job = await self.client.cancel(job_id)
        await self._record(AuditAction.JOB_CANCEL, f"job:{job_id}", count=1)
        return job

    async def hold(self, job_id: int) -> Job:
        job = await self.client.hold(job_id)
        await self._record(AuditAction.JOB_HOLD, f"job:{job_id}", count=1)
        return job

    async def release(self, job_id: int) -> Job:
        job = await self.client.release(job_id)
        await self._record(AuditAction.JOB_RELEASE, f"job:{job_id}", count=1)
        return job

    async def rerun(self, job_id: int) -> Job:
        job = await self.client.rerun(job_id)
        await self._record(AuditAction.JOB_RERUN, f"job:{job_id}", count=1)
        return job

    async def delete(self, job_id: int) -> Job:
        job = await self.client.delete(job_id)
        await self._record(
            AuditAction.JOB_DELETE,
            f"job:{job_id}",
            detail={"kind": job.kind, "state": job.state.value},
            count=1,
        )
        return job

    async def reschedule(
        self,
        job_id: int,
        *,
        run_at: datetime | Literal["now"] | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> Job:
        job = await self.client.reschedule(job_id, run_at=run_at, priority=priority, queue=queue)
        detail: dict[str, Any] = {}
        if run_at is not None:
            detail["run_at"] = run_at if isinstance(run_at, str) else job.run_at.isoformat()
        if priority is not None:
            detail["priority"] = priority
        if queue is not None:
            detail["queue"] = queue
        await self._record(AuditAction.JOB_RESCHEDULE, f"job:{job_id}", detail=detail, count=1)
        return job

    # ------------------------------------------------------------------ by filter

    async def bulk_retry(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        count = await self.client.bulk_retry(filter, limit=limit)
        await self._record(AuditAction.JOBS_RETRY, filter=filter, count=count)
        return count

    async def bulk_cancel(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        count = await self.client.bulk_cancel(filter, limit=limit)
        await self._record(AuditAction.JOBS_CANCEL, filter=filter, count=count)
        return count

    async def bulk_hold(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        count = await self.client.bulk_hold(filter, limit=limit)
        await self._record(AuditAction.JOBS_HOLD, filter=filter, count=count)
        return count

    async def bulk_release(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        count = await self.client.bulk_release(filter, limit=limit)
        await self._record(AuditAction.JOBS_RELEASE, filter=filter, count=count)
        return count

    async def purge(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        count = await self.client.purge(filter, limit=limit)
        await self._record(AuditAction.JOBS_PURGE, filter=filter, count=count)
        return count

    async def record_bulk(self, action: AuditAction, filter: JobFilter, count: int) -> None:
        """Record one bulk action (retry, cancel, purge, hold, release) that a caller ran in
        batches itself through ``client``: one entry for the whole run, with every job it
        touched."""
        if not action.value.startswith("jobs."):
            raise ValueError(f"{action} is not a bulk action")
        await self._record(action, filter=filter, count=count)

    async def cancel_workflow(self, workflow_id: int) -> int:
        count = await workflows.cancel_workflow(self.store, workflow_id)
        await self._record(AuditAction.WORKFLOW_CANCEL, f"workflow:{workflow_id}", count=count)
        return count

    async def retry_node(self, workflow_id: int, job_id: int, *, downstream: bool) -> int:
        """Retry a job of the workflow, with ``downstream`` every dead or cancelled job that
        runs after it too (``workflows.retry_downstream``); how many."""
        count = await workflows.retry_downstream(
            self.store, workflow_id, job_id, with_children=downstream
        )
        await self._record_node(
            AuditAction.WORKFLOW_NODE_RETRY, workflow_id, job_id, downstream, count
        )
        return count

    async def cancel_node(self, workflow_id: int, job_id: int, *, downstream: bool) -> int:
        """Cancel a job of the workflow, with ``downstream`` every unfinished job that runs
        after it too (``workflows.cancel_downstream``); how many."""
        count = await workflows.cancel_downstream(
            self.store, workflow_id, job_id, with_children=downstream
        )
        await self._record_node(
            AuditAction.WORKFLOW_NODE_CANCEL, workflow_id, job_id, downstream, count
        )
        return count

    async def _record_node(
        self, action: AuditAction, workflow_id: int, job_id: int, downstream: bool, count: int
    ) -> None:
        detail = {"workflow": workflow_id, "downstream": downstream}
        await self._record(action, f"job:{job_id}", detail=detail, count=count)

    async def signal(
        self, key: str, data: Any = None, *, expire_after: timedelta | float | None = None
    ) -> SignalResult:
        """Send a signal (``Client.signal``); the entry names the job it reached (count 1)
        or says it was kept (count 0)."""
        result = await self.client.signal(key, data, expire_after=expire_after)
        await self._record(
            AuditAction.SIGNAL_SEND,
            f"signal:{key}",
            detail={"delivered_to": result.delivered_to},
            count=1 if result.delivered else 0,
        )
        return result

    # ------------------------------------------------------------------ flow control

    async def pause_queue(self, name: str) -> QueueInfo:
        info = await self.client.pause_queue(name)
        await self._record(AuditAction.QUEUE_PAUSE, f"queue:{info.name}")
        return info

    async def resume_queue(self, name: str) -> QueueInfo:
        info = await self.client.resume_queue(name)
        await self._record(AuditAction.QUEUE_RESUME, f"queue:{info.name}")
        return info

    async def set_limit(self, limit: Limit) -> Limit:
        await self.client.set_limit(limit)
        detail: dict[str, Any] = {}
        if limit.concurrency is not None:
            detail["concurrency"] = limit.concurrency
        if limit.rate is not None:
            detail["rate"] = limit.rate
        if limit.period is not None:
            detail["per_seconds"] = limit.period.total_seconds()
        await self._record(
            AuditAction.LIMIT_SET, f"limit:{limit.scope.value}:{limit.key}", detail=detail
        )
        return limit

    async def delete_limit(self, scope: LimitScope | str, key: str) -> bool:
        """Remove the limit; False (and nothing recorded) when there was none."""
        removed = await self.client.delete_limit(scope, key)
        if removed:
            await self._record(AuditAction.LIMIT_DELETE, f"limit:{LimitScope(scope).value}:{key}")
        return removed

    # ------------------------------------------------------------------ schedules

    async def create_schedule(self, spec: ScheduleSpec) -> Schedule:
        schedule = await self.store.create_schedule(spec)
        await self._record(
            AuditAction.SCHEDULE_CREATE, f"schedule:{spec.name}", detail=_schedule_detail(spec)
        )
        return schedule

    async def upsert_schedule(self, spec: ScheduleSpec) -> Schedule:
        """Create the schedule or replace its definition (``Store.upsert_schedule``)."""
        schedule = await self.store.upsert_schedule(spec)
        await self._record(
            AuditAction.SCHEDULE_REPLACE, f"schedule:{spec.name}", detail=_schedule_detail(spec)
        )
        return schedule

    async def edit_schedule(self, spec: ScheduleSpec) -> Schedule:
        """Replace an existing schedule's definition; ScheduleNotFound when there is none,
        also when it is deleted meanwhile (``Store.replace_schedule``: an edit never creates)."""
        schedule = await self.store.replace_schedule(spec)
        await self._record(
            AuditAction.SCHEDULE_REPLACE, f"schedule:{spec.name}", detail=_schedule_detail(spec)
        )
        return schedule

    async def pause_schedule(self, name: str, *, missed: Missed | str = Missed.QUEUE) -> Schedule:
        """Pause the schedule; ``missed`` says what its resume does with the slots that fall
        due meanwhile (queue them under its misfire policy, or drop them)."""
        try:
            chosen = Missed(missed)
        except ValueError:
            raise InvalidInput("missed must be queue or drop") from None
        schedule = await self.store.pause_schedule(name, missed=chosen)
        await self._record(
            AuditAction.SCHEDULE_PAUSE, f"schedule:{name}", detail={"missed": chosen.value}
        )
        return schedule

    async def resume_schedule(self, name: str) -> Schedule:
        schedule = await self.store.resume_schedule(name)
        await self._record(AuditAction.SCHEDULE_RESUME, f"schedule:{name}")
        return schedule

    async def delete_schedule(self, name: str) -> None:
        await self.store.delete_schedule(name)
        await self._record(AuditAction.SCHEDULE_DELETE, f"schedule:{name}")

    async def trigger_schedule(self, name: str) -> EnqueueResult:
        """Run the schedule now; ``duplicate`` results touched no job (count 0)."""
        result = await self.store.trigger_schedule(name, workflows=self.workflows)
        await self._record(
            AuditAction.SCHEDULE_RUN,
            f"schedule:{name}",
            detail={"job": result.job.id, "duplicate": result.duplicate},
            count=0 if result.duplicate else 1,
        )
        return result


def _schedule_detail(spec: ScheduleSpec) -> dict[str, Any]:
    rule = spec.rule
    detail: dict[str, Any] = {"kind": spec.kind, "queue": spec.queue}
    if rule.expression is not None:
        detail["cron"] = rule.expression
        detail["timezone"] = rule.timezone
    elif rule.interval is not None:
        detail["every_seconds"] = rule.interval.total_seconds()
    return detail
