"""Durable jobs in the HTTP API and the CLI: a job's steps and what it sleeps until or waits
for in its detail, and signals sent with POST /api/signals and `rota signal`."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from rota.domain.job import JobSpec
from rota.store.memory import MemoryStore
from rota.store.sqlite import SqliteStore
from rota.testing import FakeClock
from tests.support.cli import rota

LEASE = timedelta(seconds=30)


async def _claimed(store: MemoryStore) -> int:
    await store.enqueue([JobSpec(kind="order")])
    [job] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
    await store.checkpoint(job.lease, "charge", result='{"charge": "ch_1"}', duration=LEASE / 30)
    await store.fail_step(job.lease, "email", error="ConnectionError: smtp down")
    return job.id


async def test_a_job_s_detail_lists_its_steps_and_what_it_waits_for(
    api: httpx.AsyncClient, store: MemoryStore, clock: FakeClock
) -> None:
    job_id = await _claimed(store)
    [job] = await store.get_many([job_id])
    await store.wait_for(job.lease, "wait-1", "payment:order-42", timeout=timedelta(days=2))
    detail = (await api.get(f"/api/jobs/{job_id}")).json()
    assert [(s["name"], s["kind"], s["state"], s["attempts"]) for s in detail["steps"]] == [
        ("charge", "step", "succeeded", 1),
        ("email", "step", "failed", 1),
        ("wait-1", "wait", "waiting", 0),
    ]
    charge, email, wait = detail["steps"]
    assert (charge["result_preview"], charge["duration_seconds"]) == ('{"charge":"ch_1"}', 1.0)
    assert email["error"] == "ConnectionError: smtp down"
    assert wait["key"] == "payment:order-42"
    deadline = (clock.now() + timedelta(days=2)).isoformat().replace("+00:00", "Z")
    assert detail["suspended"] == {
        "kind": "wait",
        "step": "wait-1",
        "until": deadline,
        "key": "payment:order-42",
    }
    assert detail["state"] == "pending"


async def test_a_plain_job_s_detail_has_no_steps(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    [result] = await store.enqueue([JobSpec(kind="plain")])
    detail = (await api.get(f"/api/jobs/{result.job.id}")).json()
    assert (detail["steps"], detail["suspended"]) == ([], None)


async def test_post_signal_delivers_to_the_waiting_job_or_keeps_it(
    api: httpx.AsyncClient, store: MemoryStore, clock: FakeClock
) -> None:
    kept = await api.post("/api/signals", json={"key": "paid:1", "data": {"ok": True}})
    assert kept.status_code == 200
    assert kept.json() == {
        "key": "paid:1",
        "delivered_to": None,
        "expires_at": (clock.now() + timedelta(days=1)).isoformat().replace("+00:00", "Z"),
    }
    await store.enqueue([JobSpec(kind="order")])
    [job] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
    await store.wait_for(job.lease, "wait-1", "paid:2", timeout=timedelta(hours=1))
    delivered = await api.post(
        "/api/signals", json={"key": "paid:2", "data": 7, "expire_after_seconds": 60}
    )
    assert delivered.json()["delivered_to"] == job.id
    [wait] = await store.steps(job.id)
    assert (wait.state.value, wait.result) == ("received", 7)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"key": "has space"}, "signal key"),
        ({"key": ""}, "key"),
        ({"key": "k", "data": "\u0000"}, "signal data: must not contain NUL"),
        ({"key": "k", "expire_after_seconds": 0}, "expire_after"),
        ({"key": "k", "extra": 1}, "extra"),
        ({"data": 1}, "key"),
    ],
)
async def test_a_bad_signal_is_a_400_and_sends_nothing(
    api: httpx.AsyncClient, store: MemoryStore, body: dict[str, object], error: str
) -> None:
    response = await api.post("/api/signals", json=body)
    assert response.status_code == 400, response.text
    assert error in response.json()["error"]
    assert store._durable.signals == []


async def test_rota_signal_and_jobs_show_from_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "rota.db"
    url = f"sqlite:///{path}"
    store = SqliteStore(path)
    await store.migrate()
    [result] = await store.enqueue([JobSpec(kind="order")])
    [job] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
    await store.checkpoint(job.lease, "charge", result='"ch_1"')
    await store.sleep(job.lease, "cool-off", delay=timedelta(hours=1))
    await store.close()

    sent = rota("signal", "shipped:o-7", "--data", '"1Z123"', url=url)
    assert sent.code == 0, sent.err
    assert sent.out.startswith("no job waits for shipped:o-7: kept until ")
    as_json = rota("signal", "k", "--json", "--expire-after", "2h", url=url)
    assert json.loads(as_json.out)["delivered_to"] is None
    bad = rota("signal", "bad key", url=url)
    assert bad.code == 2 and "signal key" in bad.err
    assert rota("signal", "k", "--data", "{not json", url=url).code == 2

    shown = rota("jobs", "show", str(result.job.id), url=url)
    assert "suspended: sleeping until " in shown.out
    assert "step 1 charge: step succeeded, 1 attempt" in shown.out
    assert "step 2 cool-off: sleep sleeping" in shown.out
    detail = json.loads(rota("jobs", "show", str(result.job.id), "--json", url=url).out)
    assert [step["name"] for step in detail["steps"]] == ["charge", "cool-off"]
    assert detail["suspended"]["kind"] == "sleep"
