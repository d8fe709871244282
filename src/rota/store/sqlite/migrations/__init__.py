"""The SQLite schema as versioned migrations: ``NNN_name.sql`` files in this package.

A database records each applied version in ``rota_migrations``. ``apply_pending`` runs inside
the caller's ``BEGIN IMMEDIATE`` transaction: SQLite's DDL is transactional, so a migration is
applied whole or not at all, and two processes migrating at once simply take turns (the second
finds nothing left to do).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from functools import cache
from importlib import resources


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema change: its version number, its name (``001_initial``) and its SQL."""

    version: int
    name: str
    sql: str

    def statements(self) -> list[str]:
        """The SQL split into statements; a trigger body's inner ``;`` does not end one."""
        found: list[str] = []
        pending = ""
        for piece in self.sql.split(";"):
            pending += piece + ";"
            if sqlite3.complete_statement(pending):
                if _has_code(pending):
                    found.append(pending.strip())
                pending = ""
        if _has_code(pending.rstrip(";")):
            raise ValueError(f"migration {self.name} ends inside a statement")
        return found


def _has_code(sql: str) -> bool:
    lines = (line.split("--", 1)[0].strip() for line in sql.splitlines())
    return any(line and line != ";" for line in lines)


@cache
def known() -> tuple[Migration, ...]:
    """Every migration shipped with this version of rota, oldest first."""
    found: list[Migration] = []
    for entry in resources.files(__name__).iterdir():
        name = entry.name
        if not name.endswith(".sql"):
            continue
        stem = name.removesuffix(".sql")
        number, _, _ = stem.partition("_")
        found.append(Migration(version=int(number), name=stem, sql=entry.read_text("utf-8")))
    found.sort(key=lambda migration: migration.version)
    versions = [migration.version for migration in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError("two SQLite migrations share a version number")
    return tuple(found)


_CREATE_LEDGER = """
CREATE TABLE IF NOT EXISTS rota_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL  -- microseconds since the Unix epoch, UTC
)
"""


def applied_versions(conn: sqlite3.Connection) -> set[int]:
    """The versions this database has applied (none before its first migration)."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'rota_migrations'"
    ).fetchone()
    if exists is None:
        return set()
    return {version for (version,) in conn.execute("SELECT version FROM rota_migrations")}


def pending(conn: sqlite3.Connection) -> list[str]:
    """Names of the known migrations the database has not applied, oldest first."""
    done = applied_versions(conn)
    return [migration.name for migration in known() if migration.version not in done]


def apply_pending(conn: sqlite3.Connection, applied_at_us: int) -> list[str]:
    """Apply every pending migration in the caller's write transaction; return their names."""
    conn.execute(_CREATE_LEDGER)
    done = applied_versions(conn)
    names: list[str] = []
    for migration in known():
        if migration.version in done:
            continue
        for statement in migration.statements():
            conn.execute(statement)
        conn.execute(
            "INSERT INTO rota_migrations (version, name, applied_at) VALUES (?, ?, ?)",
            (migration.version, migration.name, applied_at_us),
        )
        names.append(migration.name)
    return names
