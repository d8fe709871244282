"""A worker's --metrics-port server: answers only the Host names it is meant for (no DNS
rebinding), bounds its connections and drops requests that never finish arriving."""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator

import pytest

from rota.observability.exporter import host_allowed
from rota.observability.metrics import Metrics, MetricsServer, serve_metrics


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    served = serve_metrics(
        Metrics(),
        port=0,
        allowed_hosts=["metrics.internal"],
        max_connections=4,
        request_timeout_s=0.5,
    )
    yield served
    served.close()


def get(server: MetricsServer, host: str | None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.putrequest("GET", "/metrics", skip_host=True)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_it_answers_addresses_localhost_and_configured_names(server: MetricsServer) -> None:
    port = server.port
    hosts = [f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}"]
    for host in [*hosts, f"10.0.0.7:{port}", f"metrics.internal:{port}"]:
        status, body = get(server, host)
        assert status == 200, host
        assert b"rota_" in body or body.startswith(b"#"), host


def test_another_host_name_is_refused_so_a_rebinding_page_reads_nothing(
    server: MetricsServer,
) -> None:
    status, body = get(server, f"attacker.example:{server.port}")
    assert status == 421
    assert b"rota_" not in body and b"unknown Host" in body
    assert get(server, None)[0] == 400


@pytest.mark.parametrize(
    ("header", "allowed"),
    [
        ("127.0.0.1", True),
        ("127.0.0.1:9100", True),
        ("[::1]:9100", True),
        ("localhost:9100", True),
        ("metrics.internal", True),
        ("127.0.0.1.attacker.example", False),
        ("localhost.attacker.example:9100", False),
        ("", False),
        ("[::1", False),
    ],
)
def test_host_names_are_judged_by_name_not_by_prefix(header: str, allowed: bool) -> None:
    assert host_allowed(header, frozenset({"metrics.internal"})) is allowed


def connection_threads() -> int:
    return sum(t.name == "rota-metrics-connection" for t in threading.enumerate())


def test_connections_are_bounded_and_half_sent_requests_time_out(server: MetricsServer) -> None:
    idle = []
    for _ in range(20):  # each sends half a request, then nothing
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        idle.append(sock)
    try:
        # The server accepts in order: the first 4 are served (they wait for the rest of
        # their request), the other 16 are closed at once. Once the last is closed, every
        # one was accepted, and no more than 4 threads serve them.
        assert idle[-1].recv(1024) == b""
        assert connection_threads() <= 4
        # The 4 served ones are dropped when their request has not arrived in time.
        for sock in idle:
            assert sock.recv(1024) == b""
    finally:
        for sock in idle:
            sock.close()
    assert get(server, "127.0.0.1")[0] == 200, "the server serves again once they are gone"
