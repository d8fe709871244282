"""The Django Tasks backend's own rules, without a Django project: its options, how result
ids are read, and how a recorded failure becomes Django's TaskError. The backend at work, on
a real project and worker, is tests/integration/test_django.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pytest.importorskip("django")

from django.core.exceptions import ImproperlyConfigured

from rota.contrib import django as backend_module
from rota.contrib.django import RotaBackend
from rota.domain.job import Attempt
from rota.domain.job_state import Outcome


def backend(**options: object) -> RotaBackend:
    return RotaBackend("default", {"OPTIONS": options})


def test_options_name_exactly_one_database_and_nothing_unknown() -> None:
    with pytest.raises(ImproperlyConfigured, match="exactly one of DATABASE"):
        backend()
    with pytest.raises(ImproperlyConfigured, match="exactly one of DATABASE"):
        backend(DATABASE="default", DATABASE_URL="sqlite:///rota.db")
    with pytest.raises(ImproperlyConfigured, match="unknown OPTIONS RETRIES"):
        backend(DATABASE_URL="sqlite:///rota.db", RETRIES=3)
    with pytest.raises(ImproperlyConfigured, match="MAX_ATTEMPTS"):
        backend(DATABASE_URL="sqlite:///rota.db", MAX_ATTEMPTS="3")
    with pytest.raises(ImproperlyConfigured, match="MODULES"):
        backend(DATABASE_URL="sqlite:///rota.db", MODULES="shop.jobs")
    ready = backend(DATABASE_URL="sqlite:///rota.db", MAX_ATTEMPTS=5, MODULES=["shop.jobs"])
    assert (ready.database, ready.max_attempts, ready.modules) == (None, 5, ("shop.jobs",))


@pytest.mark.parametrize("result_id", ["", "x", "0", "-3", "1.5", "١٢", "9" * 20, " 7"])
def test_a_result_id_that_is_no_job_id_does_not_exist(result_id: str) -> None:
    with pytest.raises(backend_module.TaskResultDoesNotExist):
        backend_module._job_id(result_id)


def test_a_result_id_is_the_jobs_id() -> None:
    assert backend_module._job_id("42") == 42


def attempt(traceback: str | None, error: str | None = None) -> Attempt:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return Attempt(1, 1, "w", at, at, Outcome.FAILED, error=error, traceback=traceback)


@pytest.mark.parametrize(
    ("traceback", "error", "path"),
    [
        (
            "Traceback (most recent call last):\n  ...\nValueError: boom\n",
            None,
            "builtins.ValueError",
        ),
        ("Traceback ...\nshop.errors.OutOfStock: sku 7\n\n", None, "shop.errors.OutOfStock"),
        ("Traceback ...\nKeyboardInterrupt\n", None, "builtins.KeyboardInterrupt"),
        (None, "TimeoutError: job timed out after 5s", "builtins.TimeoutError"),
        (None, "lease expired on the last attempt", "builtins.Exception"),
        ("", None, "builtins.Exception"),
    ],
)
def test_a_failed_attempt_becomes_djangos_task_error(
    traceback: str | None, error: str | None, path: str
) -> None:
    task_error = backend_module._error(attempt(traceback, error))
    assert task_error.exception_class_path == path
    assert task_error.traceback == (traceback or error or "")
