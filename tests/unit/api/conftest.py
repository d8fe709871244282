"""Fixtures for the API tests: an app over a MemoryStore on a FakeClock, and an ASGI client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from rota.api import ApiSettings, create_app
from rota.client import Client
from rota.domain.job import Job, JobSpec
from rota.domain.job_state import JobState
from rota.observability.metrics import Metrics
from rota.store.memory import MemoryStore
from rota.testing import FakeClock

BASE_URL = "http://127.0.0.1"
TOKEN = "test-token-0123456789"

MakeApp = Callable[..., FastAPI]


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock=clock)


@pytest.fixture
def make_app(store: MemoryStore) -> MakeApp:
    def build(settings: ApiSettings | None = None, **options: Any) -> FastAPI:
        return create_app(Client(store), settings=settings or ApiSettings(), **options)

    return build


@pytest.fixture
def app(make_app: MakeApp) -> FastAPI:
    return make_app()


def asgi_client(app: FastAPI, **options: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL, **options)


@pytest.fixture
async def api(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(app) as client:
        yield client


async def total_jobs(store: MemoryStore) -> int:
    counts = await store.counts()
    return sum(counts.by_state.values())


async def dead_job(store: MemoryStore, kind: str = "email", **spec: Any) -> Job:
    """A job that failed permanently on its first attempt (top priority, so it is the one the
    claim takes whatever else is pending)."""
    spec.setdefault("priority", 100)
    [result] = await store.enqueue([JobSpec(kind=kind, **spec)])
    [claimed] = await store.claim(
        "w1", queues=[result.job.queue], limit=1, lease=timedelta(seconds=30)
    )
    state = await store.fail(
        claimed.lease,
        error="boom",
        traceback="Traceback (most recent call last):\n  ...\nValueError: boom",
        retry_in=timedelta(0),
        permanent=True,
    )
    assert state is JobState.DEAD and claimed.id == result.job.id
    return await store.get(claimed.id)


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()
