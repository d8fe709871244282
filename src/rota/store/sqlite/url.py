"""What a ``sqlite:///path.db`` URL means: the database file and the connection options.

``sqlite:///rota.db`` is relative to the working directory (resolved once, when parsed, so a
later ``chdir`` cannot move the database); ``sqlite:////var/lib/rota.db`` is absolute. Options:

- ``busy_timeout_ms`` (default 10000): how long a statement waits for another connection's
  write lock before SQLite reports it busy (and rota retries).
- ``synchronous`` ``normal`` (default) or ``full``: ``normal`` is safe against a crashed process
  in WAL mode; ``full`` also keeps the last commits through a power loss, at a cost per commit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from rota.domain.errors import InvalidInput

DEFAULT_BUSY_TIMEOUT_MS = 10_000
MAX_BUSY_TIMEOUT_MS = 600_000
SYNCHRONOUS_MODES = ("normal", "full")
_PREFIX = "sqlite:///"


@dataclass(frozen=True, slots=True)
class SqliteOptions:
    """Where the database file is and how each connection to it is set up."""

    path: str
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS
    synchronous: str = "normal"

    def __post_init__(self) -> None:
        if not self.path or self.path == ":memory:" or self.path.startswith("file:"):
            raise InvalidInput(_memory_hint(self.path))
        if not 0 <= self.busy_timeout_ms <= MAX_BUSY_TIMEOUT_MS:
            raise InvalidInput(f"busy_timeout_ms must be between 0 and {MAX_BUSY_TIMEOUT_MS}")
        if self.synchronous not in SYNCHRONOUS_MODES:
            raise InvalidInput("synchronous must be 'normal' or 'full'")
        object.__setattr__(self, "path", os.path.abspath(self.path))


def parse_url(url: str) -> SqliteOptions:
    """The options a ``sqlite:///`` URL names; InvalidInput (naming the problem) otherwise."""
    if not isinstance(url, str) or not url[: len(_PREFIX)].lower() == _PREFIX:
        raise InvalidInput(
            "a SQLite URL looks like sqlite:///relative/path.db or sqlite:////absolute/path.db"
        )
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise InvalidInput(f"invalid SQLite URL: {exc}") from None
    if parts.fragment:
        raise InvalidInput("a SQLite URL takes no #fragment")
    # urlsplit keeps the slash that separates the (empty) host from the path: strip only that
    # one, so sqlite:////abs.db keeps its leading slash and sqlite:///rel.db has none.
    path = parts.path[1:]
    if not path or path.endswith("/"):
        raise InvalidInput("a SQLite URL needs a file name: sqlite:///path/to/rota.db")
    if "\x00" in path:
        raise InvalidInput("a SQLite path must not contain NUL characters")
    options: dict[str, str] = {}
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise InvalidInput(f"invalid SQLite URL options: {parts.query!r}") from None
    for key, value in pairs:
        if key not in ("busy_timeout_ms", "synchronous"):
            raise InvalidInput(
                f"unknown SQLite URL option {key!r}: the options are busy_timeout_ms and synchronous"
            )
        if key in options:
            raise InvalidInput(f"SQLite URL option {key!r} is given twice")
        options[key] = value
    busy_timeout_ms = DEFAULT_BUSY_TIMEOUT_MS
    if "busy_timeout_ms" in options:
        text = options["busy_timeout_ms"]
        if not text.isascii() or not text.isdigit() or len(text) > 9:
            raise InvalidInput("busy_timeout_ms must be a whole number of milliseconds")
        busy_timeout_ms = int(text)
    synchronous = options.get("synchronous", "normal").lower()
    return SqliteOptions(path=path, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous)


def _memory_hint(path: str) -> str:
    if path == ":memory:":
        return (
            "sqlite:///:memory: is not supported: each connection would see its own empty "
            "database; use memory:// for an in-process store"
        )
    if path.startswith("file:"):
        return "SQLite URI filenames (file:...) are not supported: give a plain file path"
    return "a SQLite URL needs a file name: sqlite:///path/to/rota.db"
