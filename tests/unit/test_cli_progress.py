"""Long CLI work (purge, bulk retry and cancel, migrations) shows progress on stderr when
stderr is a terminal, and only then: stdout carries the data alone, and piped stderr the
messages alone. The terminal is a real pseudo-terminal; stdout stays a pipe."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

from rota.cli.bulk import BATCH
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import JobFilter, Store, open_store
from tests.support.cli import Ran, rota, sqlite_url

#: More jobs than one batch holds, so the work takes several statements.
JOBS = 2 * BATCH + 200


def with_store(db: Path, *, jobs: int = 0, cancel: bool = False) -> None:
    """A migrated database with ``jobs`` pending jobs (cancelled with ``cancel``)."""

    async def go() -> None:
        store = open_store(sqlite_url(db))
        try:
            await store.migrate()
            await store.enqueue([JobSpec(kind="email") for _ in range(jobs)])
            if cancel:
                assert await store.bulk_cancel(JobFilter(), limit=jobs) == jobs
        finally:
            await store.close()

    asyncio.run(go())


def counts(db: Path) -> dict[JobState, int]:
    async def go(store: Store) -> dict[JobState, int]:
        totals = await store.counts()
        return {state: totals.total(state) for state in JobState if totals.total(state)}

    async def run() -> dict[JobState, int]:
        store = open_store(sqlite_url(db))
        try:
            return await go(store)
        finally:
            await store.close()

    return asyncio.run(run())


def rota_on_terminal(*args: str, url: str) -> Ran:
    """`rota ARGS` with stderr on a pseudo-terminal (and stdout on a pipe): what an operator
    at a terminal sees on stderr, with the data kept apart."""
    controller, terminal = pty.openpty()
    # 100 columns by 30 rows: room for the whole bar.
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    env = {"PATH": "/usr/bin:/bin", "TERM": "xterm-256color", "ROTA_DATABASE_URL": url}
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "rota", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=terminal,
            env=env,
        )
    finally:
        os.close(terminal)
    shown = bytearray()
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the last holder of the terminal's other end closed it
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    assert process.stdout is not None
    out = process.stdout.read().decode()
    process.stdout.close()
    code = process.wait(timeout=60)
    return Ran(code, out, shown.decode("utf-8", "replace"))


def test_purge_shows_its_progress_on_a_terminal_and_its_result_on_stdout(tmp_path: Path) -> None:
    db = tmp_path / "rota.db"
    with_store(db, jobs=JOBS, cancel=True)
    ran = rota_on_terminal("jobs", "purge", "--yes", url=sqlite_url(db))
    assert ran.code == 0, ran.err
    scope = "state cancelled|dead|succeeded"
    assert ran.out == f"deleted {JOBS} finished jobs matching {scope}\n"
    assert "deleting finished jobs" in ran.err
    assert f"{JOBS}/{JOBS}" in ran.err
    assert counts(db) == {}


def test_piped_stderr_gets_no_progress(tmp_path: Path) -> None:
    db = tmp_path / "rota.db"
    with_store(db, jobs=JOBS, cancel=True)
    ran = rota("jobs", "purge", "--yes", url=sqlite_url(db))
    assert ran.code == 0
    assert ran.out == f"deleted {JOBS} finished jobs matching state cancelled|dead|succeeded\n"
    assert ran.err == ""


def test_bulk_retry_and_cancel_work_through_every_matching_job(tmp_path: Path) -> None:
    db = tmp_path / "rota.db"
    with_store(db, jobs=JOBS, cancel=True)
    retried = rota_on_terminal("jobs", "bulk-retry", "--kind", "email", "--yes", url=sqlite_url(db))
    assert retried.code == 0, retried.err
    assert retried.out == (
        f"retried {JOBS} dead or cancelled jobs matching state cancelled|dead, kind email\n"
    )
    assert "retrying dead or cancelled jobs" in retried.err and f"{JOBS}/{JOBS}" in retried.err
    assert counts(db) == {JobState.PENDING: JOBS}

    cancelled = rota("jobs", "bulk-cancel", "--state", "pending", "--yes", url=sqlite_url(db))
    assert cancelled.code == 0 and cancelled.err == ""
    assert cancelled.out == f"cancelled {JOBS} unfinished jobs matching state pending\n"
    assert counts(db) == {JobState.CANCELLED: JOBS}


def test_a_bulk_verb_confirms_its_scope_and_refuses_states_it_cannot_act_on(
    tmp_path: Path,
) -> None:
    db = tmp_path / "rota.db"
    with_store(db, jobs=3)
    refused = rota("jobs", "bulk-cancel", "--kind", "email", url=sqlite_url(db))
    assert refused.code == 2
    assert refused.err_lines == [
        "error: would cancel 3 unfinished jobs matching state held|pending|running|waiting, "
        "kind email: pass --yes to confirm"
    ]
    wrong = rota("jobs", "bulk-retry", "--state", "pending", "--yes", url=sqlite_url(db))
    assert wrong.code == 2 and len(wrong.err_lines) == 1
    none = rota("jobs", "bulk-retry", "--yes", url=sqlite_url(db))
    assert none.out == ("no dead or cancelled jobs match state cancelled|dead; nothing retried\n")
    assert counts(db) == {JobState.PENDING: 3}


def test_migrate_shows_progress_on_a_terminal_only(tmp_path: Path) -> None:
    on_terminal = rota_on_terminal("migrate", url=sqlite_url(tmp_path / "a.db"))
    assert on_terminal.code == 0, on_terminal.err
    assert on_terminal.out == ""
    assert "applying " in on_terminal.err and " migrations" in on_terminal.err
    assert "applied " in on_terminal.err

    piped = rota("migrate", url=sqlite_url(tmp_path / "b.db"))
    assert piped.code == 0
    assert piped.out == "" and "applying" not in piped.err
    assert piped.err_lines[-1].startswith("applied ")
