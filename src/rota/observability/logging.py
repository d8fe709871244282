"""Logging: job context (job id, kind, attempt, worker) on every record, text or JSON; and
``printable``, which keeps text from jobs from steering a terminal or splitting a log line."""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
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

#: What text from jobs must not carry to a terminal or into a log line: C0 and C1 controls and
#: DEL (ESC starts CSI and OSC sequences, BEL ends them, CR and LF start a line), the Unicode
#: line and paragraph separators, the bidirectional marks, embeddings, overrides and isolates
#: (they reorder what a reader sees), and lone surrogates (bytes that were not UTF-8).
_UNPRINTABLE = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_SHORT_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, keep: str = "") -> str:
    """``text`` with every control character written as an escape (``\\x1b``, ``\\n``,
    ``\\u202e``): data from jobs cannot move the cursor, recolour or retitle a terminal,
    reorder what is shown, or start a line of its own. ``keep`` names characters to leave
    as they are (``"\\n"`` for a block printed on several lines, such as a traceback)."""
    if keep:
        return _UNPRINTABLE.sub(lambda m: m.group() if m.group() in keep else _escape(m), text)
    return _UNPRINTABLE.sub(_escape, text)


class job_context:  # noqa: N801 (used as the function it replaced: ``with job_context(...)``)
    """Mark the records logged inside this block (in this task) as about this job.

    A plain class rather than a generator-based context manager: it is entered once per job
    executed, and a generator, its wrapper and their two steps cost more than the work."""

    __slots__ = ("_fields", "_token")

    def __init__(self, job_id: int, kind: str, attempt: int, worker: str) -> None:
        self._fields = {"job_id": job_id, "kind": kind, "attempt": attempt, "worker": worker}

    def __enter__(self) -> None:
        self._token = current_job.set(self._fields)

    def __exit__(self, *exc_info: object) -> None:
        current_job.reset(self._token)


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
    """``time level logger message [job=.. kind=.. attempt=.. worker=..]``, one line a record.

    The message and the context are escaped with ``printable``, so a newline in an exception
    message, a kind or a worker name cannot start a line that reads as a record of its own. A
    traceback follows on lines that begin with ``  | ``, never with a time.
    """

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        record.asctime = self.formatTime(record, self.datefmt)
        text = (
            f"{record.asctime} {record.levelname:<7} {printable(record.name)}: "
            f"{printable(record.message)}"
        )
        context = " ".join(
            f"{name}={printable(str(record.__dict__[name]))}"
            for name in _FIELDS
            if record.__dict__.get(name) is not None
        )
        if context:
            text += f" [{context}]"
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        for block in (record.exc_text, record.stack_info and self.formatStack(record.stack_info)):
            for line in (block or "").splitlines():
                text += f"\n  | {printable(line)}"
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with the job context as fields; no control character or
    bidi mark travels raw, inside strings or out."""

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
        # json escapes C0 controls (a newline cannot end the line early); C1 controls, bidi
        # marks and U+2028 it leaves raw for a terminal tailing the log: escape them too.
        text = json.dumps(entry, ensure_ascii=False, default=str)
        return _UNPRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


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
