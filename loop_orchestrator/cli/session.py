"""`lo-orch attach`, `send`, `permit`, and what managed sessions report: `lo-orch signal` and
`lo-orch hook` (``entry.py`` answers a session's call before click; these are the rest:
help, ``--repo``, ``--dispute``, usage errors).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from loop_orchestrator.cli.common import echo, repo_option, resolve_repo

# Kept in step with hooks.SIGNAL_PHASES (a test checks); importing hooks here would put its
# work on the import path of every command.
SIGNAL_CHOICES = ("plan_ready", "impl_done", "blocked")


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


@click.command("send")
@click.argument("task")
@click.argument("message")
@repo_option
def send_command(task: str, message: str, repo: Path | None) -> None:
    """Send MESSAGE to TASK's session, delivered by the supervisor like a prompt."""
    from loop_orchestrator.commands import session

    sent = session.send(resolve_repo(repo), task, message)
    echo(
        f"Message {sent.message_id} for {sent.task} recorded; the running supervisor "
        "delivers it to the session (`lo-orch run` if none runs)."
    )


@click.command("permit")
@click.argument("task")
@click.argument("decision", type=click.Choice(["allow", "deny"]))
@click.option(
    "--always",
    is_flag=True,
    help="Also answer the same request (this tool, exactly this command or file) "
    "this way for the rest of the run.",
)
@click.option(
    "--id",
    "request_id",
    metavar="ID",
    help="The request to answer, when the task has several (`permit` without it names them).",
)
@repo_option
def permit_command(
    task: str, decision: str, always: bool, request_id: str | None, repo: Path | None
) -> None:
    """Answer TASK's pending permission request: allow or deny the tool call.

    \b
    Examples:
      lo-orch permit tokenize allow
      lo-orch permit tokenize deny
      lo-orch permit tokenize allow --always
    """
    from loop_orchestrator.commands import session

    req = session.permit(
        resolve_repo(repo),
        task,
        "allow" if decision == "allow" else "deny",
        always=always,
        request_id=request_id,
    )
    what = f"{req.tool}: {req.summary}" if req.summary else req.tool
    echo(f"{task}: {decision} {what} ({req.request_id})")
    if always:
        echo(f"The same request is answered `{decision}` for the rest of this run.")
    echo("A running supervisor hands the answer to the session now.")


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
