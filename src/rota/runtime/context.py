"""JobContext: what a handler knows about the execution it is part of."""

from __future__ import annotations

import threading
from typing import Any

from rota.domain.job import Job, Progress
from rota.domain.lease import Lease


class JobContext:
    """Passed to every handler as its first argument.

    ``fencing_token`` strictly increases with every claim of every job: pass it to your own
    downstream writes and reject writes carrying a lower token, so a worker that lost its lease
    cannot overwrite its successor's work. ``cancelled`` is set when the job is cancelled, its
    lease is lost, it times out, or the worker shuts down: long sync handlers should check
    ``ctx.is_cancelled`` between steps (async handlers are also cancelled at their next await).

    ``await ctx.progress(0.42, message="page 42 of 100")`` (``ctx.progress_sync`` in a sync
    handler) reports how far the handler is; it costs no write of its own: the worker's next
    heartbeat carries the latest report, fenced like the heartbeat itself.

    ``ctx.parent_results`` holds, for a job of a workflow, each parent's result by job id.
    """

    __slots__ = ("_event", "_flag", "_progress", "_sent", "job", "parent_results", "worker")

    def __init__(self, job: Job, worker: str) -> None:
        self.job = job
        self.worker = worker
        #: What each parent of a workflow job returned, by parent job id (None: it returned
        #: None); empty outside workflows. Read by the worker before the handler starts.
        self.parent_results: dict[int, Any] = {}
        self._flag = False
        # Made on first use: most handlers never look, and an Event costs a Condition and a lock.
        self._event: threading.Event | None = None
        #: The latest report, and the last one a heartbeat wrote. Each side writes only its
        #: own field (the handler's thread the first, the heartbeat the second), so a report
        #: made while a beat is in flight is never mistaken for one already sent.
        self._progress: Progress | None = None
        self._sent: Progress | None = None

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
        return self._flag

    @property
    def cancelled(self) -> threading.Event:
        """An Event set on cancellation, for handlers that want to wait on it."""
        event = self._event
        if event is None:
            event = self._event = threading.Event()
            # cancel() sets the flag before it looks for the event: checking the flag after
            # publishing the event means one of the two always sets it.
            if self._flag:
                event.set()
        return event

    async def progress(self, fraction: float, *, message: str | None = None) -> None:
        """Report progress: ``fraction`` in [0, 1] and an optional ``message`` of at most 200
        characters (ValueError otherwise). Only the latest report before a heartbeat is kept;
        the job's ``progress`` and ``progress_message`` show it from then on."""
        self.progress_sync(fraction, message=message)

    def progress_sync(self, fraction: float, *, message: str | None = None) -> None:
        """``progress`` for sync handlers (safe to call from the handler's thread)."""
        self._progress = Progress(fraction, message)

    def unsent_progress(self) -> Progress | None:
        """The latest report if no heartbeat wrote it yet (the heartbeat reads this)."""
        report = self._progress
        return report if report is not self._sent else None

    def progress_sent(self, report: Progress) -> None:
        """Record that a heartbeat wrote ``report`` (the heartbeat calls this)."""
        self._sent = report

    def cancel(self) -> None:
        """Tell the handler to stop (the worker calls this; handlers only read)."""
        self._flag = True
        if self._event is not None:
            self._event.set()

    def __repr__(self) -> str:
        return (
            f"JobContext(job_id={self.job.id}, attempt={self.job.attempt}, worker={self.worker!r})"
        )
