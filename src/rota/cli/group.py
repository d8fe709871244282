"""The `rota` group and the plumbing its commands share: options with their ``ROTA_*`` twins,
the target database (or app) of a command, running it, and failing in one line.

See ``rota.cli`` for what every command promises."""

from __future__ import annotations

import asyncio
import functools
import getpass
import os
import re
import sys
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

from rota.config import DEFAULT_DATABASE_URL, load_app
from rota.domain.errors import (
    InvalidInput,
    MigrationsPending,
)
from rota.observability.logging import configure_logging, printable
from rota.runtime import loops

if TYPE_CHECKING:
    from rota.app import App
    from rota.client import Client
    from rota.operator import Operator
    from rota.store import Store

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

LOG_LEVELS = click.Choice(["debug", "info", "warning", "error"], case_sensitive=False)
#: What a command line decoded from bytes that are not UTF-8 holds (Python's surrogateescape).
_UNDECODABLE = re.compile(r"[\udc80-\udcff]")


def database_option(func: F) -> F:
    """--database-url with no default of its own: the --app's database, else rota.db."""
    return click.option(
        "--database-url",
        envvar="ROTA_DATABASE_URL",
        metavar="URL",
        help="memory://, sqlite:///path.db or postgresql://... [default: the --app's database, "
        f"else {DEFAULT_DATABASE_URL}] (prefer the environment variable for URLs with a "
        "password: command lines are visible to other users).",
    )(func)


def app_option(func: F) -> F:
    return click.option(
        "--app",
        "app_ref",
        envvar="ROTA_APP",
        metavar="MODULE:ATTR",
        help="Your rota.App, e.g. myproject.jobs:app: its kinds' queue, attempts and timeout "
        "apply, kinds it has no handler for are refused, and its database is the default.",
    )(func)


def heartbeat_option(help: str) -> Callable[[F], F]:
    """--heartbeat-seconds: what a worker runs at, and what `rota workers` judges liveness by
    (one flag and one variable, so both read the same interval)."""
    return click.option(
        "--heartbeat-seconds",
        envvar="ROTA_HEARTBEAT_SECONDS",
        type=click.FloatRange(0.05),
        default=10.0,
        show_default=True,
        help=help,
    )


def audit_retention_option(func: F) -> F:
    """--audit-retention: how long the audit log keeps its entries, for `rota worker` and
    `rota serve` alike (their pruners read the same variable)."""
    return click.option(
        "--audit-retention",
        envvar="ROTA_AUDIT_RETENTION",
        default="90d",
        show_default=True,
        help="Delete audit log entries older than this (e.g. 30d, 365d), or 'off' to keep them.",
    )(func)


def shutdown_option(default: float) -> Callable[[F], F]:
    """--shutdown-timeout: the grace running jobs get after SIGTERM."""
    return click.option(
        "--shutdown-timeout",
        envvar="ROTA_SHUTDOWN_TIMEOUT",
        type=click.FloatRange(0),
        default=default,
        show_default=True,
        help="Seconds running jobs get to finish after SIGTERM before being released.",
    )


def listen_option(func: F) -> F:
    return click.option(
        "--listen-database-url",
        envvar="ROTA_LISTEN_DATABASE_URL",
        help="A direct postgresql:// connection for LISTEN when --database-url goes through "
        "a transaction pooler such as PgBouncer (without it, workers there poll).",
    )(func)


def json_option(func: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, envvar="ROTA_JSON", help="Print JSON instead of a table."
    )(func)


def page_options(what: str) -> Callable[[F], F]:
    """--limit (1-500, 50 by default) and --cursor of a newest-first listing of ``what``."""

    def decorate(func: F) -> F:
        func = click.option(
            "--cursor", envvar="ROTA_CURSOR", help="Continue after a previous page."
        )(func)
        return click.option(
            "--limit",
            envvar="ROTA_LIMIT",
            type=click.IntRange(1, 500),
            default=50,
            show_default=True,
            help=f"How many {what} (newest first).",
        )(func)

    return decorate


@dataclass(frozen=True, slots=True)
class Target:
    """What a command works on: a database, and the App named by --app (if any)."""

    database_url: str
    app: App | None = None
    #: Whether the command may create the database (a SQLite file and its folders).
    creates: bool = False

    @classmethod
    def resolve(cls, database_url: str | None, app_ref: str | None, *, creates: bool) -> Target:
        """--database-url (or ROTA_DATABASE_URL) wins, then the app's database, then rota.db."""
        app = load_app(app_ref) if app_ref else None
        url = database_url or (app.database_url if app is not None else DEFAULT_DATABASE_URL)
        return cls(url, app, creates)

    @property
    def accepted_kinds(self) -> frozenset[str] | None:
        """The kinds jobs may be enqueued for: the app's, or any (None) without one."""
        return self.app.registry.accepted_kinds() if self.app is not None else None


def uses_database(*, creates: bool) -> Callable[[F], F]:
    """Give a command --database-url and --app, and pass it the resolved ``target``.

    ``creates``: the command may create the database; otherwise it opens an existing one only,
    so a mistyped SQLite path is refused instead of leaving folders and an empty database.
    """

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def resolved(
            *args: Any, database_url: str | None, app_ref: str | None, **kwargs: Any
        ) -> Any:
            target = Target.resolve(database_url, app_ref, creates=creates)
            return command(*args, target=target, **kwargs)

        # The wrapper takes the two flags where the command takes target: not the same F.
        return database_option(app_option(resolved))  # type: ignore[return-value]

    return decorate


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--log-level",
    envvar="ROTA_LOG_LEVEL",
    type=LOG_LEVELS,
    default="info",
    show_default=True,
    help="Log level for rota and your handlers.",
)
@click.option(
    "--log-format",
    envvar="ROTA_LOG_FORMAT",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Logs as text lines or JSON objects.",
)
@click.version_option(package_name="rota", prog_name="rota")
def cli(log_level: str, log_format: str) -> None:
    """rota: a distributed job scheduler.

    Jobs run now, at a time, or on a schedule; workers claim them with leases, heartbeats and
    fencing tokens. SQLite by default, PostgreSQL for a fleet.
    """
    configure_logging(log_level, log_format)


# ---------------------------------------------------------------------- plumbing


def split(text: str | None) -> list[str] | None:
    if not text:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def run_workers(coro: Coroutine[Any, Any, T]) -> T:
    """``run`` for commands that run workers: on uvloop when it is installed (``rota.runtime.loops``)."""
    return loops.run(coro)


def open_target(target: Target) -> Store:
    """The target's store, not yet opened; InvalidInput for a SQLite file that does not exist
    when the command may not create it (the store would create it, and its folders, on first
    use). On PostgreSQL a refused connection fails the command at once, with its cause."""
    from rota.store import open_store

    store = open_store(target.database_url)
    fail_at_once: Callable[[], None] | None = getattr(store, "fail_at_once", None)
    if fail_at_once is not None:  # PostgreSQL: a refused connection is said at once
        fail_at_once()
    path: str | None = getattr(store, "path", None)
    if not target.creates and path is not None and not os.path.isfile(path):
        raise InvalidInput(
            f"no database at {path}: this command opens an existing database only "
            "(check --database-url or ROTA_DATABASE_URL)"
        )
    if target.creates:
        announce_new_database(path)
    return store


def announce_new_database(path: str | None) -> None:
    """Say on stderr that a command is about to create the SQLite database at ``path``
    (None: not SQLite, nothing to say); InvalidInput when its folder does not exist: a
    mistyped path, or a relative one from another directory, must not leave a new database
    (and its folders) where no worker looks."""
    if path is None or os.path.exists(path):
        return
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise InvalidInput(
            f"no folder {folder} for the database {path}: create it first, or check "
            "--database-url or ROTA_DATABASE_URL"
        )
    click.echo(f"creating a new SQLite database at {printable(path)}", err=True)


def announce_new_database_url(database_url: str) -> None:
    """``announce_new_database`` for the file a ``sqlite:///`` URL names (others: nothing)."""
    if database_url[:10].lower() == "sqlite:///":
        from rota.store.sqlite.url import parse_url

        announce_new_database(parse_url(database_url).path)


def with_client(target: Target, use: Callable[[Client], Awaitable[T]]) -> T:
    """``use`` a Client on the target's store, migrated first where migrations are automatic."""
    from rota.client import Client

    async def go() -> T:
        store = open_target(target)
        try:
            pending = await store.pending_migrations()
            if pending:
                await _migrate_if_embedded(store, target, pending)
            return await use(Client(store))
        finally:
            await store.close()

    return run(go())


def with_operator(target: Target, use: Callable[[Operator], Awaitable[T]]) -> T:
    """``use`` the operator verbs on the target's store: each action that succeeds is
    recorded in the audit log as ``cli:<os user>``."""
    from rota.operator import Operator

    identity = cli_user()
    builders = target.app.schedules.workflow_builders() if target.app is not None else None
    return with_client(target, lambda client: use(Operator(client, identity, workflows=builders)))


def cli_user() -> str:
    """The audit identity of whoever runs the command: ``cli:`` and the OS login name."""
    from rota.domain.audit import cli_identity

    try:
        user: str | None = getpass.getuser()
    except (OSError, KeyError):  # no login name: a container user without a passwd entry
        user = None
    return cli_identity(user)


async def _migrate_if_embedded(store: Store, target: Target, pending: list[str]) -> None:
    if not target.database_url.startswith(("sqlite:", "memory:")):
        raise MigrationsPending("the database needs migrations: run `rota migrate`")
    path: str | None = getattr(store, "path", None)
    if not target.creates and path is not None and _has_no_schema(pending):
        # An existing file that rota never migrated: a read must not turn it into one.
        raise InvalidInput(f"{path} is not a rota database (check --database-url)")
    await store.migrate()


def _has_no_schema(pending: list[str]) -> bool:
    from rota.store.sqlite import migrations

    return len(pending) == len(migrations.known())


def fail(message: str, code: int) -> None:
    """Print ``error: message`` as one escaped line on stderr and exit with ``code``."""
    click.echo(f"error: {printable(message)}", err=True)
    sys.exit(code)


def refuse_undecodable(args: Sequence[str], environ: Mapping[str, str]) -> None:
    """InvalidInput for an argument or ROTA_* variable that was not UTF-8: rota's names,
    payloads and URLs are text, and such a value could be neither stored nor printed."""
    for arg in args:
        if _UNDECODABLE.search(arg):
            raw = arg.encode("utf-8", "surrogateescape")
            raise InvalidInput(f"argument {raw!r} is not valid UTF-8")
    for name, value in environ.items():
        if name.startswith("ROTA_") and _UNDECODABLE.search(value):
            raise InvalidInput(f"{printable(name)} is not valid UTF-8")
