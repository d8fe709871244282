"""The benchmark harness's side of the peers run in a Python 3.12 venv (bench/peers312.py):
a run without that venv measures the others and says why these were left out, and the peers'
process answers each request with one line, its timed loops timing themselves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bench import harness, peers312, run
from bench.harness import Bench, Settings


def test_without_the_venv_the_problem_names_the_make_target(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(harness, "PYTHON312", tmp_path / ".venv-bench312" / "bin" / "python")
    problem = harness.peers312_problem()
    assert problem is not None
    assert "make setup-bench312" in problem


def test_a_run_without_the_venv_measures_the_others_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(run, "peers312_problem", lambda: "no .venv-bench312 venv")
    bench = Bench(Settings(systems=("rota", "pgqueuer", "oban", "dbos")))
    run.leave_out_peers312(bench)
    assert bench.settings.systems == ("rota", "pgqueuer")
    assert bench.skipped == [
        ("oban", "not measured: no .venv-bench312 venv"),
        ("dbos", "not measured: no .venv-bench312 venv"),
    ]


def test_a_run_that_asks_for_no_peer_of_the_venv_does_not_look_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def looked() -> str:
        raise AssertionError("looked for the venv")

    monkeypatch.setattr(run, "peers312_problem", looked)
    bench = Bench(Settings(systems=("rota", "pgqueuer")))
    run.leave_out_peers312(bench)
    assert bench.settings.systems == ("rota", "pgqueuer")
    assert bench.skipped == []


class _Side:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def enqueue_one(self, kind: str, seq: int) -> None:
        self.calls.append((kind, seq))

    async def enqueue_many(self, kind: str, count: int) -> None:
        self.calls.append((kind, count))


async def test_the_single_enqueues_are_timed_in_the_peers_process() -> None:
    side = _Side()
    seconds = await peers312._answer(side, "enqueue_singles", {"kind": "noop", "count": 3})
    assert side.calls == [("noop", 0), ("noop", 1), ("noop", 2)]
    assert seconds >= 0


async def test_an_enqueue_for_pickup_latency_answers_the_instant_it_returned() -> None:
    side = _Side()
    at = await peers312._answer(side, "enqueue_one", {"kind": "record", "seq": 7})
    assert side.calls == [("record", 7)]
    assert isinstance(at, float)


async def test_an_unknown_request_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown request 'drop'"):
        await peers312._answer(_Side(), "drop", {})
