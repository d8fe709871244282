"""`cli:<os user>` in the audit log is a claim, not an authentication: the CLI talks to the
database directly and records whatever login name its environment gives (issue 43, point 5)."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

from tests.support.cli import invoke, migrated, sqlite_url


def test_the_cli_records_the_login_name_its_environment_claims(tmp_path: Path) -> None:
    db = migrated(tmp_path / "claim.db")
    real = pwd.getpwuid(os.getuid()).pw_name
    claimed = "someone-else" if real != "someone-else" else "another-one"
    env = {"ROTA_DATABASE_URL": sqlite_url(db), "LOGNAME": claimed, "USER": claimed}
    assert invoke("queues", "pause", "emails", env=env).code == 0
    listed = invoke("audit", "--json", env=env)
    [entry] = json.loads(listed.out)["entries"]
    assert entry["identity"] == f"cli:{claimed}" != f"cli:{real}"
