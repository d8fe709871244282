"""Running `rota serve` as a subprocess for tests: start, wait until it answers, stop by PID."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.processes import hangup_as_by_default

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Served:
    process: subprocess.Popen[str]
    url: str
    log: Path

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def post(self, path: str, body: Any) -> Any:
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def wait_until(self, predicate: Any, *, timeout: float, what: str) -> Any:
        """Re-check ``predicate()`` every 200 ms (a polite client: `rota serve` gives each
        identity 100 reads a second) until it returns a truthy value."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; log:\n{self.log.read_text()}")
            time.sleep(0.2)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)
        return self.process.wait(timeout=timeout)


@contextlib.contextmanager
def serving(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """`rota serve` in ``cwd`` on a free port; yields once /healthz answers; always stopped."""
    port = free_port()
    log = cwd / "serve.log"
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(REPO / "src"),
        **(env or {}),
    }
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "rota", "serve", "--port", str(port), *args],
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env=environment,
            preexec_fn=hangup_as_by_default(),
        )
    served = Served(process, f"http://127.0.0.1:{port}", log)
    try:

        def healthy() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"rota serve exited early:\n{log.read_text()}")
            try:
                return bool(served.get("/healthz"))
            except (urllib.error.URLError, ConnectionError):
                return False

        served.wait_until(healthy, timeout=30, what="rota serve to answer /healthz")
        yield served
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
