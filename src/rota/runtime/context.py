"""JobContext: what a handler knows about the execution it is part of."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from rota.domain.job import Job
from rota.domain.lease import Lease


@dataclass(slots=True)
class JobContext:
    """Passed to every handler as its first argument.

    ``fencing_token`` strictly increases with every claim of every job: pass it to your own
    downstream writes and reject writes carrying a lower token, so a worker that lost its lease
    cannot overwrite its successor's work. ``cancelled`` is set when the job is cancelled, its
    lease is lost, it times out, or the worker shuts down: long sync handlers should check
    ``ctx.is_cancelled`` between steps (async handlers are also cancelled at their next await).
    """

    job: Job
    worker: str
    cancelled: threading.Event = field(default_factory=threading.Event)

    @property
    def job_id(self) -> int:
        return self.job.id

    @property
    def attempt(self) -> int:
        return self.job.attempt

    @property
    def fencing_token(self) -> int:
        assert self.job.lease_token is not None  # a context exists only for claimed jobs
        return self.job.lease_token

    @property
    def lease(self) -> Lease:
        return self.job.lease

    @property
    def is_cancelled(self) -> bool:
        return self.cancelled.is_set()
