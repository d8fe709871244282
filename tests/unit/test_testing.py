"""rota.testing: isolating a module-level App, driving it by a FakeClock, running jobs inline."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import rota
from rota import App, JobContext, JobState
from rota.domain.errors import InvalidInput
from rota.testing import FakeClock, drain, drain_sync, isolated, run_job


def make_app(tmp_path: Path) -> App:
    """An App as a user's module would define it: a real database URL, no clock."""
    app = App(f"sqlite:///{tmp_path / 'real.db'}")

    @app.job("email")
    async def email(ctx: JobContext, payload: Any) -> None:
        if "@" not in payload.get("to", ""):
            raise rota.Permanent("not an email address")

    @app.job("flaky", retry=rota.RetryPolicy(base=timedelta(seconds=30), jitter=0))
    async def flaky(ctx: JobContext, payload: Any) -> None:
        raise RuntimeError("upstream returned 503")

    @app.job("later")
    async def later(ctx: JobContext, payload: Any) -> None:
        raise rota.Snooze(60)

    return app


async def test_isolated_points_the_app_at_a_fresh_store_and_back(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    real_url = app.database_url

    async with isolated(app) as clock:
        assert (app.database_url, app.clock) == ("memory://", clock)
        await app.enqueue("email", {"to": "ada@example.com"})
        assert await drain(app) == 1

    assert (app.database_url, app.clock) == (real_url, None)
    assert not (tmp_path / "real.db").exists()
    async with isolated(app):
        assert (await app.jobs.list()).jobs == []


def test_isolated_works_test_after_test_in_one_process(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    for n in range(3):
        with isolated(app):
            assert app.enqueue_sync("email", {"to": f"{n}@example.com"}).job.id == 1
            assert drain_sync(app) == 1
    assert not (tmp_path / "real.db").exists()


async def test_the_fake_clock_decides_when_a_delayed_job_is_due(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with isolated(app) as clock:
        job = (await app.enqueue("email", {"to": "ada@example.com"}, delay=60)).job
        assert job.run_at == clock.now() + timedelta(seconds=60)
        assert await drain(app) == 0
        clock.advance(60)
        assert await drain(app) == 1
        assert (await app.jobs.get(job.id)).state is JobState.SUCCEEDED


async def test_isolated_takes_a_given_clock_and_an_sqlite_url(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    clock = FakeClock()
    url = f"sqlite:///{tmp_path / 'test.db'}"
    async with isolated(app, database_url=url, clock=clock) as given:
        assert given is clock
        job = (await app.enqueue("email", {"to": "ada@example.com"})).job
        assert job.created_at == clock.now()
    assert (tmp_path / "test.db").exists()
    assert not (tmp_path / "real.db").exists()


async def test_a_sync_isolation_inside_an_async_test_closes_its_sqlite_store(
    tmp_path: Path,
) -> None:
    app = make_app(tmp_path)
    with isolated(app, database_url=f"sqlite:///{tmp_path / 'test.db'}"):
        store = await app.open()
    with pytest.raises(rota.StoreUnavailable):
        await store.enqueue([app.spec("email")])


async def test_an_open_app_is_not_isolated(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    await app.open()
    with pytest.raises(InvalidInput, match="not open"), isolated(app):
        pass
    assert app.database_url.startswith("sqlite:")
    with pytest.raises(InvalidInput, match="already open"):
        app.with_clock(FakeClock())
    await app.close()


def test_a_sync_isolation_refuses_postgresql() -> None:
    app = App("sqlite:///unused.db")
    with (
        pytest.raises(InvalidInput, match="async with"),
        isolated(app, database_url="postgresql://127.0.0.1/rota"),
    ):
        pass
    assert app.database_url == "sqlite:///unused.db"


@pytest.mark.postgres
async def test_an_async_isolation_runs_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with isolated(app, database_url=pg_url) as clock:
        job = (await app.enqueue("email", {"to": "ada@example.com"})).job
        assert job.created_at == clock.now()
        assert await drain(app) == 1
    assert app.database_url.startswith("sqlite:")


async def test_a_closed_app_opens_afresh() -> None:
    app = App("memory://")
    await app.enqueue("k")
    await app.close()
    assert (await app.jobs.list()).jobs == []
    await app.close()


async def test_drain_sync_is_refused_inside_a_running_loop(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="await drain"):
        drain_sync(make_app(tmp_path))


def test_drain_sync_is_refused_on_postgresql() -> None:
    with pytest.raises(InvalidInput, match="memory:// and SQLite"):
        drain_sync(App("postgresql://127.0.0.1/rota"))


async def test_run_job_reports_each_outcome_without_touching_the_app_store(
    tmp_path: Path,
) -> None:
    app = make_app(tmp_path)
    async with isolated(app):
        waiting = (await app.enqueue("email", {"to": "ada@example.com"})).job

        ok = await run_job(app, "email", {"to": "ada@example.com"})
        bad = await run_job(app, "email", {"to": "nobody"})
        failed = await run_job(app, "flaky", max_attempts=2)
        snoozed = await run_job(app, "later")

        assert (ok.state, ok.attempt) == (JobState.SUCCEEDED, 1)
        assert (bad.state, bad.last_error) == (JobState.DEAD, "Permanent: not an email address")
        assert (failed.state, failed.attempt, failed.max_attempts) == (JobState.PENDING, 1, 2)
        assert failed.last_error == "RuntimeError: upstream returned 503"
        assert (snoozed.state, snoozed.attempt) == (JobState.PENDING, 0)
        assert (await app.jobs.get(waiting.id)).state is JobState.PENDING
        assert [job.id for job in (await app.jobs.list()).jobs] == [waiting.id]


async def test_run_job_validates_like_enqueue(tmp_path: Path) -> None:
    with pytest.raises(rota.InvalidJob):
        await run_job(make_app(tmp_path), "email", {"bad": float("nan")})
    with pytest.raises(rota.InvalidJob, match="unknown kind 'no-such-kind'"):
        await run_job(make_app(tmp_path), "no-such-kind")


def test_a_sync_drain_runs_jobs_enqueued_from_sync_code(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    with isolated(app) as clock:
        app.enqueue_sync("email", {"to": "ada@example.com"})
        app.enqueue_sync("email", {"to": "bob@example.com"}, delay=10)
        assert drain_sync(app) == 1
        clock.advance(10)
        assert drain_sync(app) == 1
        states = asyncio.run(app.jobs.list()).jobs
        assert [job.state for job in states] == [JobState.SUCCEEDED, JobState.SUCCEEDED]
