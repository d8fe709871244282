"""API load on `rota serve` (C10): sparse cron schedules in an SQLite file, and clients paging
through /api/schedules without pause. Shared by `integration/test_serve_load.py`, which checks
that a job keeps its lease under it, and `bench/serve_load.py`, which times /healthz under it."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rota.domain.schedule import Rule, ScheduleSpec
from rota.store.sqlite import SqliteStore

#: Sparse rules: leap days, new year, month ends...
EXPRESSIONS = ("0 0 29 2 *", "0 0 1 1 *", "30 4 31 12 *", "0 6 29 2 *", "45 23 31 12 *")
#: ...in zones with DST, some of them shifting by 30 or 45 minutes.
ZONES = (
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Pacific/Chatham",
    "Europe/London",
)


async def populate(path: Path, count: int) -> None:
    """``count`` schedules over the 30 rules above, in the SQLite file at ``path``."""
    store = SqliteStore.from_url(f"sqlite:///{path}")
    await store.migrate()
    rules = [Rule.cron(expression, zone) for expression in EXPRESSIONS for zone in ZONES]
    for index in range(count):
        spec = ScheduleSpec(name=f"sparse-{index:05}", kind="email", rule=rules[index % len(rules)])
        await store.create_schedule(spec)
    await store.close()


def call(url: str, body: Any = None) -> Any:
    """GET ``url`` (POST ``body`` as JSON when given); the decoded JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"} if data else {}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read() or b"null")


@dataclass
class Paging:
    """What the clients of ``paging`` saw: each page's latency (seconds) and each error."""

    pages: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@contextlib.contextmanager
def paging(url: str, clients: int, *, also: tuple[str, ...] = ()) -> Iterator[Paging]:
    """``clients`` threads page through ``url``'s /api/schedules without pause until the block
    ends: every fourth asks for the six soonest (as the overview does), the others for 50 at a
    time, each following its cursor. After every page a client also GETs the paths in
    ``also``. A client that meets an error records it and stops."""
    stop = threading.Event()
    seen = Paging()

    def client(number: int) -> None:
        cursor: str | None = None
        while not stop.is_set():
            query = "?order=due&limit=6" if number % 4 == 0 else "?limit=50"
            if cursor:
                query += f"&cursor={cursor}"
            began = time.perf_counter()
            try:
                page = call(url + "/api/schedules" + query)
                for path in also:
                    call(url + path)
            except (urllib.error.URLError, OSError) as error:
                seen.errors.append(repr(error))
                return
            seen.pages.append(time.perf_counter() - began)
            cursor = page["next_cursor"]

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    for thread in threads:
        thread.start()
    try:
        yield seen
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
