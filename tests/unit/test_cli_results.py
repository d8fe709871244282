"""`rota jobs show` prints a job's result and its running attempt's progress."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

from click.testing import CliRunner

from rota.cli import cli
from rota.domain.job import JobSpec
from rota.domain.payload import Progress
from rota.store.sqlite import SqliteStore

LEASE = timedelta(seconds=30)


def _jobs(db: Path) -> tuple[int, int]:
    """A job that succeeded with a result, and one running with progress reported."""

    async def make() -> tuple[int, int]:
        store = SqliteStore(db)
        await store.migrate()
        await store.enqueue([JobSpec(kind="report", priority=1), JobSpec(kind="crawl")])
        [done] = await store.claim("w1", queues=["default"], limit=1, lease=LEASE)
        result = json.dumps({"answer": 42, "note": "\x1b[31mred"})
        await store.complete_many([done.lease], results=[result])
        [running] = await store.claim("w1", queues=["default"], limit=1, lease=LEASE)
        progress = {running.id: Progress(0.42, "page 42 of 100")}
        await store.heartbeat([running.lease], lease=LEASE, progress=progress)
        await store.close()
        return done.id, running.id

    return asyncio.run(make())


def _show(db: Path, *args: str) -> str:
    result = CliRunner().invoke(
        cli, ["jobs", "show", *args], env={"ROTA_DATABASE_URL": f"sqlite:///{db}"}
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_jobs_show_prints_the_result_and_the_progress(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    done, running = _jobs(db)
    shown = _show(db, str(done))
    [line] = [line for line in shown.splitlines() if line.strip().startswith("result:")]
    assert '"answer": 42' in line
    assert "\x1b" not in shown, "control characters from data are escaped"
    assert "progress: 100%" in shown, "a job that succeeded did all its work"
    as_json = json.loads(_show(db, str(done), "--json"))
    assert as_json["result"] == {"answer": 42, "note": "\x1b[31mred"}
    assert as_json["progress"] == 1.0

    shown = _show(db, str(running))
    assert "progress: 42% page 42 of 100" in shown
    assert "result:" not in shown
    as_json = json.loads(_show(db, str(running), "--json"))
    assert (as_json["progress"], as_json["progress_message"], as_json["result"]) == (
        0.42,
        "page 42 of 100",
        None,
    )
