"""Property tests of every documented operation against /openapi.json (TESTPLAN T32), with
every check schemathesis has: no input produces a server error, every response matches its
documented status, headers and schema, schema-invalid input is refused and schema-valid input
is accepted. On the memory store and SQLite."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from rota.api import ApiSettings, create_app
from rota.client import Client
from rota.domain.job import JobSpec
from rota.store import open_store

#: Examples per operation; raise it (nightly) with ROTA_SCHEMATHESIS_EXAMPLES.
EXAMPLES = int(os.environ.get("ROTA_SCHEMATHESIS_EXAMPLES", "50"))


def _schema(url: str) -> Any:
    store = open_store(url)

    async def prepare() -> None:
        await store.migrate()
        # A few jobs so that small ids exist and the retry/cancel routes reach the store.
        await store.enqueue([JobSpec(kind="email"), JobSpec(kind="report", unique_key="k")])

    asyncio.run(prepare())
    # schemathesis calls the app as host "testserver"; allow it explicitly.
    app = create_app(Client(store), settings=ApiSettings(allowed_hosts=("testserver",)))
    return schemathesis.openapi.from_asgi("/openapi.json", app)


# Built at import: schemathesis's fixture-based loader does not work with this pytest. The
# SQLite file lives in a directory removed when the interpreter exits.
_SQLITE_DIR = tempfile.TemporaryDirectory(prefix="rota-schemathesis-")
memory_schema = _schema("memory://")
sqlite_schema = _schema(f"sqlite:///{Path(_SQLITE_DIR.name) / 'api.db'}")


#: Refusals the document states in words (and, for unique_key, in a pattern) that the
#: generator does not honour: text with NUL or control characters or lone surrogates (no
#: JSON Schema says "no NUL anywhere in this nested value"), and cron expressions of the
#: documented shape that name no calendar (a minute of 61, February 30).
_UNSTATED = {
    "POST /api/jobs": ("payload: must not contain", "unique_key: must not contain"),
    "POST /api/schedules": ("cron:", "payload: must not contain"),
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


@sqlite_schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_conforms_on_sqlite(case: schemathesis.Case) -> None:
    _validate(case)
