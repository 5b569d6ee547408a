"""Rendering helpers: rich on a terminal, plain stable text otherwise."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click


def is_tty() -> bool:
    return sys.stdout.isatty()


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> None:
    """A table: rich when stdout is a terminal, aligned plain text otherwise."""
    cells = [[("" if c is None else str(c)) for c in row] for row in rows]
    if is_tty():
        from rich.console import Console
        from rich.table import Table

        t = Table(title=title)
        for h in headers:
            t.add_column(h)
        for row in cells:
            t.add_row(*row)
        Console().print(t)
        return
    if title:
        click.echo(title)
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    click.echo("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
