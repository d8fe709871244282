"""The loop rota's worker processes run on: uvloop when installed, asyncio's otherwise."""

from __future__ import annotations

import asyncio
import sys

import pytest

from rota.runtime import loops


async def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_workers_run_on_uvloop_when_it_is_installed() -> None:
    uvloop = pytest.importorskip("uvloop")
    assert loops.loop_factory() is uvloop.new_event_loop
    assert loops.run(loop_module()).startswith("uvloop")


def test_workers_run_on_asyncio_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # what an import of a missing module sees
    assert loops.loop_factory() is asyncio.new_event_loop
    assert loops.run(loop_module()).startswith("asyncio")
    loop = loops.new_event_loop()
    try:
        assert loop.run_until_complete(loop_module()).startswith("asyncio")
    finally:
        loop.close()
