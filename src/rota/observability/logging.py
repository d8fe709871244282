"""Logging: job context (job id, kind, attempt, worker) on every record, text or JSON."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: The job the current task or thread is executing, if any.
current_job: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "rota_current_job", default=None
)
#: The worker the current task belongs to, if any.
current_worker: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "rota_current_worker", default=None
)

_FIELDS = ("job_id", "kind", "attempt", "worker")


@contextmanager
def job_context(job_id: int, kind: str, attempt: int, worker: str) -> Iterator[None]:
    """Mark the records logged inside this block (in this task) as about this job."""
    token = current_job.set({"job_id": job_id, "kind": kind, "attempt": attempt, "worker": worker})
    try:
        yield
    finally:
        current_job.reset(token)


class JobContextFilter(logging.Filter):
    """Adds job_id, kind, attempt and worker to every record (None outside a job)."""

    def filter(self, record: logging.LogRecord) -> bool:
        job = current_job.get()
        for name in _FIELDS:
            if not hasattr(record, name):
                setattr(record, name, job.get(name) if job else None)
        if record.__dict__.get("worker") is None:
            record.worker = current_worker.get()
        return True


class TextFormatter(logging.Formatter):
    """``time level logger message [job=.. kind=.. attempt=.. worker=..]``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        context = " ".join(
            f"{name}={record.__dict__[name]}"
            for name in _FIELDS
            if record.__dict__.get(name) is not None
        )
        return f"{text} [{context}]" if context else text


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with the job context as fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(level: str = "info", fmt: str = "text") -> None:
    """Send rota's (and the handlers') logs to stderr with job context, as text or JSON."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(JobContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Access logs stay quiet unless asked for; the connection pool logs every failed attempt
    # during an outage, which rota already reports once per interval in its own words.
    logging.getLogger("uvicorn.access").setLevel(max(logging.WARNING, root.level))
    logging.getLogger("psycopg.pool").setLevel(max(logging.ERROR, root.level))
