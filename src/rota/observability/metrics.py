"""Every Prometheus metric rota exports, in one place, on a registry of its own.

Labels are bounded: kinds, queues and outcomes come from validated names and fixed enums; job
ids, payload values and tenants never become labels.

Two families, aggregated differently across a fleet (docs/operations.md):

- *process* metrics count what this process did (handlers run, claims, leases lost, slots
  fired): every worker process exports its own (``rota worker --metrics-port``, and `rota
  serve` for its in-process workers); sum them across processes.
- *store* gauges (queue depth, dead jobs, oldest due job, workers alive) are read from the
  database, the same whichever process reads them; only `rota serve`'s /metrics sets them, at
  scrape time. Take one value (``max``) across its replicas, never a sum.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from rota.domain.errors import InvalidInput
from rota.domain.job_state import Outcome
from rota.observability.hotpath import Counters, Gauges, Histograms

if TYPE_CHECKING:  # prometheus-client is imported by the first Metrics, not by `import rota`
    from prometheus_client import CollectorRegistry, Gauge
    from prometheus_client.registry import Collector

log = logging.getLogger("rota.metrics")

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class Metrics:
    """The metric objects; one instance per process (or per test)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        # Updated per job by the worker: plain numbers, not prometheus-client's locked values
        # (rota.observability.hotpath says why).
        self.job_duration = Histograms(
            "rota_job_duration_seconds",
            "Time a handler ran, by kind and outcome.",
            ["kind", "outcome"],
            buckets=DURATION_BUCKETS,
        )
        self.schedule_lag = Histograms(
            "rota_job_start_lag_seconds",
            "Delay from a job's run_at to its handler starting (schedule lag).",
            ["kind"],
            buckets=LAG_BUCKETS,
        )
        self.running = Gauges("rota_jobs_running", "Jobs this process is executing now.", ["kind"])
        self.jobs_finished = Counters(
            "rota_jobs_finished",
            "Attempts finished by this process, by kind and outcome.",
            ["kind", "outcome"],
        )
        # Durable jobs (rota.runtime.durable): per step on the worker's loop, like the above.
        self.steps = Counters(
            "rota_steps",
            "Steps of durable jobs by kind and outcome: succeeded (run and checkpointed), "
            "failed, replayed (answered from its checkpoint without running).",
            ["kind", "outcome"],
        )
        self.step_duration = Histograms(
            "rota_step_duration_seconds",
            "Time a step ran before its checkpoint, by kind.",
            ["kind"],
            buckets=DURATION_BUCKETS,
        )
        self.sleeps = Counters(
            "rota_sleeps", "Durable sleeps begun (the job let go of its worker), by kind.", ["kind"]
        )
        self.waits = Counters(
            "rota_waits",
            "Waits for signals by kind and outcome: received, timed_out, suspended (the job "
            "let go of its worker until a signal or its deadline).",
            ["kind", "outcome"],
        )
        for family in (
            self.job_duration,
            self.schedule_lag,
            self.running,
            self.jobs_finished,
            self.steps,
            self.step_duration,
            self.sleeps,
            self.waits,
        ):
            r.register(family)
        self.signals = Counter(
            "rota_signals_sent_total",
            "Signals sent by this process: delivered (to a waiting job) or kept (for a wait "
            "to come, until they expire).",
            ["outcome"],
            registry=r,
        )
        self.claims = Counter(
            "rota_claims_total",
            "Claim attempts by result: claimed (jobs taken), empty, error.",
            ["result"],
            registry=r,
        )
        self.jobs_claimed = Counter(
            "rota_jobs_claimed_total", "Jobs claimed, by queue.", ["queue"], registry=r
        )
        self.leases_lost = Counter(
            "rota_leases_lost_total",
            "Leases this process lost (heartbeat or completion fenced out).",
            ["kind"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "rota_queue_jobs",
            "Jobs in the store by queue and state (sampled estimates on large tables).",
            ["queue", "state"],
            registry=r,
        )
        self.dead_jobs = Gauge("rota_dead_jobs", "Jobs in the dead state.", registry=r)
        self.oldest_due_age = Gauge(
            "rota_oldest_due_job_age_seconds",
            "Age of the oldest job that is due but not started (0 when none).",
            registry=r,
        )
        self.workers_alive = Gauge(
            "rota_workers_alive", "Workers that sent a heartbeat recently.", registry=r
        )
        self.clock_rate = Gauge(
            "rota_store_clock_rate_ratio",
            "Seconds of the store's clock per second of this worker's monotonic clock, as "
            "measured from heartbeats (0 until measured; lease deadlines and heartbeats follow "
            "the store's clock when it strays from 1).",
            registry=r,
        )
        self.schedules_fired = Counter(
            "rota_schedule_runs_total",
            "Schedule slots turned into jobs by this process.",
            ["schedule_outcome"],
            registry=r,
        )

    @property
    def process_metrics(self) -> tuple[Collector, ...]:
        """What this process did or measured: every worker process exports its own; sum the
        counters across them (the clock rate is each process's own reading: never summed)."""
        return (
            self.job_duration,
            self.schedule_lag,
            self.running,
            self.claims,
            self.jobs_claimed,
            self.leases_lost,
            self.jobs_finished,
            self.schedules_fired,
            self.clock_rate,
            self.steps,
            self.step_duration,
            self.sleeps,
            self.waits,
            self.signals,
        )

    @property
    def store_gauges(self) -> tuple[Gauge, ...]:
        """Read from the database (by the API's /metrics, at scrape time): the same whichever
        process reads them; take one value across processes, never a sum."""
        return (self.queue_depth, self.dead_jobs, self.oldest_due_age, self.workers_alive)

    def process_registry(self) -> CollectorRegistry:
        """A registry of the process metrics alone: what a worker process exports. A store
        gauge it never sets would read 0 there, a false "nothing dead, nothing waiting"."""
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Only(self.process_metrics))
        return registry


class KindMetrics:
    """One kind's metric children, looked up once instead of once per job."""

    def __init__(self, metrics: Metrics, kind: str) -> None:
        self._metrics = metrics
        self._kind = kind
        self.lag = metrics.schedule_lag.labels(kind)
        self.running = metrics.running.labels(kind)
        self._durations = {
            outcome: metrics.job_duration.labels(kind, outcome.value) for outcome in Outcome
        }
        self._finished: dict[Outcome, Any] = {}

    def duration(self, outcome: Outcome) -> Any:
        return self._durations[outcome]

    def finished(self, outcome: Outcome) -> Any:
        """The finished-attempts counter for ``outcome``, made on first use (a counter
        child exports a 0 as soon as it exists, where no series should appear yet)."""
        counter = self._finished.get(outcome)
        if counter is None:
            counter = self._finished[outcome] = self._metrics.jobs_finished.labels(
                self._kind, outcome.value
            )
        return counter


class MetricsServer:
    """/metrics of one process over HTTP, served from threads of its own, so a scrape never
    waits on the event loop and never delays a heartbeat; bounded in connections and time,
    and only for the Host names it is meant for (``rota.observability.exporter``)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        host: str,
        port: int,
        allowed_hosts: Iterable[str] = (),
        **limits: Any,
    ) -> None:
        from rota.observability.exporter import start_metrics_server

        try:
            self._server, self._thread = start_metrics_server(
                registry, host=host, port=port, allowed_hosts=allowed_hosts, **limits
            )
        except OSError as error:
            raise InvalidInput(
                f"could not serve metrics on {host}:{port} ({error.strerror or error})"
            ) from None
        self.host = host
        self.port: int = self._server.server_address[1]
        log.info("metrics on http://%s/metrics", _address(host, self.port))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_metrics(
    metrics: Metrics,
    *,
    port: int,
    host: str = "127.0.0.1",
    allowed_hosts: Iterable[str] = (),
    **limits: Any,
) -> MetricsServer:
    """Serve ``metrics``' process metrics on http://host:port/metrics until ``close()``
    (port 0 picks a free port: read ``.port``). Bind errors raise InvalidInput. Requests are
    answered for a Host that is an IP address, ``localhost`` or one of ``allowed_hosts``;
    ``limits``: ``max_connections``, ``request_timeout_s`` (``exporter.start_metrics_server``)."""
    return MetricsServer(
        metrics.process_registry(), host=host, port=port, allowed_hosts=allowed_hosts, **limits
    )


class _Only:
    """Collects exactly the given collectors' metrics."""

    def __init__(self, collectors: Iterable[Collector]) -> None:
        self._collectors = list(collectors)

    def collect(self) -> Iterator[Any]:
        for collector in self._collectors:
            yield from collector.collect()


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
