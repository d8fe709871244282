"""`rota schedules ...` as a user runs it: a subprocess against a SQLite file."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rota.cli import cli
from rota.store import open_store
from rota.store.records import WorkerInfo
from tests.support.cli import invoke, migrated, sqlite_url


def run(*args: str, db: Path, **env: str) -> tuple[int, str, str]:
    result = subprocess.run(
        [sys.executable, "-m", "rota", *args],
        capture_output=True,
        text=True,
        env={"ROTA_DATABASE_URL": f"sqlite:///{db}", "PATH": "/usr/bin:/bin", **env},
        timeout=60,
    )
    return result.returncode, result.stdout, result.stderr


def test_schedules_help_lists_every_subcommand() -> None:
    result = CliRunner().invoke(cli, ["schedules", "--help"])
    assert result.exit_code == 0
    for command in ("list", "show", "add", "pause", "resume", "remove", "run-now"):
        assert command in result.output


def test_add_list_show_pause_run_now_resume_remove_round_trip(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    code, out, err = run(
        "schedules",
        "add",
        "nightly",
        "--kind",
        "backup",
        "--cron",
        "30 2 * * *",
        "--timezone",
        "Europe/Berlin",
        "--payload",
        '{"full": true}',
        "--jitter",
        "5m",
        "--misfire",
        "all",
        "--overlap",
        "allow",
        "--json",
        db=db,
    )
    assert code == 0, err
    added = json.loads(out)
    assert (added["name"], added["kind"], added["cron"], added["timezone"]) == (
        "nightly",
        "backup",
        "30 2 * * *",
        "Europe/Berlin",
    )
    assert added["payload"] == {"full": True} and added["jitter_seconds"] == 300
    assert (added["misfire"], added["overlap"], added["paused"]) == ("all", "allow", False)
    assert added["description"] == "every day at 02:30 (Europe/Berlin)"
    assert len(added["next_runs"]) == 5 and added["next_runs"][0] == added["next_run_at"]

    code, out, _ = run("schedules", "add", "pulse", "--kind", "ping", "--every", "30s", db=db)
    assert code == 0
    assert out.startswith("schedule pulse: every 30 seconds\n")
    assert out.count("\n  20") == 5, "the next five runs are shown"

    code, out, _ = run("schedules", "list", "--json", db=db)
    listed = json.loads(out)
    assert [s["name"] for s in listed["schedules"]] == ["nightly", "pulse"]
    assert listed["schedules"][1]["every_seconds"] == 30

    code, out, _ = run("schedules", "show", "nightly", "--count", "3", db=db)
    assert code == 0
    assert "every day at 02:30 (Europe/Berlin)" in out
    assert out.count("02:30 Europe/Berlin)") == 3, "runs are also shown on the schedule's clock"

    assert run("schedules", "pause", "pulse", "--missed", "drop", db=db)[:2] == (
        0,
        "schedule pulse paused; the runs it misses will be dropped on resume\n",
    )
    refused = run("schedules", "pause", "pulse", "--missed", "later", db=db)
    assert refused[0] == 2
    code, out, _ = run("schedules", "run-now", "pulse", "--json", db=db)
    job = json.loads(out)
    assert (job["schedule"], job["kind"], job["state"], job["duplicate"]) == (
        "pulse",
        "ping",
        "pending",
        False,
    )
    code, out, _ = run("schedules", "show", "pulse", "--json", db=db)
    shown = json.loads(out)
    assert (shown["paused"], shown["missed"]) == (True, "drop")
    assert (shown["last_job_id"], shown["last_outcome"]) == (job["id"], "pending")

    code, out, _ = run("schedules", "resume", "pulse", db=db)
    assert code == 0 and out.startswith("schedule pulse resumed; next run ")
    assert run("schedules", "remove", "pulse", db=db)[:2] == (0, "schedule pulse removed\n")
    code, out, _ = run("schedules", "list", "--json", db=db)
    assert [s["name"] for s in json.loads(out)["schedules"]] == ["nightly"]
    code, out, _ = run("jobs", "list", "--json", db=db)
    assert [j["id"] for j in json.loads(out)["jobs"]] == [job["id"]], "its job stays"


def test_every_add_flag_has_an_environment_twin(tmp_path: Path) -> None:
    db = tmp_path / "env.db"
    code, out, err = run(
        "schedules",
        "add",
        "report",
        "--json",
        db=db,
        ROTA_KIND="report",
        ROTA_CRON="@hourly",
        ROTA_TIMEZONE="America/New_York",
        ROTA_PAYLOAD='{"a": 1}',
        ROTA_QUEUE="reports",
        ROTA_PRIORITY="4",
        ROTA_TENANT="acme",
        ROTA_MAX_ATTEMPTS="6",
        ROTA_JITTER="30s",
        ROTA_MISFIRE="skip",
        ROTA_MISFIRE_LIMIT="7",
        ROTA_GRACE="2m",
        ROTA_OVERLAP="allow",
    )
    assert code == 0, err
    added = json.loads(out)
    assert {key: added[key] for key in ("kind", "cron", "timezone", "queue", "tenant")} == {
        "kind": "report",
        "cron": "0 * * * *",
        "timezone": "America/New_York",
        "queue": "reports",
        "tenant": "acme",
    }
    assert (added["priority"], added["max_attempts"], added["misfire_limit"]) == (4, 6, 7)
    assert (added["jitter_seconds"], added["grace_seconds"]) == (30, 120)
    assert (added["misfire"], added["overlap"], added["payload"]) == ("skip", "allow", {"a": 1})


def test_add_replace_keeps_the_pause(tmp_path: Path) -> None:
    db = tmp_path / "replace.db"
    run("schedules", "add", "pulse", "--kind", "ping", "--every", "30s", db=db)
    run("schedules", "pause", "pulse", db=db)

    code, out, err = run(
        "schedules",
        "add",
        "pulse",
        "--kind",
        "pong",
        "--every",
        "30s",
        "--replace",
        "--json",
        db=db,
    )

    assert code == 0, err
    assert (json.loads(out)["kind"], json.loads(out)["paused"]) == ("pong", True)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add", "s", "--kind", "k", "--cron", "61 * * * *"], "cron: '61 * * * *': bad minute"),
        (["add", "s", "--kind", "k", "--cron", "0 9 * *"], "must have 5 fields"),
        (["add", "s", "--kind", "k", "--cron", "@fortnightly"], "unknown nickname"),
        (["add", "s", "--kind", "k", "--cron", "0 0 30 2 *"], "never fires"),
        (
            ["add", "s", "--kind", "k", "--cron", "0 9 * * *", "--timezone", "Mars/Olympus"],
            "unknown time zone 'Mars/Olympus'",
        ),
        (["add", "s", "--kind", "k"], "give --cron or --every"),
        (
            ["add", "s", "--kind", "k", "--every", "1m", "--cron", "@daily"],
            "give --cron or --every",
        ),
        (["add", "s", "--kind", "k", "--every", "soon"], "--every"),
        (["add", "s", "--kind", "k", "--every", "0s"], "every: must be positive"),
        (["add", "s", "--kind", "k", "--every", "1m", "--timezone", "UTC"], "--timezone"),
        (["add", "s", "--kind", "k", "--every", "1m", "--payload", "{oops"], "--payload"),
        (["add", "s", "--kind", "k", "--every", "1m", "--payload", "NaN"], "NaN"),
        (["add", "s", "--kind", "k", "--every", "1m", "--jitter", "-5m"], "--jitter"),
        (["add", "s", "--kind", "k", "--every", "1m", "--priority", "500"], "priority"),
        (["add", "s", "--kind", "k", "--every", "1m", "--misfire-limit", "0"], "misfire_limit"),
        (["add", "bad name", "--kind", "k", "--every", "1m"], "name:"),
        (["add", "s", "--kind", "bad kind", "--every", "1m"], "kind:"),
        (["show", "nope"], "schedule 'nope' not found"),
        (["pause", "nope"], "schedule 'nope' not found"),
        (["resume", "nope"], "schedule 'nope' not found"),
        (["remove", "nope"], "schedule 'nope' not found"),
        (["run-now", "nope"], "schedule 'nope' not found"),
        (["list", "--cursor", "garbage!"], "cursor is not valid"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    db = migrated(tmp_path / "bad.db")
    code, out, err = run("schedules", *args, db=db)

    assert code == 2, (out, err)
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert out == ""
    code, out, _ = run("schedules", "list", "--json", db=db)
    assert json.loads(out)["schedules"] == [], "bad input wrote nothing"


def test_adding_an_existing_name_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "twice.db"
    run("schedules", "add", "pulse", "--kind", "ping", "--every", "30s", db=db)

    code, out, err = run("schedules", "add", "pulse", "--kind", "pong", "--cron", "@daily", db=db)

    assert (code, out) == (2, "")
    assert "schedule 'pulse' already exists" in err
    code, out, _ = run("schedules", "show", "pulse", "--json", db=db)
    assert json.loads(out)["kind"] == "ping"


def test_list_pages_by_name_with_a_cursor(tmp_path: Path) -> None:
    db = tmp_path / "pages.db"
    for name in ("c", "a", "b"):
        assert run("schedules", "add", name, "--kind", "ping", "--every", "1m", db=db)[0] == 0

    code, out, _ = run("schedules", "list", "--limit", "2", "--json", db=db)
    first = json.loads(out)
    assert code == 0 and [s["name"] for s in first["schedules"]] == ["a", "b"]
    code, out, _ = run(
        "schedules", "list", "--limit", "2", "--cursor", first["next_cursor"], "--json", db=db
    )
    second = json.loads(out)
    assert [s["name"] for s in second["schedules"]] == ["c"] and second["next_cursor"] is None

    code, out, _ = run("schedules", "list", "--limit", "2", db=db, COLUMNS="200")
    assert code == 0 and f"more: --cursor {first['next_cursor']}" in out


def _register_workers(db: Path, *workers: WorkerInfo) -> None:
    async def go() -> None:
        store = open_store(sqlite_url(db))
        try:
            for worker in workers:
                await store.register_worker(worker)
        finally:
            await store.close()

    asyncio.run(go())


def test_add_warns_for_a_kind_no_live_worker_runs(tmp_path: Path) -> None:
    db = migrated(tmp_path / "cli.db")
    _register_workers(
        db,
        WorkerInfo("w1", "h", 1, ("default",), 4, kinds=("email", "report")),
        WorkerInfo("w2", "h", 2, ("other",), 4, kinds=("emial",)),
    )
    env = {"ROTA_DATABASE_URL": sqlite_url(db)}
    typo = invoke("schedules", "add", "s1", "--kind", "emial", "--every", "1h", env=env)
    assert typo.code == 0, "accepted: workers for it may come later"
    assert typo.err_lines == [
        "warning: no live worker runs kind 'emial' on queue 'default' (kinds run there: "
        "'email', 'report'); its jobs will wait until a worker that runs it starts (--app "
        "checks the kind against your app)"
    ]
    known = invoke("schedules", "add", "s2", "--kind", "email", "--every", "1h", env=env)
    assert (known.code, known.err_lines) == (0, [])


def test_add_warns_when_no_worker_is_alive_and_not_for_one_that_runs_any_kind(
    tmp_path: Path,
) -> None:
    db = migrated(tmp_path / "cli.db")
    env = {"ROTA_DATABASE_URL": sqlite_url(db)}
    alone = invoke("schedules", "add", "s1", "--kind", "email", "--every", "1h", env=env)
    assert "(kinds run there: none)" in alone.err
    _register_workers(db, WorkerInfo("any", "h", 1, ("default",), 4, kinds=None))
    anything = invoke("schedules", "add", "s2", "--kind", "whatever", "--every", "1h", env=env)
    assert (anything.code, anything.err_lines) == (0, [])
