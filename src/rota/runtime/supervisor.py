"""Supervisor: N ``rota worker`` processes of one app, kept running (``--processes N``).

Each child is a real ``python -m rota worker`` process of the same app, named
``<name>-<slot>`` (slot 1..N; its process shows as ``rota-worker-<slot>``). The supervisor:

- starts them, each in a process group of its own, so a Ctrl-C at the terminal reaches the
  supervisor alone, which passes it on: the first SIGTERM, SIGINT or SIGHUP stops every child
  gracefully (running jobs finish), a second one stops them at once. Children die with the
  supervisor (``PR_SET_PDEATHSIG`` on Linux) should it be SIGKILLed;
- restarts a child that dies, after a backoff that doubles while it keeps dying (0.5 s up to
  30 s; a child that lived a minute starts afresh), and logs an error when it died three times
  in a row. Its jobs are taken over as any dead worker's are: their leases expire and the
  rescuer puts them back;
- replaces at once a child that recycled itself (``rota.runtime.supervised``);
- serves one ``/metrics`` for the whole fleet: each child serves its own on a loopback port it
  reports, and a scrape of the supervisor sums theirs (the clock rate, a reading per process,
  takes the highest) beside its own ``rota_worker_processes`` and restart count.

Settings reach the children as ``ROTA_*`` variables (database URLs never show in ``ps``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from rota.runtime.signals import stop_signals

log = logging.getLogger("rota.supervisor")

#: First restart delay after a death; doubled for each death in a row, up to RESTART_CAP_S.
RESTART_BASE_S = 0.5
RESTART_CAP_S = 30.0
#: A child that lived this long before dying starts its backoff afresh.
STABLE_S = 60.0
#: Deaths in a row after which the supervisor says a child keeps dying.
KEEPS_DYING = 3
#: The worker settings the children read from the environment, by WorkerSettings field.
ENV_OF = {
    "queues": "ROTA_QUEUES",
    "concurrency": "ROTA_CONCURRENCY",
    "claim_batch": "ROTA_CLAIM_BATCH",
    "lease": "ROTA_LEASE_SECONDS",
    "heartbeat": "ROTA_HEARTBEAT_SECONDS",
    "poll": "ROTA_POLL_SECONDS",
    "rescue": "ROTA_RESCUE_SECONDS",
    "shutdown_timeout": "ROTA_SHUTDOWN_TIMEOUT",
    "retention": "ROTA_RETENTION",
    "unrunnable_grace": "ROTA_UNRUNNABLE_GRACE",
    "audit_retention": "ROTA_AUDIT_RETENTION",
}
#: What the supervisor sets per child, or must not pass on from its own environment.
NOT_INHERITED = (
    "ROTA_PROCESSES",
    "ROTA_WORKER_NAME",
    "ROTA_METRICS_PORT",
    "ROTA_METRICS_HOST",
    "ROTA_MAX_JOBS_PER_CHILD",
    "ROTA_MAX_MEMORY_PER_CHILD",
)


def child_environment(options: Mapping[str, Any]) -> dict[str, str]:
    """``ROTA_*`` variables for WorkerSettings ``options`` (durations as timedeltas or
    seconds, ``"off"`` for an optional one turned off; None leaves the default)."""
    env: dict[str, str] = {}
    for key, value in options.items():
        if value is None or key == "name":
            continue
        if key not in ENV_OF:
            raise ValueError(f"no environment variable for worker setting {key!r}")
        if isinstance(value, timedelta):
            value = value.total_seconds()
        if isinstance(value, list | tuple):
            value = ",".join(value)
        env[ENV_OF[key]] = str(value)
    return env


@dataclass(frozen=True, slots=True)
class FleetSettings:
    """What the supervisor runs: ``processes`` children of ``app_ref``."""

    app_ref: str
    processes: int
    #: Worker names are ``<name>-<slot>``.
    name: str
    #: ROTA_* variables for every child (database URL, worker settings).
    env: Mapping[str, str] = field(default_factory=dict)
    #: Options given to `rota` before `worker` (log level and format).
    cli_args: Sequence[str] = ()
    max_jobs_per_child: int | None = None
    max_memory_per_child_mb: int | None = None
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    metrics_allowed_hosts: Sequence[str] = ()


@dataclass(slots=True)
class Child:
    """One child process in its slot."""

    slot: int
    name: str
    process: asyncio.subprocess.Process
    started: float
    ready: bool = False
    recycling: bool = False
    metrics_port: int | None = None
    status: asyncio.Task[None] | None = None


class Supervisor:
    """Runs the fleet until stopped; see the module docstring."""

    def __init__(self, settings: FleetSettings) -> None:
        self.settings = settings
        self.children: dict[int, Child] = {}
        self.restarts = 0
        self._signals: list[signal.Signals] = []
        self._stop = asyncio.Event()
        self._aborted = False

    @property
    def stopping(self) -> bool:
        return bool(self._signals)

    def request_stop(self, signum: signal.Signals = signal.SIGTERM) -> None:
        """Pass ``signum`` on to every child: the first stops them gracefully, a second one
        at once. No child is started or restarted after it."""
        self._signals.append(signum)
        if len(self._signals) == 1:
            log.info(
                "stopping %d worker process(es): finishing running jobs "
                "(signal again to stop at once)",
                len(self.children),
            )
        else:
            self._aborted = True
            log.warning("stopping worker processes now: running jobs are abandoned")
        self._stop.set()
        for child in list(self.children.values()):
            self._signal(child, signum)

    async def run(self) -> int:
        """Run until stopped and every child has exited: 0 after a graceful stop, 1 if
        running jobs were abandoned or a child did not stop cleanly."""
        loop = asyncio.get_running_loop()
        installed = []
        for signum in stop_signals():
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, self.request_stop, signum)
                installed.append(signum)
        exporter = self._serve_metrics()
        log.info(
            "supervising %d worker process(es) of %s",
            self.settings.processes,
            self.settings.app_ref,
        )
        try:
            codes = await asyncio.gather(
                *(self._keep(slot) for slot in range(1, self.settings.processes + 1))
            )
        finally:
            for signum in installed:
                loop.remove_signal_handler(signum)
            if exporter is not None:
                exporter.close()
        clean = all(code == 0 for code in codes) and not self._aborted
        log.info("worker processes stopped%s", "" if clean else " (not all cleanly)")
        return 0 if clean else 1

    # ------------------------------------------------------------------ one slot

    async def _keep(self, slot: int) -> int:
        """Keep a child running in ``slot`` until the stop; its last exit code as judged."""
        failures = 0
        while True:
            child = await self._spawn(slot)
            code = await child.process.wait()
            del self.children[slot]
            if child.status is not None:  # its last words (a recycle) arrive before its end
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(child.status, 5)
            if self.stopping:
                return self._judge_stopped(child, code)
            if child.recycling and code == 0:
                log.info("worker process %d recycled: starting a fresh one", slot)
                failures = 0
                continue
            lived = time.monotonic() - child.started
            failures = 1 if lived >= STABLE_S else failures + 1
            self.restarts += 1
            delay = min(RESTART_BASE_S * 2 ** (failures - 1), RESTART_CAP_S)
            how = _exit_text(code)
            if failures >= KEEPS_DYING:
                log.error(
                    "worker process %d keeps dying: %s (%d times in a row, the last after "
                    "%.1fs); restarting in %.1fs",
                    slot,
                    how,
                    failures,
                    lived,
                    delay,
                )
            else:
                log.warning(
                    "worker process %d (pid %d) %s; restarting in %.1fs",
                    slot,
                    child.process.pid,
                    how,
                    delay,
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
            if self._stop.is_set():
                return 0

    def _judge_stopped(self, child: Child, code: int) -> int:
        """0 for a child that stopped as asked; one that a signal ended before it could
        handle signals (still starting) had no jobs, so that is a clean stop too."""
        if code == 0:
            return 0
        if code < 0 and not child.ready and -code in self._signals:
            return 0
        log.warning("worker process %d %s", child.slot, _exit_text(code))
        return 1

    async def _spawn(self, slot: int) -> Child:
        settings = self.settings
        name = f"{settings.name}-{slot}"
        read_fd, write_fd = os.pipe()
        args = [
            sys.executable,
            "-m",
            "rota",
            *settings.cli_args,
            "worker",
            "--name",
            name,
            "--supervised-fd",
            str(write_fd),
        ]
        if settings.metrics_port is not None:
            args += ["--metrics-port", "0", "--metrics-host", "127.0.0.1"]
        if settings.max_jobs_per_child is not None:
            args += ["--max-jobs-per-child", str(settings.max_jobs_per_child)]
        if settings.max_memory_per_child_mb is not None:
            args += ["--max-memory-per-child", str(settings.max_memory_per_child_mb)]
        env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
        env.update(settings.env)
        env["ROTA_APP"] = settings.app_ref
        try:
            process = await asyncio.create_subprocess_exec(
                *args,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                pass_fds=(write_fd,),
                process_group=0,
                preexec_fn=_die_with_parent,
            )
        finally:
            os.close(write_fd)
        child = Child(slot, name, process, time.monotonic())
        self.children[slot] = child
        child.status = asyncio.create_task(
            self._read_status(child, read_fd), name=f"rota-status-{slot}"
        )
        if self.stopping:  # a stop came while it was starting
            self._signal(child, self._signals[-1])
        return child

    async def _read_status(self, child: Child, fd: int) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        pipe = os.fdopen(fd, "rb", buffering=0)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        try:
            while line := await reader.readline():
                try:
                    status = json.loads(line)
                except ValueError:
                    continue
                if status.get("event") == "ready":
                    child.ready = True
                    child.metrics_port = status.get("metrics_port")
                    log.info(
                        "worker process %d started: pid %d, worker %s",
                        child.slot,
                        child.process.pid,
                        child.name,
                    )
                elif status.get("event") == "recycle":
                    child.recycling = True
                    log.info("worker process %d recycles: %s", child.slot, status.get("reason"))
        finally:
            transport.close()

    def _signal(self, child: Child, signum: signal.Signals) -> None:
        if child.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(signum)

    # ------------------------------------------------------------------ metrics

    def _serve_metrics(self) -> Any:
        if self.settings.metrics_port is None:
            return None
        from rota.observability.fleet import serve_fleet_metrics

        return serve_fleet_metrics(
            self,
            port=self.settings.metrics_port,
            host=self.settings.metrics_host,
            allowed_hosts=self.settings.metrics_allowed_hosts,
        )

    def metrics_ports(self) -> Iterator[int]:
        """The metrics ports of the children that reported one (any thread)."""
        for child in list(self.children.values()):
            if child.ready and child.metrics_port:
                yield child.metrics_port


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _die_with_parent() -> None:  # pragma: no cover (runs in the forked child)
    """Ask Linux to SIGTERM this child when the supervisor dies (PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(1, signal.SIGTERM)
