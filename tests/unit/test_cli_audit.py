"""`rota audit`, and the audit entries the CLI's operator commands leave as cli:<os user>."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from rota.domain.audit import AuditAction, AuditRecord
from rota.domain.errors import StateConflict
from rota.domain.job import JobSpec
from rota.store import Store, open_store
from tests.support.cli import invoke, rota, sqlite_url

USER = {"LOGNAME": "deploy", "USER": "deploy"}


def _on_store(db: Path, use: Any) -> Any:
    async def go() -> Any:
        store = open_store(sqlite_url(db))
        try:
            await store.migrate()
            return await use(store)
        finally:
            await store.close()

    return asyncio.run(go())


async def _dead_and_pending(store: Store) -> tuple[int, int]:
    [dead] = await store.enqueue([JobSpec(kind="email", priority=100, max_attempts=1)])
    [claimed] = await store.claim("w", queues=["default"], limit=1, lease=timedelta(seconds=30))
    await store.fail(claimed.lease, error="boom", retry_in=timedelta(0))
    [pending] = await store.enqueue([JobSpec(kind="sms")])
    return dead.job.id, pending.job.id


def test_cli_operator_commands_are_recorded_as_the_os_user(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    dead, pending = _on_store(db, _dead_and_pending)
    env = {**USER, "ROTA_DATABASE_URL": sqlite_url(db)}
    commands = [
        ("jobs", "retry", str(dead)),
        ("jobs", "reschedule", str(pending), "--priority", "5"),
        ("jobs", "cancel", str(pending)),
        ("queues", "pause", "emails"),
        ("limits", "set", "--kind", "email", "--concurrency", "2"),
        ("limits", "remove", "--kind", "email"),
        ("schedules", "add", "nightly", "--kind", "report", "--cron", "0 3 * * *"),
        ("schedules", "pause", "nightly"),
        ("schedules", "run-now", "nightly"),
        ("schedules", "remove", "nightly"),
    ]
    for command in commands:
        ran = invoke(*command, env=env)
        assert ran.code == 0, (command, ran.out, ran.err)
    with pytest.raises(StateConflict):  # already cancelled: refused, and not recorded
        invoke("jobs", "cancel", str(pending), env=env)
    assert invoke("jobs", "purge", "--state", "cancelled", "--yes", env=env).code == 0

    listed = invoke("audit", "--json", env=env)
    assert listed.code == 0, listed.err
    entries = json.loads(listed.out)["entries"]
    assert {entry["identity"] for entry in entries} == {"cli:deploy"}
    assert [(e["action"], e["target"], e["count"]) for e in reversed(entries)] == [
        ("job.retry", f"job:{dead}", 1),
        ("job.reschedule", f"job:{pending}", 1),
        ("job.cancel", f"job:{pending}", 1),
        ("queue.pause", "queue:emails", None),
        ("limit.set", "limit:kind:email", None),
        ("limit.delete", "limit:kind:email", None),
        ("schedule.create", "schedule:nightly", None),
        ("schedule.pause", "schedule:nightly", None),
        ("schedule.run", "schedule:nightly", 1),
        ("schedule.delete", "schedule:nightly", None),
        ("jobs.purge", None, 1),
    ]
    assert entries[0]["filter"] == {"states": ["cancelled"]}
    assert entries[-1]["detail"] is None and entries[-2]["detail"] == {"priority": 5}

    only = invoke("audit", "--json", "--action", "job.cancel", env=env)
    assert [e["target"] for e in json.loads(only.out)["entries"]] == [f"job:{pending}"]
    table = invoke("audit", "--target", "queue:emails", env=env)
    assert table.code == 0 and "cli:deploy" in table.out and "queue.pause" in table.out


def test_audit_filters_by_identity_and_time_and_pages(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"

    async def setup(store: Store) -> None:
        for n, who in enumerate(("token:admin", "basic:alice", "token:admin")):
            at = (await store.now()) - timedelta(days=3 - n)
            record = AuditRecord(identity=who, action=AuditAction.QUEUE_PAUSE, target=f"queue:{n}")
            await store.record_audit(record, now=at)

    _on_store(db, setup)
    env = {"ROTA_DATABASE_URL": sqlite_url(db)}

    def targets(*args: str) -> list[str]:
        ran = invoke("audit", "--json", *args, env=env)
        assert ran.code == 0, ran.err
        return [entry["target"] for entry in json.loads(ran.out)["entries"]]

    assert targets("--identity", "token:admin") == ["queue:2", "queue:0"]
    assert targets("--since", "2d12h") == ["queue:2", "queue:1"]
    assert targets("--until", "1d12h") == ["queue:1", "queue:0"]
    first = json.loads(invoke("audit", "--json", "--limit", "2", env=env).out)
    assert first["next_cursor"] is not None
    assert targets("--cursor", first["next_cursor"]) == ["queue:0"]


def test_bad_audit_options_are_one_line_and_exit_2(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    _on_store(db, lambda store: store.now())
    bad = rota("audit", "--since", "last tuesday", url=sqlite_url(db))
    assert bad.code == 2
    assert len(bad.err_lines) == 1 and bad.err_lines[0].startswith("error: --since")
    unknown = rota("audit", "--action", "job.explode", url=sqlite_url(db))
    assert unknown.code == 2 and "Traceback" not in unknown.err
