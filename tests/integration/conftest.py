"""Fixtures of the tests that run real worker processes: a database on SQLite and on
PostgreSQL (a module may define its own), and a migrated store on it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rota.store import Store, open_store

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'rota.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    store = open_store(database_url)
    await store.migrate()
    yield store
    await store.close()
