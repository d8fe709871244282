"""Property tests of every documented operation against /openapi.json (TESTPLAN T32), with
every check schemathesis has: no input produces a server error, every response matches its
documented status, headers and schema, schema-invalid input is refused and schema-valid input
is accepted. On the memory store, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import atexit
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from rota.api import ApiSettings, create_app
from rota.client import Client
from rota.domain.job import JobSpec
from rota.store import Store, open_store
from tests.support.postgres import with_database

#: Examples per operation; raise it (nightly) with ROTA_SCHEMATHESIS_EXAMPLES.
EXAMPLES = int(os.environ.get("ROTA_SCHEMATHESIS_EXAMPLES", "50"))


#: schemathesis calls the app as host "testserver"; allow it explicitly.
SETTINGS = ApiSettings(allowed_hosts=("testserver",))


async def _prepare(store: Store) -> None:
    await store.migrate()
    # A few jobs so that small ids exist and the retry/cancel routes reach the store.
    await store.enqueue([JobSpec(kind="email"), JobSpec(kind="report", unique_key="k")])


def _schema(url: str) -> Any:
    store = open_store(url)
    asyncio.run(_prepare(store))
    app = create_app(Client(store), settings=SETTINGS)
    return schemathesis.openapi.from_asgi("/openapi.json", app)


class _StorePerLifespan:
    """The API on a PostgreSQL store opened at each lifespan startup and closed at its
    shutdown: schemathesis serves every call through a test client of its own, on an event
    loop of its own, and a connection pool belongs to the loop that opened it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.api: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.api(scope, receive, send)
            return
        await receive()  # lifespan.startup
        store = open_store(self.url)
        self.api = create_app(Client(store), settings=SETTINGS)
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        await store.close()
        await send({"type": "lifespan.shutdown.complete"})


def _postgres_database() -> str | None:
    """A fresh database on the tests' PostgreSQL server (dropped at exit), or None without one."""
    server = (
        os.environ.get("ROTA_TEST_DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    name = f"rota_st_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(server, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError:
        return None

    def drop() -> None:
        with psycopg.connect(server, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    atexit.register(drop)
    url = with_database(server, name)
    asyncio.run(_prepare_and_close(url))
    return url


async def _prepare_and_close(url: str) -> None:
    store = open_store(url)
    try:
        await _prepare(store)
    finally:
        await store.close()


# Built at import: schemathesis's fixture-based loader does not work with this pytest. The
# SQLite file lives in a directory removed when the interpreter exits.
_SQLITE_DIR = tempfile.TemporaryDirectory(prefix="rota-schemathesis-")
memory_schema = _schema("memory://")
sqlite_schema = _schema(f"sqlite:///{Path(_SQLITE_DIR.name) / 'api.db'}")
_POSTGRES_URL = _postgres_database()
# Without a server the PostgreSQL test runs on the memory store's schema and skips (a failure
# under CI=true, like every skipped PostgreSQL test).
postgres_schema = (
    memory_schema
    if _POSTGRES_URL is None
    else schemathesis.openapi.from_asgi("/openapi.json", _StorePerLifespan(_POSTGRES_URL))
)


def _shadowing_segments(paths: list[str]) -> dict[str, set[str]]:
    """For each path parameter, the literal segments other paths have in its place: with such a
    value the request names another operation (``GET /api/jobs/counts`` reads the counts; it is
    not job "counts" refused), so no check of this operation applies to it."""
    split = [path.strip("/").split("/") for path in paths]
    shadowing: dict[str, set[str]] = {}
    for parts in split:
        for index, part in enumerate(parts):
            if part.startswith("{"):
                shadowing.setdefault(part[1:-1], set()).update(
                    other[index]
                    for other in split
                    if len(other) > index
                    and other[:index] == parts[:index]
                    and not other[index].startswith("{")
                )
    return shadowing


_SHADOWING = _shadowing_segments(list(memory_schema.raw_schema["paths"]))


@schemathesis.hook
def filter_path_parameters(ctx: Any, path_parameters: dict[str, Any] | None) -> bool:
    return not any(
        str(value) in _SHADOWING.get(name, ()) for name, value in (path_parameters or {}).items()
    )


#: Refusals the document states in words (and, for unique_key, in a pattern) that the
#: generator does not honour: text with NUL or control characters or lone surrogates (no
#: JSON Schema says "no NUL anywhere in this nested value"), and cron expressions of the
#: documented shape that name no calendar (a minute of 61, February 30).
_UNSTATED = {
    "POST /api/jobs": ("payload: must not contain", "unique_key: must not contain"),
    "POST /api/schedules": ("cron:", "payload: must not contain"),
    "POST /api/schedules/{name}/edit": ("cron:", "payload: must not contain"),
    "POST /api/signals": ("signal data: must not contain",),
}


def _refused_for_what_a_schema_cannot_say(response: Any, case: schemathesis.Case) -> bool:
    prefixes = _UNSTATED.get(case.operation.label)
    if prefixes is None or response.status_code != 400:
        return False
    message = str(response.json().get("error", ""))
    return message.startswith(prefixes) and (
        "NUL" in message
        or "control characters" in message
        or "surrogates" in message
        or message.startswith("cron:")
    )


@schemathesis.check
def accepts_schema_valid_input(ctx: Any, response: Any, case: schemathesis.Case) -> bool | None:
    if _refused_for_what_a_schema_cannot_say(response, case):
        return None
    return positive_data_acceptance(ctx, response, case)


def _validate(case: schemathesis.Case) -> None:
    case.call_and_validate(
        excluded_checks=[positive_data_acceptance], additional_checks=[accepts_schema_valid_input]
    )


@memory_schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_conforms_on_memory(case: schemathesis.Case) -> None:
    _validate(case)


#: The API runs on the test client's own thread, where the store draws from the global
#: random (psycopg_pool: each new connection's expiry jitter; SQLite: a busy retry's
#: backoff). Hypothesis sees the global state move while it draws a case on this thread and
#: warns as if the strategy had used it, whenever the two happen to overlap.
SERVER_USES_RANDOM = pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies"
)


@SERVER_USES_RANDOM
@sqlite_schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_conforms_on_sqlite(case: schemathesis.Case) -> None:
    _validate(case)


@pytest.mark.postgres
@SERVER_USES_RANDOM
@postgres_schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_conforms_on_postgres(case: schemathesis.Case) -> None:
    if _POSTGRES_URL is None:
        pytest.skip("no PostgreSQL server on 127.0.0.1:5432 (or ROTA_TEST_DATABASE_URL)")
    _validate(case)
