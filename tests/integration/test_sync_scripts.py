"""A plain synchronous script that enqueues with ``App.enqueue_sync`` and exits, as a Django
or Flask management command would, on SQLite and PostgreSQL: the job is written and the exit
is clean (nothing on stderr, no "Task was destroyed but it is pending!" from the bridge's loop).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rota.domain.job_state import JobState
from rota.store import open_store
from tests.support.processes import REPO_ROOT

pytestmark = pytest.mark.slow

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

SCRIPT = """
import os
import rota

app = rota.App(os.environ["ROTA_DATABASE_URL"])

@app.job("report")
def report(ctx, payload):
    pass

for n in range(3):
    print(app.enqueue_sync("report", {"n": n}).job.id)
"""


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'rota.db'}"
    return str(request.getfixturevalue("pg_url"))


async def test_a_script_that_enqueues_and_exits_leaves_stderr_empty(
    database_url: str, tmp_path: Path
) -> None:
    script = tmp_path / "enqueue.py"
    script.write_text(SCRIPT)
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(REPO_ROOT / "src"),
            "ROTA_DATABASE_URL": database_url,
        },
    )
    assert result.returncode == 0, result.stderr
    assert "Task was destroyed" not in result.stderr
    assert result.stderr == ""
    ids = [int(line) for line in result.stdout.split()]
    assert len(ids) == 3
    store = open_store(database_url)
    try:
        jobs = [await store.get(job_id) for job_id in ids]
    finally:
        await store.close()
    assert [(job.kind, job.state, job.payload) for job in jobs] == [
        ("report", JobState.PENDING, {"n": n}) for n in range(3)
    ]
