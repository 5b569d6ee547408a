"""`lo-orch dashboard` (the full-screen view) and `lo-orch send TASK MESSAGE`."""

from __future__ import annotations

from pathlib import Path

import click

from loop_orchestrator.cli.common import echo, repo_option, resolve_repo


@click.command("dashboard")
@repo_option
def dashboard_command(repo: Path | None) -> None:
    """A full-screen live view of the run: what needs you, every task, the selected task's
    pane, brief, review and ledger; keys (shown in the footer) attach, send, retry and pass
    the gates. `q` quits."""
    from loop_orchestrator.dashboard.app import run_dashboard

    run_dashboard(resolve_repo(repo))


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
