"""The `rota` command line: parse flags (each with a ``ROTA_*`` twin), build, delegate.

The group and the shared plumbing live in ``rota.cli.group``; each family of commands has its
own module, imported here to register its commands.

Every command that works on a database takes ``--database-url`` and ``--app``: the app's kinds
fill in how jobs of a kind are enqueued (queue, attempts, timeout) and refuse kinds it has no
handler for, and its database is the default when no URL is given. Commands that only read,
or change what must already exist, open an existing database only.

Data goes to stdout, logs and progress to stderr. Bad input, and a database that cannot be
connected to (its cause in one line: refused, unknown database or role, authentication, SSL),
print one line and exit 2; a store that fails otherwise exits 1; no traceback reaches the user
unless ROTA_DEBUG is set.
"""

from __future__ import annotations

import os
import sys

import click

from rota.cli import audit as _audit
from rota.cli import bulk as _bulk
from rota.cli import hold as _hold
from rota.cli import jobs as _jobs
from rota.cli import operate as _operate
from rota.cli import queues as _queues
from rota.cli import schedules as _schedules
from rota.cli import serve as _serve
from rota.cli import signals as _signals
from rota.cli import workflows as _workflows
from rota.cli.group import cli, fail, refuse_undecodable
from rota.domain.errors import (
    ConnectionFailed,
    InvalidInput,
    MigrationsPending,
    NotFound,
    RotaError,
    StateConflict,
    StoreUnavailable,
)
from rota.observability.logging import printable

__all__ = ["cli", "main"]
_ = (_audit, _bulk, _hold, _jobs, _operate, _queues, _schedules, _serve, _signals, _workflows)


def main() -> None:
    """Entry point: run the CLI and turn every error into one line and an exit code."""
    try:
        refuse_undecodable(sys.argv[1:], os.environ)
        cli.main(prog_name="rota", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as asked:
        # `rota` or `rota jobs` alone: the help is the answer, not an error line.
        click.echo(asked.format_message(), err=True)
        sys.exit(asked.exit_code)
    except click.UsageError as error:
        command = error.ctx.command_path if error.ctx is not None else "rota"
        fail(f"{error.format_message()} (see '{command} --help')", error.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        fail(error.format_message(), error.exit_code)
    except (InvalidInput, NotFound, StateConflict, ConnectionFailed) as error:
        fail(str(error), 2)
    except (StoreUnavailable, MigrationsPending, RotaError) as error:
        fail(str(error), 1)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as error:  # the last line of defence: one line, no traceback
        if os.environ.get("ROTA_DEBUG"):
            raise
        click.echo(
            f"internal error: {type(error).__name__}: {printable(str(error))} "
            "(set ROTA_DEBUG=1 for details)",
            err=True,
        )
        sys.exit(1)
