"""The contract suite's ``store`` fixture: every test runs on memory, SQLite and PostgreSQL, and
on PostgreSQL through PgBouncer in transaction pooling mode (with LISTEN on a direct
connection, as the docs tell users to configure it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rota.store import Store, open_store
from rota.testing import FakeClock
from tests.support.pgbouncer import advisory_locks

PGBOUNCER = "postgres+pgbouncer"
BACKENDS = [
    "memory",
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param(PGBOUNCER, marks=pytest.mark.postgres),
]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if backend == "memory":
        return "memory://"
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'rota.db'}"
    url = str(request.getfixturevalue("pg_url"))
    if backend == PGBOUNCER:
        return str(request.getfixturevalue("pgbouncer").route(url))
    return url


@pytest.fixture
def listen_url(backend: str, request: pytest.FixtureRequest) -> str | None:
    """The direct connection for LISTEN where the store goes through PgBouncer."""
    return str(request.getfixturevalue("pg_url")) if backend == PGBOUNCER else None


@pytest.fixture
async def store(store_url: str, listen_url: str | None, clock: FakeClock) -> AsyncIterator[Store]:
    store = open_store(store_url, clock=clock, listen_database_url=listen_url)
    await store.migrate()
    yield store
    if listen_url is not None:
        # T24: through a transaction pooler no advisory lock outlives its transaction.
        assert advisory_locks(listen_url) == 0, "an advisory lock outlived its transaction"
    await store.close()


@pytest.fixture
async def second_store(store_url: str, clock: FakeClock) -> AsyncIterator[Store | None]:
    """Another store object on the same database (None for memory, which cannot share)."""
    if store_url.startswith("memory"):
        yield None
        return
    other = open_store(store_url, clock=clock)
    yield other
    await other.close()
