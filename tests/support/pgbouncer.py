"""Debian's PgBouncer in transaction pooling mode, started by the tests in front of a PostgreSQL
server: every database of the server is reachable through it under the same name.

In transaction mode each transaction (each statement, for an autocommit connection) runs on
whichever server session is free, so anything a client leaves in its session (a prepared
statement, a LISTEN, a session advisory lock, a SET) leaks to other clients or is lost. The
tests run rota through it to prove rota leaves nothing there.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

PGBOUNCER = "pgbouncer"
#: How soon PgBouncer tries a failed server login again (its default, 15 s, would hide
#: rota's own reconnect in any test that restarts PostgreSQL behind it).
SERVER_LOGIN_RETRY_S = 0.25


#: The PgBouncers running now, by port: which URLs go through one of them.
_RUNNING: dict[int, PgBouncer] = {}


def pgbouncer_bin() -> str | None:
    return shutil.which(PGBOUNCER) or next(
        (path for path in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(path)),
        None,
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgBouncer:
    """A PgBouncer process of a test's own (transaction pooling, trust auth) in front of the
    server of ``server_url``; stopped by PID."""

    def __init__(self, server_url: str, directory: Path, port: int, popen: subprocess.Popen[bytes]):
        self.server_url = server_url
        self.directory = directory
        self.port = port
        self.popen = popen

    @classmethod
    def start(cls, server_url: str, *, pool_size: int = 20) -> PgBouncer:
        binary = pgbouncer_bin()
        if binary is None:
            raise RuntimeError("pgbouncer is not installed")
        server = urlsplit(server_url)
        user = server.username or "postgres"
        directory = Path(tempfile.mkdtemp(prefix="rota-pgbouncer-"))
        port = _free_port()
        password = f" password={server.password}" if server.password else ""
        (directory / "users.txt").write_text(f'"{user}" ""\n')
        (directory / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={server.hostname or '127.0.0.1'} port={server.port or 5432}{password}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {directory / 'users.txt'}\n"
            "pool_mode = transaction\n"
            f"max_client_conn = 1000\ndefault_pool_size = {pool_size}\n"
            f"server_login_retry = {SERVER_LOGIN_RETRY_S}\n"
            f"logfile = {directory / 'pgbouncer.log'}\n"
            f"admin_users = {user}\n"
        )
        as_user: dict[str, object] = {}
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            for path in (directory, *directory.iterdir()):
                shutil.chown(path, "postgres", "postgres")
            as_user = {"user": "postgres", "group": "postgres", "extra_groups": []}
        popen = subprocess.Popen(
            [binary, str(directory / "pgbouncer.ini")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            **as_user,  # type: ignore[call-overload]
        )
        bouncer = cls(server_url, directory, port, popen)
        bouncer._wait_ready()
        _RUNNING[port] = bouncer
        return bouncer

    def _wait_ready(self, within_s: float = 30.0) -> None:
        deadline = time.monotonic() + within_s
        while True:
            if self.popen.poll() is not None:
                raise RuntimeError(f"pgbouncer exited: {self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer did not listen: {self.log()}") from None
                time.sleep(0.05)

    def route(self, url: str) -> str:
        """``url`` (a database on the server) reached through PgBouncer instead."""
        parts = urlsplit(url)
        user = parts.netloc.rpartition("@")[0]
        return urlunsplit(parts._replace(netloc=f"{user}@127.0.0.1:{self.port}"))

    def unroute(self, url: str) -> str:
        """``url`` (through this PgBouncer) as a direct connection to the server."""
        server = urlsplit(self.server_url)
        parts = urlsplit(url)
        user = parts.netloc.rpartition("@")[0]
        netloc = f"{user}@{server.hostname or '127.0.0.1'}:{server.port or 5432}"
        return urlunsplit(parts._replace(netloc=netloc))

    def log(self) -> str:
        try:
            return (self.directory / "pgbouncer.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        _RUNNING.pop(self.port, None)
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)  # PgBouncer: shut down at once
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        shutil.rmtree(self.directory, ignore_errors=True)


def unpooled(url: str) -> str:
    """``url`` itself, or the direct connection behind it if it goes through one of the tests'
    PgBouncers (for LISTEN, and for test code that prepares statements)."""
    if not url.startswith("postgresql://"):
        return url
    bouncer = _RUNNING.get(urlsplit(url).port or 5432)
    if bouncer is None or urlsplit(url).hostname != "127.0.0.1":
        return url
    return bouncer.unroute(url)


def advisory_locks(direct_url: str) -> int:
    """Advisory locks held in the database of ``direct_url`` (asked directly, not through
    the pooler)."""
    with psycopg.connect(direct_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchone()
        return int(row[0]) if row else 0
