"""`import rota`, `import rota.cli` and `rota --help` load no web stack, metrics or terminal
library: the commands that need them import them (a worker's first claim waits on none)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("fastapi", "starlette", "uvicorn", "prometheus_client", "rich")

REPORT = f"""
import sys
import json
print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)), file=sys.stderr)
"""


def loaded_after(code: str) -> list[str]:
    """The heavy packages in sys.modules once ``code`` ran in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", code + REPORT],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    loaded: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return loaded


def test_importing_rota_and_its_cli_loads_no_heavy_package() -> None:
    assert loaded_after("import rota, rota.cli") == []


@pytest.mark.parametrize("args", [["--help"], ["worker", "--help"], ["jobs", "--help"]])
def test_rota_help_loads_no_heavy_package(args: list[str]) -> None:
    code = (
        "import sys\nfrom rota.cli import main\n"
        f"sys.argv = ['rota', *{args!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
    )
    assert loaded_after(code) == []


def test_a_command_that_prints_a_table_still_gets_rich() -> None:
    code = "from rota.cli.terminal import table\ntable(['a'], [['x']])\n"
    assert loaded_after(code) == ["rich"]
