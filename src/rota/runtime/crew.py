"""Workers beside a web server in one process, kept out of the server's way.

A request handler that blocks its event loop, or queues on its store's connections, must not
delay a heartbeat (a lease lost that way runs the job twice): ``WorkerThread`` runs the workers
on a loop and a thread of their own, with a store of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from concurrent.futures import Future
from typing import Any, Protocol

from rota.runtime import loops
from rota.runtime.worker import Worker
from rota.store import Store


class WorkerSource(Protocol):
    """What WorkerThread needs of an App's workers (``app.workers``): the App's store, a
    store for another loop, and workers."""

    @property
    def store(self) -> Store: ...

    def open_store(self) -> Store: ...

    def worker(self, *, store: Store | None = ..., **options: Any) -> Worker: ...


class WorkerThread:
    """In-process workers (of `rota serve`, or of a host app's lifespan) on an event loop of
    their own in a thread of their own, with a store of their own
    (docs/decisions/0004-workers-off-the-api-loop.md).

    Nothing a request handler does on the API's loop (or its store's connections) can then
    delay a heartbeat: the heartbeat's loop is never blocked by a handler, and the GIL is
    handed over every few milliseconds even while a handler computes.
    """

    def __init__(
        self,
        app: WorkerSource,
        *,
        names: list[str],
        options: dict[str, Any],
        threads_end_with_process: bool = False,
    ) -> None:
        """``threads_end_with_process``: the caller ends the process once the workers stopped
        (`rota serve`), so a hard stop hands back the jobs of sync handlers still running in
        threads too, as `rota worker` does; a host app that lives on keeps them (their lease
        expires instead, as the thread may still finish the job)."""
        self._app = app
        self._threads_end_with_process = threads_end_with_process
        self._names = names
        self._options = options
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: list[Any] = []
        self._stops = 0
        self._done: Future[bool] = Future()
        self._thread = threading.Thread(target=self._run, name="rota-workers", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def finished(self) -> bool:
        return self._done.done()

    def request_stop(self) -> None:
        """Like Worker.request_stop for every worker (the second call stops at once); safe
        from any thread, and before the workers exist (they then stop as they start)."""
        with self._lock:
            self._stops += 1
            loop = self._loop
        if loop is not None and not self.finished:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._stop_pool)

    async def wait(self) -> bool:
        """Until every worker stopped; True if any had to abandon its jobs."""
        return await asyncio.wrap_future(self._done)

    def _run(self) -> None:
        # Not asyncio.run: it would wait for the default executor, and a sync handler stuck
        # in a thread cannot be interrupted.
        loop = loops.new_event_loop()
        try:
            self._done.set_result(loop.run_until_complete(self._main()))
        except BaseException as error:  # reported to the waiting API loop
            self._done.set_exception(error)
        finally:
            loop.close()

    async def _main(self) -> bool:
        store = self._app.open_store()
        try:
            pool = [
                self._app.worker(store=store, name=name, **self._options) for name in self._names
            ]
            for worker in pool:
                worker.threads_end_with_process = self._threads_end_with_process
            with self._lock:
                self._loop = asyncio.get_running_loop()
                self._pool = pool
                stops = self._stops
            for _ in range(stops):
                self._stop_pool()
            tasks = [asyncio.create_task(worker.run(), name=worker.name) for worker in pool]
            try:
                await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            return any(worker.aborted for worker in pool)
        finally:
            if store is not self._app.store:
                await store.close()

    def _stop_pool(self) -> None:
        for worker in self._pool:
            worker.request_stop()
