"""`rota serve` as a real process: zero setup, crash recovery on another worker, clean stop."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

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
