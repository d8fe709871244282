"""Timing points inside a worker process, for ``bench.pickup``: installed by ``bench.worker``
when ``BENCH_TRACE`` names a file, written there as JSON when the worker stops.

Each event is ``[name, time.time()]``:

- ``notice``: a notification reached the worker's Python code (rota: the listener parsed its
  payload; PgQueuer: its listener queued the event);
- ``sent`` / ``answered``: the claim statement was handed to the driver / its rows came back
  (rota: ``PoolConnection.run`` of ``rota_claim_all``, ``rota_claim_fresh`` or ``rota_claim``;
  PgQueuer: its driver's ``fetch`` inside ``Queries.dequeue``). Only calls that returned rows
  are kept.
- ``server_cpu`` (only with ``BENCH_TRACE_SERVER_CPU`` set; the value is in µs, not an
  instant): the CPU time the claim's server process spent from just before the claim was
  sent to just after its rows came back (``/proc/<pid>/schedstat``, so the server must run on
  this host), for the same calls (those that returned rows). Read outside the sent/answered
  instants, but inside the pickup.

The handler's first line is recorded by the ``record`` job itself (``bench.apps``). Patching
is bench-only: it wraps the named functions and changes nothing they do.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

EVENTS: list[list[Any]] = []


def install(system: str) -> None:
    if system == "rota":
        _install_rota()
    elif system == "pgqueuer":
        _install_pgqueuer()
    else:
        raise SystemExit(f"no pickup trace for {system!r}")


def write(path: str) -> None:
    Path(path).write_text(json.dumps(EVENTS))


#: Whether each claim's server CPU is read too (``server_cpu``).
SERVER_CPU = bool(os.environ.get("BENCH_TRACE_SERVER_CPU"))


def _cpu_ns(pid: int) -> int:
    """CPU time the process ``pid`` has run, in ns (its schedstat's first field)."""
    with open(f"/proc/{pid}/schedstat") as stat:
        return int(stat.read().split()[0])


def _install_rota() -> None:
    from rota.store.postgres import listen
    from rota.store.postgres.connect import PoolConnection

    parse = listen.due_at

    def due_at(payload: str) -> Any:
        EVENTS.append(["notice", time.time()])
        return parse(payload)

    listen.due_at = due_at  # type: ignore[assignment]

    run = PoolConnection.run

    async def traced(self: Any, sql: str, params: Any) -> Any:
        if "FROM rota_claim" not in sql:
            return await run(self, sql, params)
        before = _cpu_ns(self.info.backend_pid) if SERVER_CPU else 0
        sent = time.time()
        rows = await run(self, sql, params)
        if rows:
            EVENTS.append(["sent", sent])
            EVENTS.append(["answered", time.time()])
            if SERVER_CPU:
                EVENTS.append(["server_cpu", (_cpu_ns(self.info.backend_pid) - before) / 1000])
        return rows

    PoolConnection.run = traced  # type: ignore[method-assign]


def _install_pgqueuer() -> None:
    from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver
    from pgqueuer.adapters.persistence.queries import Queries
    from pgqueuer.core import listeners

    put = listeners.PGNoticeEventListener.put_nowait

    def put_nowait(self: Any, item: Any) -> None:
        EVENTS.append(["notice", time.time()])
        put(self, item)

    listeners.PGNoticeEventListener.put_nowait = put_nowait  # type: ignore[method-assign]

    dequeue = Queries.dequeue
    fetch = AsyncpgDriver.fetch
    inside = [False]

    async def traced_dequeue(self: Any, *args: Any, **kwargs: Any) -> Any:
        inside[0] = True
        try:
            return await dequeue(self, *args, **kwargs)
        finally:
            inside[0] = False

    async def traced_fetch(self: Any, query: str, *args: Any) -> Any:
        if not inside[0]:
            return await fetch(self, query, *args)
        pid = self._connection.get_server_pid() if SERVER_CPU else 0
        before = _cpu_ns(pid) if SERVER_CPU else 0
        sent = time.time()
        rows = await fetch(self, query, *args)
        if rows:
            EVENTS.append(["sent", sent])
            EVENTS.append(["answered", time.time()])
            if SERVER_CPU:
                EVENTS.append(["server_cpu", (_cpu_ns(pid) - before) / 1000])
        return rows

    Queries.dequeue = traced_dequeue  # type: ignore[method-assign]
    AsyncpgDriver.fetch = traced_fetch  # type: ignore[method-assign]
