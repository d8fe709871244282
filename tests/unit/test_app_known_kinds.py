"""An App that has handlers refuses kinds it has none for, on every enqueue path; an App with
no handlers (code that only enqueues) accepts any kind. The API applies the same rule."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from rota import App, JobContext
from rota.api import ApiSettings, create_app
from rota.domain.errors import InvalidInput
from rota.domain.job import JobSpec
from rota.domain.names import check_known_kind
from rota.store import JobFilter


def billing_app(url: str = "memory://") -> App:
    app = App(url)

    @app.job("invoice", queue="billing", max_attempts=7, timeout=12)
    def invoice(ctx: JobContext, payload: object) -> None:
        return None

    @app.job("email")
    def email(ctx: JobContext, payload: object) -> None:
        return None

    return app


UNKNOWN = "kind: unknown kind 'invioce' (known kinds: email, invoice)"


async def test_enqueue_and_enqueue_many_refuse_a_kind_without_handler() -> None:
    async with billing_app() as app:
        with pytest.raises(InvalidInput) as refused:
            await app.enqueue("invioce")
        assert str(refused.value) == UNKNOWN
        with pytest.raises(InvalidInput, match="unknown kind 'invioce'"):
            await app.enqueue_many([app.spec("invoice"), JobSpec(kind="invioce")])
        with pytest.raises(InvalidInput, match="unknown kind"):
            app.spec("invioce")
        assert (await app.jobs.list(JobFilter())).jobs == [], "nothing was written"
        [ok] = await app.enqueue_many([JobSpec(kind="email")])
        assert ok.job.kind == "email"


def test_enqueue_sync_refuses_a_kind_without_handler(tmp_path: Path) -> None:
    app = billing_app(f"sqlite:///{tmp_path / 'sync.db'}")
    try:
        with pytest.raises(InvalidInput) as refused:
            app.enqueue_sync("invioce", {"n": 1})
        assert str(refused.value) == UNKNOWN
        assert not (tmp_path / "sync.db").exists(), "refused before anything was opened"
        result = app.enqueue_sync("invoice", {"n": 1})
        assert (result.job.queue, result.job.max_attempts) == ("billing", 7)
    finally:
        asyncio.run(app.close())


async def test_an_app_without_handlers_accepts_any_kind() -> None:
    async with App("memory://") as producer:
        result = await producer.enqueue("handled-elsewhere")
        assert result.job.kind == "handled-elsewhere"
        assert producer.registry.accepted_kinds() is None


def test_the_unknown_kind_message_lists_a_bounded_number_of_kinds() -> None:
    known = {f"k{n:02d}" for n in range(25)}
    with pytest.raises(InvalidInput) as refused:
        check_known_kind("nope", known)
    assert str(refused.value).endswith("k19 and 5 more)")
    assert check_known_kind("k03", known) == "k03"
    assert check_known_kind("anything", None) == "anything"


@pytest.mark.parametrize(
    ("known", "said"),
    [
        (set(), "(no kind is known)"),
        ({"email"}, "(known kind: email)"),
        ({"email", "invoice"}, "(known kinds: email, invoice)"),
    ],
)
def test_the_unknown_kind_message_counts_the_known_kinds_in_agreement(
    known: set[str], said: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_known_kind("nope", known)
    assert str(refused.value) == f"kind: unknown kind 'nope' {said}"


async def test_the_api_refuses_with_the_same_rule_and_message() -> None:
    async with billing_app() as app:
        api = create_app(
            app.database.client, settings=ApiSettings(), kinds=app.registry.accepted_kinds()
        )
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=api), base_url="http://127.0.0.1"
        ) as client:
            refused = await client.post("/api/jobs", json={"kind": "invioce"})
            accepted = await client.post("/api/jobs", json={"kind": "invoice"})
    assert (refused.status_code, refused.json()["error"]) == (400, UNKNOWN)
    assert accepted.status_code == 201
    assert (accepted.json()["queue"], accepted.json()["max_attempts"]) == ("billing", 7)


def test_a_spec_takes_its_kinds_defaults() -> None:
    """App.spec keeps each kind's defaults between specs (a bulk enqueue makes one spec per
    job), a kind registered later included; a spec with only the common options equals the
    one every option spelled out makes, and options given win over the defaults."""
    app = billing_app()
    first = app.spec("invoice", {"n": 1}, tenant="acme")
    assert first == JobSpec(
        kind="invoice",
        payload={"n": 1},
        queue="billing",
        max_attempts=7,
        tenant="acme",
        timeout=timedelta(seconds=12),
    )
    assert app.spec("invoice", {"n": 1}, tenant="acme", on_conflict="skip", delay=None) == first
    assert app.spec("invoice", {"n": 1}, tenant="acme") == first
    assert app.spec("email").queue == "default" and app.spec("email").payload == {}

    @app.job("refund", queue="ledger", priority=3, max_attempts=2)
    def refund(ctx: JobContext, payload: object) -> None:
        return None

    later = app.spec("refund", {"n": 1})
    assert (later.queue, later.priority, later.max_attempts, later.timeout) == (
        "ledger",
        3,
        2,
        None,
    )
    given = app.spec("refund", queue="q", priority=1, max_attempts=4, timeout=5)
    assert (given.queue, given.priority, given.max_attempts, given.timeout) == (
        "q",
        1,
        4,
        timedelta(seconds=5),
    )
