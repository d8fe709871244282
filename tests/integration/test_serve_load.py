"""`rota serve` under API load (C10): 3,000 schedules with sparse cron rules, 20 clients
paging through /api/schedules without pause, and an in-process job that outlives its lease
several times over. The job keeps its lease (one attempt); bench/serve_load.py measures the
/healthz latency under the same load."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.support.schedule_load import paging, populate
from tests.support.serve import serving

pytestmark = pytest.mark.slow

SCHEDULES = 3000
CLIENTS = 20


def test_twenty_clients_listing_sparse_schedules_cost_no_lease(tmp_path: Path) -> None:
    asyncio.run(populate(tmp_path / "rota.db", SCHEDULES))
    # Twenty clients on one address are one identity: lift its read share, as the bench does.
    lifted = {"ROTA_MAX_READS_PER_IDENTITY": "1000", "ROTA_READ_RATE_PER_IDENTITY": "1000000"}
    with serving(tmp_path, env=lifted) as served:
        with paging(served.url, CLIENTS, also=("/healthz",)) as load:
            served.wait_until(lambda: len(load.pages) >= CLIENTS, timeout=120, what="every client")
            # The demo's `slow` job runs 6 s under a 3 s lease with a heartbeat every second.
            job = served.post("/api/jobs", {"kind": "slow", "max_attempts": 3})

            def finished() -> Any:
                detail = served.get(f"/api/jobs/{job['id']}")
                return detail if detail["state"] in ("succeeded", "dead") else None

            detail = served.wait_until(finished, timeout=120, what="the slow job to finish")
        assert load.errors == []
        assert [(a["attempt"], a["outcome"]) for a in detail["attempts"]] == [(1, "succeeded")]
        assert detail["state"] == "succeeded"
        assert served.stop() == 0
