from __future__ import annotations

from pathlib import Path

import pytest

import rota
from rota.testing import drain


@pytest.fixture
def rota_database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'test.db'}"


async def test_the_app_can_be_isolated_on_sqlite_instead(
    rota_app: rota.App, rota_database_url: str, tmp_path: Path
) -> None:
    assert rota_app.database_url == rota_database_url
    await rota_app.enqueue("welcome", {"to": "ada@example.com"})
    assert await drain(rota_app) == 1
    assert (tmp_path / "test.db").exists()
