"""rota inside a host ASGI app (FastAPI, Starlette, or any ASGI framework).

``dashboard(app)`` is the API and dashboard as an ASGI app to mount below any prefix
(``host.mount("/rota", dashboard(app))``): its pages, scripts, API calls, redirects and login
cookie all stay below the prefix (the ASGI ``root_path``). ``lifespan(app)`` opens the App
when the host starts and closes it when the host stops, and can run workers in the host's
process meanwhile::

    from fastapi import FastAPI
    from rota.contrib.asgi import dashboard, lifespan

    host = FastAPI(lifespan=lifespan(jobs))
    host.mount("/rota", dashboard(jobs))
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from starlette.types import Receive, Scope, Send

from rota.api import ApiSettings, create_app
from rota.app import App
from rota.domain.errors import InvalidInput
from rota.runtime.crew import WorkerThread
from rota.runtime.worker_settings import default_worker_name
from rota.store import Store

log = logging.getLogger("rota.asgi")

Lifespan = Callable[[Any], AbstractAsyncContextManager[None]]


def dashboard(app: App, *, settings: ApiSettings | None = None) -> Dashboard:
    """The API and dashboard for ``app``'s store, as an ASGI app to mount below a prefix.

    POST /api/jobs accepts the kinds ``app`` has handlers for (any kind if it has none).
    ``settings`` secures it as for ``rota serve``: by default it answers only requests for
    loopback host names; behind a real host name give ``allowed_hosts``, and an auth token
    or basic auth unless the host app authenticates these routes itself. The App opens on
    the first request if ``lifespan`` has not opened it.
    """
    return Dashboard(app, settings or ApiSettings())


class Dashboard:
    """The ASGI app ``dashboard`` returns: built on first use, rebuilt if the App reopens."""

    def __init__(self, app: App, settings: ApiSettings) -> None:
        self._app = app
        self._settings = settings
        self._lock = asyncio.Lock()
        self._api: Any = None
        self._store: Store | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            # Served on its own (a mounted app gets no lifespan): open and close the App here.
            await _serve_lifespan(lifespan(self._app)(self), receive, send)
            return
        api = await self._current()
        await api(scope, receive, send)

    async def _current(self) -> Any:
        store = await self._app.open()
        if self._api is None or self._store is not store:
            async with self._lock:
                if self._api is None or self._store is not store:
                    self._api = create_app(
                        self._app.database.client,
                        settings=self._settings,
                        metrics=self._app.metrics,
                        kinds=self._app.registry.kinds() or None,
                        workflows=self._app.schedules.workflow_builders(),
                        enqueuer=self._app.enqueuer,
                    )
                    self._store = store
        return self._api


def lifespan(app: App, *, workers: int = 0, **worker_options: Any) -> Lifespan:
    """A lifespan for the host app (``FastAPI(lifespan=...)``, ``Starlette(lifespan=...)``):
    opens ``app`` on startup; on shutdown stops its workers and closes it.

    With ``workers`` > 0, that many workers (``worker_options`` as for ``App.worker``, e.g.
    ``concurrency=20``) claim and run jobs in the host's process from startup to shutdown,
    which stops them as SIGTERM stops ``rota worker``: no new claims, running jobs get
    ``shutdown_timeout`` to finish, the rest are handed back. As in ``rota serve``, they run
    on an event loop and a thread of their own with connections of their own
    (``rota.runtime.crew.WorkerThread``), so a request handler that blocks the host's loop
    does not delay their heartbeats.

    To combine with a lifespan of your own, enter it inside yours:
    ``async with lifespan(jobs)(host): yield``.
    """
    if workers < 0:
        raise InvalidInput("workers must not be negative")

    @contextlib.asynccontextmanager
    async def run(host: Any) -> AsyncIterator[None]:
        await app.open()
        base = default_worker_name()
        names = [f"{base}-{index + 1}" for index in range(workers)]
        crew = WorkerThread(app.workers, names=names, options=worker_options) if workers else None
        try:
            if crew is not None:
                crew.start()
            yield
        finally:
            try:
                if crew is not None:
                    crew.request_stop()
                    await crew.wait()
            finally:
                await app.close()

    return run


async def _serve_lifespan(
    context: AbstractAsyncContextManager[None], receive: Receive, send: Send
) -> None:
    """The ASGI lifespan protocol around ``context``: entered on startup, left on shutdown,
    each answered only once done (or failed, with the reason)."""
    if (await receive())["type"] != "lifespan.startup":
        return
    try:
        await context.__aenter__()
    except Exception as error:
        await send({"type": "lifespan.startup.failed", "message": str(error)})
        return
    await send({"type": "lifespan.startup.complete"})
    await receive()  # lifespan.shutdown: the only message that follows
    try:
        await context.__aexit__(None, None, None)
    except Exception as error:
        await send({"type": "lifespan.shutdown.failed", "message": str(error)})
        return
    await send({"type": "lifespan.shutdown.complete"})
