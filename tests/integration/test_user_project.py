"""rota.testing from a user's side: tests/userproject, its own module-level App and tests,
run by pytest in a subprocess with rota's plugin found through its pytest11 entry point."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

USER_PROJECT = Path(__file__).resolve().parents[1] / "userproject"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    copy = tmp_path / "userproject"
    shutil.copytree(USER_PROJECT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def pytest_in(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "ROTA_")) and key != "PYTHONPATH"
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_user_project_tests_its_module_level_app_with_the_plugin(project: Path) -> None:
    result = pytest_in(project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "8 passed" in result.stdout
    # The App's own database was never opened: every test ran on its isolated store.
    assert not (project / "shop.db").exists()


def test_the_fixtures_come_from_the_entry_point_plugin(project: Path) -> None:
    result = pytest_in(project, "-p", "no:rota", "tests/test_jobs.py")
    # Without rota's plugin its setting is unknown, and --strict-config refuses it.
    assert result.returncode == 4
    assert "Unknown config option: rota_app" in result.stderr


def test_an_unconfigured_rota_app_fixture_says_what_to_set(project: Path) -> None:
    result = pytest_in(project, "-o", "rota_app=", "tests/test_jobs.py")
    assert result.returncode == 1
    assert 'needs `rota_app = "package.module:app"`' in result.stdout
    assert "Traceback" not in result.stdout
