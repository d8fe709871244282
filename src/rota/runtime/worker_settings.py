"""WorkerSettings: how a worker behaves, checked before it starts; and worker names."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from rota.domain.audit import DEFAULT_AUDIT_RETENTION
from rota.domain.errors import InvalidInput, InvalidJob
from rota.domain.names import validate_name
from rota.domain.payload import DEFAULT_MAX_RESULT_BYTES, MAX_RESULT_CAP


def default_worker_name() -> str:
    """host:pid:random, unique even when a pid is reused."""
    host = "".join(c if c.isalnum() or c in "-." else "-" for c in socket.gethostname())
    return f"{host or 'host'}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def validate_worker_name(name: str) -> str:
    """``name`` if a worker may be called so: the rule of kind and queue names (letters,
    digits and ``_ . : -``), since the name is stored, logged and shown; InvalidInput if not."""
    try:
        validate_name("worker name", name)
    except InvalidJob as error:
        raise InvalidInput(f"bad worker name {name!r}: {error.reason}") from None
    return name


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """How a worker behaves. Durations are timedeltas; the defaults suit most deployments."""

    name: str | None = None
    #: Queues to claim from; None means the queues of the registered kinds.
    queues: Sequence[str] | None = None
    concurrency: int = 10
    lease: timedelta = timedelta(seconds=30)
    heartbeat: timedelta = timedelta(seconds=10)
    #: Longest sleep between claims when nothing wakes the worker.
    poll: timedelta = timedelta(seconds=1)
    rescue: timedelta = timedelta(seconds=5)
    shutdown_timeout: timedelta = timedelta(seconds=30)
    #: Finished jobs older than this are deleted (their attempts with them); None keeps all.
    retention: timedelta | None = timedelta(days=7)
    #: Audit log entries older than this are deleted; None keeps them all.
    audit_retention: timedelta | None = DEFAULT_AUDIT_RETENTION
    #: Most jobs one claim may take (it never takes more than the free slots).
    claim_batch: int = 100
    #: Let tenants take turns in each claim, so one tenant's backlog cannot starve another.
    fair: bool = True
    #: How long a due job of a kind no live worker runs waits (for a worker of newer code, in
    #: a rolling deploy) before the rescuer ends it dead; None: it waits forever.
    unrunnable_grace: timedelta | None = timedelta(minutes=10)
    #: The largest result a handler may return, as JSON bytes: over it the attempt fails,
    #: permanently, saying so. Over MAX_RESULT_BYTES (64 KiB) a result is stored apart.
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES

    def validated(self) -> WorkerSettings:
        """Self, or InvalidInput naming the setting that cannot work."""
        if not 1 <= self.concurrency <= 10_000:
            raise InvalidInput("concurrency must be between 1 and 10000")
        if self.heartbeat <= timedelta(0) or self.lease <= timedelta(0):
            raise InvalidInput("lease and heartbeat must be positive")
        if self.lease < 2 * self.heartbeat:
            raise InvalidInput(
                "the lease must be at least twice the heartbeat interval, so one late "
                "heartbeat does not lose it"
            )
        if self.poll <= timedelta(0) or self.rescue <= timedelta(0):
            raise InvalidInput("poll and rescue intervals must be positive")
        if self.unrunnable_grace is not None and self.unrunnable_grace < timedelta(0):
            raise InvalidInput("the grace for jobs no worker runs must not be negative")
        if self.shutdown_timeout < timedelta(0):
            raise InvalidInput("shutdown timeout must not be negative")
        if self.retention is not None and self.retention < timedelta(minutes=1):
            raise InvalidInput("retention must be at least a minute (or None to keep everything)")
        if self.audit_retention is not None and self.audit_retention < timedelta(minutes=1):
            raise InvalidInput(
                "audit retention must be at least a minute (or None to keep everything)"
            )
        if not 1 <= self.claim_batch <= 10_000:
            raise InvalidInput("claim batch must be between 1 and 10000")
        if not 1 <= self.max_result_bytes <= MAX_RESULT_CAP:
            raise InvalidInput(f"max result bytes must be between 1 and {MAX_RESULT_CAP}")
        if self.name is not None:
            validate_worker_name(self.name)
        for queue in self.queues or ():
            try:
                validate_name("queue", queue)
            except InvalidInput as error:
                raise InvalidInput(f"bad queue name {queue!r}: {error}") from None
        return self
