"""Log lines built from job data (exception messages, kinds, worker names) cannot forge a
record: in text, every record starts a line with its time and nothing else does; in JSON,
every record is one line of JSON with no raw control character."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from rota import App, JobContext, WorkerSettings
from rota.observability.logging import (
    JobContextFilter,
    JsonFormatter,
    TextFormatter,
    job_context,
    printable,
)
from rota.testing import FakeClock

FORGED = "2026-01-01 00:00:00,000 INFO    rota.worker: payment 42 settled"
HOSTILE = f"boom\n{FORGED}\r\n{FORGED}\x1b[2K\u2028{FORGED}\x85x"
RECORD = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ +\S+: ")


@pytest.fixture
def captured(request: pytest.FixtureRequest) -> Iterator[tuple[io.StringIO, logging.Handler]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(JobContextFilter())
    handler.setFormatter(TextFormatter() if request.param == "text" else JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield stream, handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


async def run_failing_job(kind: str = "pay") -> None:
    """A real worker runs a handler whose exception message carries HOSTILE; the worker logs
    the failure (with the traceback) in its own words."""
    app = App("memory://", clock=FakeClock())

    @app.job(kind, max_attempts=1)
    def pay(ctx: JobContext, payload: object) -> None:
        raise RuntimeError(HOSTILE)

    async with app:
        await app.enqueue(kind)
        worker = app.worker(WorkerSettings(name="w-1"))
        await worker.run_until_idle()


async def log_hostile_records() -> None:
    """The worker's own record of a failure, and a record whose job context is hostile."""
    await run_failing_job()
    with job_context(7, f"kind\n{FORGED}", 1, f"w\r{FORGED}"):
        logging.getLogger("rota.test").warning("failed: %s", HOSTILE)


@pytest.mark.parametrize("captured", ["text"], indirect=True)
async def test_text_records_from_job_data_stay_on_their_own_lines(
    captured: tuple[io.StringIO, logging.Handler],
) -> None:
    stream, _ = captured
    await log_hostile_records()
    try:
        raise ValueError(HOSTILE)
    except ValueError:
        logging.getLogger("rota.test").exception("handler raised")
    text = stream.getvalue()
    assert "boom\\n2026-01-01" in text, "the job's failure was logged, escaped"
    lines = text.splitlines()
    records = [line for line in lines if RECORD.match(line)]
    continued = [line for line in lines if not RECORD.match(line)]
    assert len(records) >= 3, "the worker's, the warning and the exception"
    assert all(line.startswith("  | ") for line in continued), continued
    assert not any(line.startswith(FORGED) for line in lines)
    assert "Traceback (most recent call last):" in "\n".join(continued)
    for line in lines:
        assert printable(line) == line, f"raw control characters in {line!r}"


@pytest.mark.parametrize("captured", ["json"], indirect=True)
async def test_json_records_are_one_line_each_with_nothing_raw(
    captured: tuple[io.StringIO, logging.Handler],
) -> None:
    stream, _ = captured
    await log_hostile_records()
    lines = stream.getvalue().splitlines()
    entries = [json.loads(line) for line in lines]
    assert any(HOSTILE in entry["message"] for entry in entries), "the value survives exactly"
    assert entries[-1]["worker"] == f"w\r{FORGED}"
    for line in stream.getvalue().split("\n")[:-1]:
        assert printable(line) == line, f"raw control characters in {line!r}"
