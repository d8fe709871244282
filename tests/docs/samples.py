"""Reading the code samples out of the documentation, and the rules for running them.

A page's fenced blocks are its samples, in order:

- ``python``: executed, all blocks of a page in one namespace, in a fresh directory that is
  the working directory; top-level ``await`` is allowed (the blocks run on one event loop
  kept for the page, which is not running between blocks, so sync code may start its own).
- any block with ``title="path"`` (a relative path): written to that file in the page's
  directory instead, for later commands and imports to use (``title="/etc/..."``: only
  checked as below).
- ``console``: every ``$ `` line is a command run by the shell in the page's directory, which
  must exit 0; ``rota serve`` and ``rota worker`` run until stopped, so they are started,
  awaited until ready, stopped with SIGTERM and must exit 0; ``make`` lines are repository
  targets, checked with ``make -n``.
- ``ini``, ``yaml``, ``toml``: parsed; every ``rota`` command line in them must parse with the
  real CLI (flags and values valid).
- ``text``, ``json`` and fences with no language show output or diagrams and are not run;
  but a line of a plain (or ``sh``) fence that starts with ``rota `` must parse with the CLI.

A page containing ``<!-- samples: postgres -->`` runs against a fresh PostgreSQL database
whose URL is in ``ROTA_DATABASE_URL`` (the samples read it from there).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,})(?P<info>[^`]*)$")
TITLE = re.compile(r'title="(?P<title>[^"]+)"')
POSTGRES = "<!-- samples: postgres -->"


@dataclass(frozen=True)
class Sample:
    page: str
    line: int
    language: str
    title: str | None
    code: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """Every page with samples: the README and the site's Markdown."""
    docs = sorted(path for path in (ROOT / "docs").rglob("*.md") if "hooks" not in path.parts)
    return [ROOT / "README.md", *docs]


def samples(path: Path) -> list[Sample]:
    page = str(path.relative_to(ROOT))
    found: list[Sample] = []
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        indent, ticks, info = match["indent"], match["ticks"], match["info"].strip()
        start = index + 1
        index = start
        while index < len(lines) and lines[index].strip() != ticks:
            index += 1
        body = [
            line[len(indent) :] if line.startswith(indent) else line for line in lines[start:index]
        ]
        index += 1
        language = info.split(" ", 1)[0].split("{", 1)[0].strip().lower()
        title = TITLE.search(info)
        found.append(
            Sample(
                page=page,
                line=start,
                language=language,
                title=title["title"] if title else None,
                code="\n".join(body) + "\n",
            )
        )
    return found


def uses_postgres(path: Path) -> bool:
    return POSTGRES in path.read_text()
