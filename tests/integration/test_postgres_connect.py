"""A PostgreSQL connection that cannot be made says why in one line, at once where waiting
cannot help, without the password: ConnectionFailed from the library, exit code 2 from every
command. A missing or old schema is "migrations pending", never psycopg's UndefinedTable."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest

import rota
from rota.api import ApiSettings, create_app
from rota.client import Client
from rota.domain.errors import ConnectionFailed, MigrationsPending
from rota.domain.job import JobSpec
from rota.store import Store, open_store
from rota.store.postgres import connect
from rota.store.postgres.queries import migrations
from tests.support.postgres import Cluster, Server, _free_port, pg_bin

pytestmark = pytest.mark.postgres

PASSWORD = "pw-Never-Shown-4711"
REPO_ROOT = Path(__file__).resolve().parents[2]


def _as(
    url: str, *, user: str | None = None, port: int | None = None, db: str | None = None
) -> str:
    """``url`` with another user (and always our password), port or database."""
    parts = urlsplit(url)
    name = user or parts.username or "postgres"
    netloc = f"{name}:{PASSWORD}@{parts.hostname}:{port or parts.port or 5432}"
    path = f"/{db}" if db else parts.path
    return urlunsplit(parts._replace(netloc=netloc, path=path))


def attempts(caplog: pytest.LogCaptureFixture) -> int:
    return sum("connection attempt" in record.getMessage() for record in caplog.records)


async def _fail(url: str) -> ConnectionFailed:
    store = open_store(url)
    try:
        with pytest.raises(ConnectionFailed) as raised:
            await store.now()
    finally:
        await store.close()
    return raised.value


@pytest.fixture
def refused_url(pg_server: Server) -> str:
    return _as(pg_server.url, port=_free_port())


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"db": "rota_no_such_db"}, 'database "rota_no_such_db" does not exist'),
        ({"user": "rota_no_such_role"}, 'role "rota_no_such_role" does not exist'),
    ],
)
async def test_a_wrong_database_or_role_fails_at_once_saying_which(
    pg_server: Server, change: dict[str, str], expected: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="rota.store.postgres")
    failure = await _fail(_as(pg_server.url, **change))  # type: ignore[arg-type]
    assert expected in str(failure)
    assert failure.permanent
    assert attempts(caplog) == 1, "a failure that waiting cannot heal was retried"
    assert PASSWORD not in str(failure) + caplog.text


async def test_a_bad_ssl_setting_fails_at_once_as_an_ssl_error(
    pg_server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    with pg_server.admin() as conn:
        if conn.execute("SHOW ssl").fetchone() == ("on",):
            pytest.skip("this server speaks SSL: sslmode=require would succeed")
    caplog.set_level(logging.DEBUG, logger="rota.store.postgres")
    failure = await _fail(_as(pg_server.url) + "?sslmode=require")
    assert str(failure).startswith("SSL error with PostgreSQL at ")
    assert "SSL was required" in str(failure)
    assert failure.permanent and attempts(caplog) == 1
    bogus = await _fail(_as(pg_server.url) + "?sslmode=bogus")
    assert str(bogus) == 'bad connection setting: invalid sslmode value: "bogus"'
    assert PASSWORD not in str(failure) + str(bogus) + caplog.text


async def test_a_refused_connection_is_retried_within_the_wait_then_named_with_host_and_port(
    refused_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connect, "CONNECT_WAIT_S", 1.0)
    caplog.set_level(logging.DEBUG, logger="rota.store.postgres")
    failure = await _fail(refused_url)
    port = urlsplit(refused_url).port
    assert str(failure) == f"connection refused at 127.0.0.1:{port}: is PostgreSQL running there?"
    assert not failure.permanent
    assert attempts(caplog) > 2, "a refused connection (maybe a restart) was not retried"
    assert PASSWORD not in str(failure) + caplog.text


@pytest.mark.parametrize("command", [["jobs", "list"], ["enqueue", "email"], ["migrate"]])
def test_a_command_reports_a_refused_connection_at_its_first_attempt(
    refused_url: str, tmp_path: Path, command: list[str]
) -> None:
    # A one-shot command's user is waiting: no retrying a refused connection for seconds
    # first (a long-running store still does, in case the server is restarting).
    result = cli("--log-level", "debug", *command, url=refused_url, cwd=tmp_path)
    assert result.returncode == 2
    tried = [line for line in result.stderr.splitlines() if "connection attempt" in line]
    assert len(tried) == 1, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"error: connection refused at 127.0.0.1:{urlsplit(refused_url).port}: "
        "is PostgreSQL running there?"
    )


@pytest.fixture(scope="module")
def password_cluster(pg_server: Server) -> Iterator[Cluster]:
    """A throwaway cluster where the role ``rota_pw`` must give its password."""
    if pg_bin("initdb") is None or pg_bin("pg_ctl") is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    cluster = Cluster.create()
    try:
        hba = cluster.datadir / "pg_hba.conf"
        hba.write_text("host all rota_pw 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute("CREATE ROLE rota_pw LOGIN PASSWORD 'the-right-one'")
        cluster._run(pg_bin("pg_ctl") or "pg_ctl", "-D", str(cluster.datadir), "reload")
        yield cluster
    finally:
        cluster.destroy()


async def test_a_wrong_password_fails_at_once_and_is_never_shown(
    password_cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="rota.store.postgres")
    failure = await _fail(_as(password_cluster.url, user="rota_pw"))
    assert 'password authentication failed for user "rota_pw"' in str(failure)
    assert failure.permanent and attempts(caplog) == 1
    assert PASSWORD not in str(failure) + caplog.text


# ---------------------------------------------------------------------- the CLI


def cli(*args: str, url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rota", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(REPO_ROOT / "src"),
            "ROTA_DATABASE_URL": url,
        },
        timeout=120,
    )


COMMANDS = [
    ["migrate"],
    ["migrate", "--check"],
    ["check"],
    ["enqueue", "k"],
    ["jobs", "list"],
    ["schedules", "list"],
    ["queues", "list"],
    ["workers"],
    ["worker", "--app", "myapp:app"],
    ["serve", "--app", "myapp:app", "--port", "0", "--workers", "1"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_every_command_says_what_is_wrong_in_one_line_and_exits_2(
    pg_server: Server, tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "myapp.py").write_text(
        "import rota\napp = rota.App('sqlite:///unused.db')\n"
        "@app.job('k')\nasync def k(ctx, payload):\n    pass\n"
    )
    result = cli(*command, url=_as(pg_server.url, db="rota_no_such_db"), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        'error: database "rota_no_such_db" does not exist (PostgreSQL at '
        f"{urlsplit(pg_server.url).hostname}:{urlsplit(pg_server.url).port or 5432})"
    )
    assert PASSWORD not in result.stdout + result.stderr


def test_a_refused_connection_exits_2_naming_host_and_port(
    refused_url: str, tmp_path: Path
) -> None:
    result = cli("jobs", "list", url=refused_url, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: connection refused at 127.0.0.1:{urlsplit(refused_url).port}: "
        "is PostgreSQL running there?"
    )
    assert PASSWORD not in result.stderr


# ---------------------------------------------------------------------- missing or old schema


@pytest.fixture
def unmigrated_url(pg_server: Server) -> Iterator[str]:
    with pg_server.database(migrated=False) as url:
        yield url


@pytest.fixture
def old_schema_url(pg_server: Server) -> Iterator[str]:
    """A database at the first migration only, as an older rota left it."""
    with pg_server.database(migrated=False) as url:
        version, text = migrations()[0]
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(text)
            conn.execute(
                "CREATE TABLE rota_migrations (version text PRIMARY KEY, "
                "applied_at timestamptz NOT NULL DEFAULT now())"
            )
            conn.execute("INSERT INTO rota_migrations (version) VALUES (%s)", [version])
        yield url


def asgi(store: Store) -> httpx.AsyncClient:
    api = create_app(Client(store), settings=ApiSettings())
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://127.0.0.1")


def one_line_pending(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "rota migrate" in result.stderr


async def test_an_unmigrated_database_says_migrations_pending_everywhere(
    unmigrated_url: str, tmp_path: Path
) -> None:
    url = unmigrated_url
    store = open_store(url)
    try:
        with pytest.raises(MigrationsPending, match=r"migrations pending: run `rota migrate`"):
            await store.enqueue([JobSpec(kind="k")])
        async with await psycopg.AsyncConnection.connect(url) as own:
            with pytest.raises(MigrationsPending):
                await store.enqueue_on(own, [JobSpec(kind="k")])  # type: ignore[attr-defined]
        with psycopg.connect(url) as own_sync, pytest.raises(MigrationsPending):
            store.enqueue_on_sync(own_sync, [JobSpec(kind="k")])  # type: ignore[attr-defined]
        async with asgi(store) as http:  # the API answers 503 with the reason, not 500
            answer = await http.post("/api/jobs", json={"kind": "k"})
        assert answer.status_code == 503
        assert "rota migrate" in answer.text
    finally:
        await store.close()
    # The sync entry point of Django/Flask code, which opens a store of its own.
    app = rota.App(url)
    try:
        with pytest.raises(MigrationsPending, match="rota migrate"):
            await asyncio.to_thread(app.enqueue_sync, "k")
    finally:
        await app.close()
    one_line_pending(cli("enqueue", "k", url=url, cwd=tmp_path))


async def test_an_old_schema_says_migrations_pending(old_schema_url: str, tmp_path: Path) -> None:
    store = open_store(old_schema_url)
    try:
        with pytest.raises(MigrationsPending, match=r"migrations pending: run `rota migrate`"):
            await store.list_schedules()
        async with asgi(store) as http:
            answer = await http.get("/api/schedules")
        assert answer.status_code == 503
        assert "rota migrate" in answer.text
    finally:
        await store.close()
    one_line_pending(cli("schedules", "list", url=old_schema_url, cwd=tmp_path))


async def test_a_caller_after_another_gets_the_connection_just_returned(pg_url: str) -> None:
    """The pool hands out the connection returned last: calls one after another keep one warm
    backend, and the connections a burst opened stay idle for the pool to close in time."""
    store = open_store(f"{pg_url}?pool_min=1&pool_max=4")
    try:
        pool = store._connections  # type: ignore[attr-defined]

        async def backend() -> int:
            async with pool.connection() as conn:
                row = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()
                return int(row[0])

        # A burst: four callers at once, each holding its connection until all four have one.
        holding: list[int] = []
        all_in = asyncio.Event()

        async def hold() -> int:
            async with pool.connection() as conn:
                holding.append(conn.info.backend_pid)
                if len(holding) == 4:
                    all_in.set()
                await all_in.wait()
                return int(conn.info.backend_pid)

        burst = set(await asyncio.gather(*(hold() for _ in range(4))))
        assert len(burst) == 4
        used = {await backend() for _ in range(20)}
        assert len(used) == 1
    finally:
        await store.close()


async def test_every_connection_of_a_store_runs_without_jit(pg_url: str) -> None:
    """JIT compiling costs a statement about 0.1 s, and large tables' estimates pass its
    threshold for statements that run in a millisecond: every session the pool opens, the
    ones a burst adds included, has it off."""
    store = open_store(f"{pg_url}?pool_min=1&pool_max=3")
    try:
        pool = store._connections  # type: ignore[attr-defined]
        all_in = asyncio.Event()
        held: list[str] = []

        async def jit() -> str:
            async with pool.connection() as conn:
                row = await (await conn.execute("SHOW jit")).fetchone()
                held.append(row[0])
                if len(held) == 3:
                    all_in.set()
                await all_in.wait()
                return str(row[0])

        assert await asyncio.gather(*(jit() for _ in range(3))) == ["off"] * 3
    finally:
        await store.close()


async def test_a_pool_connection_keeps_one_cursor_for_the_steps_of_a_flow(pg_url: str) -> None:
    """The steps of the store's flows share their connection's kept cursor (no new cursor and
    adaptation cache per statement), and a closed kept cursor is replaced, not reused."""
    store = open_store(f"{pg_url}?pool_min=1&pool_max=1")
    try:
        pool = store._connections  # type: ignore[attr-defined]
        async with pool.connection() as conn:
            kept = conn.kept_cursor()
            assert conn.kept_cursor() is kept
            await kept.close()
        # A keyed enqueue is a flow: looked up, inserted, in one transaction.
        await store.enqueue([JobSpec(kind="k", unique_key="once")])
        async with pool.connection() as again:
            assert again is conn
            fresh = again.kept_cursor()
            assert fresh is not kept and not fresh.closed
            assert fresh.pgresult is not None  # the flow's steps ran on it
            assert await (await fresh.execute("SELECT 1")).fetchone() == (1,)
    finally:
        await store.close()
