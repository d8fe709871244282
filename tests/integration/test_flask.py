"""The Flask pattern: a view enqueues with ``enqueue_sync`` (no event loop of its own), a worker
elsewhere runs the job; on PostgreSQL a view can enqueue inside its own transaction."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask, request

from rota import App, JobContext, JobState
from rota.store import JobFilter


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'rota.db'}"
    return str(request.getfixturevalue("pg_url"))


def jobs_app(database_url: str, sent: list[str]) -> App:
    jobs = App(database_url)

    @jobs.job("welcome", max_attempts=5)
    async def welcome(ctx: JobContext, payload: Any) -> None:
        sent.append(payload["to"])

    return jobs


def web_app(jobs: App, database_url: str) -> Flask:
    web = Flask(__name__)

    @web.post("/signup")
    def signup() -> tuple[dict[str, Any], int]:
        email = request.form["email"]
        result = jobs.enqueue_sync("welcome", {"to": email}, unique_key=f"welcome:{email}")
        return {"job": result.job.id, "duplicate": result.duplicate}, 202

    @web.post("/signup-in-transaction")
    def signup_in_transaction() -> tuple[dict[str, Any], int]:
        # The application's own write and the job commit together, or neither does.
        email = request.form["email"]
        with psycopg.connect(database_url) as conn:
            conn.execute("INSERT INTO signups (email) VALUES (%s)", (email,))
            result = jobs.enqueue_sync("welcome", {"to": email}, connection=conn)
            if email.endswith("@invalid"):
                conn.rollback()
                return {"error": "refused"}, 400
        return {"job": result.job.id}, 202

    return web


async def test_a_view_enqueues_with_enqueue_sync_and_a_worker_runs_the_job(
    database_url: str,
) -> None:
    sent: list[str] = []
    web_jobs = jobs_app(database_url, [])  # the web process's App: it only enqueues
    client = web_app(web_jobs, database_url).test_client()
    try:
        # A WSGI server runs views on threads with no event loop: so does this test.
        first = await asyncio.to_thread(client.post, "/signup", data={"email": "ada@example.com"})
        again = await asyncio.to_thread(client.post, "/signup", data={"email": "ada@example.com"})
        assert first.status_code == 202
        assert again.get_json() == {"job": first.get_json()["job"], "duplicate": True}
    finally:
        await web_jobs.close()

    async with jobs_app(database_url, sent) as worker_jobs:  # a worker process's App
        assert await worker_jobs.worker(name="flask-test").run_until_idle() == 1
        job = await worker_jobs.jobs.get(first.get_json()["job"])
    assert job.state is JobState.SUCCEEDED
    assert sent == ["ada@example.com"]


@pytest.mark.postgres
async def test_a_view_enqueues_inside_its_own_transaction(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE signups (email text PRIMARY KEY)")
    web_jobs = jobs_app(pg_url, [])
    client = web_app(web_jobs, pg_url).test_client()
    kept = await asyncio.to_thread(
        client.post, "/signup-in-transaction", data={"email": "ada@example.com"}
    )
    refused = await asyncio.to_thread(
        client.post, "/signup-in-transaction", data={"email": "eve@invalid"}
    )
    await web_jobs.close()
    assert kept.status_code == 202 and refused.status_code == 400

    async with jobs_app(pg_url, []) as worker_jobs:
        page = await worker_jobs.jobs.list(JobFilter(kind="welcome"))
    assert [job.payload for job in page.jobs] == [{"to": "ada@example.com"}]
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT email FROM signups").fetchall()
    assert rows == [("ada@example.com",)]
