"""T40: no code from data. Kinds that name importable callables (``os.system``,
``builtins.eval``, ``__import__``, ``a.b:c``) and a pickled body are refused at the API or
end dead with "no handler" in a real worker process, whose ``sys.modules`` is unchanged."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import httpx
import pytest

from rota.api import ApiSettings, create_app
from rota.client import Client
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import Store
from tests.support.chaosfleet import ChaosFleet
from tests.support.processes import eventually

pytestmark = [pytest.mark.slow]

HOSTILE_KINDS = ["os.system", "builtins.eval", "__import__", "a.b:c", "subprocess.Popen"]


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'rota.db'}"


async def probe(fleet: ChaosFleet, store: Store, name: str) -> set[str]:
    await store.enqueue([JobSpec(kind="probe", payload={"name": name})])
    path = fleet.probes / f"{name}.json"
    await eventually(path.exists, what=f"probe {name}")
    return set(json.loads(path.read_text()))


async def test_kinds_naming_callables_never_import_or_run_anything(
    fleet: ChaosFleet, store: Store
) -> None:
    # A kind no worker runs is never claimed; the rescuer ends it (here with no grace, on
    # every pass) without looking it up anywhere.
    await fleet.start_ready("w", env={"ROTA_UNRUNNABLE_GRACE": "0s"})
    # Warm the dead-job path once, so what it imports lazily is not mistaken for the kinds'.
    [warm] = await store.enqueue([JobSpec(kind="no.such.kind", max_attempts=1)])
    await eventually(lambda: _dead(store, warm.job.id), what="the warm-up job to die")
    before = await probe(fleet, store, "before")

    app = create_app(Client(store), settings=ApiSettings())
    accepted: list[int] = []
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
    ) as api:
        for kind in HOSTILE_KINDS:
            response = await api.post("/api/jobs", json={"kind": kind, "payload": "id > /tmp/x"})
            assert response.status_code in (201, 400), (kind, response.text)
            if response.status_code == 201:
                accepted.append(response.json()["id"])
        pickled = pickle.dumps({"kind": "os.system", "payload": "id"})
        for content_type in ("application/octet-stream", "application/json"):
            response = await api.post(
                "/api/jobs", content=pickled, headers={"content-type": content_type}
            )
            assert 400 <= response.status_code < 500, (content_type, response.status_code)
    assert accepted, "every hostile kind was refused: nothing reached a worker"
    for job_id in accepted:
        job = await eventually(lambda j=job_id: _dead(store, j), what=f"job {job_id} dead")
        assert job.last_error is not None and "no live worker runs" in job.last_error, (
            job.last_error
        )
        assert job.attempt == 0, "never claimed, never handed to a handler lookup"
    after = await probe(fleet, store, "after")
    assert after == before, f"modules imported: {sorted(after - before)}"


async def _dead(store: Store, job_id: int) -> object:
    job = await store.get(job_id)
    return job if job.state is JobState.DEAD else None
