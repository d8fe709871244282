"""Fixtures shared by every test: the fake clock, PostgreSQL discovery, CI strictness."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from rota.testing import FakeClock
from tests.support.pgbouncer import PgBouncer, pgbouncer_bin
from tests.support.postgres import ENABLE_HINT, Server

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Server]:
    """A PostgreSQL server with a migrated template database; skips (fails in CI) without one."""
    server = Server.find()
    if server is None:
        if IN_CI:
            pytest.fail(f"CI=true but no PostgreSQL server was found. {ENABLE_HINT}")
        pytest.skip(ENABLE_HINT)
    server.template()
    yield server
    server.close()


@pytest.fixture
def pg_url(pg_server: Server) -> Iterator[str]:
    """The URL of a fresh, migrated database of its own for this test."""
    with pg_server.database() as url:
        yield url


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under CI=true a skipped PostgreSQL test is a failure: a missing server must not pass."""
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and item.get_closest_marker("postgres") is not None:
        report.outcome = "failed"
        report.longrepr = f"PostgreSQL test skipped under CI=true: {report.longrepr}"


@pytest.fixture(scope="session")
def pgbouncer(pg_server: Server) -> Iterator[PgBouncer]:
    """Debian's PgBouncer in transaction pooling mode in front of the test server; skips (fails
    in CI) without it."""
    if pgbouncer_bin() is None:
        message = "pgbouncer is not installed (apt-get install pgbouncer)"
        if IN_CI:
            pytest.fail(f"CI=true but {message}")
        pytest.skip(message)
    bouncer = PgBouncer.start(pg_server.url)
    yield bouncer
    bouncer.stop()
