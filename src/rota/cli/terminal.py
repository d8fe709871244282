"""What the CLI prints: text from jobs escaped, never read as markup, and tables that keep one
row per line when stdout is a file or a pipe.

Payloads, errors, tracebacks, worker names and schedule fields are data, and data may hold
ESC, OSC or bidi sequences that would recolour, retitle or rewrite the operator's terminal,
or rich markup (``[bold]``, ``[/]``) that rich would interpret or choke on. Every value goes
through ``shown`` (``printable``: control characters become visible escapes) and into tables as
rich ``Text``, which is never parsed for markup.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from rota.observability.logging import printable

if TYPE_CHECKING:  # rich is imported by the commands that print with it, not by `rota --help`
    from rich.console import Console
    from rich.table import Table

#: The width tables get when stdout is not a terminal: wide enough that no row ever wraps, so
#: `rota jobs list > jobs.txt` keeps one job per line (rich would fold at 80 columns).
UNWRAPPED_WIDTH = 1_000_000

Justify = Literal["left", "right"]


def shown(value: object, *, keep: str = "") -> str:
    """``value`` as it may reach a terminal: '' for None, control characters escaped."""
    return "" if value is None else printable(str(value), keep=keep)


def console() -> Console:
    """A rich Console on stdout that reads no markup, emoji or highlighting from what it
    prints, and does not wrap when stdout is not a terminal."""
    from rich.console import Console

    out = Console(markup=False, emoji=False, highlight=False)
    if not out.is_terminal:
        out.width = UNWRAPPED_WIDTH
    return out


def table(
    columns: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    justify: Mapping[str, Justify] | None = None,
) -> Table:
    """A borderless table of ``rows``; every cell is shown escaped and as plain text."""
    from rich.table import Table
    from rich.text import Text

    drawn = Table(box=None, header_style="bold", pad_edge=False)
    for column in columns:
        drawn.add_column(column, overflow="fold", justify=(justify or {}).get(column, "left"))
    for row in rows:
        drawn.add_row(*(Text(shown(cell)) for cell in row))
    return drawn


def stderr_console() -> Console:
    """A rich Console on stderr, reading no markup from what it prints: where progress goes."""
    from rich.console import Console

    return Console(stderr=True, markup=False, emoji=False, highlight=False)


@contextlib.contextmanager
def progress(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """Show how far long work has got, on stderr, while the block runs; yields ``advance(n)``.

    Only when stderr is a terminal: piped or redirected, nothing is shown, so stdout and stderr
    carry the command's data and messages alone (``--json`` output included). The bar is
    erased when the block ends; ``total`` None shows a spinner and the elapsed time."""
    out = stderr_console()
    if not out.is_terminal:
        yield lambda amount: None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = [
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),
        *([BarColumn(), MofNCompleteColumn()] if total is not None else []),
        TimeElapsedColumn(),
    ]
    with Progress(*columns, console=out, transient=True) as bar:
        task = bar.add_task(shown(description), total=total)
        yield lambda amount: bar.advance(task, amount)
