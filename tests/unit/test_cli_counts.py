"""Counts in the CLI's messages read as English: "1 held job", "3 held jobs", "no held jobs"."""

from __future__ import annotations

from pathlib import Path

from rota.domain.job import JobSpec
from rota.store import Store
from tests.support.cli import invoke, sqlite_url
from tests.unit.test_cli_operator import _dead, on_store


def test_bulk_verbs_count_one_job_in_the_singular(tmp_path: Path) -> None:
    db = tmp_path / "ops.db"

    async def setup(store: Store) -> None:
        await store.enqueue([JobSpec(kind="email")])

    on_store(db, setup)
    env = {"ROTA_DATABASE_URL": sqlite_url(db)}
    held = invoke("jobs", "hold", "--yes", env=env)
    assert held.out == "held 1 waiting or pending job matching state pending|waiting\n"
    released = invoke("jobs", "release", "--yes", env=env)
    assert released.out == "released 1 held job matching state held\n"
    cancelled = invoke("jobs", "bulk-cancel", "--state", "pending", "--yes", env=env)
    assert cancelled.out.startswith("cancelled 1 ")
    assert " job matching state pending\n" in cancelled.out
    purged = invoke("jobs", "purge", "--yes", env=env)
    assert purged.out == "deleted 1 finished job matching state cancelled|dead|succeeded\n"


def test_bulk_verbs_count_several_or_no_jobs_in_the_plural(tmp_path: Path) -> None:
    db = tmp_path / "ops.db"

    async def setup(store: Store) -> None:
        for _ in range(2):
            await _dead(store, "email")

    on_store(db, setup)
    env = {"ROTA_DATABASE_URL": sqlite_url(db)}
    retried = invoke("jobs", "bulk-retry", "--yes", env=env)
    assert retried.out == "retried 2 dead or cancelled jobs matching state cancelled|dead\n"
    none = invoke("jobs", "purge", "--yes", env=env)
    assert none.out == "no finished jobs match state cancelled|dead|succeeded; nothing deleted\n"
    assert "(s)" not in retried.out + none.out
