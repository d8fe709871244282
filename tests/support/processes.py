"""Worker subprocesses for integration tests: start, wait until ready, signal, clean up.

Every process is started by a ``Fleet`` and signalled by the PID it got from ``Popen``; the
fleet kills whatever is left when the test ends. Waiting on a process or on the store is always
``eventually(condition)``: re-check a condition every 50 ms until a bounded deadline, never a
fixed sleep followed by an assertion.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from rota.store import Store
from tests.support.history import HISTORY_ENV

REPO_ROOT = Path(__file__).resolve().parents[2]
APP_REF = "tests.support.workerapp:app"


def hangup_as_by_default() -> Callable[[], Any] | None:
    """A ``preexec_fn`` giving a child SIGHUP's default action when this process ignores it
    (the test run was started under nohup): an ignored signal is inherited across exec, and
    rota keeps SIGHUP ignored when it starts so (the nohup convention), so the tests that send
    SIGHUP would test the runner's start instead of rota. None (no preexec_fn) otherwise."""
    hangup = getattr(signal, "SIGHUP", None)
    if hangup is None or signal.getsignal(hangup) is not signal.SIG_IGN:
        return None
    return lambda: signal.signal(hangup, signal.SIG_DFL)


async def eventually(
    condition: Callable[[], Any],
    *,
    within_s: float = 30.0,
    every_s: float = 0.05,
    what: str = "the condition",
) -> Any:
    """The first truthy value of ``condition()`` (sync or async), checked every ``every_s``
    seconds; AssertionError naming ``what`` if none comes within ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {within_s:g}s waiting for {what} (last: {value!r})"
            )
        await asyncio.sleep(every_s)


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """Settings passed to `rota worker` as flags: short, so faults heal within seconds."""

    concurrency: int = 4
    lease_s: float = 2.0
    heartbeat_s: float = 0.5
    rescue_s: float = 0.5
    poll_s: float = 0.1
    shutdown_timeout_s: float = 5.0

    def flags(self) -> list[str]:
        return [
            f"--concurrency={self.concurrency}",
            f"--lease-seconds={self.lease_s}",
            f"--heartbeat-seconds={self.heartbeat_s}",
            f"--rescue-seconds={self.rescue_s}",
            f"--poll-seconds={self.poll_s}",
            f"--shutdown-timeout={self.shutdown_timeout_s}",
        ]


class WorkerProcess:
    """One `rota worker` subprocess, known by the PID its Popen returned."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes], stderr_path: Path) -> None:
        self.name = name
        self.popen = popen
        self.stderr_path = stderr_path

    def __repr__(self) -> str:
        return f"<worker {self.name} pid {self.pid} {'running' if self.alive else 'exited'}>"

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def signal(self, signum: signal.Signals) -> None:
        """Send ``signum`` to this process only, and only while it has not been reaped."""
        if self.alive:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def terminate(self) -> None:
        self.signal(signal.SIGTERM)

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    async def wait_exit(self, within_s: float = 30.0) -> int:
        """The exit code once the process has exited (negative: killed by that signal)."""
        await eventually(lambda: not self.alive, within_s=within_s, what=f"{self.name} to exit")
        code = self.popen.returncode
        assert code is not None
        return code

    async def wait_log(self, text: str, within_s: float = 30.0) -> str:
        """Wait until ``text`` appears in the process's stderr; return all of stderr."""
        await eventually(
            lambda: text in self.stderr(),
            within_s=within_s,
            what=f"{text!r} in the stderr of {self.name}",
        )
        return self.stderr()

    def reap(self) -> None:
        """SIGKILL the process if it still runs (stopped ones too) and collect its status."""
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)


class Fleet:
    """The worker processes of one test, all on one store and one history file."""

    def __init__(
        self,
        database_url: str,
        store: Store,
        directory: Path,
        options: WorkerOptions | None = None,
        *,
        listen_database_url: str | None = None,
    ) -> None:
        self.database_url = database_url
        #: ROTA_LISTEN_DATABASE_URL of every worker (a direct connection behind a pooler).
        self.listen_database_url = listen_database_url
        self.store = store
        self.directory = directory
        self.history = directory / "history.jsonl"
        self.options = options or WorkerOptions()
        self.workers: list[WorkerProcess] = []

    def start(
        self,
        name: str,
        *,
        database_url: str | None = None,
        env: dict[str, str] | None = None,
        prefix: list[str] | None = None,
        app: str = APP_REF,
        **overrides: Any,
    ) -> WorkerProcess:
        """Start `rota worker --app app` named ``name`` (behind ``prefix``, e.g. a netns exec),
        with ``env`` added to its environment; ``overrides`` replace WorkerOptions fields."""
        options = replace(self.options, **overrides)
        environment = {
            **os.environ,
            "ROTA_DATABASE_URL": database_url or self.database_url,
            **(
                {"ROTA_LISTEN_DATABASE_URL": self.listen_database_url}
                if self.listen_database_url
                else {}
            ),
            HISTORY_ENV: str(self.history),
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)]),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        stderr_path = self.directory / f"{name}.stderr"
        with stderr_path.open("ab") as stderr:
            popen = subprocess.Popen(
                [
                    *(prefix or []),
                    sys.executable,
                    *("-m", "rota", "worker", "--app", app, "--name", name),
                    *options.flags(),
                ],
                cwd=REPO_ROOT,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                preexec_fn=hangup_as_by_default(),
            )
        worker = WorkerProcess(name, popen, stderr_path)
        self.workers.append(worker)
        return worker

    async def start_ready(
        self, name: str, *, within_s: float = 30.0, **overrides: Any
    ) -> WorkerProcess:
        worker = self.start(name, **overrides)
        await self.wait_ready(worker, within_s=within_s)
        return worker

    async def wait_ready(self, worker: WorkerProcess, *, within_s: float = 30.0) -> None:
        """Wait until the worker's row is in the registry (it claims right after)."""

        async def registered() -> bool:
            if not worker.alive:
                raise AssertionError(
                    f"{worker.name} exited with {worker.returncode} while starting:\n"
                    f"{worker.stderr()}"
                )
            return any(info.name == worker.name for info in await self.store.list_workers())

        await eventually(registered, within_s=within_s, what=f"{worker.name} to register")

    async def stop(self, *, within_s: float | None = None) -> dict[str, int]:
        """Stop every live worker gracefully (SIGTERM) and wait until each has exited; the exit
        codes of those that were alive, by name."""
        alive = [worker for worker in self.workers if worker.alive]
        for worker in alive:
            worker.terminate()
        limit = within_s if within_s is not None else self.options.shutdown_timeout_s + 30
        return {worker.name: await worker.wait_exit(within_s=limit) for worker in alive}

    def close(self) -> None:
        for worker in self.workers:
            worker.reap()

    def logs(self, tail: int | None = None) -> str:
        """Every worker's stderr (its last ``tail`` lines), for a failure's report; each
        headed by how many warnings and errors it logged in all."""
        parts = []
        for worker in self.workers:
            lines = worker.stderr().splitlines()
            shown = lines[-tail:] if tail else lines
            levels = [fields[2] for line in lines if len(fields := line.split(maxsplit=3)) > 3]
            parts.append(
                f"----- {worker.name} (pid {worker.pid}, exit {worker.returncode}, "
                f"{levels.count('WARNING')} warnings, {levels.count('ERROR')} errors; "
                f"last {len(shown)} of {len(lines)} lines) -----"
            )
            parts.extend(shown)
        return "\n".join(parts)


async def supervise(
    fleet: Fleet,
    name: str,
    until: Callable[[], Any],
    *,
    max_restarts: int,
    within_s: float,
    **overrides: Any,
) -> int:
    """Keep one worker running, as a supervisor would: start ``name-1``, and whenever the
    worker dies start the next incarnation, until ``until()`` (sync or async) is true.
    Returns how many times the worker died; AssertionError past ``max_restarts`` deaths or
    ``within_s`` seconds."""
    deaths = 0
    current = fleet.start(f"{name}-1", **overrides)

    async def settled() -> bool:
        nonlocal current, deaths
        value = until()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return True
        if not current.alive:
            deaths += 1
            assert deaths <= max_restarts, f"{name} died {deaths} times"
            current = fleet.start(f"{name}-{deaths + 1}", **overrides)
        return False

    await eventually(settled, within_s=within_s, what=f"{name} to finish the work")
    current.terminate()
    await current.wait_exit()
    return deaths


async def pause_between_writes(worker: WorkerProcess, database_url: str, tries: int = 50) -> None:
    """SIGSTOP ``worker`` at a moment it holds no SQLite write lock (any moment on PostgreSQL,
    where each of the worker's statements commits on its own and a paused client holds no
    row lock)."""
    if not database_url.startswith("sqlite:"):
        worker.pause()
        return
    path = database_url.removeprefix("sqlite:///").partition("?")[0]
    for _ in range(tries):
        worker.pause()
        if await asyncio.to_thread(sqlite_write_lock_is_free, path):
            return
        worker.resume()
        await asyncio.sleep(0.02)  # a moment to finish the transaction it was stopped in
    raise AssertionError(f"{worker.name} held the SQLite write lock at every one of {tries} pauses")


def sqlite_write_lock_is_free(path: str | os.PathLike[str]) -> bool:
    """True if a write transaction can start on the SQLite file right now.

    A process stopped with SIGSTOP while inside a write transaction keeps SQLite's write lock
    (file locks are not leases), so every other process waits until it resumes. Tests that
    pause a worker use this to pause it between two of its writes.
    """
    conn = sqlite3.connect(os.fspath(path), timeout=0.2, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError as error:
        if "locked" in str(error) or "busy" in str(error):
            return False
        raise
    finally:
        conn.close()


F = TypeVar("F", bound=Fleet)


@contextlib.contextmanager
def reaped(fleet: F, *, tail: int = 40) -> Iterator[F]:
    """``fleet``; on exit every worker is reaped and the last ``tail`` lines of each one's log
    printed (pytest shows them when the test failed)."""
    try:
        yield fleet
    finally:
        fleet.close()
        print(fleet.logs(tail=tail))
