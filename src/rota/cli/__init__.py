"""The `rota` command line: parse flags (each with a ``ROTA_*`` twin), build, delegate.

The group and the shared plumbing live here; each family of commands has its own module.

Data goes to stdout, logs and progress to stderr. Bad input, and a database that cannot be
connected to (its cause in one line: refused, unknown database or role, authentication, SSL),
print one line and exit 2; a store that fails otherwise exits 1; no traceback reaches the user
unless ROTA_DEBUG is set.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import click

from rota.config import DEFAULT_DATABASE_URL
from rota.domain.errors import (
    ConnectionFailed,
    InvalidInput,
    MigrationsPending,
    NotFound,
    RotaError,
    StateConflict,
    StoreUnavailable,
)
from rota.observability.logging import configure_logging

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

LOG_LEVELS = click.Choice(["debug", "info", "warning", "error"], case_sensitive=False)


def database_option(default: str | None = DEFAULT_DATABASE_URL) -> Callable[[F], F]:
    return click.option(
        "--database-url",
        envvar="ROTA_DATABASE_URL",
        default=default,
        show_default=default is not None,
        help="memory://, sqlite:///path.db or postgresql://... (prefer the environment "
        "variable for URLs with a password: command lines are visible to other users).",
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


def with_client(database_url: str, use: Callable[[Any], Awaitable[T]]) -> T:
    from rota.client import Client
    from rota.store import open_store

    async def go() -> T:
        store = open_store(database_url)
        try:
            if await store.pending_migrations():
                await _migrate_if_embedded(store, database_url)
            return await use(Client(store))
        finally:
            await store.close()

    return run(go())


async def _migrate_if_embedded(store: Any, database_url: str) -> None:
    if database_url.startswith(("sqlite:", "memory:")):
        await store.migrate()
    else:
        raise MigrationsPending("the database needs migrations: run `rota migrate`")


def main() -> None:
    """Entry point: run the CLI and turn every error into one line and an exit code."""
    try:
        cli.main(prog_name="rota", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except (InvalidInput, NotFound, StateConflict, ConnectionFailed) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)
    except (StoreUnavailable, MigrationsPending, RotaError) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as error:  # the last line of defence: one line, no traceback
        if os.environ.get("ROTA_DEBUG"):
            raise
        click.echo(
            f"internal error: {type(error).__name__}: {error} (set ROTA_DEBUG=1 for details)",
            err=True,
        )
        sys.exit(1)


# Importing the command modules registers their commands on the group.
from rota.cli import jobs as _jobs  # noqa: E402
from rota.cli import operate as _operate  # noqa: E402
from rota.cli import queues as _queues  # noqa: E402
from rota.cli import schedules as _schedules  # noqa: E402
from rota.cli import serve as _serve  # noqa: E402

__all__ = ["cli", "main"]
_ = (_jobs, _operate, _queues, _schedules, _serve)
