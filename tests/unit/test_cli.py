"""The CLI in-process: commands, JSON output, and one-line errors with exit code 2."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from rota.cli import cli
from rota.domain.job import JobSpec
from rota.store.sqlite import SqliteStore
from rota.testing import FakeClock
from tests.support.cli import migrated


def run(*args: str, db: Path) -> tuple[int, str, str]:
    result = subprocess.run(
        [sys.executable, "-m", "rota", *args],
        capture_output=True,
        text=True,
        env={"ROTA_DATABASE_URL": f"sqlite:///{db}", "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    return result.returncode, result.stdout, result.stderr


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for command in ("worker", "enqueue", "jobs", "migrate", "workers", "check"):
        assert command in result.output


def test_enqueue_list_show_cancel_retry_round_trip(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    code, out, _ = run(
        "enqueue",
        "email",
        "--payload",
        '{"to": "ada@example.com"}',
        "--delay",
        "1h",
        "--unique-key",
        "welcome:1",
        "--json",
        db=db,
    )
    assert code == 0
    job = json.loads(out)
    assert (job["kind"], job["state"], job["payload"], job["duplicate"]) == (
        "email",
        "pending",
        {"to": "ada@example.com"},
        False,
    )
    code, out, _ = run("enqueue", "email", "--unique-key", "welcome:1", "--json", db=db)
    assert json.loads(out)["duplicate"] is True
    code, out, _ = run("jobs", "list", "--json", db=db)
    assert [j["id"] for j in json.loads(out)["jobs"]] == [job["id"]]
    code, out, _ = run("jobs", "cancel", str(job["id"]), db=db)
    assert code == 0
    code, out, _ = run("jobs", "retry", str(job["id"]), db=db)
    assert code == 0
    code, out, _ = run("jobs", "show", str(job["id"]), "--json", db=db)
    assert json.loads(out)["state"] == "pending"


def test_jobs_show_says_why_a_crash_suspect_runs_alone(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"

    async def suspect() -> int:
        clock = FakeClock()
        store = SqliteStore(db, clock=clock)
        await store.migrate()
        [result] = await store.enqueue([JobSpec(kind="email")])
        await store.claim("w1", queues=["default"], limit=1, lease=timedelta(seconds=5))
        clock.advance(timedelta(seconds=6))
        await store.rescue()
        await store.close()
        return result.job.id

    job_id = asyncio.run(suspect())
    code, out, _ = run("jobs", "show", str(job_id), db=db)
    assert code == 0
    assert "quarantine: crash suspect: its lease ran out once while its handler ran" in out
    code, out, _ = run("jobs", "show", str(job_id), "--json", db=db)
    shown = json.loads(out)
    assert (shown["crashes"], shown["attempts"][0]["error"]) == (1, "lease expired")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["enqueue", ""], "kind"),
        (["enqueue", "bad kind"], "kind"),
        (["enqueue", "k", "--payload", "{not json"], "--payload"),
        (["enqueue", "k", "--payload", "NaN"], "NaN"),
        (["enqueue", "k", "--payload", '"\\u0000"'], "NUL"),
        (["enqueue", "k", "--delay", "-5s"], "--delay"),
        (["enqueue", "k", "--delay", "soon"], "--delay"),
        (["enqueue", "k", "--at", "2026-02-30T00:00:00Z"], "--at"),
        (["enqueue", "k", "--at", "2026-01-01T00:00:00"], "offset"),
        (["enqueue", "k", "--delay", "5s", "--at", "2026-01-01T00:00:00Z"], "not both"),
        (["enqueue", "k", "--max-attempts", "0"], "max_attempts"),
        (["enqueue", "k", "--priority", "1000"], "priority"),
        (["enqueue", "k", "--unique-key", "x" * 300], "unique_key"),
        (["jobs", "show", "123456"], "not found"),
        (["jobs", "show", "abc"], "abc"),
        (["jobs", "retry", "999"], "not found"),
        (["worker", "--app", "no.such.module:app"], "cannot import"),
        (["worker", "--app", "not a reference"], "--app"),
        (
            ["worker", "--app", "examples.quickstart:app", "--unrunnable-grace", "soon"],
            "--unrunnable-grace",
        ),
        (["worker", "--app", "examples.quickstart:app", "--claim-batch", "0"], "--claim-batch"),
        (["migrate", "--database-url", "mysql://x"], "unsupported database URL"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    db = migrated(tmp_path / "bad.db")
    code, out, err = run(*args, db=db)
    assert code == 2, (out, err)
    assert message in err
    assert "Traceback" not in err
    assert out == ""
    code, out, _ = run("jobs", "list", "--json", db=db)
    assert json.loads(out)["jobs"] == [], "bad input wrote nothing"


@pytest.mark.parametrize(("args", "expected"), [([], None), (["--claim-batch", "500"], 500)])
def test_worker_claims_up_to_its_claim_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], expected: int | None
) -> None:
    """The flag reaches the worker's settings; without it, the library's default applies."""
    from rota.app import App
    from rota.cli import operate
    from rota.runtime.worker_settings import WorkerSettings

    made: list[WorkerSettings] = []

    async def run_worker(
        self: App,
        settings: None = None,
        *,
        handle_signals: bool,
        ready: object,
        metrics_port: object,
        metrics_host: object,
        metrics_allowed_hosts: object = (),
        **options: object,
    ) -> None:
        await self.open()
        made.append(self.worker(settings, **options).settings)

    def leave(code: int) -> None:
        raise SystemExit(code)

    monkeypatch.setattr(App, "run_worker", run_worker)
    monkeypatch.setattr(operate.os, "_exit", leave)
    db = migrated(tmp_path / "w.db")
    result = CliRunner().invoke(
        cli,
        ["worker", "--app", "examples.quickstart:app", "--database-url", f"sqlite:///{db}", *args],
    )
    assert result.exit_code == 0, result.output
    assert [settings.claim_batch for settings in made] == [expected or WorkerSettings().claim_batch]


def test_migrate_check_reports_pending_then_up_to_date(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    code, _, err = run("migrate", "--check", db=db)
    assert code == 2 and "no database at" in err, "a check opens an existing database only"
    assert not db.exists()
    db.touch()
    code, _, err = run("migrate", "--check", db=db)
    assert code == 1
    assert "pending" in err
    assert run("migrate", db=db)[0] == 0
    code, _, err = run("migrate", "--check", db=db)
    assert code == 0
    assert "up to date" in err


def test_jobs_list_reads_previews_of_900_kb_payloads(tmp_path: Path) -> None:
    db = migrated(tmp_path / "heavy.db")
    blob = "x" * 900_000

    async def heavy() -> None:
        store = SqliteStore(db)
        await store.enqueue([JobSpec(kind="heavy", payload={"blob": blob}) for _ in range(3)])
        await store.close()

    asyncio.run(heavy())
    code, out, _ = run("jobs", "list", "--json", db=db)
    assert code == 0
    # Three payloads of 900 KB whole would print 2.7 MB.
    assert len(out) < 10_000
    listed = json.loads(out)["jobs"]
    assert len(listed) == 3
    for job in listed:
        assert "payload" not in job and job["payload_truncated"] is True
        assert job["payload_preview"].startswith('{"blob":"xxx')
        assert len(job["payload_preview"].encode()) <= 300
        assert (job["result_preview"], job["last_error_preview"]) == (None, None)
    shown = json.loads(run("jobs", "show", str(listed[0]["id"]), "--json", db=db)[1])
    assert shown["payload"] == {"blob": blob}
