"""`rota queues ...` and `rota limits ...` as a user runs them: a subprocess against a SQLite
file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rota.cli import cli
from tests.support.cli import migrated


def run(*args: str, db: Path, **env: str) -> tuple[int, str, str]:
    result = subprocess.run(
        [sys.executable, "-m", "rota", *args],
        capture_output=True,
        text=True,
        env={"ROTA_DATABASE_URL": f"sqlite:///{db}", "PATH": "/usr/bin:/bin", **env},
        timeout=60,
    )
    return result.returncode, result.stdout, result.stderr


def listed(kind: str, db: Path) -> list[dict[str, object]]:
    """`rota queues list --json` or `rota limits list --json`, parsed."""
    code, out, err = run(kind, "list", "--json", db=db)
    assert code == 0, err
    items: list[dict[str, object]] = json.loads(out)[kind]
    return items


@pytest.mark.parametrize(
    ("group", "commands"),
    [("queues", ("list", "pause", "resume")), ("limits", ("list", "set", "remove"))],
)
def test_help_lists_every_subcommand(group: str, commands: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [group, "--help"])
    assert result.exit_code == 0
    for command in commands:
        assert command in result.output


def test_pause_list_and_resume_a_queue(tmp_path: Path) -> None:
    db = tmp_path / "queues.db"
    for _ in range(2):
        assert run("enqueue", "email", "--queue", "mail", db=db)[0] == 0
    assert run("enqueue", "report", db=db)[0] == 0

    assert run("queues", "pause", "mail", db=db)[:2] == (0, "queue mail paused\n")
    assert run("queues", "pause", "later", db=db)[0] == 0, "a queue without jobs yet"
    assert run("limits", "set", "--queue", "mail", "--concurrency", "2", db=db)[0] == 0

    queues = {q["name"]: q for q in listed("queues", db)}
    assert list(queues) == ["default", "later", "mail"]
    mail = queues["mail"]
    assert (mail["paused"], mail["concurrency"], mail["limit_running"]) == (True, 2, 0)
    assert mail["counts"] == {
        "waiting": 0,
        "pending": 2,
        "running": 0,
        "succeeded": 0,
        "dead": 0,
        "cancelled": 0,
        "held": 0,
    }
    assert isinstance(mail["updated_at"], str)
    assert (queues["default"]["paused"], queues["default"]["updated_at"]) == (False, None)
    assert queues["later"]["paused"] is True

    code, out, _ = run("queues", "list", db=db)
    assert code == 0
    line = next(row for row in out.splitlines() if row.split()[:1] == ["mail"])
    assert line.split() == ["mail", "paused", "2", "0", "0", "of", "2", "running"]

    assert run("queues", "resume", "mail", db=db)[:2] == (0, "queue mail resumed\n")
    assert {q["name"]: q["paused"] for q in listed("queues", db)}["mail"] is False


def test_set_list_replace_and_remove_limits(tmp_path: Path) -> None:
    db = tmp_path / "limits.db"
    code, out, err = run("limits", "set", "--kind", "pdf", "--concurrency", "3", db=db)
    assert (code, out) == (0, "limit kind pdf: at most 3 running\n"), err
    code, out, _ = run("limits", "set", "--tenant", "*", "--concurrency", "2", db=db)
    assert out == "limit tenant *: at most 2 running, for each tenant\n"
    code, out, _ = run(
        "limits", "set", "--kind", "api", "--rate", "100", "--per", "1m", "--json", db=db
    )
    assert json.loads(out) == {
        "scope": "kind",
        "key": "api",
        "concurrency": None,
        "rate": 100,
        "period_seconds": 60.0,
        "running": 0,
        "recent_starts": 0,
    }

    limits = listed("limits", db)
    assert [(lim["scope"], lim["key"], lim["concurrency"]) for lim in limits] == [
        ("kind", "api", None),
        ("kind", "pdf", 3),
        ("tenant", "*", 2),
    ]
    code, out, _ = run("limits", "list", db=db)
    assert code == 0
    api_line = next(row for row in out.splitlines() if row.split()[:2] == ["kind", "api"])
    assert api_line.split() == ["kind", "api", "100", "/", "1m", "0", "0"]

    code, out, _ = run(
        "limits", "set", "--kind", "pdf", "--concurrency", "5", "--rate", "10", "--per", "1h",
        db=db,
    )  # fmt: skip
    assert out == "limit kind pdf: at most 5 running, 10 starts per 1h\n"
    pdf = next(lim for lim in listed("limits", db) if lim["key"] == "pdf")
    assert (pdf["concurrency"], pdf["rate"], pdf["period_seconds"]) == (5, 10, 3600.0)

    assert run("limits", "remove", "--kind", "pdf", db=db)[:2] == (0, "limit kind pdf removed\n")
    assert run("limits", "remove", "--tenant", "*", db=db)[0] == 0
    assert [lim["key"] for lim in listed("limits", db)] == ["api"]


def test_every_limits_flag_has_an_environment_twin(tmp_path: Path) -> None:
    db = tmp_path / "env.db"
    code, out, err = run(
        "limits",
        "set",
        db=db,
        ROTA_LIMIT_TENANT="acme",
        ROTA_LIMIT_CONCURRENCY="4",
        ROTA_LIMIT_RATE="30",
        ROTA_LIMIT_PER="10s",
        ROTA_JSON="1",
    )
    assert code == 0, err
    assert json.loads(out)["period_seconds"] == 10.0
    code, _, err = run("limits", "set", db=db, ROTA_LIMIT_KIND="pdf", ROTA_LIMIT_CONCURRENCY="1")
    assert code == 0, err
    code, _, err = run("limits", "set", db=db, ROTA_LIMIT_QUEUE="mail", ROTA_LIMIT_CONCURRENCY="1")
    assert code == 0, err
    assert [(lim["scope"], lim["key"]) for lim in listed("limits", db)] == [
        ("kind", "pdf"),
        ("queue", "mail"),
        ("tenant", "acme"),
    ]
    acme = listed("limits", db)[2]
    assert (acme["concurrency"], acme["rate"]) == (4, 30)

    assert run("limits", "remove", db=db, ROTA_LIMIT_TENANT="acme")[0] == 0
    assert run("limits", "remove", db=db, ROTA_LIMIT_QUEUE="mail")[0] == 0
    assert [lim["key"] for lim in listed("limits", db)] == ["pdf"]


def test_the_worker_concurrency_variable_does_not_leak_into_limits(tmp_path: Path) -> None:
    """ROTA_CONCURRENCY sizes a worker; a limit set from the same shell must not pick it up."""
    db = tmp_path / "leak.db"
    code, _, err = run(
        "limits", "set", "--kind", "api", "--rate", "5", "--per", "1s", db=db,
        ROTA_CONCURRENCY="10", ROTA_KIND="other", ROTA_QUEUE="other",
    )  # fmt: skip
    assert code == 0, err
    [limit] = listed("limits", db)
    assert (limit["key"], limit["concurrency"]) == ("api", None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["limits", "set", "--concurrency", "3"], "give one of --kind, --queue or --tenant"),
        (
            ["limits", "set", "--kind", "a", "--queue", "b", "--concurrency", "1"],
            "give one of --kind, --queue or --tenant",
        ),
        (["limits", "set", "--kind", "pdf"], "give --concurrency, --rate with --per, or both"),
        (["limits", "set", "--kind", "pdf", "--rate", "5"], "--rate needs --per"),
        (
            ["limits", "set", "--kind", "pdf", "--concurrency", "1", "--per", "1m"],
            "--per needs --rate",
        ),
        (
            ["limits", "set", "--kind", "pdf", "--concurrency", "many"],
            "--concurrency: 'many' is not a whole number",
        ),
        (["limits", "set", "--kind", "pdf", "--concurrency", "2.5"], "--concurrency:"),
        (
            ["limits", "set", "--kind", "pdf", "--concurrency", "-1"],
            "concurrency must be between 0 and 1000000",
        ),
        (["limits", "set", "--kind", "pdf", "--rate", "0", "--per", "1m"], "rate must be between"),
        (["limits", "set", "--kind", "pdf", "--rate", "x", "--per", "1m"], "--rate:"),
        (["limits", "set", "--kind", "pdf", "--rate", "5", "--per", "soon"], "--per:"),
        (
            ["limits", "set", "--kind", "pdf", "--rate", "5", "--per", "500ms"],
            "a rate needs a period between 1 second and 1 day",
        ),
        (
            ["limits", "set", "--queue", "mail", "--rate", "5", "--per", "1m"],
            "rates apply to kinds and tenants, not queues",
        ),
        (["limits", "set", "--kind", "bad kind", "--concurrency", "1"], "limit key:"),
        (["limits", "set", "--kind", "*", "--concurrency", "1"], "limit key:"),
        (["limits", "remove"], "give one of --kind, --queue or --tenant"),
        (["limits", "remove", "--kind", "pdf"], "no limit on kind 'pdf'"),
        (["limits", "remove", "--queue", "bad name"], "limit key:"),
        (["queues", "pause", "bad name"], "queue: may contain only"),
        (["queues", "resume", ""], "queue: must not be empty"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    db = migrated(tmp_path / "bad.db")
    code, out, err = run(*args, db=db)

    assert code == 2, (out, err)
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert out == ""
    assert listed("limits", db) == [] and listed("queues", db) == [], "bad input wrote nothing"
