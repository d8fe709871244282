"""Every code sample in the README and the documentation site runs (rules in samples.py)."""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

import rota
from rota.cli import cli
from tests.docs.samples import ROOT, Sample, pages, samples, uses_postgres

#: Pages written before the site, whose samples continue code the page describes in prose.
PRELUDES = {"docs/guarantees.md": "import rota\napp = rota.App('memory://')\n"}
#: Commands that run until stopped, and the line each prints on stderr once it is ready.
LONG_RUNNING = {
    "serve": re.compile(r"listening on http"),
    "worker": re.compile(r"worker \S+ started"),
}
#: Every wait below is bounded by this, so a sample that hangs fails instead of stalling.
BOUND_S = 60.0

PAGES = pages()


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", [p for p in PAGES if not uses_postgres(p)], ids=page_id)
def test_the_samples_of_a_page_run(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_page(path, tmp_path, monkeypatch, database_url=None)


@pytest.mark.postgres
@pytest.mark.parametrize("path", [p for p in PAGES if uses_postgres(p)], ids=page_id)
def test_the_samples_of_a_postgresql_page_run(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str
) -> None:
    run_page(path, tmp_path, monkeypatch, database_url=pg_url)


def test_the_site_has_samples_of_every_kind() -> None:
    """The rules above are exercised: a page with no fences at all would pass vacuously."""
    languages = {sample.language for path in PAGES for sample in samples(path)}
    assert {"python", "console", "ini", "yaml", "toml"} <= languages


# ---------------------------------------------------------------------- running a page


def run_page(
    path: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch, *, database_url: str | None
) -> None:
    for key in list(os.environ):
        if key.startswith("ROTA_"):
            monkeypatch.delenv(key)
    if database_url is not None:
        monkeypatch.setenv("ROTA_DATABASE_URL", database_url)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(workdir)
    monkeypatch.syspath_prepend(str(workdir))
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    page = page_id(path)
    if page in PRELUDES:
        exec(PRELUDES[page], namespace)
    loop = asyncio.new_event_loop()
    modules = set(sys.modules)
    try:
        for sample in samples(path):
            if sample.title is not None:
                write_or_check_file(sample, workdir)
            elif sample.language == "python":
                run_python(sample, namespace, loop)
            elif sample.language == "console":
                run_console(sample, workdir)
            elif sample.language in ("ini", "yaml", "toml"):
                check_config(sample)
            elif sample.language in ("", "sh", "shell", "bash"):
                for line in sample.code.splitlines():
                    if line.startswith("export "):
                        # A sample's `export ROTA_X=...` holds for its later commands.
                        name, _, value = shlex.split(line, comments=True)[1].partition("=")
                        monkeypatch.setenv(name, value)
                    elif line.startswith("rota "):
                        check_rota_command(sample, shlex.split(line, comments=True)[1:])
    finally:
        imported = [sys.modules[name] for name in set(sys.modules) - modules]
        for name in set(sys.modules) - modules:
            module_file = getattr(sys.modules[name], "__file__", None) or ""
            if module_file.startswith(str(workdir)):
                del sys.modules[name]
        apps = [v for v in namespace.values() if isinstance(v, rota.App)]
        apps += [v for m in imported for v in vars(m).values() if isinstance(v, rota.App)]
        for app in apps:
            loop.run_until_complete(app.close())
        loop.close()


def write_or_check_file(sample: Sample, workdir: Path) -> None:
    assert sample.title is not None
    if sample.title.startswith("/"):
        check_config(sample)
        return
    target = workdir / sample.title
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(sample.code)
    if sample.language in ("ini", "yaml", "toml"):
        check_config(sample)


def run_python(sample: Sample, namespace: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
    # Padding keeps a traceback's line numbers those of the page.
    source = "\n" * sample.line + sample.code
    code = compile(source, sample.page, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if code.co_flags & inspect.CO_COROUTINE:
        loop.run_until_complete(eval(code, namespace))
    else:
        exec(code, namespace)


def run_console(sample: Sample, workdir: Path) -> None:
    running: list[tuple[str, subprocess.Popen[bytes]]] = []
    try:
        for command in commands(sample):
            argv = shlex.split(command)
            if argv[0] == "make":
                result = subprocess.run(
                    ["make", "-n", "-C", str(ROOT), *argv[1:]], capture_output=True, text=True
                )
                assert result.returncode == 0, f"{sample.where}: {command}\n{result.stderr}"
            elif argv[0] == "rota" and len(argv) > 1 and argv[1] in LONG_RUNNING:
                running.append((command, start_until_ready(sample, command, argv, workdir)))
            else:
                result = subprocess.run(
                    command,
                    shell=True,
                    cwd=workdir,
                    capture_output=True,
                    text=True,
                    timeout=BOUND_S,
                )
                assert result.returncode == 0, (
                    f"{sample.where}: {command} exited {result.returncode}\n"
                    f"{result.stdout}{result.stderr}"
                )
    finally:
        for command, process in reversed(running):
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=BOUND_S)
            assert code == 0, f"{sample.where}: {command} exited {code} on SIGTERM"


def commands(sample: Sample) -> list[str]:
    found: list[str] = []
    for line in sample.code.splitlines():
        if line.startswith("$ "):
            found.append(line[2:].split("  #", 1)[0].strip())
    assert found, f"{sample.where}: a console sample with no $ command"
    return found


def start_until_ready(
    sample: Sample, command: str, argv: list[str], workdir: Path
) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    if argv[1] == "serve" and "--port" not in argv:
        env["ROTA_PORT"] = str(free_port())
    log = workdir / f"{argv[1]}-{len(list(workdir.glob('*.log')))}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            argv, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=sink
        )
    ready = LONG_RUNNING[argv[1]]
    deadline = time.monotonic() + BOUND_S
    while not ready.search(log.read_text(errors="replace")):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            pytest.fail(f"{sample.where}: {command} never became ready:\n{log.read_text()}")
        time.sleep(0.05)  # polling the log for readiness, bounded by the deadline above
    return process


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# ---------------------------------------------------------------------- configuration files


def check_config(sample: Sample) -> None:
    if sample.language == "yaml":
        for document in yaml.safe_load_all(sample.code):
            for argv in rota_argvs(document):
                check_rota_command(sample, argv)
    elif sample.language == "toml":
        tomllib.loads(sample.code)
    elif sample.language == "ini":
        for line in sample.code.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "ExecStart":
                argv = shlex.split(value)
                assert Path(argv[0]).name == "rota", f"{sample.where}: {line}"
                check_rota_command(sample, argv[1:])


def rota_argvs(node: object) -> list[list[str]]:
    """The rota command lines in a parsed YAML document (lists whose first item is rota)."""
    if isinstance(node, dict):
        return [argv for value in node.values() for argv in rota_argvs(value)]
    if isinstance(node, list):
        if node and all(isinstance(item, str) for item in node) and Path(node[0]).name == "rota":
            return [[str(item) for item in node[1:]]]
        return [argv for item in node for argv in rota_argvs(item)]
    return []


def check_rota_command(sample: Sample, args: list[str]) -> None:
    """Parse ``rota ARGS`` with the real CLI, without running it."""
    command: click.Command = cli
    name = "rota"
    rest = list(args)
    while isinstance(command, click.Group):
        assert rest and rest[0] in command.commands, f"{sample.where}: rota {shlex.join(args)}"
        name = rest.pop(0)
        command = command.commands[name]
    try:
        command.make_context(name, rest).close()
    except click.ClickException as error:
        pytest.fail(f"{sample.where}: rota {shlex.join(args)}: {error.format_message()}")
