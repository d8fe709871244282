"""The app the supervised fleets of tests/integration/test_worker_fleet.py run.

``ROTA_DATABASE_URL`` names the store and ``ROTA_TEST_FLAGS`` a folder: a ``hold`` job writes
``<job id>.<pid>`` there as it starts, then waits for the file its payload names (at most a
minute); ``pid`` returns at once. Both return the pid of the process that ran them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import rota

app = rota.App(os.environ["ROTA_DATABASE_URL"])
FLAGS = Path(os.environ["ROTA_TEST_FLAGS"])


@app.job("hold", max_attempts=5)
def hold(ctx: rota.JobContext, payload: Any) -> int:
    (FLAGS / f"{ctx.job_id}.{os.getpid()}").write_text("started")
    deadline = time.monotonic() + 60
    while not (FLAGS / str(payload["until"])).exists() and time.monotonic() < deadline:
        time.sleep(0.02)  # a handler that waits for the test's go
    return os.getpid()


@app.job("pid")
def pid(ctx: rota.JobContext, payload: Any) -> int:
    return os.getpid()
