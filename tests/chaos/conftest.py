"""Fixtures of the chaos tests: a store per backend, a fleet of chaosapp workers with a fenced
downstream store, throwaway PostgreSQL clusters, chaos proxies, and the seed of the run."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from rota.store import Store, open_store
from tests.support.chaosfleet import ChaosFleet
from tests.support.migrate import migrate_url
from tests.support.nemesis import chaos_seed
from tests.support.pgbouncer import unpooled
from tests.support.postgres import Cluster, Server, pg_bin, with_database
from tests.support.processes import WorkerOptions
from tests.support.proxy import ChaosProxy

#: T4's timing: lease 3 s, heartbeat 1 s, rescue 1 s.
CHAOS_OPTIONS = WorkerOptions(
    concurrency=8, lease_s=3.0, heartbeat_s=1.0, rescue_s=1.0, poll_s=0.2, shutdown_timeout_s=5.0
)
#: Slack for process scheduling on a busy 2-core CI machine, added to every time bound.
MARGIN_S = 3.0


class LateStop(AssertionError):
    """A handler was still running when another worker could take its job over: raised by
    the timing checks alone, so an xfail for that bug cannot hide any other failure."""


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
#: Through PgBouncer in transaction pooling mode, with LISTEN on a direct connection (T24).
PGBOUNCER = "postgres+pgbouncer"
POOLED_BACKENDS = [*BACKENDS, pytest.param(PGBOUNCER, marks=pytest.mark.postgres)]


@pytest.fixture
def seed() -> int:
    return chaos_seed()


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'rota.db'}"
    url = str(request.getfixturevalue("pg_url"))
    if request.param == PGBOUNCER:
        return str(request.getfixturevalue("pgbouncer").route(url))
    return url


#: For the tests that drive a FakeClock through the store itself: every backend.
FAKE_CLOCK_BACKENDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=FAKE_CLOCK_BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'rota.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    store = open_store(database_url)
    await store.migrate()
    yield store
    await store.close()


def effects_target(database_url: str, tmp_path: Path) -> str:
    """The fenced store: a table in the same PostgreSQL database, or a SQLite file of its own."""
    if database_url.startswith("postgresql://"):
        return unpooled(database_url).partition("?")[0]
    return str(tmp_path / "effects.db")


@pytest.fixture
def fleet(database_url: str, store: Store, tmp_path: Path) -> Iterator[ChaosFleet]:
    direct = unpooled(database_url)
    fleet = ChaosFleet(
        database_url,
        store,
        tmp_path,
        CHAOS_OPTIONS,
        effects=effects_target(database_url, tmp_path),
        listen_database_url=direct if direct != database_url else None,
    )
    try:
        yield fleet
    finally:
        fleet.close()
        print(fleet.logs(tail=60))  # shown by pytest when the test failed


@pytest.fixture
def cluster(pg_server: Server, tmp_path: Path) -> Iterator[Cluster]:
    """A throwaway PostgreSQL cluster of this test's own, which it may restart and kill."""
    if pg_bin("initdb") is None or pg_bin("pg_ctl") is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    made = Cluster.create()
    try:
        yield made
    finally:
        made.destroy()


@pytest.fixture
def cluster_url(cluster: Cluster) -> str:
    """A migrated database on the throwaway cluster."""
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        conn.execute('CREATE DATABASE "rota_chaos"')
    url = with_database(cluster.url, "rota_chaos")
    migrate_url(url)
    return url


@pytest.fixture
async def cluster_store(cluster_url: str) -> AsyncIterator[Store]:
    """A store on the throwaway cluster's database."""
    store = open_store(cluster_url)
    yield store
    await store.close()


@pytest.fixture
def proxies() -> Iterator[list[ChaosProxy]]:
    """Proxies a test starts (append them); all closed at the end."""
    started: list[ChaosProxy] = []
    try:
        yield started
    finally:
        for proxy in started:
            with contextlib.suppress(Exception):
                proxy.close()


def through(proxy: ChaosProxy, url: str) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")
    user = netloc[0] + "@" if netloc[0] else ""
    host = proxy.listen[0]
    return urlunsplit(parts._replace(netloc=f"{user}{host}:{proxy.port}"))


def proxied(url: str, proxies: list[ChaosProxy], listen_host: str = "127.0.0.1") -> ChaosProxy:
    """A started proxy in front of the PostgreSQL server of ``url``."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    proxy = ChaosProxy(parts.hostname or "127.0.0.1", parts.port or 5432, listen_host=listen_host)
    proxies.append(proxy.start())
    return proxy


IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
