"""The README's walkthrough, done as a user would: `rota serve` with the demo kinds, a `crash`
job enqueued from the CLI, and what the README says happens to it, read back from the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.docs.test_samples import BOUND_S, free_port

ROTA = str(Path(sys.executable).parent / "rota")


def rota(workdir: Path, *args: str) -> Any:
    result = subprocess.run(
        [ROTA, *args], cwd=workdir, capture_output=True, text=True, timeout=BOUND_S, env=ENV
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout) if "--json" in args else result.stdout


ENV = {key: value for key, value in os.environ.items() if not key.startswith("ROTA_")}


def test_a_crash_job_loses_its_lease_and_another_worker_finishes_it(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        serve = subprocess.Popen(
            [ROTA, "serve", "--app", "rota.demo:app", "--port", str(free_port())],
            cwd=tmp_path,
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    try:
        deadline = time.monotonic() + BOUND_S
        while "listening on http" not in log.read_text():
            assert serve.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)  # polling the log for readiness, bounded by the deadline

        job_id = int(rota(tmp_path, "enqueue", "crash", "--app", "rota.demo:app").split()[1])
        while (job := rota(tmp_path, "jobs", "show", str(job_id), "--json"))["state"] != (
            "succeeded"
        ):
            assert job["state"] in ("pending", "running") and time.monotonic() < deadline, job
            time.sleep(0.1)  # polling the job's state, bounded by the deadline

        first, second = job["attempts"]
        assert (first["attempt"], first["outcome"]) == (1, "lease_expired")
        assert (second["attempt"], second["outcome"]) == (2, "succeeded")
        assert second["worker"] != first["worker"]
        assert second["token"] > first["token"]
        assert (
            "handler abandoned the job: no more heartbeats; its lease will expire"
            in log.read_text()
        )
        # The worker that "crashed" is alive and well (only the job's lease ran out): it is
        # still registered, and keeps beating after the job was done by another.
        done_at = datetime.fromisoformat(second["finished_at"])
        while True:
            beats = {
                w["name"]: w["beat_at"] for w in rota(tmp_path, "workers", "--json")["workers"]
            }
            assert len(beats) == 3 and first["worker"] in beats, beats
            if datetime.fromisoformat(beats[first["worker"]]) > done_at:
                break
            assert time.monotonic() < deadline, beats
            time.sleep(0.1)  # polling for the next beat, bounded by the deadline
    finally:
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=BOUND_S) == 0
