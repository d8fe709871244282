"""Worker: the claim loop, bounded concurrency, heartbeats, and a graceful stop.

One asyncio loop runs: the claim loop (claims sized to free slots, woken by the store or a
short poll), one task per held job, and the background services (heartbeat, rescuer,
registry, and any extra such as the schedule firer), each a ``tick()`` tests call directly.

An attempt that runs alone (a crash suspect's, ``rota.domain.blame``) runs alone indeed: while
the worker holds one it claims nothing, and its handler starts only once every other job it
holds has finished.
Local deadlines and timers are set from the store's clock as the worker measures it
(``storeclock``), never from the local wall clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

from rota.domain.clock import Clock, SystemClock
from rota.domain.job import Job
from rota.domain.retry import RECONNECT_BACKOFF
from rota.domain.wording import counted
from rota.observability import tracing
from rota.observability.logging import current_worker
from rota.observability.metrics import Metrics
from rota.runtime.completions import Completer
from rota.runtime.context import JobContext
from rota.runtime.durable import DurableRuntime
from rota.runtime.execution import Execution, Stop
from rota.runtime.executor import Executor
from rota.runtime.heartbeat import Heartbeater
from rota.runtime.hooks import Hooks
from rota.runtime.progress import ProgressWriter
from rota.runtime.pruner import Pruner
from rota.runtime.registration import Registration
from rota.runtime.registry import Registry
from rota.runtime.rescuer import Rescuer
from rota.runtime.services import (
    ErrorLog,
    Service,
    bounded,
    first_of,
    run_service,
    wait_or_stop,
    woken,
)
from rota.runtime.storeclock import StoreClock
from rota.runtime.worker_settings import WorkerSettings, default_worker_name
from rota.store.base import Store
from rota.store.records import ALIVE_BEATS

log = logging.getLogger("rota.worker")


class Worker:
    """Claims and executes jobs until stopped. See the module docstring."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        settings: WorkerSettings | None = None,
        *,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        services: Sequence[Service] = (),
        hooks: Hooks | None = None,
    ) -> None:
        self.settings = (settings or WorkerSettings()).validated()
        self.name = self.settings.name or default_worker_name()
        self.queues = list(self.settings.queues or registry.queues())
        self._store = store
        self._registry = registry
        self._clock = clock or SystemClock()
        self.metrics = metrics or Metrics()
        self.store_clock = StoreClock(self._clock, metrics=self.metrics)
        self._held: dict[int, Execution] = {}
        #: The attempt held that runs alone, if any: nothing else is claimed meanwhile.
        self._alone: Execution | None = None
        self._threads = ThreadPoolExecutor(
            max_workers=self.settings.concurrency, thread_name_prefix="rota-job"
        )
        self._completer = Completer(store, timeout_s=self.settings.lease.total_seconds())
        #: Steps, sleeps and waits of the jobs this worker runs (rota.runtime.durable).
        self._durable = DurableRuntime(
            store,
            clock=self._clock,
            metrics=self.metrics,
            threads=self._threads,
            lease=self.settings.lease,
            held=self._held,
            retry_of=registry.retry_of,
        )
        self._executor = Executor(
            store,
            registry,
            worker=self.name,
            clock=self._clock,
            metrics=self.metrics,
            threads=self._threads,
            completer=self._completer,
            lease=self.settings.lease,
            on_abandon=self._simulate_restart,
            until_alone=self._until_alone,
            hooks=hooks,
            on_parent_finished=lambda: self._wake_soon(None),
            max_result_bytes=self.settings.max_result_bytes,
        )
        self._resume_claims_at = 0.0
        self.heartbeater = Heartbeater(
            store,
            self._clock,
            self.store_clock,
            lease=self.settings.lease,
            heartbeat=self.settings.heartbeat,
            held=self._held,
            arm=self._arm,
            lease_margin=self._lease_margin,
        )
        self.rescuer = Rescuer(
            store,
            interval=self.settings.rescue,
            unrunnable_grace=self.settings.unrunnable_grace,
            # A worker seen within the grace counts, whatever its own heartbeat interval: a
            # fleet of mixed settings never ends a job a slow-beating worker could run.
            alive_within=max(
                ALIVE_BEATS * self.settings.heartbeat,
                self.settings.unrunnable_grace or timedelta(0),
            ),
        )
        self.progress = ProgressWriter(
            store,
            self._clock,
            lease=self.settings.lease,
            held=self._held,
            idle=self.settings.heartbeat,
        )
        self.registration = Registration(
            store,
            registry,
            name=self.name,
            queues=self.queues,
            concurrency=self.settings.concurrency,
            heartbeat=self.settings.heartbeat,
        )
        self._services: list[Service] = [
            self.heartbeater,
            self.progress,
            self.rescuer,
            self.registration,
            *services,
        ]
        if self.settings.retention is not None or self.settings.audit_retention is not None:
            self._services.append(
                Pruner(
                    store,
                    retention=self.settings.retention,
                    audit_retention=self.settings.audit_retention,
                )
            )
        # asyncio events bind to a loop only when first awaited, so they can be made here.
        self._wake = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._job_finished = asyncio.Event()
        self._stop_claiming = asyncio.Event()
        self._stopped_services = asyncio.Event()
        self._aborted = asyncio.Event()
        self.idle = asyncio.Event()
        self._first_claim = asyncio.Event()  # answered or failed: the services may start
        self._wake_timer: asyncio.TimerHandle | None = None
        #: Lease alarms by local deadline: one timer for every held job due at that instant.
        self._alarms: dict[float, _Alarm] = {}
        self._wake_at: float | None = None

    # ------------------------------------------------------------------ public surface

    @property
    def held(self) -> list[Job]:
        """The jobs this worker is executing now."""
        return [execution.job for execution in self._held.values()]

    @property
    def threads_end_with_process(self) -> bool:
        """Set by a caller that ends the process once ``run`` returns (``rota worker``): a
        hard stop then hands back jobs whose sync handler is still running too."""
        return self._executor.threads_end_with_process

    @threads_end_with_process.setter
    def threads_end_with_process(self, value: bool) -> None:
        self._executor.threads_end_with_process = value

    @property
    def aborted(self) -> bool:
        """True once a second stop request abandoned the running jobs."""
        return self._aborted.is_set()

    def add_service(self, service: Service) -> None:
        """Run ``service`` alongside the worker's own (call before ``run``)."""
        self._services.append(service)

    def free_slots(self) -> int:
        """Jobs a claim may take now: none while an attempt that runs alone is held."""
        if self._alone is not None:
            return 0
        return self.settings.concurrency - len(self._held)

    def request_stop(self) -> None:
        """Stop claiming; running jobs get the shutdown timeout to finish, then are released.
        A second call stops at once: running jobs are cancelled and handed back, fenced,
        within a second each (``Executor._halted``)."""
        if self._stop_claiming.is_set():
            self._aborted.set()
            log.warning("stopping now: running jobs are handed back unfinished")
            for execution in list(self._held.values()):
                execution.interrupt(Stop.HALT)
        else:
            log.info(
                "stopping: no new claims; waiting for %s", counted(len(self._held), "running job")
            )
            self._stop_claiming.set()
        self.wake()

    def wake(self, due_at: datetime | None = None) -> None:
        """Claim soon: now, or when ``due_at`` (store time) comes. Safe from any thread."""
        loop = self._loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake_soon(due_at)
        else:
            loop.call_soon_threadsafe(self._wake_soon, due_at)

    async def run(self) -> None:
        """Run until ``request_stop()``; returns after a graceful (or immediate) stop."""
        self._bind_loop()
        current_worker.set(self.name)
        await self.registration.register()
        await self.heartbeater.read_clock()  # where the store's clock stands, before any wait
        log.info(
            "worker %s started: queues %s, concurrency %d, kinds %s",
            self.name,
            ",".join(self.queues),
            self.settings.concurrency,
            ",".join(self._registry.kinds()) or "(none)",
        )
        watch_task = asyncio.create_task(self._watch(), name="rota-watch")
        await asyncio.sleep(0)  # let the watcher subscribe before the first claim
        service_tasks = [
            asyncio.create_task(self._service(service), name=f"rota-{service.name}")
            for service in self._services
        ]
        try:
            await self._claim_loop()
            await self._drain()
        finally:
            self._stopped_services.set()
            self.heartbeater.cancel()
            watch_task.cancel()
            for task in service_tasks:
                task.cancel()
            await asyncio.gather(watch_task, *service_tasks, return_exceptions=True)
            await self._finish()

    async def _service(self, service: Service) -> None:
        # The first claim goes first: anything queued ahead of it delays jobs due at start.
        await self._first_claim.wait()
        await run_service(service, self._stopped_services, self._clock)

    # ------------------------------------------------------------------ ticks

    async def claim_tick(self) -> list[Job]:
        """Claim up to the free slots (at most claim_batch) and start each job."""
        self._bind_loop()
        free = min(self.free_slots(), self.settings.claim_batch)
        if free <= 0:
            return []
        sent = self._clock.monotonic()
        try:
            # Bounded by the lease: an answer later than that is for leases already running out.
            jobs = await bounded(
                self._store.claim(
                    self.name,
                    queues=self.queues,
                    limit=free,
                    lease=self.settings.lease,
                    fair=self.settings.fair,
                    kinds=self._registry.kinds(),
                ),
                self.settings.lease.total_seconds(),
                "a claim",
            )
        except Exception:
            self.metrics.claims.labels("error").inc()
            raise
        self.metrics.claims.labels("claimed" if jobs else "empty").inc()
        if jobs and jobs[0].started_at is not None:  # the store's now as it leased them
            self.store_clock.observe(
                sent, self._clock.monotonic(), jobs[0].started_at, for_rate=False
            )
        deadline = sent + self._lease_margin()
        if jobs and deadline - self._clock.monotonic() < self.heartbeater.interval_s():
            self.heartbeater.hurry()
        if jobs:
            tracing.claimed(
                jobs, worker=self.name, queues=self.queues, took_s=self._clock.monotonic() - sent
            )
        # Counted per queue, once per claim: a labels() lookup and a locked add per job cost
        # more than the rest of a no-op job's bookkeeping.
        per_queue: dict[str, int] = {}
        for job in jobs:
            per_queue[job.queue] = per_queue.get(job.queue, 0) + 1
        for queue, count in per_queue.items():
            self.metrics.jobs_claimed.labels(queue).inc(count)
        for job in jobs:
            self._start(job, sent, deadline)
        return jobs

    async def run_until_idle(self, *, max_jobs: int | None = None) -> int:
        """Claim and run due jobs until none is due; return how many were started.

        For tests: with a FakeClock, jobs scheduled in the future stay put until advanced.
        """
        started = 0
        while max_jobs is None or started < max_jobs:
            jobs = await self.claim_tick()
            started += len(jobs)
            if not self._held:
                if not jobs:
                    break
                continue
            await asyncio.wait(
                [execution.task for execution in self._held.values() if execution.task],
                return_when=asyncio.FIRST_COMPLETED,
            )
        await self.wait_for_running()
        return started

    async def wait_for_running(self) -> None:
        """Wait until every held job has finished and reported."""
        while self._held:
            await asyncio.wait(
                [execution.task for execution in self._held.values() if execution.task]
            )

    # ------------------------------------------------------------------ internals

    @property
    def _loop(self) -> asyncio.AbstractEventLoop | None:
        return getattr(self, "_bound_loop", None)

    def _bind_loop(self) -> None:
        if self._loop is None:
            self._bound_loop = self._durable.loop = asyncio.get_running_loop()

    def _lease_margin(self) -> float:
        """Local seconds after sending a claim or heartbeat during which the lease is surely
        ours: the lease less a safety margin for the request's own trip and an error in the
        measured clock rate, as the store's clock runs (``StoreClock.rate``)."""
        lease = self.settings.lease.total_seconds()
        return self.store_clock.local_s(
            lease - min(self.settings.heartbeat.total_seconds(), lease * 0.2)
        )

    def _start(self, job: Job, sent: float, deadline: float) -> None:
        execution = Execution(
            job,
            JobContext(job, self.name, self._durable, on_progress=self.progress.reported),
            deadline,
            job.lease,
            finished=self._finished,
            renewed_at=sent,
        )
        self._held[job.id] = execution
        if job.runs_alone:
            self._alone = execution
        self._arm(execution)
        # Unnamed (Task-N): a name per job costs more than the rest of the task's creation.
        # The task lets go of the job as it ends (Executor.run calls _finished; a done
        # callback would cost one per job); one cancelled unstarted, by Execution.interrupt.
        execution.task = asyncio.create_task(self._executor.run(execution))

    def _arm(self, execution: Execution) -> None:
        """Stop the handler when its local lease deadline passes, even while a heartbeat is
        stuck on a dead connection; every successful heartbeat moves the alarm.

        The jobs of one claim share their deadline, and so do the leases one heartbeat renewed:
        they share one timer, not one each."""
        self._disarm(execution)
        deadline = execution.deadline
        alarm = self._alarms.get(deadline)
        if alarm is None:
            loop = asyncio.get_running_loop()
            delay = max(0.0, deadline - self._clock.monotonic())
            handle = loop.call_later(delay, self._deadline_passed, deadline)
            alarm = self._alarms[deadline] = _Alarm(handle)
        alarm.holders += 1
        execution.alarm_at = deadline

    def _disarm(self, execution: Execution) -> None:
        deadline = execution.alarm_at
        if deadline is None:
            return
        execution.alarm_at = None
        alarm = self._alarms.get(deadline)
        if alarm is not None:
            alarm.holders -= 1
            if alarm.holders <= 0:
                alarm.handle.cancel()
                del self._alarms[deadline]

    def _deadline_passed(self, deadline: float) -> None:
        if self._alarms.pop(deadline, None) is None:
            return
        now = self._clock.monotonic()
        overdue = False
        for execution in [e for e in self._held.values() if e.alarm_at == deadline]:
            execution.alarm_at = None
            if execution.stop is not None:
                continue
            if now < execution.deadline:
                self._arm(execution)  # a test's clock, or a heartbeat that landed meanwhile
            else:
                overdue = True
        if overdue:
            # Leases run out together (they were renewed together): stop them in one go.
            # One already writing its outcome (or running its hooks after it) stops by itself.
            self.heartbeater.expire(
                [
                    e
                    for e in self._held.values()
                    if e.stop is None and e.deadline <= now and not e.reporting
                ]
            )

    def _finished(self, execution: Execution) -> None:
        self._disarm(execution)
        if self._held.get(execution.job.id) is execution:
            del self._held[execution.job.id]
        if self._alone is execution:
            self._alone = None
        self._slot_freed.set()
        self._job_finished.set()

    async def _until_alone(self, execution: Execution) -> None:
        """Return once ``execution`` is the only job held, for its handler to start alone."""
        while any(other is not execution for other in self._held.values()):
            self._job_finished.clear()
            await self._job_finished.wait()

    def _simulate_restart(self) -> None:
        """A handler raised Abandon: like a crashed and restarted process, claim nothing for
        one lease, so the abandoned job is taken over by another worker."""
        lease = self.settings.lease + self.settings.heartbeat
        self._resume_claims_at = self._clock.monotonic() + lease.total_seconds()

    def _wake_soon(self, due_at: datetime | None) -> None:
        if due_at is None:
            self._wake.set()
            return
        # A future job: arm one timer for the earliest such instant we have heard of. The due
        # time is on the store's clock, and so is the delay: the local wall clock may be off.
        delay = self.store_clock.delay_s(due_at)
        if delay is None or delay <= 0:
            self._wake.set()
            return
        if delay <= self.store_clock.uncertainty_s:
            # Maybe due already: the store's now is known only to within the latest
            # reading's round trip, and a job enqueued for now must not wait for the estimate
            # to catch up. Claim now; the timer below covers a job not due yet after all.
            self._wake.set()
        at = self._clock.monotonic() + delay
        if self._wake_at is not None and self._wake_at <= at and self._wake_timer is not None:
            return
        if self._wake_timer is not None:
            self._wake_timer.cancel()
        loop = self._loop
        assert loop is not None
        self._wake_at = at
        self._wake_timer = loop.call_later(delay, self._timer_fired)

    def _timer_fired(self) -> None:
        self._wake_at = None
        self._wake_timer = None
        self._wake.set()

    async def _watch(self) -> None:
        watch = getattr(self._store, "watch", None)
        if watch is None:
            return
        await watch(self.wake, on_schedules=self._schedules_changed)

    def _schedules_changed(self) -> None:
        for service in self._services:
            nudge = getattr(service, "nudge", None)
            if nudge is not None:
                nudge()

    async def _claim_loop(self) -> None:
        try:
            await self._claiming()
        finally:
            self._first_claim.set()

    async def _claiming(self) -> None:
        errors = ErrorLog(self._clock)
        failures = 0
        poll = self.settings.poll.total_seconds()
        while not self._stop_claiming.is_set():
            restart_left = self._resume_claims_at - self._clock.monotonic()
            if restart_left > 0:
                await wait_or_stop(self._stop_claiming, restart_left)
                continue
            if self.free_slots() <= 0:
                self._slot_freed.clear()
                waiters = [self._slot_freed.wait(), self._stop_claiming.wait()]
                await first_of(waiters)
                continue
            # Clear before claiming: a wake-up that arrives during the claim must not be lost.
            self._wake.clear()
            try:
                jobs = await self.claim_tick()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self._first_claim.set()
                failures += 1
                errors.error("claim failed: %s", error)
                # Short and capped: in an outage the claim itself waits for the store's next
                # connection, so this pause is all that stands between its return and a claim.
                backoff = RECONNECT_BACKOFF.delay(failures).total_seconds()
                await wait_or_stop(self._stop_claiming, backoff)
                continue
            self._first_claim.set()
            if failures:
                errors.recovered("claiming")
                failures = 0
            if jobs:
                # Let the handlers just started take their first step before the next claim
                # is built and sent: a job's start should not wait on the claim after it.
                await asyncio.sleep(0)
            else:
                # Nothing is due. (A short batch is no proof of that: rows locked by other
                # claimers, limits and per-tenant quotas all shorten a batch; so claim again.)
                # request_stop() wakes this wait too.
                self.idle.set()
                await woken(self._wake, within_s=poll)
                self.idle.clear()

    async def _drain(self) -> None:
        """Let running jobs finish within the shutdown timeout, then release the rest."""
        tasks = [execution.task for execution in self._held.values() if execution.task]
        if tasks and not self._aborted.is_set():
            abort: asyncio.Task[object] = asyncio.create_task(self._aborted.wait())
            pending: set[asyncio.Task[object]] = set(tasks)
            # The grace period is a local wait on the event loop's clock, like any timeout.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.settings.shutdown_timeout.total_seconds()
            while pending and not abort.done():
                left = deadline - loop.time()
                if left <= 0:
                    break
                _, pending = await asyncio.wait(
                    [*pending, abort], timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                pending.discard(abort)
            abort.cancel()
        remaining = list(self._held.values())
        aborted = self._aborted.is_set()
        if remaining and not aborted:
            log.info(
                "shutdown timeout: releasing %s for other workers", counted(len(remaining), "job")
            )
        for execution in remaining:
            if execution.stop is None:  # one already stopping (a hard stop) is left to finish
                execution.interrupt(Stop.HALT if aborted else Stop.RELEASE)
        await asyncio.gather(
            *(execution.task for execution in remaining if execution.task),
            return_exceptions=True,
        )

    async def _finish(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        if self._wake_timer is not None:
            self._wake_timer.cancel()
        try:
            await self._store.deregister_worker(self.name)
        except Exception as error:  # the row will be pruned as stale; nothing to lose
            log.warning("could not deregister worker: %s", error)
        log.info("worker %s stopped", self.name)


@dataclass(slots=True)
class _Alarm:
    """A lease deadline's timer and how many held jobs it is armed for."""

    handle: asyncio.TimerHandle
    holders: int = 0
