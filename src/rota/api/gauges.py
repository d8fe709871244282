"""Store-derived gauges for /metrics, refreshed at scrape time and reused for a moment.

Counting jobs costs the store a query, so one refresh serves every scrape within
``metrics_cache_seconds``. Queue labels are bounded: the largest queues keep their own label,
the rest are summed under ``_other`` (not a valid queue name, so it cannot collide).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from rota.api.settings import ApiSettings
from rota.client import Client
from rota.domain.job_state import JobState
from rota.observability.metrics import Metrics
from rota.store.records import Counts

OTHER_QUEUES = "_other"


class StoreGauges:
    """Sets queue depth, dead jobs, oldest due age and workers alive from the store."""

    def __init__(
        self,
        client: Client,
        metrics: Metrics,
        settings: ApiSettings,
        *,
        reads: Client | None = None,
    ) -> None:
        self._client = client
        #: Where the job counts come from (a read replica, if any); workers from ``client``.
        self._reads = reads or client
        self._metrics = metrics
        self._settings = settings
        self._refreshed_at: datetime | None = None

    async def refresh(self) -> None:
        now = await self._client.store.now()
        if self._refreshed_at is not None:
            age = (now - self._refreshed_at).total_seconds()
            # A clock that went backwards also forces a refresh.
            if 0 <= age < self._settings.metrics_cache_seconds:
                return
        counts = await self._reads.store.counts(now=now)
        workers = await self._client.workers()
        heartbeat = timedelta(seconds=self._settings.heartbeat_interval_seconds)
        alive = sum(1 for worker in workers if worker.is_alive(now, heartbeat))
        self._set_queue_depth(counts)
        self._metrics.dead_jobs.set(counts.total(JobState.DEAD))
        oldest = counts.oldest_due_at
        self._metrics.oldest_due_age.set(
            max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0
        )
        self._metrics.workers_alive.set(alive)
        self._refreshed_at = now

    def _set_queue_depth(self, counts: Counts) -> None:
        by_size = sorted(
            counts.by_queue.items(), key=lambda item: (-sum(item[1].values()), item[0])
        )
        kept = by_size[: self._settings.max_metric_queues]
        other: dict[JobState, int] = dict.fromkeys(JobState, 0)
        for _, per_state in by_size[self._settings.max_metric_queues :]:
            for state, n in per_state.items():
                other[state] += n
        gauge = self._metrics.queue_depth
        # Forget queues that vanished since the last scrape, so none lingers with a stale value.
        gauge.clear()
        for queue, per_state in kept:
            for state in JobState:
                gauge.labels(queue=queue, state=state.value).set(per_state.get(state, 0))
        if len(by_size) > len(kept):
            for state in JobState:
                gauge.labels(queue=OTHER_QUEUES, state=state.value).set(other[state])
