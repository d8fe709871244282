"""The contract suite's ``store`` fixture: every test runs on memory, SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rota.store import Store, open_store
from rota.testing import FakeClock

BACKENDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    backend: str = request.param
    if backend == "memory":
        return "memory://"
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'rota.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
async def store(store_url: str, clock: FakeClock) -> AsyncIterator[Store]:
    store = open_store(store_url, clock=clock)
    await store.migrate()
    yield store
    await store.close()
