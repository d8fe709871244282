"""The HTTP server behind a worker's ``--metrics-port``: prometheus-client's WSGI app, served
with a bound on connections and time, and only to the Host names it is meant for.

prometheus-client's own server starts a thread per connection without limit and answers any
Host. Here a connection past ``max_connections`` is closed at once, a request not received
within ``request_timeout_s`` is dropped, and a request whose Host header is not an IP address,
``localhost`` or a configured name is answered 421: a page of another site whose name an
attacker points at 127.0.0.1 (DNS rebinding) cannot read the metrics through the victim's
browser, which sends that site's name as Host.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

log = logging.getLogger("rota.metrics")

#: Connections served at once; more are closed as they arrive.
MAX_CONNECTIONS = 16
#: How long a connection may take to send its request (and to take the answer).
REQUEST_TIMEOUT_S = 10.0

_App = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def host_allowed(header: str | None, names: frozenset[str]) -> bool:
    """Whether a request with this Host header is for us: an IP address, ``localhost``, or
    one of ``names`` (lower case), with or without a port."""
    if not header:
        return False
    host = header.strip().lower()
    if host.startswith("["):  # [v6]:port
        host = host[1 : host.find("]")] if "]" in host else ""
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    if not host:
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost" or host in names
    return True


def _checking_host(app: _App, names: frozenset[str]) -> _App:
    def checked(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        header = environ.get("HTTP_HOST")
        if not header:
            start_response("400 Bad Request", [("Content-Type", "text/plain")])
            return [b"a Host header is required\n"]
        if not host_allowed(header, names):
            start_response("421 Misdirected Request", [("Content-Type", "text/plain")])
            return [b"unknown Host: add its name to the worker's allowed metrics hosts\n"]
        return app(environ, start_response)

    return checked


class _Handler(WSGIRequestHandler):
    """One request per connection, within ``timeout`` (a socket timeout on every read and
    write), logging nothing per request."""

    timeout = REQUEST_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        return


class _BoundedServer(WSGIServer):
    """A WSGI server with a thread per connection, at most ``max_connections`` of them."""

    daemon_threads = True
    max_connections = MAX_CONNECTIONS

    def server_bind(self) -> None:
        self._slots = threading.BoundedSemaphore(self.max_connections)
        super().server_bind()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # full: closed at once, never queued
            return
        threading.Thread(
            target=self._serve,
            args=(request, client_address),
            daemon=True,
            name="rota-metrics-connection",
        ).start()

    def _serve(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception as error:  # a timeout or a reset: that connection's business only
            log.debug("metrics connection from %s ended: %s", client_address, error)
        finally:
            self.shutdown_request(request)
            self._slots.release()


def start_metrics_server(
    registry: CollectorRegistry,
    *,
    host: str,
    port: int,
    allowed_hosts: Iterable[str] = (),
    max_connections: int = MAX_CONNECTIONS,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``registry`` on http://host:port/ from a thread; OSError if it cannot bind."""
    names = frozenset(name.strip().lower() for name in allowed_hosts if name.strip())
    family = _family(host, port)

    class Server(_BoundedServer):
        address_family = family

    class Handler(_Handler):
        timeout = request_timeout_s

    Server.max_connections = max_connections
    app = _checking_host(make_wsgi_app(registry), names)
    server = make_server(host, port, app, Server, handler_class=Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="rota-metrics")
    thread.start()
    return server, thread


def _family(host: str, port: int) -> socket.AddressFamily:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return infos[0][0] if infos else socket.AF_INET
