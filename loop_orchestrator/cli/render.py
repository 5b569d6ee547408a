"""Rendering helpers: rich on a terminal, plain stable text otherwise."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from typing import Any

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
