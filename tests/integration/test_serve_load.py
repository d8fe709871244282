"""`rota serve` under API load (C10): 3,000 schedules with sparse cron rules, 20 clients
paging through /api/schedules without pause, and an in-process job that outlives its lease
several times over. The job keeps its lease (one attempt); bench/serve_load.py measures the
/healthz latency under the same load."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from rota.domain.schedule import Rule, ScheduleSpec
from rota.store.sqlite import SqliteStore
from tests.support.serve import serving

pytestmark = pytest.mark.slow

SCHEDULES = 3000
CLIENTS = 20
#: Sparse rules: a leap day, new year, a month's last day, in zones with DST.
EXPRESSIONS = ("0 0 29 2 *", "0 0 1 1 *", "30 4 31 12 *", "15 3 29 2 1", "0 12 31 1,3 *")
ZONES = (
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Pacific/Chatham",
    "Europe/London",
)


async def _populate(path: Path) -> None:
    store = SqliteStore.from_url(f"sqlite:///{path}")
    await store.migrate()
    rules = [Rule.cron(e, z) for e in EXPRESSIONS for z in ZONES]
    for index in range(SCHEDULES):
        spec = ScheduleSpec(name=f"sparse-{index:04}", kind="email", rule=rules[index % len(rules)])
        await store.create_schedule(spec)
    await store.close()


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.loads(response.read())


def test_twenty_clients_listing_sparse_schedules_cost_no_lease(tmp_path: Path) -> None:
    asyncio.run(_populate(tmp_path / "rota.db"))
    with serving(tmp_path) as served:
        stop = threading.Event()
        pages: list[int] = []
        failures: list[str] = []

        def poll(client: int) -> None:
            cursor: str | None = None
            while not stop.is_set():
                query = "?order=due&limit=6" if client % 4 == 0 else "?limit=50"
                if cursor:
                    query += f"&cursor={cursor}"
                try:
                    page = _get(served.url + "/api/schedules" + query)
                    _get(served.url + "/healthz")
                except (urllib.error.URLError, OSError) as error:
                    failures.append(repr(error))
                    return
                pages.append(len(page["schedules"]))
                cursor = page["next_cursor"]

        clients = [threading.Thread(target=poll, args=(n,)) for n in range(CLIENTS)]
        for thread in clients:
            thread.start()
        try:
            served.wait_until(lambda: len(pages) >= CLIENTS, timeout=120, what="every client")
            # The demo's `slow` job runs 6 s under a 3 s lease with a heartbeat every second.
            job = served.post("/api/jobs", {"kind": "slow", "max_attempts": 3})

            def finished() -> Any:
                detail = served.get(f"/api/jobs/{job['id']}")
                return detail if detail["state"] in ("succeeded", "dead") else None

            detail = served.wait_until(finished, timeout=120, what="the slow job to finish")
        finally:
            stop.set()
            for thread in clients:
                thread.join(timeout=120)
        assert failures == []
        assert [(a["attempt"], a["outcome"]) for a in detail["attempts"]] == [(1, "succeeded")]
        assert detail["state"] == "succeeded"
        assert served.stop() == 0
