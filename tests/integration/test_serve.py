"""`rota serve` as a real process: zero setup, crash recovery on another worker, clean stop
(SIGTERM or SIGHUP), and a busy port refused before anything starts."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rota.store import open_store
from tests.support.serve import REPO, serving

pytestmark = pytest.mark.slow


def test_serve_starts_in_an_empty_directory_and_a_crash_job_recovers_on_another_worker(
    tmp_path: Path,
) -> None:
    with serving(tmp_path) as served:
        assert (tmp_path / "rota.db").exists(), "the embedded default needs no setup"
        job = served.post("/api/jobs", {"kind": "crash"})

        def finished() -> object:
            detail = served.get(f"/api/jobs/{job['id']}")
            return detail if detail["state"] == "succeeded" else None

        detail = served.wait_until(finished, timeout=30, what="the crash job to succeed")
        first, second = detail["attempts"]
        assert (first["attempt"], first["outcome"]) == (1, "lease_expired")
        assert (second["attempt"], second["outcome"]) == (2, "succeeded")
        assert first["worker"] != second["worker"], "another worker took over"
        assert second["token"] > first["token"]
        assert served.stop(signal.SIGTERM) == 0


def test_serve_runs_demo_jobs_and_heartbeats_keep_a_long_one_alive(tmp_path: Path) -> None:
    with serving(tmp_path) as served:
        for kind in ("email", "slow", "flaky"):
            served.post("/api/jobs", {"kind": kind, "max_attempts": 1})

        def all_finished() -> bool:
            jobs = (
                served.get("/api/jobs?kind=email")["jobs"]
                + served.get("/api/jobs?kind=slow")["jobs"]
            )
            return all(j["state"] == "succeeded" for j in jobs) and len(jobs) == 2

        served.wait_until(all_finished, timeout=30, what="email and slow to succeed")
        slow = served.get("/api/jobs?kind=slow")["jobs"][0]
        assert slow["attempt"] == 1, "heartbeats kept the 6 s job alive past its 3 s lease"
        assert served.stop(signal.SIGTERM) == 0


def test_serve_refuses_a_public_bind_without_auth(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rota", "serve", "--host", "0.0.0.0", "--port", "0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "src")},
    )
    assert result.returncode == 2
    assert "refusing to listen on '0.0.0.0' without authentication" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "rota.db").exists(), "nothing was created"


def serve_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "rota", "serve", *args]


def clean_env() -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "src")}


async def registered_workers(database: Path) -> list[str]:
    store = open_store(f"sqlite:///{database}")
    try:
        return [info.name for info in await store.list_workers()]
    finally:
        await store.close()


async def test_sighup_stops_serve_gracefully_and_its_workers_leave_the_registry(
    tmp_path: Path,
) -> None:
    """SIGHUP (the terminal or SSH session went away) stops like SIGTERM: by default it
    would kill the process on the spot and leave its workers registered as alive."""
    with serving(tmp_path) as served:
        await asyncio.to_thread(
            served.wait_until,
            lambda: len(served.get("/api/workers")["workers"]) == 3,
            timeout=30,
            what="the three workers to register",
        )
        assert await asyncio.to_thread(served.stop, signal.SIGHUP) == 0
    assert "stopping: finishing running jobs" in served.log.read_text()
    assert await registered_workers(tmp_path / "rota.db") == []


async def test_serve_on_a_busy_port_says_so_in_one_line_and_registers_nothing(
    tmp_path: Path,
) -> None:
    database = tmp_path / "rota.db"
    store = open_store(f"sqlite:///{database}")
    await store.migrate()
    await store.close()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = await asyncio.to_thread(
            subprocess.run,
            serve_command("--port", str(port)),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env=clean_env(),
        )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: could not listen on 127.0.0.1:{port}: address already in use"
    ]
    assert await registered_workers(database) == []


BLOCKING_APP = """\
import time

import rota

app = rota.App("sqlite:///rota.db")


@app.job("block", max_attempts=3)
def block(ctx, payload):
    time.sleep(60)
"""


async def test_a_second_signal_hands_back_a_sync_handlers_job_at_once(tmp_path: Path) -> None:
    """A hard stop of `rota serve` (the second signal) releases the job whose plain ``def``
    handler still sleeps in a thread, as `rota worker` does: the process ends that thread, so
    leaving the job to its lease would only delay the next worker by the rest of it."""
    (tmp_path / "blockapp.py").write_text(BLOCKING_APP)
    env = {"PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{tmp_path}"}
    with serving(tmp_path, "--app", "blockapp:app", "--workers", "1", env=env) as served:
        job = served.post("/api/jobs", {"kind": "block"})
        served.wait_until(
            lambda: served.get(f"/api/jobs/{job['id']}")["state"] == "running",
            timeout=30,
            what="the blocking job to start",
        )
        os.kill(served.process.pid, signal.SIGTERM)
        served.wait_until(
            lambda: "stopping: finishing running jobs" in served.log.read_text(),
            timeout=30,
            what="the graceful stop to begin",
        )
        assert await asyncio.to_thread(served.stop, signal.SIGTERM) != 0
    store = open_store(f"sqlite:///{tmp_path / 'rota.db'}")
    try:
        handed_back = await store.get(job["id"])
        assert (handed_back.state.value, handed_back.attempt) == ("pending", 0)
        assert [attempt.outcome.value for attempt in await store.attempts(job["id"])] == [
            "released"
        ]
    finally:
        await store.close()
