"""`lo-orch hook EVENT` and `lo-orch signal PHASE`: what managed sessions report."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from loop_orchestrator.cli.common import repo_option

# Kept in step with hooks.SIGNAL_PHASES (a test checks); importing hooks here would put its
# work on the import path of every command.
SIGNAL_CHOICES = ("plan_ready", "impl_done", "blocked")


@click.command("hook")
@click.argument("event")
def hook_command(event: str) -> None:
    """Entry point for Claude Code hooks: reads the hook JSON on stdin.

    The plugin's hooks/hooks.json runs it for SessionStart, UserPromptSubmit, Stop,
    StopFailure, Notification, PermissionRequest and SessionEnd. It records the event in
    the task's status and the ledger; in a session lo-orch does not manage it prints
    nothing and exits 0. A planning or implementing session that stops without signalling
    is answered with exit code 2 and the reason on stderr (at most a few times). A
    PermissionRequest waits for `lo-orch permit` or a [permissions] rule and prints the
    answer as Claude Code's hookSpecificOutput JSON (docs/permissions.md).
    """
    from loop_orchestrator.commands import session

    stdin = sys.stdin
    raw = "" if stdin is None or stdin.isatty() else stdin.read()
    outcome = session.hook(event, raw, os.environ)
    if outcome.stdout:
        click.echo(outcome.stdout, nl=False)
    if outcome.stderr:
        click.echo(outcome.stderr, nl=False, err=True)
    if outcome.exit_code:
        raise click.exceptions.Exit(outcome.exit_code)


@click.command("signal")
@click.argument("phase", type=click.Choice(SIGNAL_CHOICES))
@click.option("--task", "task", help="The task (default: $LO_ORCH_TASK).")
@click.option(
    "--note",
    help="What happened; required for `blocked` (what is missing) "
    "and with --dispute (why the check is wrong).",
)
@click.option(
    "--dispute",
    "disputes",
    multiple=True,
    metavar="CODE",
    help="With impl_done: dispute a heuristic finding of the last review (e.g. "
    "tests.tautology); the auditor or the person at Gate 2 judges it. Repeatable.",
)
@repo_option
def signal_command(
    phase: str, task: str | None, note: str | None, disputes: tuple[str, ...], repo: Path | None
) -> None:
    """Report a task's progress from its session: plan_ready, impl_done or blocked.

    \b
    Examples (inside a managed session):
      $LO_ORCH_BIN signal plan_ready
      $LO_ORCH_BIN signal impl_done
      $LO_ORCH_BIN signal impl_done --dispute tests.tautology --note "tests __ge__ itself"
      $LO_ORCH_BIN signal blocked --note "needs ownership of app/db.py"
    """
    from loop_orchestrator.commands import session

    result = session.signal(
        phase, task=task, note=note, disputes=disputes, repo=repo, environ=os.environ
    )
    if result.changed:
        click.echo(f"{result.task}: {result.previous} -> {result.phase}")
    else:
        click.echo(f"{result.task}: {result.message}")
