"""The chaos harness's own tests: the proxy's modes, the PostgreSQL statement parser, the
nemesis's replayable plans, libfaketime's control file and the network-namespace helpers."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import socket
import struct
import subprocess
import sys
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.support import faketime, netns
from tests.support.nemesis import SEED_ENV, Fault, Nemesis, chaos_seed
from tests.support.proxy import (
    BLACKHOLE,
    CLOSE_AFTER,
    LATENCY,
    RESET,
    ChaosProxy,
    PgStatements,
)


@pytest.fixture
async def echo() -> AsyncIterator[int]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionResetError):  # the proxy's RSTs reach this end too
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


@pytest.fixture
def proxy(echo: int) -> Iterator[ChaosProxy]:
    with ChaosProxy("127.0.0.1", echo) as started:
        yield started


async def roundtrip(port: int, data: bytes, *, within_s: float = 2.0) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(data)), within_s)
    finally:
        writer.close()


async def test_pass_forwards_both_ways(proxy: ChaosProxy) -> None:
    assert await roundtrip(proxy.port, b"hello") == b"hello"


async def test_latency_holds_every_chunk(proxy: ChaosProxy) -> None:
    proxy.set(LATENCY, latency_s=0.3)
    started = time.monotonic()
    assert await roundtrip(proxy.port, b"slow") == b"slow"
    assert time.monotonic() - started >= 0.6  # once each way


async def test_blackhole_swallows_bytes_and_the_connection_stays_dead_after_heal(
    proxy: ChaosProxy,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(b"a")
    assert await reader.readexactly(1) == b"a"
    proxy.set(BLACKHOLE)
    writer.write(b"b")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.read(1), 0.5)
    with pytest.raises(TimeoutError):  # new connections are accepted, then never answered
        await roundtrip(proxy.port, b"c", within_s=0.5)
    proxy.heal()
    writer.write(b"d")
    with pytest.raises(TimeoutError):  # half-open for good
        await asyncio.wait_for(reader.read(1), 0.5)
    assert await roundtrip(proxy.port, b"e") == b"e"
    writer.close()


async def test_reset_aborts_connections_with_rst(proxy: ChaosProxy) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(b"x")
    assert await reader.readexactly(1) == b"x"
    proxy.set(RESET)
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(reader.read(1), 2)
    with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
        await roundtrip(proxy.port, b"new")


async def test_close_after_n_bytes_forwards_exactly_n_then_closes(proxy: ChaosProxy) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    proxy.set(CLOSE_AFTER, after_bytes=3)
    writer.write(b"abcdef")
    await writer.drain()
    got = await asyncio.wait_for(reader.read(100), 2)
    assert got == b"abc"
    assert await asyncio.wait_for(reader.read(100), 2) == b""
    writer.close()


async def test_closing_with_connections_open_ends_them_without_a_traceback(
    echo: int, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = ChaosProxy("127.0.0.1", echo).start()
    clients = [await asyncio.open_connection("127.0.0.1", proxy.port) for _ in range(3)]
    for reader, writer in clients:
        writer.write(b"x")
        await writer.drain()
        assert await asyncio.wait_for(reader.readexactly(1), 2) == b"x"
    proxy.set(BLACKHOLE)  # one connection in each state: passing, and swallowing bytes
    clients[0][1].write(b"lost")
    await clients[0][1].drain()
    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        await asyncio.to_thread(proxy.close)
    for reader, writer in clients:
        with pytest.raises(ConnectionResetError):  # closed with the proxy, by an RST
            await asyncio.wait_for(reader.read(), 2)
        writer.close()
    assert [record.getMessage() for record in caplog.records if record.name == "asyncio"] == []


async def test_closing_as_clients_arrive_leaves_no_socket_open(echo: int) -> None:
    """Clients that connect as the proxy closes, accepted or not yet: each is closed by the
    proxy (none waits for an answer) and the proxy leaves no socket to the garbage collector."""
    gc.collect()  # what earlier tests left is theirs
    proxy = ChaosProxy("127.0.0.1", echo).start()
    clients = [socket.create_connection(("127.0.0.1", proxy.port), timeout=5) for _ in range(50)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        await asyncio.to_thread(proxy.close)
        gc.collect()
    for client in clients:
        with contextlib.suppress(ConnectionResetError):
            assert client.recv(1) == b""  # closed by the proxy, or reset with its listener
        client.close()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def pg_message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


def pg_startup() -> bytes:
    ssl = struct.pack("!II", 8, 80877103)
    params = b"user\0postgres\0\0"
    startup = struct.pack("!II", 8 + len(params), 196608) + params
    return ssl + startup


def test_pg_parser_sees_simple_prepared_and_named_statements() -> None:
    parser = PgStatements()
    stream = (
        pg_startup()
        + pg_message(b"Q", b"LISTEN rota_jobs\0")
        + pg_message(b"P", b"_pg3_0\0UPDATE rota_jobs SET lease_until = 1\0\0\0")
        + pg_message(b"B", b"\0_pg3_0\0\0\0\0\0\0\0")
        + pg_message(b"S", b"")
    )
    found: list[bytes] = []
    for index in range(0, len(stream), 7):  # arbitrary chunking
        found += parser.feed(stream[index : index + 7])
    assert found == [
        b"LISTEN rota_jobs",
        b"UPDATE rota_jobs SET lease_until = 1",
        b"UPDATE rota_jobs SET lease_until = 1",
    ]


async def test_a_fault_can_target_only_connections_that_ran_a_statement(
    proxy: ChaosProxy,
) -> None:
    listener_r, listener_w = await asyncio.open_connection("127.0.0.1", proxy.port)
    other_r, other_w = await asyncio.open_connection("127.0.0.1", proxy.port)
    listen = pg_startup() + pg_message(b"Q", b"LISTEN rota_jobs\0")
    listener_w.write(listen)
    assert await listener_r.readexactly(len(listen)) == listen
    proxy.set(BLACKHOLE, match=b"LISTEN ")
    other_w.write(b"still fine")
    assert await other_r.readexactly(10) == b"still fine"
    assert proxy.faulted == 0  # a connection is hit when it sends the statement, not before
    listener_w.write(pg_message(b"Q", b"LISTEN rota_jobs\0"))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(listener_r.read(1), 0.5)
    assert proxy.count(lambda link: link.dead) == 1
    listener_w.close()
    other_w.close()


async def test_a_blackholed_connection_its_client_closed_is_not_counted(
    proxy: ChaosProxy,
) -> None:
    # The upstream of a blackholed link never hears the client leave; counting it would
    # charge a worker for a connection it no longer holds.
    _, kept = await asyncio.open_connection("127.0.0.1", proxy.port)
    _, left = await asyncio.open_connection("127.0.0.1", proxy.port)
    await asyncio.to_thread(proxy.set, BLACKHOLE)
    assert await asyncio.to_thread(proxy.count) == 2
    kept.write(b"swallowed")
    left.close()
    await left.wait_closed()
    local = left.get_extra_info("sockname")
    closed = await asyncio.to_thread(
        proxy.wait_gone, lambda link: link.client.get_extra_info("peername") == local
    )
    assert closed == 1
    assert await asyncio.to_thread(proxy.count) == 1
    kept.close()


def test_the_same_seed_plans_the_same_faults() -> None:
    one = Nemesis(seed=42, kinds=["kill", "stop"], every_s=2.0, count=20, targets=4)
    two = Nemesis(seed=42, kinds=["kill", "stop"], every_s=2.0, count=20, targets=4)
    other = Nemesis(seed=43, kinds=["kill", "stop"], every_s=2.0, count=20, targets=4)
    assert one.plan() == two.plan() != other.plan()
    times = [fault.at_s for fault in one.plan()]
    assert times == sorted(times) and 1.5 * 20 <= times[-1] <= 2.5 * 20
    rotating = Nemesis(seed=1, kinds=["a", "b", "c"], every_s=1, count=6, rotate=True)
    assert [fault.kind for fault in rotating.plan()] == ["a", "b", "c", "a", "b", "c"]


def test_the_seed_comes_from_the_environment_and_is_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(SEED_ENV, "1234")
    assert chaos_seed() == 1234
    assert f"{SEED_ENV}=1234" in capsys.readouterr().out


async def test_the_nemesis_runs_its_plan_in_order_and_stops_on_request() -> None:
    done: list[Fault] = []
    nemesis = Nemesis(seed=7, kinds=["x"], every_s=0.02, count=5)

    async def act(fault: Fault) -> None:
        done.append(fault)

    await nemesis.run(act)
    assert done == nemesis.plan()
    stopped = Nemesis(seed=7, kinds=["x"], every_s=0.02, count=5)
    await stopped.run(act, stop=lambda: len(stopped.log) >= 2)
    assert len(stopped.log) == 2
    assert "x@" in nemesis.describe()


def test_faketime_skews_a_child_process_and_follows_its_file(tmp_path: Path) -> None:
    if faketime.library() is None:
        pytest.skip(faketime.INSTALL_HINT)
    fake = faketime.FakeTime(tmp_path / "clock.rc", "-120")
    assert abs(faketime.faked_epoch(fake) - (time.time() - 120)) < 5
    fake.set("+3600")
    assert abs(faketime.faked_epoch(fake) - (time.time() + 3600)) < 5
    assert fake.env()["FAKETIME_DONT_FAKE_MONOTONIC"] == "1"
    code = "import time; print(time.monotonic())"
    child = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **fake.env()},
        capture_output=True,
        text=True,
        check=True,
    )
    assert abs(float(child.stdout) - time.monotonic()) < 5  # monotonic left real


def test_a_namespace_reaches_the_host_until_cut_and_again_after_heal() -> None:
    reason = netns.unavailable()
    if reason:
        pytest.skip(reason)
    ns = netns.Netns.create()
    server = socket.create_server((ns.host_ip, 0))
    try:
        port = server.getsockname()[1]
        code = (
            "import socket,sys\n"
            "try:\n"
            f"    socket.create_connection(('{ns.host_ip}', {port}), timeout=1).close()\n"
            "except OSError:\n"
            "    sys.exit(1)\n"
        )

        def reachable() -> bool:
            run = subprocess.run([*ns.prefix(), sys.executable, "-c", code], timeout=30)
            return run.returncode == 0

        assert reachable()
        ns.cut()
        assert not reachable()
        ns.heal()
        assert reachable()
    finally:
        server.close()
        ns.destroy()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert ns.name not in listed
