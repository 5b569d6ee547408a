"""Options and helpers shared by the commands (no git or tmux calls here)."""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def repo_option(fn: F) -> F:
    """``--repo PATH``: default is the git root of the current directory."""
    return click.option(
        "--repo",
        "repo",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="The repository (default: the git root of the current directory).",
    )(fn)


def resolve_repo(repo: Path | None) -> Path:
    from loop_orchestrator.core import find_repo

    return find_repo(repo if repo is not None else Path.cwd())


#: what `scripts/lo-orch` sets to the path it was called by (``$0``)
PROG_ENV = "LO_ORCH_PROG"


def prog() -> str:
    """The command that runs this lo-orch from where the user is (issue 12, item 9):
    ``lo-orch`` when that is on PATH (or lo-orch was not started by `scripts/lo-orch`),
    else the path `scripts/lo-orch` was called by."""
    typed = os.environ.get(PROG_ENV, "").strip()
    if not typed or shutil.which("lo-orch"):
        return "lo-orch"
    return shlex.quote(typed)


def for_user(text: str) -> str:
    """``text`` with every `lo-orch ...` hint spelled as the command that works here."""
    name = prog()
    if name == "lo-orch":
        return text
    return text.replace("`lo-orch ", f"`{name} ").replace("`lo-orch`", f"`{name}`")


def echo(text: str = "", *, err: bool = False) -> None:
    """``click.echo`` of a message that may name lo-orch commands (see ``for_user``)."""
    click.echo(for_user(text), err=err)
