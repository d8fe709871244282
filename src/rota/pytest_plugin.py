"""rota's pytest plugin: fixtures that isolate your App for each test.

Registered through the ``pytest11`` entry point, so it is active wherever rota is installed.
Name your App once in the pytest configuration (``rota_app = "myproject.jobs:app"``); each
test that asks for ``rota_app`` gets that App on a fresh store read by ``rota_clock``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rota.app import App
from rota.config import load_app
from rota.domain.errors import InvalidInput
from rota.testing import FakeClock, isolated


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "rota_app",
        "module:attribute of the rota.App that the rota_app fixture isolates for each test",
        default="",
    )


@pytest.fixture
def rota_clock() -> FakeClock:
    """A FakeClock for this test: the isolated App's store and workers read it."""
    return FakeClock()


@pytest.fixture
def rota_database_url() -> str:
    """Where ``rota_app`` keeps this test's jobs: a fresh ``memory://`` store. Override it to
    test on SQLite (``f"sqlite:///{tmp_path / 'rota.db'}"``)."""
    return "memory://"


@pytest.fixture
def rota_app(
    request: pytest.FixtureRequest, rota_database_url: str, rota_clock: FakeClock
) -> Iterator[App]:
    """The App named by the ``rota_app`` setting, on a fresh store read by ``rota_clock``
    for this test, and back to its own database afterwards."""
    reference = str(request.config.getini("rota_app")).strip()
    if not reference:
        pytest.fail(
            'the rota_app fixture needs `rota_app = "package.module:app"` in your pytest '
            "configuration (or override the fixture with rota.testing.isolated)",
            pytrace=False,
        )
    try:
        app = load_app(reference)
    except InvalidInput as error:
        pytest.fail(f"rota_app = {reference!r}: {error}", pytrace=False)
    with isolated(app, database_url=rota_database_url, clock=rota_clock):
        yield app
