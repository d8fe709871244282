"""The overview's models: workers and their heartbeats, job counts, throughput, the read
replica, and what the dashboard needs to know about this server."""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, Field

from rota.store.records import ThroughputBucket, WorkerInfo


class WorkerOut(BaseModel):
    name: str
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    started_at: datetime | None
    beat_at: datetime | None
    heartbeat_age_seconds: float | None
    running: int
    alive: bool


class WorkerList(BaseModel):
    now: datetime
    workers: list[WorkerOut]


class CountsOut(BaseModel):
    by_state: dict[str, int]
    by_queue: dict[str, dict[str, int]]
    exact: bool


class BucketOut(BaseModel):
    start: datetime
    succeeded: int
    dead: int
    cancelled: int


class ThroughputOut(BaseModel):
    bucket_seconds: int
    buckets: list[BucketOut]


class ReplicaOut(BaseModel):
    """The read replica the counts, lists and details come from."""

    replaying: bool = Field(description="False when the read database is not a replica.")
    lag_seconds: float | None = Field(
        description="How stale its answers may be: 0 when it has replayed everything the "
        "primary had written; null when that cannot be told."
    )


class Stats(BaseModel):
    now: datetime
    counts: CountsOut
    oldest_due_age_seconds: float | None
    workers_alive: int
    workers_total: int
    throughput: ThroughputOut
    #: Present only when reads go to a replica.
    replica: ReplicaOut | None = None


class DashboardConfig(BaseModel):
    """What the dashboard needs to know about this server."""

    demo: bool
    #: Whether this request's identity can change nothing (read-only mode, or a read token).
    read_only: bool
    kinds: list[str] | None
    login: bool
    #: Who the dashboard acts as: the name the audit log records for its actions.
    identity: str
    #: Its role: admin, operator (no deletes, limits or schedule changes) or read-only.
    role: str = "admin"


def worker_out(info: WorkerInfo, now: datetime, heartbeat: timedelta) -> WorkerOut:
    age = info.heartbeat_age(now)
    return WorkerOut(
        name=info.name,
        host=info.host,
        pid=info.pid,
        queues=list(info.queues),
        concurrency=info.concurrency,
        started_at=info.started_at,
        beat_at=info.beat_at,
        heartbeat_age_seconds=age.total_seconds() if age is not None else None,
        running=info.running,
        alive=info.is_alive(now, heartbeat),
    )


def bucket_out(bucket: ThroughputBucket) -> BucketOut:
    return BucketOut(
        start=bucket.start,
        succeeded=bucket.succeeded,
        dead=bucket.dead,
        cancelled=bucket.cancelled,
    )
