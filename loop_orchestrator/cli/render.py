"""Rendering helpers: rich on a terminal, plain stable text otherwise."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import click


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


class TableData(Protocol):
    @property
    def title(self) -> str: ...
    @property
    def headers(self) -> Sequence[str]: ...
    @property
    def rows(self) -> Sequence[Sequence[str]]: ...


def live_table(build: Callable[[], TableData]) -> None:
    """A live table until Ctrl-C (rich Live), rebuilt every second; its last column (a
    free-text note) is cut to the width."""
    from rich.live import Live
    from rich.table import Table

    def render() -> Table:
        data = build()
        table = Table(title=data.title)
        for i, h in enumerate(data.headers):
            last = i == len(data.headers) - 1
            table.add_column(h, no_wrap=last, overflow="ellipsis")
        for row in data.rows:
            table.add_row(*row)
        return table

    with Live(render(), refresh_per_second=2) as live:
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
