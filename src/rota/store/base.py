"""The Store protocol: the contract every backend (memory, SQLite, PostgreSQL) honours.

The seam is at job-lifecycle verbs, never SQL: the runtime calls these and nothing else.
Every method that depends on time takes ``now``: ``None`` means the store's own clock (the
database's ``now()`` on PostgreSQL), a value means a caller (a test) is driving time.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from rota.domain.activity import TOP_ERRORS, ActivityBucket, ErrorGroup
from rota.domain.audit import AuditEntry, AuditFilter, AuditRecord
from rota.domain.flow import Limit, LimitScope
from rota.domain.job import Attempt, EnqueueResult, Job, JobEdit, JobSpec
from rota.domain.job_state import JobState
from rota.domain.lease import Lease
from rota.domain.payload import Progress
from rota.domain.workflow import Workflow
from rota.store.durable import DurableVerbs
from rota.store.records import (
    MAX_BULK,
    AuditPage,
    Beat,
    Counted,
    Counts,
    JobFilter,
    LimitInfo,
    Page,
    QueueInfo,
    RescueResult,
    ThroughputBucket,
    WorkerInfo,
)
from rota.store.schedule_verbs import ScheduleVerbs


class Store(DurableVerbs, ScheduleVerbs, Protocol):
    """What every backend guarantees. Fenced verbs raise ``LeaseLost`` instead of writing.
    The durable verbs (steps, sleeps, waits, signals, effects) are in store/durable.py, the
    schedule verbs in store/schedule_verbs.py."""

    #: Whether ``watch`` reports schedule changes made by any process (see ``watch``).
    pushes_schedule_changes: bool
    #: Whether ``watch_finished`` reports the jobs named to ``expect_finished`` reaching a
    #: terminal state in any process; where it does not, waiting for results polls ``get_many``.
    pushes_finished: bool

    async def migrate(self) -> list[str]:
        """Bring the schema up to date; return the migrations applied. Safe to run concurrently."""
        ...

    async def pending_migrations(self) -> list[str]:
        """Migrations this code knows that the database has not applied."""
        ...

    async def close(self) -> None:
        """Release connections; the store is unusable afterwards."""
        ...

    async def now(self) -> datetime:
        """The store's clock (PostgreSQL ``now()``, the injected clock elsewhere)."""
        ...

    async def enqueue(
        self, specs: Sequence[JobSpec], *, now: datetime | None = None
    ) -> list[EnqueueResult]:
        """Insert jobs atomically (all or none), in order.

        A spec whose ``unique_key`` is held by an active (pending or running) job is not
        inserted: its result is that job with ``duplicate=True``. A (schedule, slot_at) pair is
        unique across all states. Jobs due now wake sleeping workers. Every field of a spec
        is kept, its ``trace_context`` and ``expires_at`` (from ``expire_after``: now + it)
        included, and comes back from get, list and claim.
        """
        ...

    async def enqueue_workflow(self, graph: Workflow, *, now: datetime | None = None) -> list[Job]:
        """Write every job and edge of ``graph`` in one transaction (all or none); return the
        jobs in the graph's order. ``graph.check()`` runs first; InvalidJob names an unknown
        parent id, and nothing is written then.

        A job starts ``waiting`` on the edges not yet satisfied (``Job.waiting_on``), or
        ``pending`` when every parent has already succeeded (or ended, on an
        ``on_parent_failure="run"`` edge), or ``cancelled`` when a parent already ended dead or
        cancelled on a ``"cancel"`` edge. The workflow id (``Job.workflow``) is the existing
        parents' workflow, else the first existing parent's id, else the first new job's id;
        existing parents without one join it.

        From then on, in the same transaction as whatever changes a workflow job's state:
        its success satisfies the edges to its direct children, and a child whose last edge
        is satisfied becomes pending exactly once, however many parents finish at once on
        however many connections; its end dead or cancelled satisfies its ``"run"`` edges
        and cancels its waiting ``"cancel"`` children (naming it in their last_error), which
        cancel theirs in turn; retrying it puts the children it cancelled back to waiting
        (unless another parent of theirs ended dead or cancelled: that one blocks them then).
        """
        ...

    async def parent_results(self, job_id: int) -> dict[int, object]:
        """The result (None: none stored) of each parent of the job, by parent id; empty for
        a job without parents. Pruned parents are left out."""
        ...

    async def workflow(
        self,
        workflow_id: int,
        *,
        after: int | None = None,
        limit: int | None = None,
        previews: bool = False,
    ) -> tuple[list[Job], list[tuple[int, int, str]]]:
        """The jobs of the workflow by id, and its edges as (parent, child, on_parent_failure);
        both empty for an unknown id. With ``limit``, one page: the first ``limit`` jobs with
        ids above ``after``, and the edges into them, in (child, parent) order, at most
        MAX_PAGE_EDGES + 1 (the one more says that more exist); ``previews`` as list_jobs."""
        ...

    async def workflow_states(self, workflow_id: int) -> dict[JobState, int]:
        """How many jobs of the workflow are in each state (states it has none in left out)."""
        ...

    async def related(
        self, job_id: int, *, parents: bool, after: int | None = None, limit: int = 50
    ) -> list[tuple[int, JobState, str]]:
        """One page of the job's parents (or children), by id above ``after``: each as (its
        id, its state, the edge's on_parent_failure)."""
        ...

    async def cancel_workflow(self, workflow_id: int, *, now: datetime | None = None) -> int:
        """Cancel every job of the workflow that has not finished (waiting, pending, running:
        a running one's lease is thereby lost); return how many."""
        ...

    async def claim(
        self,
        worker: str,
        *,
        queues: Sequence[str],
        limit: int,
        lease: timedelta,
        fair: bool = True,
        kinds: Collection[str] | None = None,
        now: datetime | None = None,
    ) -> list[Job]:
        """Lease up to ``limit`` jobs: due pending jobs not expired (``expires_at`` unset or
        after now) and running jobs whose lease expired with attempts left, of the ``kinds``
        given (None: every kind; a job of another kind is left for a worker that runs it),
        highest priority first, then earliest run_at, then id; with
        ``fair``, tenants take turns (rota.domain.flow.interleave). Paused queues give nothing,
        and no job starts past a concurrency or rate limit of its queue, kind or tenant,
        however many workers claim at once.

        Two concurrent callers never receive the same job; never more than ``limit`` rows.
        Each claimed job gets attempt + 1, a fencing token strictly greater than every token
        issued before, and lease_until = now + lease. Taking over an expired lease first
        applies ``rota.domain.blame.expire`` to it (so its attempt may be given back, and it
        cannot be taken when that makes it dead).

        A crash suspect (``Job.is_suspect``, and every expired lease) is claimed alone: when it
        comes first in the claim's order it is the only job returned, and otherwise the batch
        ends before it (``rota.domain.flow.select``).
        """
        ...

    async def heartbeat(
        self,
        leases: Sequence[Lease],
        *,
        lease: timedelta,
        progress: Mapping[int, Progress] | None = None,
        now: datetime | None = None,
    ) -> Beat:
        """Extend every still-held lease to now + lease, in one statement; return the leases
        that are lost and the store's ``now`` (also for an empty ``leases``: a clock reading).

        ``progress`` (by job id) is written with the renewal, fenced the same way: only onto
        jobs still held by the lease given for them; a lost lease's progress is dropped."""
        ...

    async def begin(self, lease: Lease, *, now: datetime | None = None) -> None:
        """Record that the handler of this lease starts now. A crash suspect's worker calls it
        (holding nothing else) before running the handler: from then on, an expiry of this
        lease counts against the job; without it the attempt is given back
        (``rota.domain.blame``). Ordinary leases need not call it. Fenced (LeaseLost)."""
        ...

    async def complete(self, lease: Lease, *, now: datetime | None = None) -> None:
        """Mark the job succeeded. Raises LeaseLost unless it is running under this token."""
        ...

    async def complete_many(
        self,
        leases: Sequence[Lease],
        *,
        results: Sequence[str | None] | None = None,
        now: datetime | None = None,
    ) -> list[Lease]:
        """Mark each job succeeded that is still held by its lease; return the leases lost.

        ``results`` pairs each lease with its handler's result as JSON text (see
        ``rota.domain.payload.encode_result``; None: nothing stored), written in the same
        statement and fenced with it: a lost lease's result is never written."""
        ...

    async def fail(
        self,
        lease: Lease,
        *,
        error: str,
        retry_in: timedelta,
        traceback: str | None = None,
        permanent: bool = False,
        now: datetime | None = None,
    ) -> JobState:
        """Record a failed attempt: pending again at now + retry_in while attempts are left and
        the error is not permanent, otherwise dead. Returns the new state. Fenced (LeaseLost).
        """
        ...

    async def snooze(self, lease: Lease, delay: timedelta, *, now: datetime | None = None) -> None:
        """Pending again at now + delay; the attempt is given back. Fenced (LeaseLost)."""
        ...

    async def release(self, lease: Lease, *, now: datetime | None = None) -> None:
        """Pending again, due now; the attempt is given back (graceful shutdown). Fenced."""
        ...

    async def retry(
        self, job_id: int, *, max_attempts: int | None = None, now: datetime | None = None
    ) -> Job:
        """A dead or cancelled job becomes pending now (waiting, if it has parents that have
        not all succeeded) with its attempts reset; ``max_attempts``
        raises (never lowers) the limit. JobNotFound; StateConflict in any other state.
        The edges its end settled wait again for its new outcome, to each child that has not
        started since or may be retried (``rota.domain.workflow.REOPENED_STATES``).
        The durable waits its earlier run left waiting are forgotten in the same write: the
        new run waits afresh (a new deadline), and no signal reaches the old waits meanwhile
        (a signal finding no wait is kept, for the new run's wait among others).
        """
        ...

    async def rerun(self, job_id: int, *, now: datetime | None = None) -> Job:
        """A succeeded job runs again: pending now, a new attempt series (attempt back to 0,
        so it has its whole max_attempts; last_error cleared), every earlier attempt kept in
        its history; durable waits left waiting are forgotten, as by ``retry``. JobNotFound;
        StateConflict in any other state, or while another active job holds its unique key
        (nothing changes)."""
        ...

    async def cancel(self, job_id: int, *, now: datetime | None = None) -> Job:
        """A waiting, pending or running job becomes cancelled; a running one's lease is thereby lost,
        so its worker stops the handler at its next heartbeat and any late write is fenced.
        JobNotFound; StateConflict when the job is already terminal.
        """
        ...

    async def delete(self, job_id: int) -> Job:
        """Remove a pending or finished job and its attempt history at once; return the job
        as it was. JobNotFound; JobRunning (nothing changes) while a worker holds it: cancel
        it first. A deleted job's unique key and schedule slot are free again.

        Deleting a workflow job settles the children it still holds up, in the same
        transaction, as if it had ended without succeeding: a waiting child on a "cancel" edge
        is cancelled ("cancelled: parent job N was deleted"), and one on a "run" edge stops
        waiting for it (pending once nothing else holds it). The same holds for ``purge`` and
        ``prune``; children deleted together with their parent are simply gone."""
        ...

    async def purge(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        """Delete up to ``limit`` finished (succeeded, dead or cancelled) jobs matching
        ``filter``, oldest id first, with their history; return how many."""
        ...

    async def reschedule(self, job_id: int, edit: JobEdit, *, now: datetime | None = None) -> Job:
        """Apply ``edit`` (run_at or now, priority, queue) to a pending job and return it.

        One conditional write, fenced against a concurrent claim: it changes the job only if
        it is still pending when written, so a job claimed meanwhile is reported, never
        changed. JobNotFound; JobRunning while (or once) a worker holds it; StateConflict for
        a finished job. Nothing changes on any error. A job made due wakes workers.
        """
        ...

    async def get(self, job_id: int) -> Job:
        """The job with this id, or JobNotFound."""
        ...

    async def get_preview(self, job_id: int, *, chars: int) -> Job:
        """The job with this id, its payload and result as ``Preview``s of (at most) the first
        ``chars`` characters of their JSON text, and its last error cut alike: cut as the
        store reads them, so a job's own answer never reads a whole 900 KB payload (``get``
        reads it whole). JobNotFound."""
        ...

    async def get_many(self, job_ids: Sequence[int]) -> list[Job]:
        """The jobs with these ids that exist, in no particular order, in one query (ids
        that name no job are left out). For waiting on many jobs at once."""
        ...

    async def list_jobs(
        self,
        filter: JobFilter,
        *,
        cursor: str | None = None,
        limit: int = 50,
        previews: bool = False,
    ) -> Page:
        """Jobs matching ``filter``, newest (highest id) first, by keyset: a page is stable
        however many jobs are inserted meanwhile. InvalidCursor for a cursor we did not issue.
        With ``previews``, each job's payload and result are a ``Preview`` (their first
        characters, cut as the store reads them) and its last error is cut alike: a page's
        size is bounded whatever the jobs hold (the API's lists and ``rota jobs list``; the
        job's own route reads more through ``get_preview``).
        """
        ...

    async def counts(self, *, now: datetime | None = None) -> Counts:
        """Job counts by state and by queue; cheap at millions of rows."""
        ...

    async def count_jobs(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        """How many jobs match ``filter``, counting no further than ``limit``."""
        ...

    async def count_or_estimate(self, filter: JobFilter, *, exact_up_to: int) -> Counted:
        """How many jobs match ``filter``: exactly while at most ``exact_up_to`` match (a
        count that stops after ``exact_up_to + 1`` rows decides), and exactly beyond that
        where the store holds the number already (the maintained counts of a state, queue
        and kind). Otherwise an estimate flagged ``estimated``, never below
        ``exact_up_to + 1``: PostgreSQL's planner's row estimate for the filter (from each
        table's statistics of the columns filters combine: tenant and state; tenant, state,
        kind and queue; schedule and state), SQLite's share of matches in evenly spread
        windows of ids times the jobs counted. Its cost does not grow with the number of
        matches. The memory store always counts exactly."""
        ...

    async def throughput(
        self, *, since: datetime, bucket: timedelta, now: datetime | None = None
    ) -> list[ThroughputBucket]:
        """Jobs finished per bucket from ``since`` to now, oldest first, empty buckets included."""
        ...

    async def activity(
        self,
        *,
        since: datetime,
        bucket: timedelta,
        queue: str | None = None,
        kind: str | None = None,
        now: datetime | None = None,
    ) -> list[ActivityBucket]:
        """Attempts that ended per bucket from ``since`` (a whole minute) to now, oldest first,
        empty buckets included, of one queue or kind (or all): successes, failures, deaths,
        and run times and waits as duration histograms (rota.domain.activity). Read from the
        per-minute tallies that ``complete_many`` and ``fail`` keep in their own fenced
        statement; InvalidInput for a bucket that is no whole number of minutes."""
        ...

    async def top_errors(
        self,
        *,
        since: datetime,
        queue: str | None = None,
        kind: str | None = None,
        limit: int = TOP_ERRORS,
        now: datetime | None = None,
    ) -> list[ErrorGroup]:
        """The ``limit`` most frequent errors of failed attempts from ``since`` to now, of
        one queue or kind (or all), grouped by fingerprint (rota.domain.activity
        .error_fingerprint), most first; read from the per-minute error tallies ``fail``
        keeps, so its cost follows the window's minutes, not the jobs."""
        ...

    async def attempts(self, job_id: int) -> list[Attempt]:
        """Every attempt of the job, oldest first, the current one included. JobNotFound."""
        ...

    async def rescue(self, *, now: datetime | None = None, limit: int = 1000) -> RescueResult:
        """Expired leases, by ``rota.domain.blame.expire``: dead when a suspect's worker died
        on its last attempt, otherwise pending again (due now), the attempt counted or given
        back, the job a crash suspect when its handler had started.

        Each row is rewritten only if it still carries the token the rescuer observed, so a
        rescue never overwrites a job that completed or was re-claimed meanwhile.
        """
        ...

    async def expire(self, *, now: datetime | None = None, limit: int = 1000) -> list[int]:
        """Cancel up to ``limit`` pending jobs whose ``expires_at`` has come (<= now), with
        last_error "expired" (rota.domain.job_state.EXPIRED); return their ids, ascending. Claims
        never take such a job, whether or not this ran yet."""
        ...

    async def end_unrunnable(
        self,
        *,
        grace: timedelta,
        alive_within: timedelta,
        now: datetime | None = None,
        limit: int = 1000,
    ) -> list[int]:
        """End dead, with last_error ``rota.domain.job_state.unrunnable(kind)``, up to ``limit``
        pending jobs due for longer than ``grace`` that no live worker can run: their queue is
        served by at least one worker that beat within ``alive_within``, and every such worker
        listed its kinds, none of them the job's. Return their ids, ascending.

        A queue no live worker serves ends nothing (the fleet may be down or deploying), nor
        does a worker that did not list its kinds; so during a rolling deploy a job waits for
        a worker of the new code, and only one left behind for ``grace`` ends.
        """
        ...

    async def prune(self, *, older_than: datetime, limit: int = 10_000) -> int:
        """Delete up to ``limit`` terminal jobs finished before ``older_than``, oldest first
        (by finish time, or by id where an index on finish times would cost every completion);
        return how many. A store that keeps finished jobs by day (PostgreSQL) deletes a day
        only once all of it finished before ``older_than``, and then all of it in one pass,
        whatever ``limit`` says: a job is kept at least as long as asked, and at most a day
        longer."""
        ...

    async def bulk_retry(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        """Retry up to ``limit`` dead or cancelled jobs matching ``filter``; return how many."""
        ...

    async def bulk_cancel(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        """Cancel up to ``limit`` unfinished (waiting, pending, held or running) jobs matching
        ``filter``; return how many."""
        ...

    async def hold(self, job_id: int, *, now: datetime | None = None) -> Job:
        """A waiting or pending job becomes held: no claim takes it until ``release_held``.
        One conditional write, fenced against a concurrent claim like ``reschedule``: a job
        claimed meanwhile is reported, never changed. It keeps its run_at, unique key, slot
        and parents. JobNotFound; StateConflict in any other state (a running job, one already
        held, a finished one); nothing changes on any error."""
        ...

    async def release_held(self, job_id: int, *, now: datetime | None = None) -> Job:
        """A held job goes back where it was: waiting while parents are left (``waiting_on``),
        else pending, due at its run_at (a job whose time has passed is due at once; a job
        made due wakes workers). JobNotFound; StateConflict unless it is held."""
        ...

    async def bulk_hold(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        """Hold up to ``limit`` waiting or pending jobs matching ``filter``, oldest id first;
        return how many (jobs claimed meanwhile are not counted)."""
        ...

    async def bulk_release_held(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        """Release up to ``limit`` held jobs matching ``filter``, oldest id first; return how
        many."""
        ...

    async def register_worker(self, info: WorkerInfo, *, now: datetime | None = None) -> None:
        """Add or replace this worker's row in the registry, beat_at = now."""
        ...

    async def beat_worker(self, name: str, *, now: datetime | None = None) -> bool:
        """Refresh the worker's beat_at; False if it has no row (the caller re-registers)."""
        ...

    async def deregister_worker(self, name: str) -> None:
        """Remove the worker's row (clean shutdown)."""
        ...

    async def list_workers(self) -> list[WorkerInfo]:
        """Every registered worker with its last beat and the number of jobs it holds."""
        ...

    async def prune_workers(self, *, older_than: datetime) -> int:
        """Forget workers not seen since ``older_than``; return how many."""
        ...

    # ------------------------------------------------------------------ audit log

    async def record_audit(self, record: AuditRecord, *, now: datetime | None = None) -> AuditEntry:
        """Append an entry for an operator action, at ``now`` (None: the store's clock), and
        return it. Ids strictly increase, and are never reused after pruning."""
        ...

    async def list_audit(
        self, filter: AuditFilter, *, cursor: str | None = None, limit: int = 50
    ) -> AuditPage:
        """Entries matching ``filter``, newest (highest id) first, by keyset (cursors as for
        jobs): a page is stable however many entries are appended meanwhile. At most
        MAX_PAGE_SIZE per page. InvalidCursor for a cursor we did not issue."""
        ...

    async def prune_audit(self, *, older_than: datetime, limit: int = 10_000) -> int:
        """Delete up to ``limit`` entries recorded before ``older_than``, oldest first; return
        how many."""
        ...

    async def pause_queue(self, queue: str, *, now: datetime | None = None) -> QueueInfo:
        """No job of ``queue`` is claimed until it is resumed; running jobs carry on."""
        ...

    async def resume_queue(self, queue: str, *, now: datetime | None = None) -> QueueInfo:
        """``queue`` is claimed from again."""
        ...

    async def list_queues(self) -> list[QueueInfo]:
        """Every queue with settings, by name."""
        ...

    async def set_limit(self, limit: Limit, *, now: datetime | None = None) -> None:
        """Add or replace the limit for (scope, key); starts already counted are kept."""
        ...

    async def delete_limit(self, scope: LimitScope, key: str) -> bool:
        """Remove the limit for (scope, key); False if there was none."""
        ...

    async def list_limits(self, *, now: datetime | None = None) -> list[LimitInfo]:
        """Every limit with its current use, by scope and key."""
        ...

    async def running_by_tenant(self, *, now: datetime | None = None) -> dict[str, int]:
        """Jobs running with a live lease, per tenant (jobs without a tenant not counted)."""
        ...

    async def watch(
        self,
        on_due: Callable[[datetime | None], None],
        *,
        on_schedules: Callable[[], None] | None = None,
    ) -> None:
        """Until cancelled, call ``on_due(run_at)`` when jobs may have arrived: ``run_at`` is
        the earliest run_at among them, or None when unknown (e.g. after a reconnect). A hint
        only; it may come from any thread, late, twice, or not at all, so workers also poll.
        Where ``pushes_schedule_changes`` is true, ``on_schedules()`` is called on the
        watching loop when a schedule was created, changed or resumed by any process (and
        after a reconnect), so schedule firers may sleep until the next slot.
        """
        ...

    async def expect_finished(self, job_ids: Sequence[int]) -> None:
        """Say that someone waits for these jobs: from now on, the write that makes one of
        them terminal is reported to ``watch_finished`` (once per write). Jobs nobody expects
        may go unreported, so finishing them costs nothing extra. Ids of jobs that do not
        exist, or have finished, are harmless."""
        ...

    async def watch_finished(self, on_finished: Callable[[], None]) -> None:
        """Until cancelled, call ``on_finished()`` after expected jobs (``expect_finished``)
        reached a terminal state (succeeded, dead, cancelled), and after every reconnect. A
        hint only, which says neither which jobs nor how many: it may come from any thread,
        late, twice, or not at all. Where ``pushes_finished`` is false it never comes, and
        waiters poll."""
        ...
