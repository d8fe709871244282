"""A throwaway PostgreSQL cluster configured as production, owned by one benchmark run.

``initdb`` in a temporary directory on the machine's disk (so ``fsync`` means what it says),
a port of its own, connections over a unix socket in that directory (no TCP listener, so no
clash with any other server on the machine). The postmaster runs in a session of its own, so
a Ctrl-C in the terminal reaches the harness and not the server: the harness stops it itself,
by its PID, and removes the directory.

The settings are PostgreSQL's defaults where production keeps them, and what a production
server of this size sets otherwise (``PRODUCTION``). The report does not copy this dict: it
reads back what the running server says (``server_settings``), so the documented settings
cannot drift from the measured ones.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: postgresql.conf of the cluster. Durability is on as shipped (fsync, synchronous_commit,
#: full_page_writes); autovacuum is on with its default thresholds; memory and checkpoints are
#: sized for a dedicated server with a few GiB of RAM and an SSD.
PRODUCTION: dict[str, str] = {
    "shared_buffers": "1GB",
    "effective_cache_size": "4GB",
    "maintenance_work_mem": "256MB",
    "max_connections": "300",
    "wal_level": "replica",
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "max_wal_size": "4GB",
    "min_wal_size": "1GB",
    "checkpoint_timeout": "15min",
    "checkpoint_completion_target": "0.9",
    "autovacuum": "on",
    "random_page_cost": "1.1",
    "effective_io_concurrency": "200",
    "log_checkpoints": "on",
    "log_autovacuum_min_duration": "1s",
}

#: Always listed in the report, whatever their source (the ones a reader checks first).
KEY_SETTINGS = (
    "server_version",
    "shared_buffers",
    "autovacuum",
    "synchronous_commit",
    "fsync",
    "full_page_writes",
    "wal_level",
    "max_wal_size",
    "checkpoint_timeout",
    "work_mem",
    "effective_cache_size",
    "max_connections",
    "data_checksums",
    "jit",
    "huge_pages",
    "lc_collate",
)


#: A UTF-8 database with byte-order collation, trust auth on the socket only (nothing listens
#: on TCP).
_INITDB = ("-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8")


def pg_bin(name: str) -> str:
    """A PostgreSQL server binary: on PATH, else the newest /usr/lib/postgresql/*/bin."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    if not candidates:
        raise RuntimeError(
            f"PostgreSQL's {name} was not found: install the server package "
            "(Debian: postgresql-15) or pass --database-url"
        )
    return candidates[0]


def _free_port() -> int:
    """A port no TCP listener and no socket in /var/run/postgresql uses (we listen on neither,
    but a tool that connects by port alone should not find another server)."""
    for _ in range(100):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if not Path(f"/var/run/postgresql/.s.PGSQL.{port}").exists():
            return port
    raise RuntimeError("no free port found")


@dataclass
class Cluster:
    """One running cluster; ``start`` makes it, ``stop`` ends it (idempotent)."""

    root: Path
    port: int
    process: subprocess.Popen[bytes]
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    @property
    def url(self) -> str:
        """The ``postgres`` database over the unix socket."""
        return f"postgresql://postgres@/postgres?host={self.root}&port={self.port}"

    def new_database(self, prefix: str) -> str:
        """A new, empty database named ``prefix`` and a random suffix; its URL."""
        import uuid

        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self.url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
        return self.url.replace("/postgres?", f"/{name}?", 1)

    @classmethod
    def start(cls, *, extra: dict[str, str] | None = None, timeout_s: float = 60.0) -> Cluster:
        """initdb, write the settings, start the postmaster, wait until it accepts connections."""
        initdb, postgres = pg_bin("initdb"), pg_bin("postgres")
        root = Path(tempfile.mkdtemp(prefix="rota-bench-pg-"))
        owner: dict[str, Any] = {}
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            shutil.chown(root, "postgres", "postgres")
            owner = {"user": "postgres", "group": "postgres", "extra_groups": []}
        try:
            subprocess.run(
                [initdb, "-D", str(root / "data"), *_INITDB],
                check=True,
                capture_output=True,
                timeout=120,
                **owner,
            )
        except subprocess.CalledProcessError as error:
            shutil.rmtree(root, ignore_errors=True)
            raise RuntimeError(f"initdb failed: {error.stderr.decode()[-2000:]}") from None
        port = _free_port()
        conf = {
            **PRODUCTION,
            **(extra or {}),
            "port": str(port),
            "listen_addresses": "''",
            "unix_socket_directories": f"'{root}'",
        }
        with (root / "data" / "postgresql.conf").open("a") as handle:
            handle.write("\n# rota benchmarks: production settings (bench/cluster.py)\n")
            handle.writelines(f"{key} = {_quoted(value)}\n" for key, value in conf.items())
        log = (root / "server.log").open("wb")
        if owner:
            shutil.chown(root / "server.log", "postgres", "postgres")
        process = subprocess.Popen(
            [postgres, "-D", str(root / "data")],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **owner,
        )
        log.close()
        cluster = cls(root=root, port=port, process=process, extra=dict(extra or {}))
        try:
            cluster._wait_ready(timeout_s)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _wait_ready(self, timeout_s: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"PostgreSQL exited at start: {self.log.read_text()[-2000:]}")
            with contextlib.suppress(psycopg.OperationalError):
                with psycopg.connect(self.url, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"PostgreSQL did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)

    def stop(self, timeout_s: float = 60.0) -> None:
        """Fast shutdown (SIGINT to the postmaster), then immediate, then SIGKILL; then the
        directory goes. Safe to call twice."""
        for sig, wait_s in ((signal.SIGINT, timeout_s), (signal.SIGQUIT, 10.0)):
            if self.process.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(wait_s)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def _quoted(value: str) -> str:
    if value.startswith("'") or value.replace(".", "").isdigit():
        return value
    return f"'{value}'"


# ---------------------------------------------------------------------- server CPU


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the command name (which may hold spaces): state is [0], ppid [1],
    # utime [11], stime [12], cutime [13], cstime [14].
    return text.rpartition(")")[2].split()


def children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and fields[1] == str(parent):
                found.append(int(entry.name))
    return found


def server_cpu_seconds(postmaster: int, *, exclude: tuple[int, ...] = ()) -> float:
    """User + system CPU of a PostgreSQL server so far: the postmaster, its live children
    (backends, autovacuum, checkpointer, WAL writer...) and, through the postmaster's cutime
    and cstime, every child that has exited. ``exclude``: backends not to count (the harness's
    own polling connection)."""
    tick = os.sysconf("SC_CLK_TCK")
    root = _stat(postmaster)
    if root is None:
        raise RuntimeError(f"PostgreSQL's postmaster {postmaster} is gone")
    total = sum(int(root[i]) for i in (11, 12, 13, 14))
    for pid in children(postmaster):
        if pid in exclude:
            continue
        fields = _stat(pid)
        if fields is not None:
            total += int(fields[11]) + int(fields[12])
    return total / tick


def process_cpu_seconds(pid: int) -> float:
    fields = _stat(pid)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postmaster_of(backend_pid: int) -> int | None:
    """The postmaster of a backend seen in /proc (a local server), else None."""
    fields = _stat(backend_pid)
    return int(fields[1]) if fields is not None else None
