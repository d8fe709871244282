"""Every CLI input error is one line on stderr and exit code 2, with nothing written: deep
JSON, instants past the calendar, bytes that are not UTF-8, malformed URLs, click's own usage
errors, bad worker names; and read commands never create a database."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from rota.domain.errors import InvalidInput
from tests.support.cli import invoke, migrated, rota, sqlite_url

DEEP = "[" * 100_000


def assert_one_line_exit_2(ran_code: int, out: str, err_lines: list[str], message: str) -> None:
    assert ran_code == 2, err_lines
    assert len(err_lines) == 1, err_lines
    assert err_lines[0].startswith("error: ") and message in err_lines[0], err_lines
    assert out == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["enqueue", "k", "--payload", DEEP], "--payload: JSON nested too deeply"),
        (["schedules", "add", "s", "--kind", "k", "--every", "1h", "--payload", DEEP], "deeply"),
        (["enqueue", "k", "--at", "9999-12-31T23:59:59-05:00"], "between 1970 and 9999"),
        (["enqueue", "k", "--at", "0001-01-01T00:00:00+01:00"], "between 1970 and 9999"),
        (["enqueue", "k", "--at", "99999-01-01T00:00:00Z"], "must be an ISO 8601 date"),
        (["enqueue", "k", "--at", "99999999999999999999"], "must be an ISO 8601 date"),
        # As strict as the API's run_at: any other separator, a control character included, is refused.
        (["enqueue", "k", "--at", "2026-12-01X10:00:00Z"], "must be an ISO 8601 date"),
        (["enqueue", "k", "--at", "2026-12-01\x0110:00:00Z"], "must be an ISO 8601 date"),
        (
            ["enqueue", "k", "--at", "\uff12\uff10\uff12\uff16-12-01T10:00:00Z"],
            "must be an ISO 8601 date",
        ),
        (["enqueue", "k", "--delay", "1e400"], "--delay"),
        (["jobs", "list", "--database-url", "postgresql://[::1"], "Invalid IPv6 URL"),
        (["jobs", "list", "--database-url", "postgresql://db:99999/x"], "Port out of range"),
        (["enqueue", "k", "--database-url", "postgresql://db:port/x"], "invalid database URL"),
        (["enqueue"], "Missing argument 'KIND'. (see 'rota enqueue --help')"),
        (["enqueue", "k", "--nope"], "No such option '--nope'. (see 'rota enqueue --help')"),
        (["jobs", "lst"], "No such command 'lst'"),
        (["jobs", "list", "--limit", "0"], "(see 'rota jobs list --help')"),
        (["jobs", "list", "--state", "zombie"], "'zombie' is not one of"),
        (["jobs", "show", "abc"], "'abc' is not a valid integer"),
        (["frobnicate"], "No such command 'frobnicate'. (see 'rota --help')"),
        (["jobs", "list", "--kind", "bad kind"], "--kind: may contain only"),
        (["worker", "--app", "x:app", "--name", "bad name"], "bad worker name 'bad name'"),
        (["worker", "--app", "x:app", "--name", "w\n2026 INFO forged"], "bad worker name"),
        (["worker", "--app", "x:app", "--name", ""], "must not be empty"),
    ],
)
def test_input_errors_are_one_line_and_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    db = tmp_path / "input.db"
    ran = rota(*args, url=sqlite_url(db), cwd=tmp_path)
    assert_one_line_exit_2(ran.code, ran.out, ran.err_lines, message)
    assert "Traceback" not in ran.err
    assert not db.exists(), "nothing was opened or written"


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ([b"jobs", b"list", b"--kind", b"caf\xe9"], {}, "argument b'caf\\xe9' is not valid UTF-8"),
        ([b"jobs", b"list", b"--tenant", b"\xff"], {}, "argument b'\\xff' is not valid UTF-8"),
        ([b"enqueue", b"k\xff"], {}, "is not valid UTF-8"),
        ([b"worker", b"--app", b"x:app", b"--name", b"w\xfe"], {}, "is not valid UTF-8"),
        ([b"jobs", b"list"], {"ROTA_QUEUE": "\udcff"}, "ROTA_QUEUE is not valid UTF-8"),
        ([b"worker", b"--app", b"x:app"], {"ROTA_WORKER_NAME": "\udcff"}, "not valid UTF-8"),
    ],
)
def test_arguments_that_are_not_utf8_are_refused(
    tmp_path: Path, args: list[bytes], env: dict[str, str], message: str
) -> None:
    db = migrated(tmp_path / "bytes.db")
    ran = rota(*args, url=sqlite_url(db), env=env)
    assert_one_line_exit_2(ran.code, ran.out, ran.err_lines, message)


@pytest.mark.postgres
def test_a_filter_that_is_not_utf8_is_refused_on_postgresql(pg_url: str) -> None:
    ran = rota(b"jobs", b"list", b"--kind", b"\xff", url=pg_url)
    assert_one_line_exit_2(ran.code, ran.out, ran.err_lines, "is not valid UTF-8")
    ran = rota("jobs", "list", "--kind", "bad kind", url=pg_url)
    assert_one_line_exit_2(ran.code, ran.out, ran.err_lines, "--kind: may contain only")


# ---------------------------------------------------------------------- read commands


READS = [
    ["jobs", "list"],
    ["jobs", "show", "1"],
    ["jobs", "retry", "1"],
    ["jobs", "cancel", "1"],
    ["workers"],
    ["schedules", "list"],
    ["schedules", "show", "s"],
    ["schedules", "pause", "s"],
    ["schedules", "resume", "s"],
    ["schedules", "remove", "s"],
    ["schedules", "run-now", "s"],
    ["queues", "list"],
    ["queues", "resume", "q"],
    ["limits", "list"],
    ["limits", "remove", "--kind", "k"],
    ["check"],
    ["migrate", "--check"],
]


@pytest.mark.parametrize("args", READS)
def test_read_commands_never_create_a_database_or_its_folders(
    tmp_path: Path, args: list[str]
) -> None:
    url = sqlite_url(tmp_path / "no" / "such" / "dir" / "x.db")
    with pytest.raises(InvalidInput) as refused:
        invoke(*args, env={"ROTA_DATABASE_URL": url})
    assert str(refused.value).startswith(f"no database at {tmp_path}/no/such/dir/x.db")
    assert os.listdir(tmp_path) == []


def test_a_mistyped_path_is_one_line_naming_it(tmp_path: Path) -> None:
    ran = rota("jobs", "list", "--database-url", "sqlite:///no/such/dir/x.db", cwd=tmp_path)
    assert_one_line_exit_2(
        ran.code, ran.out, ran.err_lines, f"no database at {tmp_path}/no/such/dir/x.db"
    )
    assert "existing database only" in ran.err
    assert os.listdir(tmp_path) == []


def test_a_read_does_not_turn_another_sqlite_file_into_a_rota_database(tmp_path: Path) -> None:
    other = tmp_path / "app.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY)")
    conn.close()
    with pytest.raises(InvalidInput, match="is not a rota database"):
        invoke("jobs", "list", env={"ROTA_DATABASE_URL": sqlite_url(other)})
    with sqlite3.connect(other) as conn:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master")]
    conn.close()
    assert tables == ["users"]


CREATING_COMMANDS = (
    (["enqueue", "k"], "a.db"),
    (["schedules", "add", "s", "--kind", "k", "--every", "1h"], "b.db"),
    (["queues", "pause", "q"], "c.db"),
    (["limits", "set", "--kind", "k", "--concurrency", "1"], "d.db"),
    (["migrate"], "e.db"),
)


def test_commands_that_create_still_create_and_say_so(tmp_path: Path) -> None:
    for args, name in CREATING_COMMANDS:
        path = tmp_path / name
        ran = invoke(*args, env={"ROTA_DATABASE_URL": sqlite_url(path)})
        assert ran.code == 0, args
        assert path.is_file()
        assert f"creating a new SQLite database at {path}\n" in ran.err, args
    again = invoke("enqueue", "k", env={"ROTA_DATABASE_URL": sqlite_url(tmp_path / "a.db")})
    assert again.code == 0
    assert "creating" not in again.err, "an existing database is not announced"


def test_commands_that_create_refuse_a_folder_that_does_not_exist(tmp_path: Path) -> None:
    for args, name in CREATING_COMMANDS:
        url = sqlite_url(tmp_path / "new" / name)
        with pytest.raises(InvalidInput) as refused:
            invoke(*args, env={"ROTA_DATABASE_URL": url})
        assert str(refused.value).startswith(
            f"no folder {tmp_path}/new for the database {tmp_path}/new/{name}: create it first"
        ), args
    assert os.listdir(tmp_path) == []


def test_a_relative_path_from_another_folder_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    ran = rota("enqueue", "email", url="sqlite:///data/rota.db", cwd=tmp_path / "elsewhere")
    assert_one_line_exit_2(
        ran.code,
        ran.out,
        ran.err_lines,
        f"no folder {tmp_path}/elsewhere/data for the database {tmp_path}/elsewhere/data/rota.db",
    )
    assert os.listdir(tmp_path / "elsewhere") == []


@pytest.mark.parametrize("command", [["worker"], ["serve", "--port", "0"]])
def test_worker_and_serve_refuse_a_database_folder_that_does_not_exist(
    tmp_path: Path, command: list[str]
) -> None:
    ran = rota(*command, "--app", "rota.demo:app", url="sqlite:///data/rota.db", cwd=tmp_path)
    assert_one_line_exit_2(
        ran.code, ran.out, ran.err_lines, f"no folder {tmp_path}/data for the database"
    )
    assert os.listdir(tmp_path) == []
