"""What went wrong talking to PostgreSQL, said in one line: a connection that could not be made
(refused, unknown database or role, failed authentication, SSL, a bad setting), and a schema
that is missing or older than this code.

libpq reports a failed connection as text only (no SQLSTATE), so the cause is read from its
message. Messages in another language are passed on as they are and treated as worth retrying.
"""

from __future__ import annotations

import re

import psycopg
from psycopg.conninfo import conninfo_to_dict

from rota.domain.errors import ConnectionFailed, MigrationsPending

#: Errors a statement of ours raises when the schema lacks what it names: a table, a column or
#: a function that a migration creates.
SCHEMA_ERRORS = (
    psycopg.errors.UndefinedTable,
    psycopg.errors.UndefinedColumn,
    psycopg.errors.UndefinedFunction,
)

#: Failures that waiting cannot heal, by a fragment of libpq's or the server's message.
_PERMANENT = re.compile(
    r'database ".*" does not exist|role ".*" does not exist|authentication failed'
    r"|no pg_hba\.conf entry|pg_hba\.conf rejects|no password supplied"
    r"|permission denied for database|is not currently accepting connections"
    r"|invalid .*(value|option)|invalid (uri|connection string)|missing \"=\"|bad value for"
    r"|no such (database|user)"  # PgBouncer's answers for names it does not serve
    r"|ssl(?! syscall)|certificate",
    re.IGNORECASE,
)
_SSL = re.compile(r"ssl|certificate", re.IGNORECASE)


def address_of(conninfo: str) -> str:
    """``host:port`` of a connection string, for messages (never its password)."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "an unreadable address"
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    port = str(params.get("port") or "5432")
    return f"{host}:{port}"


def connection_failed(error: BaseException, conninfo: str) -> ConnectionFailed:
    """The ConnectionFailed that says in one line why ``error`` (from a connection attempt
    to ``conninfo``) happened, without the password."""
    address = _address(error, conninfo)
    cause = _cause(str(error))
    permanent = bool(_PERMANENT.search(cause))
    lowered = cause.lower()
    if "connection refused" in lowered:
        message = f"connection refused at {address}: is PostgreSQL running there?"
    elif "no such file or directory" in lowered and "socket" in str(error):
        message = f"no PostgreSQL socket at {address}: is the server running there?"
    elif "resolve host" in lowered or "translate host name" in lowered:
        message = f"cannot resolve the host of {address}: {cause}"
    elif "timeout expired" in lowered:
        message = f"no answer from PostgreSQL at {address} (connection timeout expired)"
    elif permanent and lowered.startswith(("invalid", "bad value", "missing")):
        message = f"bad connection setting: {cause}"
    elif permanent and _SSL.search(cause):
        message = f"SSL error with PostgreSQL at {address}: {cause}"
    else:
        message = f"{cause} (PostgreSQL at {address})"
    return ConnectionFailed(
        _without_password(message, conninfo), address=address, permanent=permanent
    )


def again(failure: ConnectionFailed) -> ConnectionFailed:
    """A fresh copy of ``failure``, to raise once more without growing its traceback."""
    return ConnectionFailed(str(failure), address=failure.address, permanent=failure.permanent)


def migrations_pending(error: psycopg.Error) -> MigrationsPending:
    """The MigrationsPending for a statement that found part of the schema missing."""
    detail = _cause(str(error))
    return MigrationsPending(f"migrations pending: run `rota migrate` ({detail})")


def _address(error: BaseException, conninfo: str) -> str:
    pgconn = getattr(error, "pgconn", None)
    host = getattr(pgconn, "host", None) if pgconn is not None else None
    port = getattr(pgconn, "port", None) if pgconn is not None else None
    if host and port:
        return f"{host.decode(errors='replace')}:{port.decode(errors='replace')}"
    return address_of(conninfo)


def _cause(text: str) -> str:
    """The reason in libpq's message: the first line, after the last "failed:", without the
    severity prefix."""
    line = text.strip().splitlines()[0] if text.strip() else "unknown error"
    for prefix in ("connection failed:", "connection is bad:"):
        if line.startswith(prefix):
            line = line[len(prefix) :].strip()
    if " failed: " in line:
        line = line.rpartition(" failed: ")[2]
    line = re.sub(r"^(FATAL|ERROR):\s+", "", line.strip())
    return re.sub(r"\s+", " ", line) or "unknown error"


def _without_password(message: str, conninfo: str) -> str:
    try:
        password = str(conninfo_to_dict(conninfo).get("password") or "")
    except psycopg.Error:
        return message
    return message.replace(password, "***") if password else message
