"""Every `rota enqueue` the docs show names its app, and the demo has an app to name: without
`--app` (or ROTA_APP), a job gets rota's defaults, not what the page registered."""

from __future__ import annotations

import re
from pathlib import Path

from rota.config import load_app
from tests.docs.samples import ROOT, pages
from tests.support.cli import invoke, sqlite_url

#: A fenced code block of a Markdown page: its opening line and its text.
_BLOCK = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_ENQUEUE = re.compile(r"(?:^|[\s/$])rota enqueue\b")


def enqueues_without_an_app(page: Path) -> list[str]:
    """The `rota enqueue` lines of the page's code blocks that name no app (a block that
    exports ROTA_APP before them names it for all)."""
    found = []
    for block in _BLOCK.findall(page.read_text()):
        named = False
        for line in block.splitlines():
            if "ROTA_APP=" in line:
                named = True
            if _ENQUEUE.search(line) and not named and "--app" not in line:
                found.append(line.strip())
    return found


def test_every_enqueue_in_the_docs_names_its_app() -> None:
    bare = {
        str(page.relative_to(ROOT)): lines
        for page in pages()
        if (lines := enqueues_without_an_app(page))
    }
    assert bare == {}


def test_the_demo_app_is_importable_and_its_registrations_apply(tmp_path: Path) -> None:
    demo = load_app("rota.demo:app")
    assert {"email", "flaky", "slow", "crash", "report"} <= set(demo.registry.kinds())
    url = sqlite_url(tmp_path / "rota.db")
    ran = invoke("enqueue", "flaky", "--app", "rota.demo:app", env={"ROTA_DATABASE_URL": url})
    assert ran.code == 0, ran.err
    job_id = ran.out.split()[1]
    shown = invoke("jobs", "show", job_id, "--json", env={"ROTA_DATABASE_URL": url})
    assert '"max_attempts": 4' in shown.out, "flaky's registration, not the default 3"
