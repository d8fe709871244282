"""Flow control from Python: ``app.pause_queue``, ``app.set_limit`` and friends on a MemoryStore."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

import rota
from rota import App, InvalidInput, JobState, Limit, LimitScope
from rota.store.memory import MemoryStore
from rota.testing import FakeClock


@pytest.fixture
async def app(clock: FakeClock) -> AsyncIterator[App]:
    async with App(store=MemoryStore(clock=clock), clock=clock) as opened:
        yield opened


async def test_set_limit_reads_like_the_rule_it_sets(app: App) -> None:
    assert await app.limits.set(kind="pdf", concurrency=3) == Limit(
        LimitScope.KIND, "pdf", concurrency=3
    )
    await app.limits.set(tenant="*", concurrency=2)
    await app.limits.set(kind="api", rate=100, per=timedelta(minutes=1))
    await app.limits.set(tenant="acme", rate=10, per=30, concurrency=5)  # per in seconds

    limits = {info.limit.ident: info.limit for info in await app.limits.list()}
    assert limits[(LimitScope.TENANT, "*")].concurrency == 2
    assert limits[(LimitScope.KIND, "api")].period == timedelta(minutes=1)
    acme = limits[(LimitScope.TENANT, "acme")]
    assert (acme.concurrency, acme.rate, acme.period) == (5, 10, timedelta(seconds=30))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": 1}, "exactly one of kind, queue or tenant"),
        ({"kind": "a", "queue": "b", "concurrency": 1}, "exactly one of kind, queue or tenant"),
        ({"kind": "pdf"}, "a concurrency, a rate (with per), or both"),
        ({"kind": "pdf", "rate": 5}, "a rate needs per"),
        ({"kind": "pdf", "concurrency": 1, "per": 60}, "per needs a rate"),
        ({"kind": "pdf", "rate": 5, "per": "1m"}, "per: must be a number of seconds"),
        ({"kind": "pdf", "rate": 5, "per": 0.5}, "a period between 1 second and 1 day"),
        ({"queue": "mail", "rate": 5, "per": 60}, "rates apply to kinds and tenants"),
        ({"kind": "pdf", "concurrency": -1}, "concurrency must be between"),
        ({"kind": "pdf", "concurrency": True}, "concurrency must be between"),
        ({"kind": "*", "concurrency": 1}, "limit key:"),
    ],
)
async def test_a_bad_limit_raises_invalid_input_and_writes_nothing(
    app: App, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInput, match=re.escape(message)):
        await app.limits.set(**options)
    assert await app.limits.list() == []


async def test_delete_limit_says_whether_there_was_one(app: App) -> None:
    await app.limits.set(tenant="*", concurrency=1)

    assert await app.limits.delete(tenant="*") is True
    assert await app.limits.delete(tenant="*") is False
    with pytest.raises(InvalidInput, match="exactly one"):
        await app.limits.delete()
    with pytest.raises(InvalidInput, match="limit scope"):
        await app.database.client.delete_limit("worker", "w1")


async def test_pause_shows_in_queues_and_stops_claims_until_resumed(app: App) -> None:
    await app.enqueue("email", queue="mail")
    await app.enqueue("email", queue="mail", tenant="acme")
    await app.limits.set(queue="mail", concurrency=5)

    info = await app.queues.pause("mail")
    assert (info.name, info.paused) == ("mail", True)
    assert await app.store.claim("w", queues=["mail"], limit=5, lease=timedelta(seconds=30)) == []
    [mail] = await app.queues.list()
    assert isinstance(mail, rota.QueueStatus)
    assert (mail.paused, mail.count(JobState.PENDING), mail.exact) == (True, 2, True)
    assert mail.limit is not None and mail.limit.limit.concurrency == 5

    await app.queues.resume("mail")
    claimed = await app.store.claim("w", queues=["mail"], limit=5, lease=timedelta(seconds=30))
    assert len(claimed) == 2
    assert await app.limits.running_by_tenant() == {"acme": 1}
    [mail] = await app.queues.list()
    assert (mail.paused, mail.count(JobState.RUNNING), mail.limit and mail.limit.running) == (
        False,
        2,
        2,
    )


async def test_a_bad_queue_name_is_refused(app: App) -> None:
    with pytest.raises(InvalidInput, match="queue:"):
        await app.queues.pause("bad name")
    assert await app.queues.list() == []
