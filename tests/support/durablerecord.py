"""The external record of the durable jobs' tests: one row per execution of a step (job, step,
token, pid), written by ``tests.support.durableapp``'s workers on connections of their own,
outside rota's tables; and the table ``ctx.transaction()`` writes in rota's own database."""

from __future__ import annotations

import sqlite3

RECORD_ENV = "ROTA_DURABLE_RECORD"

PG_RECORD_SCHEMA = """
CREATE TABLE IF NOT EXISTS durable_record (
    seq bigserial PRIMARY KEY, job bigint NOT NULL, step text NOT NULL,
    token bigint NOT NULL, pid integer NOT NULL);
"""
SQLITE_RECORD_SCHEMA = """
CREATE TABLE IF NOT EXISTS durable_record (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, job INTEGER NOT NULL, step TEXT NOT NULL,
    token INTEGER NOT NULL, pid INTEGER NOT NULL);
"""
#: In rota's own database: what ctx.transaction() writes.
TX_SCHEMA = "CREATE TABLE IF NOT EXISTS durable_tx (job bigint NOT NULL, token bigint NOT NULL)"


def create_record(target: str) -> None:
    """Make the external record's table (the test calls it before starting workers)."""
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute(PG_RECORD_SCHEMA)
        return
    conn = sqlite3.connect(target)
    try:
        conn.executescript("PRAGMA journal_mode=WAL;" + SQLITE_RECORD_SCHEMA)
    finally:
        conn.close()


def read_record(target: str) -> list[tuple[int, str, int, int]]:
    """(job, step, token, pid) of every step execution recorded, in order."""
    sql = "SELECT job, step, token, pid FROM durable_record ORDER BY seq"
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            return [tuple(row) for row in conn.execute(sql).fetchall()]  # type: ignore[misc]
    conn = sqlite3.connect(target, timeout=30)
    try:
        return [tuple(row) for row in conn.execute(sql).fetchall()]
    finally:
        conn.close()


def create_tx_table(database_url: str) -> None:
    """ctx.transaction()'s table, in rota's own database (a store URL)."""
    if database_url.startswith("sqlite"):
        conn = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        try:
            conn.execute(TX_SCHEMA)
            conn.commit()
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as pg:
        pg.execute(TX_SCHEMA)


def read_tx(database_url: str) -> list[tuple[int, int]]:
    """(job, token) of every row ctx.transaction() committed, ordered."""
    sql = "SELECT job, token FROM durable_tx ORDER BY job, token"
    if database_url.startswith("sqlite"):
        conn = sqlite3.connect(database_url.removeprefix("sqlite:///"), timeout=30)
        try:
            return [tuple(row) for row in conn.execute(sql).fetchall()]
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as pg:
        return [tuple(row) for row in pg.execute(sql).fetchall()]  # type: ignore[misc]
