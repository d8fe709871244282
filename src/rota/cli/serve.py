"""`rota serve`: the API, the dashboard, N workers and the schedule firer in one process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import click

from rota.cli.group import (
    announce_new_database_url,
    audit_retention_option,
    cli,
    listen_option,
    run_workers,
    shutdown_option,
)
from rota.config import DEFAULT_DATABASE_URL, load_app, parse_retention
from rota.domain.errors import InvalidInput
from rota.runtime.crew import WorkerThread

if TYPE_CHECKING:
    from rota.api.connections import ConnectionLimits

log = logging.getLogger("rota.serve")

#: How long a thread of the server may hold the interpreter before another running thread
#: takes it (Python's default is 5 ms). The loop answers requests while the store's thread
#: reads rows and another renders schedules; each time the loop waits for the interpreter it
#: waits up to this long per busy thread, several times per request. With 1 ms (and schedule
#: pages made cheaper), every admin write beside one client reading 500-row pages answered
#: within 200 ms (bench/serve_load.md).
SERVER_SWITCH_INTERVAL_S = 0.001


@cli.command()
@click.option(
    "--database-url",
    envvar="ROTA_DATABASE_URL",
    default=DEFAULT_DATABASE_URL,
    show_default=True,
    help="Where jobs live (prefer the environment for passwords).",
)
@listen_option
@click.option(
    "--read-database-url",
    envvar="ROTA_READ_DATABASE_URL",
    help="A streaming replica the dashboard and API read lists, counts and details from "
    "(PostgreSQL); writes and claims stay on --database-url. Prefer the environment for "
    "passwords.",
)
@click.option(
    "--app",
    "app_ref",
    envvar="ROTA_APP",
    metavar="MODULE:ATTR",
    help="Your rota.App; without it the demo kinds are registered.",
)
@click.option(
    "--workers",
    envvar="ROTA_WORKERS",
    type=click.IntRange(0, 64),
    default=3,
    show_default=True,
    help="In-process workers.",
)
@click.option(
    "--concurrency",
    envvar="ROTA_CONCURRENCY",
    type=click.IntRange(1, 10_000),
    default=10,
    show_default=True,
    help="Jobs each worker runs at once.",
)
@click.option(
    "--host",
    envvar="ROTA_HOST",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; anything but loopback needs auth.",
)
@click.option(
    "--port",
    envvar="ROTA_PORT",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="Port to listen on (0 picks a free one).",
)
@click.option(
    "--read-only",
    envvar="ROTA_READ_ONLY",
    is_flag=True,
    help="Refuse every change through the API and dashboard.",
)
@audit_retention_option
@click.option(
    "--allowed-host",
    "allowed_hosts",
    envvar="ROTA_ALLOWED_HOSTS",
    multiple=True,
    help="Host names the API answers to (behind a proxy); repeatable.",
)
@shutdown_option(10.0)
@click.option(
    "--header-timeout",
    envvar="ROTA_HEADER_TIMEOUT",
    type=click.FloatRange(0, 3600, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds a request's headers may take to arrive before the connection is closed.",
)
@click.option(
    "--body-timeout",
    envvar="ROTA_BODY_TIMEOUT",
    type=click.FloatRange(0, 3600, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds a request's body may take to arrive before the connection is closed.",
)
@click.option(
    "--max-connections",
    envvar="ROTA_MAX_CONNECTIONS",
    type=click.IntRange(1, 1_000_000),
    help="Open connections past which new ones get 503 [default: what the open-file "
    "limit leaves room for, at most 1024].",
)
@click.option(
    "--max-reads-per-identity",
    envvar="ROTA_MAX_READS_PER_IDENTITY",
    type=click.IntRange(1, 1_000_000),
    default=16,
    show_default=True,
    help="Reads one identity may have in flight; past it, 429 with Retry-After.",
)
@click.option(
    "--read-rate-per-identity",
    envvar="ROTA_READ_RATE_PER_IDENTITY",
    type=click.FloatRange(0, 1e9, min_open=True),
    default=100.0,
    show_default=True,
    help="Reads a second one identity may start beside others of its own in flight (three "
    "seconds' worth at once); past it, 429. One read at a time is never refused.",
)
@click.option(
    "--credentials-file",
    envvar="ROTA_CREDENTIALS_FILE",
    metavar="PATH",
    help="Named tokens and basic-auth users with their roles, and the trusted proxy (TOML; "
    "see the operator docs). ROTA_CREDENTIALS may hold the same text instead.",
)
@click.option(
    "--max-requests",
    envvar="ROTA_MAX_REQUESTS",
    type=click.IntRange(1, 10_000),
    default=2,
    show_default=True,
    help="Requests handled at once; the rest wait their turn, and /healthz never waits.",
)
def serve(
    database_url: str,
    listen_database_url: str | None,
    read_database_url: str | None,
    app_ref: str | None,
    workers: int,
    concurrency: int,
    host: str,
    port: int,
    read_only: bool,
    audit_retention: str,
    allowed_hosts: tuple[str, ...],
    shutdown_timeout: float,
    header_timeout: float,
    body_timeout: float,
    max_connections: int | None,
    max_requests: int,
    max_reads_per_identity: int,
    read_rate_per_identity: float,
    credentials_file: str | None,
) -> None:
    """Run the API, the dashboard and workers in one process (migrations applied on start).

    Protect it with ROTA_AUTH_TOKEN (bearer token, and a login page for the dashboard) or
    ROTA_BASIC_AUTH=user:password; beside them, ROTA_READ_TOKEN and ROTA_READ_BASIC_AUTH give
    an identity that sees everything and changes nothing. All are read from the environment
    only, never from flags, so they do not show up in process listings. For several named
    credentials with roles (admin, operator, read-only) and single sign-on through a trusted
    proxy, see --credentials-file.
    """
    from rota.api import ApiSettings, check_bind
    from rota.api.connections import ConnectionLimits, default_max_connections
    from rota.api.credentials import load_credentials
    from rota.app import App
    from rota.demo import DEMO_APP, DEMO_HEARTBEAT, DEMO_LEASE, DEMO_RESCUE, add_demo_kinds
    from rota.store.replica import check_read_url

    # The demo app runs with the demo's short lease, named by --app or not.
    demo = app_ref in (None, DEMO_APP)
    timing: dict[str, Any] = {}
    if demo:
        app = add_demo_kinds(App(database_url))
        timing = {
            "lease": DEMO_LEASE,
            "heartbeat": DEMO_HEARTBEAT,
            "rescue": DEMO_RESCUE,
            "poll": 0.2,
        }
    else:
        app = load_app(app_ref or "")
        source = click.get_current_context().get_parameter_source("database_url")
        if source is not click.core.ParameterSource.DEFAULT:
            app.with_database(database_url)
    if listen_database_url:
        app.database.listen_database_url = listen_database_url
    app.database.auto_migrate = True  # serve applies migrations on start
    if read_database_url:
        check_read_url(app.database_url, read_database_url)
    heartbeat = timing.get("heartbeat")
    audit_kept = parse_retention(audit_retention, what="--audit-retention")
    credentials, trusted_proxy = load_credentials(
        credentials_file, os.environ.get("ROTA_CREDENTIALS")
    )
    settings = ApiSettings(
        credentials=credentials,
        trusted_proxy=trusted_proxy,
        # Set but blank is refused by ApiSettings, not read as "no auth".
        auth_token=os.environ.get("ROTA_AUTH_TOKEN"),
        basic_auth=_basic_auth(os.environ.get("ROTA_BASIC_AUTH")),
        read_token=os.environ.get("ROTA_READ_TOKEN"),
        read_basic_auth=_basic_auth(os.environ.get("ROTA_READ_BASIC_AUTH"), "ROTA_READ_BASIC_AUTH"),
        read_only=read_only,
        allowed_hosts=tuple(h.lower() for h in allowed_hosts) or None,
        heartbeat_interval_seconds=heartbeat.total_seconds() if heartbeat else 10.0,
        max_concurrent_requests=max_requests,
        max_reads_per_identity=max_reads_per_identity,
        read_rate_per_identity=read_rate_per_identity,
    )
    check_bind(host, settings)
    announce_new_database_url(app.database_url)  # after every check that may refuse the command
    # Bound before anything else: a busy port must fail before a worker registers or a
    # database is touched.
    listener = _listen(host, port)
    limits = ConnectionLimits(
        header_timeout_s=header_timeout,
        body_timeout_s=body_timeout,
        max_connections=max_connections or default_max_connections(),
    )
    aborted = run_workers(
        _serve(
            app,
            settings,
            listener=listener,
            workers=workers,
            concurrency=concurrency,
            demo=demo,
            shutdown_timeout=shutdown_timeout,
            timing={
                **timing,
                "audit_retention": audit_kept,
            },
            limits=limits,
            read_url=read_database_url or None,
        )
    )
    # Sync handlers stuck in threads cannot be interrupted; do not wait for them.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if aborted else 0)


async def _serve(
    app: Any,
    settings: Any,
    *,
    listener: socket.socket,
    workers: int,
    concurrency: int,
    demo: bool,
    shutdown_timeout: float,
    #: WorkerSettings fields for the workers (durations as seconds or timedeltas).
    timing: dict[str, Any],
    limits: ConnectionLimits | None = None,
    read_url: str | None = None,
) -> bool:
    import uvicorn

    from rota.api import create_app
    from rota.api.connections import default_limits, guarded_protocol, quiet_accept_errors
    from rota.runtime.signals import stop_signals
    from rota.runtime.worker_settings import default_worker_name
    from rota.store.postgres.replica import open_replica

    await app.open()
    replica = open_replica(app.store, read_url) if read_url else None
    api = create_app(
        app.database.client,
        settings=settings,
        metrics=app.metrics,
        kinds=app.registry.kinds() or None,
        demo=demo,
        replica=replica,
        workflows=app.schedules.workflow_builders(),
        enqueuer=app.enqueuer,
    )

    class QuietServer(uvicorn.Server):
        """uvicorn without its own signal handling: one handler stops server and workers."""

        @contextlib.contextmanager
        def capture_signals(self) -> Generator[None, None, None]:
            yield

    host, port = listener.getsockname()[:2]
    server = QuietServer(
        uvicorn.Config(
            api,
            host=host,
            port=port,
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=5,
            http=guarded_protocol(limits or default_limits()),
            # The peer address stays the TCP connection's: no client can pass for a trusted
            # proxy (or dodge the login throttle) with an X-Forwarded-For header.
            proxy_headers=False,
        )
    )
    crew = WorkerThread(
        app.workers,
        names=[f"{default_worker_name()}-{index + 1}" for index in range(workers)],
        options={"concurrency": concurrency, "shutdown_timeout": shutdown_timeout, **timing},
        threads_end_with_process=True,  # os._exit after the workers stop ends their threads
    )
    loop = asyncio.get_running_loop()
    quiet_accept_errors(loop)
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.info("stopping: finishing running jobs (signal again to stop at once)")
        server.should_exit = True
        server.force_exit = signals > 1
        crew.request_stop()

    for signum in stop_signals():
        loop.add_signal_handler(signum, on_signal)
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(SERVER_SWITCH_INTERVAL_S)
    crew.start()
    try:
        shown = f"[{host}]" if ":" in host else host
        log.info("listening on http://%s:%d", shown, port)
        await server.serve(sockets=[listener])
        if signals == 0:  # the server stopped on its own: stop the workers too
            crew.request_stop()
        return await crew.wait()
    finally:
        if not crew.finished:
            crew.request_stop()
            crew.request_stop()  # the second request abandons running jobs at once
            await crew.wait()
        if replica is not None:
            await replica.close()
        await app.close()
        sys.setswitchinterval(switch_interval)


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; InvalidInput saying why when it cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as error:
        reason = os.strerror(error.errno).lower() if error.errno else str(error)
        raise InvalidInput(f"could not listen on {host}:{port}: {reason}") from None


def _basic_auth(value: str | None, name: str = "ROTA_BASIC_AUTH") -> tuple[str, str] | None:
    if value is None:
        return None
    user, sep, password = value.partition(":")
    if not sep:
        raise InvalidInput(f"{name} must look like user:password")
    return user, password
