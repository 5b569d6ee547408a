"""Rendering helpers: rich on a terminal, plain stable text otherwise."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import click

from loop_orchestrator.columns import Frame, fit_columns, fitted_cells

if TYPE_CHECKING:
    from rich.table import Table

#: what a rich table (its default box) draws besides its columns' text: one cell of
#: padding each side of a column and a border after it, and the left edge
RICH_FRAME = Frame(per_column=3, fixed=1)


def is_tty() -> bool:
    return sys.stdout.isatty()


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    title: str | None = None,
    *,
    cut_last: bool = False,
) -> None:
    """A table: rich when stdout is a terminal, aligned plain text otherwise.

    ``cut_last`` cuts the last column (a free-text note) so every row fits the terminal's
    width (``$COLUMNS`` when not a terminal, else 120), ending in "…" where it was cut.
    """
    cells = [[("" if c is None else str(c)) for c in row] for row in rows]
    columns = shutil.get_terminal_size((120, 24)).columns
    if is_tty():
        from rich.console import Console
        from rich.table import Table

        t = Table(title=title)
        for i, h in enumerate(headers):
            last = cut_last and i == len(headers) - 1
            t.add_column(h, no_wrap=last, overflow="ellipsis" if last else "fold")
        for row in cells:
            t.add_row(*row)
        Console().print(t)
        return
    if title:
        click.echo(title)
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    if cut_last and headers:
        used = sum(widths[:-1]) + 2 * (len(widths) - 1)
        room = max(columns - used, len(headers[-1]), 12)
        cells = [[*row[:-1], _cut(row[-1], room)] for row in cells]
        widths[-1] = min(widths[-1], room)
    click.echo("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def fitted_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], width: int, title: str | None = None
) -> Table:
    """The status table for a terminal ``width`` cells wide (``columns.fit_columns``): the
    task, wave, phase and cost whole, the long columns wrapped, the columns that do not fit
    left out; every cell is shown as it is (a note's ``[b]`` is not markup)."""
    from rich.table import Table
    from rich.text import Text

    names, cells = list(headers), [list(r) for r in rows]
    widths = fit_columns(names, cells, width, RICH_FRAME)
    table = Table(title=title)
    for h, w in widths.items():
        table.add_column(h, width=w, no_wrap=True)
    for row in fitted_cells(names, cells, widths):
        table.add_row(*(Text("\n".join(lines)) for lines in row))
    return table


def task_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """The status table: on a terminal a ``fitted_table`` at its width; otherwise aligned
    plain text, every column whole but the note, cut to ``$COLUMNS`` (stable for a script)."""
    if not is_tty():
        table(headers, rows, cut_last=True)
        return
    from rich.console import Console

    console = Console()
    console.print(fitted_table(headers, rows, console.width))


class TableData(Protocol):
    @property
    def title(self) -> str: ...
    @property
    def headers(self) -> Sequence[str]: ...
    @property
    def rows(self) -> Sequence[Sequence[str]]: ...


def live_table(build: Callable[[], TableData]) -> None:
    """A live ``fitted_table`` until Ctrl-C (rich Live), rebuilt every second at the
    terminal's width then (a resized terminal gets its own layout)."""
    from rich.console import Console
    from rich.live import Live

    console = Console()

    def render() -> Table:
        data = build()
        return fitted_table(data.headers, data.rows, console.width, data.title)

    with Live(render(), console=console, refresh_per_second=2) as live:
        while True:
            time.sleep(1)
            live.update(render())


def printer() -> Callable[[str], None]:
    """A progress line printer: rich on a terminal, plain stable text otherwise."""
    if sys.stdout.isatty():
        from rich.console import Console

        console = Console()

        def show(msg: str) -> None:
            console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {msg}", highlight=False)

        return show

    def plain(msg: str) -> None:
        click.echo(f"{time.strftime('%H:%M:%S')} {msg}")

    return plain
