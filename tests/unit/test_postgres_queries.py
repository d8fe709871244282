"""The named statements of the PostgreSQL store: fragments shared where two statements must
write the same thing."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime, timedelta

import pytest

from rota.domain.job import Job
from rota.domain.job_state import JobState
from rota.store.postgres import direct
from rota.store.postgres.queries import JOB_COLUMNS, queries, query
from rota.store.postgres.rows import row_to_job


def test_cancel_and_cancel_workflow_write_one_shared_set_clause() -> None:
    shared = queries()["_cancelling"]
    assert "state = 'cancelled'" in shared
    for name in ("cancel", "cancel_workflow"):
        assert shared in query(name)
        assert "{_cancelling}" not in query(name)
        assert query(name).count("state = 'cancelled'") == 1


def test_the_job_columns_are_job_s_fields_in_order_so_a_row_builds_a_job_positionally() -> None:
    columns = [column.strip() for column in JOB_COLUMNS.split(",")]
    assert columns == [
        "timeout_us" if field.name == "timeout" else field.name for field in fields(Job)
    ]
    at = datetime(2026, 12, 3, tzinfo=UTC)
    values = {column: f"<{column}>" for column in columns}
    values |= {"state": "running", "timeout_us": 1_500_000, "run_at": at}
    job = row_to_job(tuple(values[column] for column in columns))
    assert job.state is JobState.RUNNING and job.timeout == timedelta(seconds=1.5)
    assert (job.kind, job.run_at, job.waiting_on) == ("<kind>", at, "<waiting_on>")


def test_placeholders_become_numbered_parameters() -> None:
    """How PoolConnection.run (direct.py) hands a statement to PostgreSQL."""
    statement = direct.Statement.of("SELECT %(a)s, %(b)b, %(a)s, %(c)t, '%%'")
    assert statement.text == b"SELECT $1, $2, $1, $3, '%'"
    assert statement.names == ("a", "b", "c")
    with pytest.raises(ValueError, match="two formats"):
        direct.Statement.of("SELECT %(a)s, %(a)b")
