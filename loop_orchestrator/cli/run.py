"""`lo-orch run` and `lo-orch retry`."""

from __future__ import annotations

from pathlib import Path

import click

from loop_orchestrator.cli.common import echo, repo_option, resolve_repo
from loop_orchestrator.cli.render import printer


@click.command("run")
@click.option(
    "--detach", is_flag=True, help="Run the supervisor in a window of the run's tmux session."
)
@click.option(
    "--continue-blocked",
    is_flag=True,
    help="Go on to integration and Gate 2 without the blocked or failed tasks.",
)
@click.option(
    "--allow-dirty",
    is_flag=True,
    help="Start although the main checkout has uncommitted changes (they stay where they "
    "are, outside the run; same as [workspace] allow_dirty).",
)
@repo_option
def run_command(detach: bool, continue_blocked: bool, allow_dirty: bool, repo: Path | None) -> None:
    """Supervise the approved plan until Gate 2 (or until only blocked tasks remain).

    Ctrl-C stops the supervisor, not the sessions; `lo-orch run` again resumes.
    """
    from loop_orchestrator.commands import run as running

    result = running.run(
        resolve_repo(repo),
        detach=detach,
        continue_blocked=continue_blocked,
        allow_dirty=allow_dirty,
        progress=None if detach else printer(),
    )
    if result.state == "detached":
        echo(f"Supervisor started in {result.message}.")
        echo("Follow with `lo-orch status --watch`; see the sessions with `lo-orch attach`.")
        return
    click.echo(f"\n{result.message}")
    if result.state == "review":
        echo("Gate 2: review the whole diff and land it with `lo-orch merge`.")


@click.command("retry")
@click.argument("task")
@click.option("--note", help="What changed, or what the session should do now (for its review).")
@click.option(
    "--budget",
    type=float,
    default=None,
    help="The task's new total budget in dollars (over the plan's and the config's; "
    "also lets it start when the run's budget is spent).",
)
@repo_option
def retry_command(task: str, note: str | None, budget: float | None, repo: Path | None) -> None:
    """Send a blocked or failed task back to work after you helped it."""
    from loop_orchestrator.commands import run as running

    status = running.retry(resolve_repo(repo), task, note=note, budget=budget)
    echo(f"Task {task} is {status.phase.value} again (rework round {status.rework_count}).")
    if budget is not None:
        echo(f"Its budget is now ${budget:g} in total.")
    echo("A running supervisor picks it up now; otherwise run `lo-orch run`.")
