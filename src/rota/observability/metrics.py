"""Every Prometheus metric rota exports, in one place, on a registry of its own.

Labels are bounded: kinds, queues and outcomes come from validated names and fixed enums; job
ids, payload values and tenants never become labels.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class Metrics:
    """The metric objects; one instance per process (or per test)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.job_duration = Histogram(
            "rota_job_duration_seconds",
            "Time a handler ran, by kind and outcome.",
            ["kind", "outcome"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.schedule_lag = Histogram(
            "rota_job_start_lag_seconds",
            "Delay from a job's run_at to its handler starting (schedule lag).",
            ["kind"],
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.running = Gauge(
            "rota_jobs_running", "Jobs this process is executing now.", ["kind"], registry=r
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
        self.jobs_finished = Counter(
            "rota_jobs_finished_total",
            "Attempts finished by this process, by kind and outcome.",
            ["kind", "outcome"],
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
