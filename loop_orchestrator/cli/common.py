"""Options and helpers shared by the commands (no git or tmux calls here)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from loop_orchestrator.hints import for_user

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
    from loop_orchestrator.commands.repo import find_repo

    return find_repo(repo)


def echo(text: str = "", *, err: bool = False) -> None:
    """``click.echo`` of a message that may name lo-orch commands (see ``for_user``)."""
    click.echo(for_user(text), err=err)
