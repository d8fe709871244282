"""`rota enqueue --after`, `rota workflows show | cancel`: workflows from the command line."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import invoke, migrated, rota, sqlite_url


def _enqueue(url: str, *args: str) -> dict[str, object]:
    ran = invoke("enqueue", *args, "--json", env={"ROTA_DATABASE_URL": url})
    assert ran.code == 0, ran.err
    body: dict[str, object] = json.loads(ran.out)
    return body


def test_enqueue_after_makes_a_waiting_job_that_workflows_show_lists(tmp_path: Path) -> None:
    url = sqlite_url(migrated(tmp_path / "wf.db"))
    first = _enqueue(url, "fetch")
    second = _enqueue(url, "fetch")
    child = _enqueue(
        url, "report", "--after", str(first["id"]), "--after", str(second["id"]),
        "--on-parent-failure", "run",
    )  # fmt: skip
    assert (child["state"], child["waiting_on"], child["workflow"]) == ("waiting", 2, first["id"])

    shown = invoke("workflows", "show", str(first["id"]), env={"ROTA_DATABASE_URL": url})
    assert shown.code == 0, shown.err
    [row] = [line for line in shown.out.splitlines() if line.split()[:1] == [str(child["id"])]]
    assert row.split()[1:4] == ["report", "waiting", "2"]
    assert f"{first['id']} (run), {second['id']} (run)" in row

    listed = invoke("workflows", "show", str(first["id"]), "--json", env={"ROTA_DATABASE_URL": url})
    body = json.loads(listed.out)
    assert [job["state"] for job in body["jobs"]] == ["pending", "pending", "waiting"]
    assert body["edges"] == [
        {"parent": first["id"], "child": child["id"], "on_parent_failure": "run"},
        {"parent": second["id"], "child": child["id"], "on_parent_failure": "run"},
    ]
    waiting = invoke("jobs", "list", "--state", "waiting", "--json", env={"ROTA_DATABASE_URL": url})
    assert [job["id"] for job in json.loads(waiting.out)["jobs"]] == [child["id"]]


def test_workflows_cancel_cancels_what_has_not_finished(tmp_path: Path) -> None:
    url = sqlite_url(migrated(tmp_path / "wf.db"))
    parent = _enqueue(url, "fetch")
    child = _enqueue(url, "report", "--after", str(parent["id"]))
    ran = invoke("workflows", "cancel", str(parent["id"]), env={"ROTA_DATABASE_URL": url})
    assert (ran.code, ran.out.strip()) == (0, f"workflow {parent['id']}: 2 jobs cancelled")
    shown = invoke("jobs", "show", str(child["id"]), "--json", env={"ROTA_DATABASE_URL": url})
    assert json.loads(shown.out)["state"] == "cancelled"


def test_an_unknown_parent_or_workflow_is_one_line_and_exit_2(tmp_path: Path) -> None:
    url = sqlite_url(migrated(tmp_path / "wf.db"))
    ran = rota("enqueue", "report", "--after", "41", url=url)
    assert (ran.code, ran.err_lines) == (2, ["error: depends_on: unknown parent job 41"])
    assert (
        rota("jobs", "list", "--json", url=url).out.strip() == '{"jobs": [], "next_cursor": null}'
    )
    missing = rota("workflows", "show", "41", url=url)
    assert (missing.code, missing.err_lines) == (2, ["error: workflow 41 not found"])
    lonely = rota("enqueue", "report", "--on-parent-failure", "run", url=url)
    assert (lonely.code, lonely.err_lines) == (2, ["error: --on-parent-failure needs --after"])
