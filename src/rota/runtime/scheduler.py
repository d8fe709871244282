"""Scheduler: the service that turns due schedule slots into jobs, at most once per slot.

Every worker runs one. That is safe because the store does the deciding: ``fire_due`` locks
each due schedule, inserts its slot's job under the unique (schedule, slot) key and advances the
schedule in one transaction, so any number of firers produce one job per slot. Between ticks the
firer sleeps until the earliest schedule is due (read from the store, by the store's clock). On
a store that pushes schedule changes (PostgreSQL) the worker nudges it when a schedule is
created, changed or resumed anywhere, so it sleeps up to ``PUSHED_MAX_WAIT``; elsewhere it
looks at least every second, so a schedule added by another process is seen promptly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from rota.domain.schedule import ScheduleSpec
from rota.domain.schedule_state import Firing
from rota.domain.wording import plural
from rota.domain.workflow import WorkflowBuilder
from rota.observability.metrics import Metrics
from rota.store.base import Store

log = logging.getLogger("rota.scheduler")

#: Bounds of the wait between ticks: short enough that a due slot fires within milliseconds
#: and a schedule created elsewhere within a second, long enough not to spin.
MIN_WAIT = timedelta(milliseconds=10)
MAX_WAIT = timedelta(seconds=1)
#: The longest wait where changes are pushed: only a safety net for a lost notification.
PUSHED_MAX_WAIT = timedelta(seconds=30)
#: Up to this many slots of one firing are logged one by one; more are summed up in one line.
LOGGED_SLOTS = 5


class Scheduler:
    """Fires due schedules (``tick``); first upserts the schedules defined in code.

    ``specs`` are upserted by the first tick, all in one store call (``upsert_schedules``, one
    transaction) before it fires anything: definition fields from code win; a pause set at
    run time is kept. A failing upsert is retried on the next tick, before that tick fires
    anything. ``workflows`` are the builders of the workflow schedules this firer can fire, by
    schedule name; others' workflow schedules are left to the processes that define them.
    """

    name = "scheduler"

    def __init__(
        self,
        store: Store,
        *,
        specs: Sequence[ScheduleSpec] = (),
        workflows: Mapping[str, WorkflowBuilder] | None = None,
        metrics: Metrics | None = None,
        batch: int = 100,
        min_wait: timedelta = MIN_WAIT,
        max_wait: timedelta = MAX_WAIT,
    ) -> None:
        self._store = store
        self._unsynced = list(specs)
        self._workflows = dict(workflows or {})
        self._metrics = metrics or Metrics()
        self._batch = batch
        self._min_s = min_wait.total_seconds()
        self._max_s = max_wait.total_seconds()
        self._wait_s = self._min_s
        #: Set by ``nudge``: the service loop ticks at once instead of waiting out its interval.
        self.nudged = asyncio.Event()

    def nudge(self) -> None:
        """Schedules changed somewhere: look again now (call on the worker's loop)."""
        self.nudged.set()

    def interval_s(self) -> float:
        """Seconds until the earliest schedule is due, as of the last tick, within the bounds;
        0 after a full batch of firings (more may be due)."""
        return self._wait_s

    async def tick(self) -> list[Firing]:
        """Upsert the code's schedules (once, on the first tick that succeeds), fire every
        due slot, and note when to come back."""
        if self._unsynced:
            await self._store.upsert_schedules(self._unsynced)
            self._unsynced = []
        firings = await self._store.fire_due(limit=self._batch, workflows=self._workflows)
        for firing in firings:
            self._report(firing)
        if len(firings) >= self._batch:
            self._wait_s = 0.0  # more may be due right now: the next batch at once
            return firings
        due = await self._store.next_fire_at(workflows=list(self._workflows))
        if due is None:
            self._wait_s = self._max_s
        else:
            left = (due - await self._store.now()).total_seconds()
            self._wait_s = min(self._max_s, max(self._min_s, left))
        return firings

    def _report(self, firing: Firing) -> None:
        counted = self._metrics.schedules_fired
        inserted = firing.inserted
        duplicates = len(firing.jobs) - len(inserted)
        if inserted:
            counted.labels("fired").inc(len(inserted))
            first, last = inserted[0].job, inserted[-1].job
            if len(inserted) <= LOGGED_SLOTS:
                for result in inserted:
                    log.info(
                        "schedule %s: slot %s enqueued as job %d",
                        firing.schedule,
                        _slot(result.job.slot_at),
                        result.job.id,
                    )
            else:  # a catch-up (misfire=all): one line, not one per slot
                log.info(
                    "schedule %s: %d slots from %s to %s enqueued as jobs %d to %d",
                    firing.schedule,
                    len(inserted),
                    _slot(first.slot_at),
                    _slot(last.slot_at),
                    first.id,
                    last.id,
                )
        if duplicates:
            # A run-now took the very instant of a slot: the slot has its job already.
            counted.labels("duplicate").inc(duplicates)
            log.debug(
                "schedule %s: %d %s already had a job",
                firing.schedule,
                duplicates,
                plural("slot", duplicates),
            )
        if firing.skipped_overlap:
            counted.labels("skipped_overlap").inc(len(firing.skipped_overlap))
            log.debug(
                "schedule %s: %d %s skipped, the previous run is still active (%s)",
                firing.schedule,
                len(firing.skipped_overlap),
                plural("slot", len(firing.skipped_overlap)),
                firing.skipped_overlap[-1].isoformat(),
            )
        for slot, why in firing.failed:
            counted.labels("failed").inc()
            log.error("schedule %s: slot %s got no workflow: %s", firing.schedule, _slot(slot), why)
        if firing.missed:
            counted.labels("skipped_misfire").inc(firing.missed)
            log.debug(
                "schedule %s: %d missed %s dropped by its misfire policy",
                firing.schedule,
                firing.missed,
                plural("slot", firing.missed),
            )


def _slot(instant: datetime | None) -> str:
    return "?" if instant is None else instant.isoformat()
