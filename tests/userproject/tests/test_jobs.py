from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from shop.jobs import OUTBOX, app, sign_up, sign_up_sync

import rota
from rota.testing import FakeClock, drain, drain_sync, run_job


async def test_the_fixture_is_the_module_level_app_on_a_fresh_store(rota_app: rota.App) -> None:
    assert rota_app is app
    assert rota_app.database_url == "memory://"
    assert (await rota_app.jobs.list()).jobs == []


async def test_signing_up_twice_sends_one_welcome(rota_app: rota.App) -> None:
    first = await sign_up("ada@example.com")
    second = await sign_up("ada@example.com")
    assert (second.duplicate, second.job.id) == (True, first.job.id)

    assert await drain(rota_app) == 1
    assert OUTBOX == ["welcome ada@example.com"]
    assert (await rota_app.jobs.get(first.job.id)).state is rota.JobState.SUCCEEDED


async def test_each_test_starts_from_an_empty_store(rota_app: rota.App) -> None:
    assert (await rota_app.jobs.list()).jobs == []
    assert (await sign_up("ada@example.com")).duplicate is False


async def test_a_delayed_job_waits_for_the_clock(rota_app: rota.App, rota_clock: FakeClock) -> None:
    await rota_app.enqueue("welcome", {"to": "bob@example.com"}, delay=timedelta(hours=1))
    assert await drain(rota_app) == 0
    rota_clock.advance(timedelta(hours=1))
    assert await drain(rota_app) == 1
    assert OUTBOX == ["welcome bob@example.com"]


async def test_the_digest_fires_at_eight_in_berlin(
    rota_app: rota.App, rota_clock: FakeClock
) -> None:
    # FakeClock starts at 2026-01-01 12:00 UTC: the next 08:00 in Berlin is 07:00 UTC tomorrow.
    await rota_app.open()
    scheduler = rota_app.schedules.scheduler()
    await scheduler.tick()
    assert await drain(rota_app) == 0
    rota_clock.advance(timedelta(hours=19))
    await scheduler.tick()
    assert await drain(rota_app) == 1
    assert OUTBOX == ["digest"]


async def test_a_bad_address_is_dead_at_once(rota_app: rota.App) -> None:
    job = await run_job(rota_app, "welcome", {"to": "nobody"})
    assert job.state is rota.JobState.DEAD
    assert job.last_error == "Permanent: not an email address: 'nobody'"
    assert OUTBOX == []


def test_sync_code_enqueues_and_a_sync_drain_runs_it(rota_app: rota.App) -> None:
    assert sign_up_sync("cy@example.com").job.state is rota.JobState.PENDING
    assert drain_sync(rota_app) == 1
    assert OUTBOX == ["welcome cy@example.com"]
    assert not Path("shop.db").exists()
