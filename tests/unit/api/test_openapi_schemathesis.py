"""Property tests of every documented operation against /openapi.json (TESTPLAN T32): no input
produces a server error, and every response matches its documented status and schema."""

from __future__ import annotations

import asyncio
import os

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from rota.api import ApiSettings, create_app
from rota.client import Client
from rota.domain.job import JobSpec
from rota.store.memory import MemoryStore
from rota.testing import FakeClock

#: Examples per operation; raise it (nightly) with ROTA_SCHEMATHESIS_EXAMPLES.
EXAMPLES = int(os.environ.get("ROTA_SCHEMATHESIS_EXAMPLES", "50"))
CHECKS = [
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
    content_type_conformance,
    negative_data_rejection,
]


def _app() -> object:
    store = MemoryStore(clock=FakeClock())
    # A few jobs so that small ids exist and the retry/cancel routes reach the store.
    asyncio.run(store.enqueue([JobSpec(kind="email"), JobSpec(kind="report", unique_key="k")]))
    # schemathesis calls the app as host "testserver"; allow it explicitly.
    return create_app(Client(store), settings=ApiSettings(allowed_hosts=("testserver",)))


schema = schemathesis.openapi.from_asgi("/openapi.json", _app())


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_conforms(case: schemathesis.Case) -> None:
    case.call_and_validate(checks=CHECKS)
