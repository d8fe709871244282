"""Opening a PostgreSQL store within its wait (CONNECT_WAIT_S, 10 s): an address that does not
answer is tried several times, each attempt bounded by half of what is left of the wait and
cut off at its end, instead of one attempt on the 10 s connect_timeout spending all of it.

Time is a FakeClock, driven step by step; the "unreachable" attempts are fakes that take
their connect_timeout of that clock and then fail as libpq does."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import psycopg
import pytest

from rota.domain.errors import ConnectionFailed
from rota.store.postgres.connect import (
    CONNECT_WAIT_S,
    Dialer,
    attempt_timeout_s,
    configured_timeout_s,
    connection_defaults,
)
from rota.testing import FakeClock

URL = "postgresql://app@db.example:6543/jobs"
T = TypeVar("T")


async def driven(clock: FakeClock, work: Awaitable[T], step_s: float = 0.01) -> T:
    """``work``'s result, moving ``clock`` forward a step each time the loop has run what was
    ready (as real time would pass), until it is done."""
    task = asyncio.ensure_future(work)
    while not task.done():
        for _ in range(10):  # let every ready callback run before time moves on
            await asyncio.sleep(0)
        clock.advance(step_s)
    return await task


class Unreachable:
    """A server address that drops packets until ``back_at`` (never, by default): each
    attempt takes its connect_timeout and fails with libpq's timeout."""

    def __init__(self, clock: FakeClock, back_at: float | None = None) -> None:
        self.clock = clock
        self.back_at = back_at
        #: (clock reading at its start, the connect_timeout it was given), per attempt.
        self.attempts: list[tuple[float, int | None]] = []

    async def __call__(self, connect_timeout: int | None) -> str:
        started = self.clock.monotonic()
        self.attempts.append((started, connect_timeout))
        if self.back_at is not None and started >= self.back_at:
            return "connection"
        await self.clock.sleep(connect_timeout if connect_timeout is not None else 10)
        raise psycopg.errors.ConnectionTimeout("connection timeout expired")


def test_each_attempt_takes_half_of_what_is_left_within_libpqs_least_and_the_configured() -> None:
    assert attempt_timeout_s(10, 10.0) == 5
    assert attempt_timeout_s(10, 4.9) == 2
    assert attempt_timeout_s(10, 0.3) == 2  # libpq's least; the wait's end cuts it off
    assert attempt_timeout_s(3, 10.0) == 3  # a shorter configured timeout stands
    assert attempt_timeout_s(None, 30.0) == 15


def test_the_configured_timeout_is_the_keyword_argument_else_the_urls() -> None:
    assert configured_timeout_s(URL, connection_defaults(URL)) == 10
    with_url = f"{URL}?connect_timeout=4"
    assert configured_timeout_s(with_url, connection_defaults(with_url)) == 4
    assert configured_timeout_s(f"{URL}?connect_timeout=0", {}) is None  # wait forever
    assert configured_timeout_s(URL, {}) is None


async def test_an_unreachable_address_is_tried_again_within_the_wait_then_named() -> None:
    clock = FakeClock()
    server = Unreachable(clock)
    dialer = Dialer(URL, connection_defaults(URL), what="PostgreSQL", clock=clock)
    with pytest.raises(ConnectionFailed) as failed:
        await driven(clock, dialer.connect(server, give_up_after_s=CONNECT_WAIT_S, fail_fast=True))
    assert str(failed.value) == (
        "no answer from PostgreSQL at db.example:6543 (connection timeout expired)"
    )
    starts = [start for start, _ in server.attempts]
    timeouts = [timeout for _, timeout in server.attempts]
    assert len(server.attempts) >= 3, server.attempts
    assert timeouts[0] == 5 and all(t is not None and t < CONNECT_WAIT_S for t in timeouts)
    assert all(start < CONNECT_WAIT_S for start in starts)
    # The wait is never overrun: the last attempt is cut off at its end.
    assert clock.monotonic() <= CONNECT_WAIT_S + 0.05


async def test_a_server_that_answers_again_within_the_wait_is_connected_to() -> None:
    clock = FakeClock()
    server = Unreachable(clock, back_at=6.0)
    dialer = Dialer(URL, connection_defaults(URL), what="PostgreSQL", clock=clock)
    connected = await driven(
        clock, dialer.connect(server, give_up_after_s=CONNECT_WAIT_S, fail_fast=True)
    )
    assert connected == "connection"
    assert len(server.attempts) >= 3
    assert dialer.last_failure is None


async def test_a_wait_of_nothing_makes_one_attempt_on_the_configured_timeout() -> None:
    clock = FakeClock()
    server = Unreachable(clock)
    dialer = Dialer(URL, connection_defaults(URL), what="PostgreSQL", clock=clock)
    with pytest.raises(ConnectionFailed):
        await driven(clock, dialer.connect(server, give_up_after_s=0.0, fail_fast=True))
    assert server.attempts == [(0.0, None)]


class RefusedThenSilent(Unreachable):
    """An address that refuses the first attempt; the next one never ends on its own, so it
    is still connecting when the wait ends."""

    async def __call__(self, connect_timeout: int | None) -> str:
        self.attempts.append((self.clock.monotonic(), connect_timeout))
        if len(self.attempts) == 1:
            raise psycopg.OperationalError(
                'connection to server at "db.example", port 6543 failed: Connection refused'
            )
        await asyncio.Event().wait()
        raise AssertionError("never set")


async def test_a_refused_connection_cut_off_at_the_end_of_the_wait_still_says_refused() -> None:
    clock = FakeClock()
    server = RefusedThenSilent(clock)
    dialer = Dialer(URL, connection_defaults(URL), what="PostgreSQL", clock=clock)
    with pytest.raises(ConnectionFailed) as failed:
        await driven(clock, dialer.connect(server, give_up_after_s=3.0, fail_fast=True))
    assert str(failed.value).startswith("connection refused at db.example:6543")
    assert len(server.attempts) >= 2, "the wait ended during an attempt after the refusal"
