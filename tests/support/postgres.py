"""Finding or starting a PostgreSQL server for tests, and one database per test.

Where the tests look, in order: ``ROTA_TEST_DATABASE_URL`` (a server URL on which they may
create databases); a throwaway cluster of the test process's own, started from PostgreSQL's
server binaries when those are installed (in /dev/shm, without fsync: the tests need speed, not
durability); the local server on 127.0.0.1:5432. Each test gets its own database,
cloned from a template that was migrated once per session (the next one while a test runs),
and dropped in the background after it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

ENABLE_HINT = (
    "PostgreSQL tests need a server: set ROTA_TEST_DATABASE_URL=postgresql://user@host:port/db, "
    "run one on 127.0.0.1:5432, or install PostgreSQL's server binaries (initdb)."
)


def with_database(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + dbname))


def _can_connect(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pg_bin(name: str) -> str | None:
    """The path of a PostgreSQL server binary (initdb, pg_ctl, postgres), newest version first."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return candidates[0] if candidates else None


@dataclass
class Cluster:
    """A PostgreSQL cluster of our own in a temporary directory, which tests may stop and kill."""

    datadir: Path
    port: int
    owner: str | None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = list(args)
        if self.owner:
            cmd = ["runuser", "-u", self.owner, "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=120)

    @classmethod
    def create(
        cls,
        base: Path | None = None,
        *,
        listen: Sequence[str] = ("127.0.0.1",),
        trusted: Sequence[str] = (),
    ) -> Cluster:
        """initdb and start a cluster listening on ``listen`` (addresses this machine has,
        e.g. the host ends of network namespaces' veths), accepting the networks ``trusted``
        (CIDRs, beside loopback) without a password."""
        initdb = pg_bin("initdb")
        if initdb is None:
            raise RuntimeError("initdb not found")
        root = Path(tempfile.mkdtemp(prefix="rota-pg-", dir=base))
        owner = "postgres" if os.geteuid() == 0 else None
        if owner:
            shutil.chown(root, owner, owner)
        cluster = cls(datadir=root / "data", port=_free_port(), owner=owner)
        cluster._run(
            initdb, "-D", str(cluster.datadir), "-U", "postgres", "-A", "trust", "--no-sync"
        )
        with (cluster.datadir / "postgresql.conf").open("a") as handle:
            handle.write(
                f"\nlisten_addresses = '{','.join(listen)}'\nfsync = off\n"
                "synchronous_commit = on\nfull_page_writes = off\nmax_connections = 200\n"
                # Unix time with milliseconds: tests read when the server became ready.
                "log_line_prefix = '%n [%p] '\n"
            )
        if trusted:
            with (cluster.datadir / "pg_hba.conf").open("a") as handle:
                handle.writelines(f"host all all {cidr} trust\n" for cidr in trusted)
        cluster._own_port_and_socket()
        cluster.start()
        return cluster

    def standby(self) -> Cluster:
        """A streaming replica of this cluster (``pg_basebackup -R`` over a replication slot
        of its own), started and serving reads; destroy it before this one."""
        basebackup = pg_bin("pg_basebackup")
        if basebackup is None:
            raise RuntimeError("pg_basebackup not found")
        root = Path(tempfile.mkdtemp(prefix="rota-pg-standby-", dir=self.datadir.parent.parent))
        if self.owner:
            shutil.chown(root, self.owner, self.owner)
        replica = Cluster(datadir=root / "data", port=_free_port(), owner=self.owner)
        slot = f"rota_standby_{replica.port}"
        replica._run(
            basebackup,
            *("-D", str(replica.datadir), "-h", "127.0.0.1", "-p", str(self.port)),
            *("-U", "postgres", "-R", "-C", "-S", slot, "-X", "stream", "--no-sync"),
            "--checkpoint=fast",  # the default spread checkpoint takes minutes
        )
        replica._own_port_and_socket()  # the copied postgresql.conf names the primary's
        replica.start()
        return replica

    def _own_port_and_socket(self) -> None:
        with (self.datadir / "postgresql.conf").open("a") as handle:
            handle.write(
                f"\nport = {self.port}\nunix_socket_directories = '{self.datadir.parent}'\n"
            )

    def start(self) -> None:
        self._run(
            pg_bin("pg_ctl") or "pg_ctl",
            "-D",
            str(self.datadir),
            "-w",
            "-t",
            "60",
            "-l",
            str(self.datadir.parent / "log"),
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run(
            pg_bin("pg_ctl") or "pg_ctl",
            "-D",
            str(self.datadir),
            "-m",
            mode,
            "-w",
            "stop",
            check=False,
        )

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def ready_at(self, *, after: float) -> float | None:
        """The first instant (Unix time) after ``after`` at which the server logged that it
        accepts connections, from its own log; None if it has not yet."""
        try:
            text = (self.datadir.parent / "log").read_text(errors="replace")
        except FileNotFoundError:
            return None
        for line in text.splitlines():
            if "ready to accept connections" not in line:
                continue
            with contextlib.suppress(ValueError):
                at = float(line.split(" ", 1)[0])
                if at > after:
                    return at
        return None

    def kill(self) -> None:
        """SIGKILL the postmaster (and so every backend): a crash, not a shutdown."""
        pidfile = self.datadir / "postmaster.pid"
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            pid = int(pidfile.read_text().splitlines()[0])
            os.kill(pid, 9)

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.datadir.parent, ignore_errors=True)


#: Databases of finished tests that may wait to be dropped.
DROPS_BEHIND = 2


class Server:
    """A PostgreSQL server the tests may create databases on."""

    def __init__(self, url: str, cluster: Cluster | None = None) -> None:
        self.url = url
        self.cluster = cluster
        self._template: str | None = None
        # Cloning and dropping a database take a few hundred ms of the server's I/O each: the
        # next test's database is cloned while a test runs, and used ones are dropped behind.
        self._cloner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pg-clone")
        self._dropper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pg-drop")
        self._next: Future[str] | None = None
        self._drops: list[Future[None]] = []

    @classmethod
    def find(cls) -> Server | None:
        explicit = os.environ.get("ROTA_TEST_DATABASE_URL")
        if explicit:
            return cls(explicit) if _can_connect(explicit) else None
        if pg_bin("initdb") and pg_bin("pg_ctl"):
            # In memory where it can be, without fsync: a test's database is cloned in tens of
            # milliseconds there, against several hundred on a durable server's disk.
            memory = Path("/dev/shm")
            base = memory if memory.is_dir() and os.access(memory, os.W_OK) else None
            cluster = Cluster.create(base)
            return cls(cluster.url, cluster)
        local = "postgresql://postgres@127.0.0.1:5432/postgres"
        if _can_connect(local):
            return cls(local)
        return None

    def admin(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.url, autocommit=True, connect_timeout=10)

    def template(self) -> str:
        """The name of a database migrated to the current schema, built once per session."""
        if self._template is None:
            from tests.support.migrate import migrate_url

            name = f"rota_tpl_{uuid.uuid4().hex[:10]}"
            with self.admin() as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            migrate_url(with_database(self.url, name))
            self._template = name
        return self._template

    @contextlib.contextmanager
    def database(self, *, migrated: bool = True) -> Iterator[str]:
        """A fresh database (cloned from the migrated template, or empty) that no other test
        has used; dropped afterwards, in the background."""
        if migrated:
            ready, self._next = self._next, self._cloner.submit(self._create, True)
            name = ready.result() if ready is not None else self._create(True)
        else:
            name = self._create(False)
        try:
            yield with_database(self.url, name)
        finally:
            # A test's leftover connections live until its database is dropped: a short queue.
            self._drops = [drop for drop in self._drops if not drop.done()]
            while len(self._drops) >= DROPS_BEHIND:
                self._drops.pop(0).result()
            self._drops.append(self._dropper.submit(self.drop, name))

    def _create(self, migrated: bool) -> str:
        name = f"rota_t_{uuid.uuid4().hex[:12]}"
        template = f' TEMPLATE "{self.template()}"' if migrated else ""
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"{template}')
        return name

    def drop(self, name: str) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                with self.admin() as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def close(self) -> None:
        if self._next is not None:
            self._dropper.submit(self.drop, self._next.result())
        self._cloner.shutdown()
        self._dropper.shutdown()  # waits for every drop
        if self._template is not None:
            with contextlib.suppress(psycopg.Error):
                self.drop(self._template)
        if self.cluster is not None:
            self.cluster.destroy()
