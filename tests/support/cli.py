"""Running `rota` as a user does: a subprocess with its own argv bytes, environment and working
directory; and databases made ready for commands that open existing databases only."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from rota.cli import cli
from rota.store import open_store


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return self.err.strip().splitlines()


def rota(
    *args: str | bytes,
    url: str | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> Ran:
    """`rota ARGS` in a fresh process (argv may hold bytes that are not UTF-8); ``url`` goes to
    ROTA_DATABASE_URL. Output is decoded with surrogateescape, so no byte is hidden."""
    environ = {"PATH": "/usr/bin:/bin", **(env or {})}
    if url is not None:
        environ["ROTA_DATABASE_URL"] = url
    result = subprocess.run(
        [sys.executable, "-m", "rota", *args],
        capture_output=True,
        env=environ,
        cwd=cwd,
        timeout=60,
    )
    return Ran(
        result.returncode,
        result.stdout.decode("utf-8", "surrogateescape"),
        result.stderr.decode("utf-8", "surrogateescape"),
    )


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def migrated(path: Path) -> Path:
    """``path`` as an empty, migrated SQLite database (read commands refuse a missing one)."""

    async def go() -> None:
        store = open_store(sqlite_url(path))
        try:
            await store.migrate()
        finally:
            await store.close()

    asyncio.run(go())
    assert os.path.isfile(path)
    return path


def invoke(*args: str, env: dict[str, str] | None = None) -> Ran:
    """`rota ARGS` in this process through click, with exceptions raised as they are (turning
    them into one line is ``main``'s work, tested through ``rota``). No ROTA_* variable from
    the outside leaks in, and the root logger the command configures is restored after."""
    environ: dict[str, str | None] = {key: None for key in os.environ if key.startswith("ROTA_")}
    environ.update(env or {})
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        result = CliRunner().invoke(cli, list(args), env=environ, catch_exceptions=False)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    return Ran(result.exit_code, result.stdout, result.stderr)


APP_MODULE = """
import rota

app = rota.App({url!r})


@app.job("invoice", queue="billing", max_attempts=7, timeout=12)
def invoice(ctx, payload):
    return None


@app.job("email")
def email(ctx, payload):
    return None
"""


def write_app(directory: Path, url: str, module: str = "billing") -> str:
    """A module in ``directory`` whose ``app`` registers invoice (queue billing, 7 attempts,
    timeout 12 s) and email, on ``url``; returns its ``--app`` reference."""
    (directory / f"{module}.py").write_text(APP_MODULE.format(url=url))
    return f"{module}:app"
