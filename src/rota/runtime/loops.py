"""The event loop rota's own worker processes run on: uvloop when it is installed, else asyncio's.

uvloop (the ``rota[speed]`` extra) runs the same asyncio code with the loop itself in C; for a
worker, whose cost per job is mostly the loop's own scheduling of tasks, futures and callbacks,
it takes a large share of the CPU off every job. It is optional: a process without it runs on
asyncio's loop with the same behaviour. Only the loops rota makes itself follow it (``rota
worker``, ``rota serve``'s workers); ``App.run_worker`` runs on whatever loop its caller runs.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger("rota.runtime")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's ``new_event_loop`` when uvloop can be imported, asyncio's otherwise."""
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        log.debug("event loop: asyncio's (install rota[speed] for uvloop)")
        return asyncio.new_event_loop
    log.debug("event loop: uvloop %s", getattr(uvloop, "__version__", ""))
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new loop of the kind ``loop_factory`` picks."""
    return loop_factory()()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` on a loop of the kind ``loop_factory`` picks."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(coro)
