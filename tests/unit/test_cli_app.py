"""`--app` on every command that takes a database: the kind's registration applies, kinds the
app has no handler for are refused, and the app's database is the default."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from rota.cli import cli
from rota.domain.errors import InvalidInput
from rota.store import JobFilter, open_store
from tests.support.cli import invoke, migrated, rota, sqlite_url, write_app


@pytest.fixture
def app_ref(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A billing app (invoice: queue billing, 7 attempts, 12 s) on tmp_path/app.db, importable
    from the working directory as --app loads it; the current directory holds no rota.db."""
    module = f"billing_{uuid.uuid4().hex[:8]}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield write_app(tmp_path, sqlite_url(tmp_path / "app.db"), module)
    sys.modules.pop(module, None)


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name)


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


def test_every_command_with_a_database_takes_app_with_the_same_flag_and_variable() -> None:
    with_database = [path for path in _commands(cli) if _has(_command(path), "database_url")]
    assert len(with_database) >= 20
    for path in with_database:
        [app] = [p for p in _command(path).params if p.name == "app_ref"]
        assert isinstance(app, click.Option)
        assert (app.opts, app.envvar) == (["--app"], "ROTA_APP"), path


def _has(command: click.Command, name: str) -> bool:
    return any(param.name == name for param in command.params)


def test_enqueue_with_app_takes_the_kinds_queue_attempts_and_timeout(
    app_ref: str, tmp_path: Path
) -> None:
    ran = invoke("enqueue", "invoice", "--app", app_ref, "--json")
    assert ran.code == 0, ran.err
    job = json.loads(ran.out)
    assert (job["queue"], job["max_attempts"], job["timeout_seconds"]) == ("billing", 7, 12.0)
    assert (tmp_path / "app.db").is_file() and not (tmp_path / "rota.db").exists()

    ran = invoke(
        "enqueue",
        "invoice",
        "--queue",
        "urgent",
        "--max-attempts",
        "2",
        "--json",
        env={"ROTA_APP": app_ref},
    )
    job = json.loads(ran.out)
    assert (job["queue"], job["max_attempts"]) == ("urgent", 2), "given flags win"


def test_enqueue_text_output_names_the_queue(app_ref: str) -> None:
    ran = invoke("enqueue", "invoice", "--app", app_ref)
    assert ran.out.startswith("job 1 pending in queue billing at ")


def test_with_app_an_unknown_kind_is_refused_listing_the_known_ones(
    app_ref: str, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput) as refused:
        invoke("enqueue", "invioce", "--app", app_ref)
    assert str(refused.value) == "kind: unknown kind 'invioce' (known kinds: email, invoice)"
    with pytest.raises(InvalidInput, match="unknown kind 'nope'"):
        invoke("schedules", "add", "s", "--kind", "nope", "--every", "1h", "--app", app_ref)
    assert not (tmp_path / "app.db").exists(), "nothing was opened or written"


def test_without_app_any_kind_is_accepted(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "free.db")
    ran = invoke("enqueue", "invoice", "--json", env={"ROTA_DATABASE_URL": url})
    assert (ran.code, json.loads(ran.out)["queue"]) == (0, "default")


def test_schedules_add_with_app_takes_the_kinds_queue_and_attempts(app_ref: str) -> None:
    ran = invoke(
        "schedules",
        "add",
        "nightly",
        "--kind",
        "invoice",
        "--every",
        "1h",
        "--app",
        app_ref,
        "--json",
    )
    added = json.loads(ran.out)
    assert (added["queue"], added["max_attempts"], added["priority"]) == ("billing", 7, 0)


def test_database_url_wins_over_the_apps_database(app_ref: str, tmp_path: Path) -> None:
    other = sqlite_url(tmp_path / "other.db")
    invoke("enqueue", "invoice", "--app", app_ref, "--database-url", other)
    assert not (tmp_path / "app.db").exists()
    listed = invoke("jobs", "list", "--json", env={"ROTA_DATABASE_URL": other})
    assert [j["queue"] for j in json.loads(listed.out)["jobs"]] == ["billing"]


@pytest.mark.parametrize(
    "args",
    [
        ["jobs", "list", "--json"],
        ["jobs", "show", "1", "--json"],
        ["workers", "--json"],
        ["schedules", "list", "--json"],
        ["queues", "list", "--json"],
        ["limits", "list", "--json"],
        ["migrate", "--check"],
        ["check"],
    ],
)
def test_reads_with_app_use_the_apps_database(
    app_ref: str, tmp_path: Path, args: list[str]
) -> None:
    assert invoke("enqueue", "invoice", "--app", app_ref).code == 0
    ran = invoke(*args, "--app", app_ref)
    assert ran.code == 0, ran.err
    assert not (tmp_path / "rota.db").exists()


def test_check_with_app_checks_the_apps_database(app_ref: str, tmp_path: Path) -> None:
    migrated(tmp_path / "app.db")
    ran = rota("check", "--app", app_ref, cwd=tmp_path)
    assert ran.code == 0, ran.err
    assert "app: 2 kinds (email, invoice)" in ran.out
    assert f"database sqlite:///{tmp_path / 'app.db'}: reachable" in ran.out
    assert not (tmp_path / "rota.db").exists()


def test_check_counts_an_apps_one_kind_in_the_singular(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = f"reports_{uuid.uuid4().hex[:8]}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    url = sqlite_url(migrated(tmp_path / "app.db"))
    (tmp_path / f"{module}.py").write_text(
        f"import rota\n\napp = rota.App({url!r})\n\n\n"
        '@app.job("report")\ndef report(ctx, payload):\n    return None\n'
    )
    try:
        ran = invoke("check", "--app", f"{module}:app")
    finally:
        sys.modules.pop(module, None)
    assert ran.code == 0, ran.err
    assert ran.out.splitlines()[0] == "app: 1 kind (report)"


@pytest.mark.postgres
def test_enqueue_and_check_with_an_app_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    ref = write_app(tmp_path, pg_url, "pgbilling")
    ran = rota("enqueue", "invoice", "--app", ref, "--json", cwd=tmp_path)
    assert ran.code == 0, ran.err
    job = json.loads(ran.out)
    assert (job["queue"], job["max_attempts"], job["timeout_seconds"]) == ("billing", 7, 12.0)
    refused = rota("enqueue", "invioce", "--app", ref, cwd=tmp_path)
    assert (refused.code, refused.err_lines) == (
        2,
        ["error: kind: unknown kind 'invioce' (known kinds: email, invoice)"],
    )
    ran = rota("check", "--app", ref, cwd=tmp_path)
    assert ran.code == 0 and "reachable" in ran.out, ran.err

    async def stored() -> list[tuple[str, str]]:
        store = open_store(pg_url)
        try:
            page = await store.list_jobs(JobFilter(), limit=10)
            return [(j.kind, j.queue) for j in page.jobs]
        finally:
            await store.close()

    assert asyncio.run(stored()) == [("invoice", "billing")]
