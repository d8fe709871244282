"""Named credentials with roles, the trusted-proxy header, and how each is named in the audit
log (issue 43, point 5)."""

from __future__ import annotations

import base64
import ipaddress
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from rota.api import ApiSettings
from rota.api.credentials import (
    Credential,
    Role,
    TrustedProxy,
    load_credentials,
    parse_credentials,
)
from rota.domain.errors import InvalidInput
from rota.store.memory import MemoryStore
from tests.support.cli import invoke, rota
from tests.unit.api.conftest import BASE_URL, TOKEN, MakeApp, asgi_client, dead_job

ALICE = "alice-token-0123456789abcdef"
CAROL = "carol-token-0123456789abcdef"
JSON = {"content-type": "application/json"}
NAMED = ApiSettings(
    auth_token=TOKEN,  # the single-token setting keeps working beside named ones
    credentials=(
        Credential("alice", Role.ADMIN, token=ALICE),
        Credential("bob", Role.OPERATOR, user="bob", password="bob-password-1"),
        Credential("carol", Role.READ_ONLY, token=CAROL),
    ),
)


def basic(user: str, password: str) -> dict[str, str]:
    value = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"authorization": f"Basic {value}"}


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


BOB = basic("bob", "bob-password-1")


def from_address(app: FastAPI, address: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url=BASE_URL)


async def identities(api: httpx.AsyncClient) -> list[tuple[str, str]]:
    entries = (await api.get("/api/audit", headers=bearer(TOKEN))).json()["entries"]
    return [(entry["identity"], entry["target"]) for entry in reversed(entries)]


async def test_the_audit_log_records_each_credentials_name(make_app: MakeApp) -> None:
    async with asgi_client(make_app(NAMED)) as api:
        for who, queue in ((bearer(ALICE), "a"), (BOB, "b"), (bearer(TOKEN), "c")):
            assert (await api.post(f"/api/queues/{queue}/pause", headers=who)).status_code == 204
        assert (await api.post("/login", data={"token": ALICE})).status_code == 303
        assert (await api.post("/api/queues/d/pause")).status_code == 204  # alice's session
        config = (await api.get("/api/config")).json()
        assert (config["identity"], config["role"], config["read_only"]) == (
            "alice",
            "admin",
            False,
        )
        assert await identities(api) == [
            ("alice", "queue:a"),
            ("bob", "queue:b"),
            ("token:admin", "queue:c"),
            ("alice", "queue:d"),
        ]


async def test_an_operator_acts_on_jobs_but_changes_no_configuration(
    make_app: MakeApp, store: MemoryStore
) -> None:
    dead = await dead_job(store)
    async with asgi_client(make_app(NAMED), headers={**BOB, **JSON}) as api:
        config = (await api.get("/api/config")).json()
        assert (config["role"], config["read_only"]) == ("operator", False)
        assert (await api.post(f"/api/jobs/{dead.id}/retry")).is_success
        assert (await api.post(f"/api/jobs/{dead.id}/cancel")).is_success
        created = await api.post("/api/jobs", json={"kind": "email"})
        assert created.status_code == 201
        assert (await api.post("/api/queues/q/pause")).status_code == 204
        limit = {"scope": "kind", "key": "email", "concurrency": 2}
        refused = [
            await api.delete(f"/api/jobs/{dead.id}"),
            await api.post("/api/jobs/bulk/delete", json={"state": "cancelled"}),
            await api.post("/api/limits", json=limit),
            await api.post("/api/limits/kind/email/delete"),
            await api.post("/api/schedules", json={"name": "n", "kind": "k", "cron": "0 3 * * *"}),
            await api.post("/api/schedules/n/edit", json={"cron": "0 4 * * *"}),
            await api.post("/api/schedules/n/delete"),
            await api.post("/api/jobs", json={"kind": "email", "every_seconds": 60}),
        ]
        assert [r.status_code for r in refused] == [403] * len(refused)
        assert all("bob" in r.json()["error"] and "admin" in r.json()["error"] for r in refused)
        assert (await store.get(dead.id)).id == dead.id, "nothing was deleted"
        assert await store.list_schedules() == []
    async with asgi_client(make_app(NAMED), headers={**bearer(ALICE), **JSON}) as api:
        assert (await api.post("/api/limits", json=limit)).is_success
        assert (await api.delete(f"/api/jobs/{dead.id}")).is_success


async def test_a_read_only_credential_reads_and_changes_nothing(
    make_app: MakeApp, store: MemoryStore
) -> None:
    dead = await dead_job(store)
    async with asgi_client(make_app(NAMED), headers={**bearer(CAROL), **JSON}) as api:
        assert (await api.get(f"/api/jobs/{dead.id}")).status_code == 200
        refused = await api.post(f"/api/jobs/{dead.id}/retry")
        assert refused.status_code == 403 and "carol" in refused.json()["error"]
        assert (await api.get("/api/config")).json()["role"] == "read-only"


PROXY = ApiSettings(
    auth_token=TOKEN,
    trusted_proxy=TrustedProxy(
        header="X-Forwarded-User",
        trusted=(ipaddress.ip_network("10.0.0.5/32"),),
        role=Role.READ_ONLY,
        roles=(("dana@example.com", Role.OPERATOR),),
    ),
)


async def test_a_trusted_proxy_names_the_user_and_no_one_else_can(make_app: MakeApp) -> None:
    app = make_app(PROXY)
    dana = {"x-forwarded-user": "dana@example.com", **JSON}
    async with from_address(app, "10.0.0.5") as proxy, from_address(app, "10.0.0.9") as other:
        assert (await proxy.post("/api/queues/a/pause", headers=dana)).status_code == 204
        config = (await proxy.get("/api/config", headers=dana)).json()
        assert (config["identity"], config["role"]) == ("proxy:dana@example.com", "operator")
        eve = {"x-forwarded-user": "eve", **JSON}
        assert (await proxy.get("/api/jobs", headers=eve)).status_code == 200
        assert (await proxy.post("/api/queues/b/pause", headers=eve)).status_code == 403
        # Through the proxy without its header, or with a blank one: no one is named.
        assert (await proxy.get("/api/jobs")).status_code == 401
        blank = {"x-forwarded-user": "  "}
        assert (await proxy.get("/api/jobs", headers=blank)).status_code == 401
        # The same header from any other address is ignored: it authenticates no one.
        assert (await other.get("/api/jobs", headers=dana)).status_code == 401
        assert (await other.post("/api/queues/c/pause", headers=dana)).status_code == 401
        assert (await other.get("/api/jobs", headers=bearer(TOKEN))).status_code == 200
        assert await identities(other) == [("proxy:dana@example.com", "queue:a")]


def test_credentials_are_read_from_toml() -> None:
    credentials, proxy = parse_credentials(
        f"""
        [[credential]]
        name = "alice"
        role = "admin"
        token = "{ALICE}"

        [[credential]]
        name = "bob"
        role = "operator"
        user = "bob"
        password = "bob-password-1"

        [proxy]
        header = "X-Forwarded-User"
        trusted = ["10.0.0.5", "10.0.1.0/24"]
        roles = {{ dana = "admin" }}
        """,
        "test",
    )
    assert credentials == (
        Credential("alice", Role.ADMIN, token=ALICE),
        Credential("bob", Role.OPERATOR, user="bob", password="bob-password-1"),
    )
    assert proxy is not None and proxy.trusts("10.0.1.77") and not proxy.trusts("10.0.2.1")
    assert (proxy.role_of("dana"), proxy.role_of("eve")) == (Role.ADMIN, Role.READ_ONLY)
    assert ALICE not in repr(credentials)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("credential = [", "not valid TOML"),
        ('[[credential]]\nname = "a"\nrole = "root"\ntoken = "' + "x" * 20 + '"', "role must be"),
        ('[[credential]]\nname = "a"\nrole = "admin"\ntoken = "short-token"', "at least 16"),
        ('[[credential]]\nname = "a:b"\nrole = "admin"\ntoken = "' + "x" * 20 + '"', "a name is"),
        ('[[credential]]\nname = "a"\nrole = "admin"', "either a token or a user"),
        ('[[credential]]\nname = "a"\nrole = "admin"\nuser = "u"', "non-empty password"),
        ('[[credential]]\nname = "a"\nrole = "admin"\ntokn = "x"', "unknown key 'tokn'"),
        ('[proxy]\nheader = "X-User"\ntrusted = []', "trusted must list"),
        ('[proxy]\nheader = "X-User"\ntrusted = ["not-an-ip"]', "does not appear to be"),
        ('[proxy]\nheader = "Authorization"\ntrusted = ["10.0.0.1"]', "cannot carry"),
        ("[users]", "unknown section 'users'"),
    ],
)
def test_bad_credentials_are_refused_with_a_reason(text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_credentials(text, "ROTA_CREDENTIALS")


def test_two_credentials_cannot_share_a_name_token_or_user() -> None:
    alice = Credential("alice", Role.ADMIN, token=ALICE)
    with pytest.raises(InvalidInput, match="same name 'alice'"):
        ApiSettings(credentials=(alice, Credential("alice", Role.ADMIN, token=CAROL)))
    with pytest.raises(InvalidInput, match="same token"):
        ApiSettings(auth_token=ALICE, credentials=(alice,))
    with pytest.raises(InvalidInput, match="same basic-auth user 'bob'"):
        ApiSettings(
            basic_auth=("bob", "pw-1"),
            credentials=(Credential("b", Role.OPERATOR, user="bob", password="x"),),
        )
    assert ApiSettings(credentials=(alice,)).has_auth
    assert ApiSettings(trusted_proxy=PROXY.trusted_proxy).has_auth


def test_credentials_come_from_a_file_or_the_environment(tmp_path: Path) -> None:
    text = f'[[credential]]\nname = "alice"\nrole = "admin"\ntoken = "{ALICE}"\n'
    path = tmp_path / "credentials.toml"
    path.write_text(text)
    assert load_credentials(str(path), None) == load_credentials(None, text)
    assert load_credentials(None, None) == ((), None)
    with pytest.raises(InvalidInput, match="not both"):
        load_credentials(str(path), text)
    with pytest.raises(InvalidInput, match="cannot read credentials file"):
        load_credentials(str(tmp_path / "missing.toml"), None)


def test_serve_refuses_bad_credentials_in_one_line(tmp_path: Path) -> None:
    env = {"ROTA_DATABASE_URL": f"sqlite:///{tmp_path / 'r.db'}"}
    with pytest.raises(InvalidInput, match="role must be"):
        invoke(
            "serve",
            "--port",
            "0",
            env={**env, "ROTA_CREDENTIALS": '[[credential]]\nname="a"\nrole="boss"\ntoken="x"'},
        )
    ran = rota("serve", "--credentials-file", str(tmp_path / "nope.toml"), env=env)
    assert ran.code == 2 and len(ran.err_lines) == 1, ran.err
    assert "cannot read credentials file" in ran.err
