"""`rota serve` against slow and unfinished connections (TESTPLAN T41): 500 slowloris sockets
against a process allowed 256 open files. Unfinished requests are closed after the header or
body timeout, or sooner to make room; /healthz keeps answering; the log stays one line per
event, no tracebacks."""

from __future__ import annotations

import contextlib
import http.client
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.serve import REPO, free_port

pytestmark = pytest.mark.slow

OPEN_FILES = 256
SLOW_SOCKETS = 500
HEADER_TIMEOUT_S = 2
BODY_TIMEOUT_S = 3


def _limit_open_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))


def _healthz(port: int) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status
    finally:
        connection.close()


def _slow_socket(port: int, index: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if index % 2:  # headers that never end
        sock.sendall(b"GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    else:  # a body that never arrives in full
        sock.sendall(
            b"POST /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100000\r\n\r\n{"
        )
    return sock


def test_slowloris_cannot_lock_clients_out_or_flood_the_log(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < SLOW_SOCKETS + 100:  # this test's own client sockets
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "rota", "serve", "--port", str(port),
                "--header-timeout", str(HEADER_TIMEOUT_S), "--body-timeout", str(BODY_TIMEOUT_S),
            ],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO / "src")},
            preexec_fn=_limit_open_files,  # only setrlimit between fork and exec
        )  # fmt: skip
    sockets: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                assert _healthz(port) == 200
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)

        statuses: list[int] = []
        for index in range(SLOW_SOCKETS):
            sockets.append(_slow_socket(port, index))
            if index % 25 == 0:
                statuses.append(_healthz(port))
        # Keep trickling bytes past both timeouts while probing.
        end = time.monotonic() + BODY_TIMEOUT_S + 2
        while time.monotonic() < end:
            for sock in sockets[:50]:
                with contextlib.suppress(OSError):  # closed by the server: expected
                    sock.send(b"a")
            statuses.append(_healthz(port))
            time.sleep(0.2)
        assert statuses and set(statuses) == {200}, statuses
        assert process.poll() is None, "the server is still up"
    finally:
        for sock in sockets:
            sock.close()
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
    text = log.read_text()
    assert "Traceback" not in text
    assert len(text.encode()) < 50 * SLOW_SOCKETS * 4, "about one line per closed connection"
    closed = text.count("closed a connection from")
    assert closed >= SLOW_SOCKETS - 260, text[-2000:]  # every slow socket was closed but a few
