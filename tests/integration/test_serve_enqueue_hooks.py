"""`rota serve --app` enqueues POST /api/jobs through the App's enqueue hooks (issue 43,
point 6): the before hook changes the job or refuses it (400, nothing written)."""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path

import pytest

from tests.support.serve import serving

pytestmark = pytest.mark.slow

MODULE = """
import dataclasses

import rota

app = rota.App({url!r})


@app.job("email")
def email(ctx, payload):
    return None


@app.before_enqueue
def tag(spec):
    if spec.payload.get("forbidden"):
        raise rota.InvalidInput("forbidden payloads are refused")
    return dataclasses.replace(spec, payload={{**spec.payload, "tagged": True}}, queue="tagged")
"""


def test_rota_serve_enqueues_through_the_apps_hooks(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hooked.db'}"
    (tmp_path / "hooked_serve.py").write_text(MODULE.format(url=url))
    with serving(tmp_path, "--app", "hooked_serve:app", "--workers", "0") as served:
        job = served.post("/api/jobs", {"kind": "email", "payload": {"to": "a"}})
        assert (job["queue"], job["payload"]) == ("tagged", {"to": "a", "tagged": True})
        with pytest.raises(urllib.error.HTTPError) as refused:
            served.post("/api/jobs", {"kind": "email", "payload": {"forbidden": True}})
        assert refused.value.code == 400
        assert json.loads(refused.value.read()) == {"error": "forbidden payloads are refused"}
        assert [j["id"] for j in served.get("/api/jobs")["jobs"]] == [job["id"]]
        assert served.stop() == 0
