"""`lo-orch attach [TASK]`: look at a run's agent sessions in tmux."""

from __future__ import annotations

import os
from pathlib import Path

import click

from loop_orchestrator.cli.common import repo_option, resolve_repo


@click.command("attach")
@click.argument("task", required=False)
@repo_option
def attach_command(task: str | None, repo: Path | None) -> None:
    """Attach to the run's tmux session, focused on TASK's pane.

    Inside tmux it switches the current client instead. Detach again with the tmux prefix
    key and `d` (the agents keep running).
    """
    from loop_orchestrator.commands import session

    argv = session.attach(resolve_repo(repo), task).argv
    os.execvp(argv[0], argv)
