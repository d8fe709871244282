"""The audit log on every store: append at the store's clock, list by keyset, filter, prune."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rota.domain.audit import AuditAction, AuditFilter, AuditRecord
from rota.domain.errors import InvalidCursor
from rota.store import Store
from rota.testing import FakeClock


def _record(
    identity: str = "token:admin",
    action: AuditAction = AuditAction.JOB_RETRY,
    target: str | None = "job:1",
    **fields: object,
) -> AuditRecord:
    return AuditRecord(identity=identity, action=action, target=target, **fields)  # type: ignore[arg-type]


async def test_an_entry_is_stamped_by_the_store_clock_and_reads_back_whole(
    store: Store, clock: FakeClock
) -> None:
    entry = await store.record_audit(
        _record(
            action=AuditAction.JOBS_PURGE,
            target=None,
            filter={"states": ["dead"], "kind": "email"},
            detail={"limit": 10000, "note": "ünïcode ✓"},
            count=42,
        )
    )
    assert entry.at == clock.now()
    assert (entry.identity, entry.action, entry.target, entry.count) == (
        "token:admin",
        "jobs.purge",
        None,
        42,
    )
    assert entry.filter == {"states": ["dead"], "kind": "email"}
    assert entry.detail == {"limit": 10000, "note": "ünïcode ✓"}
    page = await store.list_audit(AuditFilter())
    assert page.entries == [entry]
    assert page.next_cursor is None


async def test_entries_list_newest_first_and_a_page_is_stable_while_more_arrive(
    store: Store, clock: FakeClock
) -> None:
    ids = []
    for n in range(5):
        ids.append((await store.record_audit(_record(target=f"job:{n}"))).id)
        clock.advance(1)
    assert ids == sorted(ids) and len(set(ids)) == 5
    first = await store.list_audit(AuditFilter(), limit=2)
    assert [e.id for e in first.entries] == [ids[4], ids[3]]
    assert first.next_cursor is not None
    await store.record_audit(_record(target="job:late"))  # newer: not on the later pages
    second = await store.list_audit(AuditFilter(), cursor=first.next_cursor, limit=2)
    assert [e.id for e in second.entries] == [ids[2], ids[1]]
    assert second.next_cursor is not None
    third = await store.list_audit(AuditFilter(), cursor=second.next_cursor, limit=2)
    assert [e.id for e in third.entries] == [ids[0]]
    assert third.next_cursor is None


async def test_listings_filter_by_action_identity_target_and_time(
    store: Store, clock: FakeClock
) -> None:
    start = clock.now()
    await store.record_audit(_record("token:admin", AuditAction.JOB_RETRY, "job:1"))
    clock.advance(60)
    await store.record_audit(_record("basic:alice", AuditAction.JOB_CANCEL, "job:2", count=1))
    clock.advance(60)
    await store.record_audit(_record("cli:deploy", AuditAction.QUEUE_PAUSE, "queue:emails"))

    async def targets(**fields: object) -> list[str | None]:
        page = await store.list_audit(AuditFilter(**fields))  # type: ignore[arg-type]
        return [entry.target for entry in page.entries]

    assert await targets() == ["queue:emails", "job:2", "job:1"]
    assert await targets(action="job.cancel") == ["job:2"]
    assert await targets(identity="cli:deploy") == ["queue:emails"]
    assert await targets(target="job:1") == ["job:1"]
    assert await targets(since=start + timedelta(seconds=60)) == ["queue:emails", "job:2"]
    assert await targets(until=start + timedelta(seconds=60)) == ["job:1"]
    assert await targets(
        since=start + timedelta(seconds=30), until=start + timedelta(seconds=90)
    ) == ["job:2"]
    assert await targets(action="job.retry", identity="basic:alice") == []


async def test_pruning_deletes_the_oldest_entries_up_to_the_limit_and_ids_are_not_reused(
    store: Store, clock: FakeClock
) -> None:
    old = [await store.record_audit(_record(target=f"job:{n}")) for n in range(3)]
    clock.advance(timedelta(days=100))
    recent = await store.record_audit(_record(target="job:recent"))
    cutoff = clock.now() - timedelta(days=90)
    assert await store.prune_audit(older_than=cutoff, limit=2) == 2
    left = (await store.list_audit(AuditFilter())).entries
    assert [e.id for e in left] == [recent.id, old[2].id]
    assert await store.prune_audit(older_than=cutoff) == 1
    assert await store.prune_audit(older_than=cutoff) == 0
    assert await store.prune_audit(older_than=clock.now() + timedelta(seconds=1)) == 1
    again = await store.record_audit(_record(target="job:after"))
    assert again.id > recent.id


async def test_a_cursor_the_store_did_not_issue_is_refused(store: Store) -> None:
    with pytest.raises(InvalidCursor):
        await store.list_audit(AuditFilter(), cursor="not-a-cursor")
