"""`rota jobs hold | release`: by id, and by filter with the bulk verbs' confirmation."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from rota.domain.audit import AuditFilter
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import JobFilter, Store
from tests.support.cli import rota, sqlite_url
from tests.unit.test_cli_operator import on_store


def test_hold_and_release_one_job_by_id(tmp_path: Path) -> None:
    db = tmp_path / "ops.db"

    async def setup(store: Store) -> tuple[int, int]:
        await store.enqueue([JobSpec(kind="email")])
        [running] = await store.claim("w", queues=["default"], limit=1, lease=timedelta(seconds=30))
        [pending] = await store.enqueue([JobSpec(kind="email")])
        return pending.job.id, running.id

    pending, running = on_store(db, setup)
    held = rota("jobs", "hold", str(pending), url=sqlite_url(db))
    assert (held.code, held.out) == (
        0,
        f"job {pending} held: no worker claims it until it is released\n",
    )
    assert on_store(db, lambda store: store.get(pending)).state is JobState.HELD
    refused = rota("jobs", "hold", str(running), url=sqlite_url(db))
    assert refused.code == 2
    assert refused.err_lines == [
        f"error: job {running} is running; only waiting or pending jobs can be held "
        "(cancel a running one)"
    ]
    both = rota("jobs", "hold", str(pending), "--kind", "email", url=sqlite_url(db))
    assert both.code == 2
    assert both.err_lines == ["error: give a job id or filters to hold, not both"]
    released = rota("jobs", "release", str(pending), url=sqlite_url(db))
    assert (released.code, released.out) == (0, f"job {pending} released: pending again\n")
    page = on_store(db, lambda store: store.list_audit(AuditFilter()))
    assert [entry.action for entry in page.entries] == ["job.release", "job.hold"]


def test_hold_by_filter_confirms_and_reports_its_count(tmp_path: Path) -> None:
    db = tmp_path / "ops.db"

    async def setup(store: Store) -> None:
        await store.enqueue([JobSpec(kind="email") for _ in range(3)])
        await store.enqueue([JobSpec(kind="sms")])

    on_store(db, setup)
    refused = rota("jobs", "hold", "--kind", "email", url=sqlite_url(db))
    assert refused.code == 2
    assert refused.err_lines == [
        "error: would hold 3 waiting or pending jobs matching state pending|waiting, "
        "kind email: pass --yes to confirm"
    ]
    assert on_store(db, lambda store: store.counts()).total(JobState.HELD) == 0
    held = rota("jobs", "hold", "--kind", "email", "--yes", url=sqlite_url(db))
    assert held.code == 0
    assert held.out == "held 3 waiting or pending jobs matching state pending|waiting, kind email\n"
    held_filter = JobFilter(states=frozenset({JobState.HELD}))
    assert on_store(db, lambda store: store.count_jobs(held_filter)) == 3
    released = rota("jobs", "release", "--yes", url=sqlite_url(db))
    assert released.out == "released 3 held jobs matching state held\n"
    nothing = rota("jobs", "release", "--yes", url=sqlite_url(db))
    assert nothing.out == "no held jobs match state held; nothing released\n"
    bad = rota("jobs", "hold", "--state", "running", "--yes", url=sqlite_url(db))
    assert bad.code == 2
    assert bad.err_lines == [
        "error: --state running: hold cannot act on a running job; only waiting or pending "
        "jobs can be held (cancel a running one). It takes pending, waiting"
    ]
