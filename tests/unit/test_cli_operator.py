"""`rota jobs delete | purge | reschedule | rerun` and `rota enqueue --expire-after`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import Store, open_store
from tests.support.cli import rota, sqlite_url


def on_store(db: Path, use: Callable[[Store], Awaitable[Any]]) -> Any:
    async def go() -> Any:
        store = open_store(sqlite_url(db))
        try:
            await store.migrate()
            return await use(store)
        finally:
            await store.close()

    return asyncio.run(go())


async def _dead(store: Store, kind: str) -> int:
    [result] = await store.enqueue([JobSpec(kind=kind, priority=100, max_attempts=1)])
    [claimed] = await store.claim("w", queues=["default"], limit=1, lease=timedelta(seconds=30))
    await store.fail(claimed.lease, error="boom", retry_in=timedelta(0))
    return result.job.id


def test_delete_removes_a_job_and_refuses_a_running_one(tmp_path: Path) -> None:
    db = tmp_path / "ops.db"

    async def setup(store: Store) -> tuple[int, int]:
        dead = await _dead(store, "email")
        await store.enqueue([JobSpec(kind="email")])
        [running] = await store.claim("w", queues=["default"], limit=1, lease=timedelta(seconds=30))
        return dead, running.id

    dead, running = on_store(db, setup)
    deleted = rota("jobs", "delete", str(dead), url=sqlite_url(db))
    assert (deleted.code, deleted.out) == (0, f"job {dead} deleted (it was dead)\n")
    refused = rota("jobs", "delete", str(running), url=sqlite_url(db))
    assert refused.code == 2
    assert refused.err_lines == [
        f"error: job {running} is running: cannot delete it (cancel it first)"
    ]
    state = on_store(db, lambda store: store.get(running))
    assert state.state is JobState.RUNNING


def test_purge_confirms_its_scope_and_needs_yes_without_a_terminal(tmp_path: Path) -> None:
    db = tmp_path / "ops.db"

    async def setup(store: Store) -> None:
        await _dead(store, "email")
        await _dead(store, "sms")

    on_store(db, setup)
    refused = rota("jobs", "purge", "--kind", "email", url=sqlite_url(db))
    assert refused.code == 2
    assert refused.err_lines == [
        "error: would delete 1 finished job matching state cancelled|dead|succeeded, "
        "kind email: pass --yes to confirm"
    ]
    assert on_store(db, lambda store: store.counts()).total(JobState.DEAD) == 2
    purged = rota(
        "jobs", "purge", "--kind", "email", "--state", "dead", "--yes", url=sqlite_url(db)
    )
    assert purged.code == 0
    assert purged.out == "deleted 1 finished job matching state dead, kind email\n"
    assert on_store(db, lambda store: store.counts()).total(JobState.DEAD) == 1
    bad = rota("jobs", "purge", "--state", "pending", "--yes", url=sqlite_url(db))
    assert bad.code == 2 and len(bad.err_lines) == 1


def test_reschedule_moves_a_pending_job_and_refuses_bad_input(tmp_path: Path) -> None:
    db = tmp_path / "ops.db"

    async def setup(store: Store) -> int:
        [result] = await store.enqueue([JobSpec(kind="email", delay=timedelta(hours=1))])
        return result.job.id

    job_id = on_store(db, setup)
    moved = rota(
        "jobs", "reschedule", str(job_id), "--at", "2030-01-01T00:00:00Z", "--priority", "4",
        "--queue", "urgent", "--json", url=sqlite_url(db),
    )  # fmt: skip
    assert moved.code == 0, moved.err
    shown = json.loads(moved.out)
    assert (shown["run_at"], shown["priority"], shown["queue"]) == (
        "2030-01-01T00:00:00+00:00",
        4,
        "urgent",
    )
    bad = rota("jobs", "reschedule", str(job_id), "--priority", "500", url=sqlite_url(db))
    assert bad.code == 2
    assert bad.err_lines == ["error: priority: must be between -100 and 100"]
    nothing = rota("jobs", "reschedule", str(job_id), url=sqlite_url(db))
    assert nothing.code == 2 and len(nothing.err_lines) == 1
    now = rota("jobs", "reschedule", str(job_id), "--at", "now", url=sqlite_url(db))
    assert now.code == 0 and now.out.startswith(f"job {job_id} pending in queue urgent at ")
    job = on_store(db, lambda store: store.get(job_id))
    assert job.run_at.year < 2030 and job.priority == 4


def test_rerun_runs_a_succeeded_job_again_and_refuses_others(tmp_path: Path) -> None:
    db = tmp_path / "ops.db"

    async def setup(store: Store) -> tuple[int, int]:
        done = (await store.enqueue([JobSpec(kind="email", priority=1)]))[0].job.id
        [claimed] = await store.claim("w", queues=["default"], limit=1, lease=timedelta(seconds=30))
        await store.complete(claimed.lease)
        waiting = (await store.enqueue([JobSpec(kind="email")]))[0].job.id
        return done, waiting

    done, waiting = on_store(db, setup)
    rerun = rota("jobs", "rerun", str(done), url=sqlite_url(db))
    assert (rerun.code, rerun.out) == (0, f"job {done} is pending again (a new attempt series)\n")
    refused = rota("jobs", "rerun", str(waiting), url=sqlite_url(db))
    assert refused.code == 2
    assert refused.err_lines == [f"error: job {waiting} is pending; only succeeded jobs re-run"]


def test_enqueue_expire_after_sets_the_expiry(tmp_path: Path) -> None:
    db = tmp_path / "ops.db"
    made = rota("enqueue", "email", "--expire-after", "1h", "--json", url=sqlite_url(db))
    assert made.code == 0, made.err
    job = json.loads(made.out)
    created = datetime.fromisoformat(job["created_at"])
    assert datetime.fromisoformat(job["expires_at"]) == created + timedelta(hours=1)
    bad = rota("enqueue", "email", "--expire-after", "soon", url=sqlite_url(db))
    assert bad.code == 2 and len(bad.err_lines) == 1 and "--expire-after" in bad.err
    assert on_store(db, lambda store: store.counts()).total(JobState.PENDING) == 1


def test_enqueue_unique_for_dedupes_a_succeeded_job_and_replace_updates_a_waiting_one(
    tmp_path: Path,
) -> None:
    db = tmp_path / "ops.db"
    url = sqlite_url(db)
    first = rota("enqueue", "hook", "--unique-key", "h", "--unique-for", "24h", "--json", url=url)
    job_id = json.loads(first.out)["id"]

    async def finish(store: Store) -> None:
        [claimed] = await store.claim("w", queues=["default"], limit=1, lease=timedelta(seconds=30))
        await store.complete(claimed.lease)

    on_store(db, finish)
    again = rota("enqueue", "hook", "--unique-key", "h", "--unique-for", "24h", url=url)
    assert again.code == 0
    assert again.out.startswith(f"job {job_id} succeeded") and "duplicate" in again.out
    waiting = rota("enqueue", "sync", "--unique-key", "s", "--delay", "1m", "--json", url=url)
    replaced = rota(
        "enqueue", "sync", "--unique-key", "s", "--payload", '{"v": 2}', "--replace", "--json",
        url=url,
    )  # fmt: skip
    shown = json.loads(replaced.out)
    assert (shown["id"], shown["replaced"], shown["payload"]) == (
        json.loads(waiting.out)["id"],
        True,
        {"v": 2},
    )
    bad = rota("enqueue", "sync", "--replace", url=url)
    assert bad.code == 2 and bad.err_lines == ["error: on_conflict: needs a unique_key"]
