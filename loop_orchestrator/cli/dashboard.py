"""`lo-orch dashboard`: the full-screen view (a front end of its own, ``dashboard/``)."""

from __future__ import annotations

from pathlib import Path

import click

from loop_orchestrator.cli.common import repo_option, resolve_repo


@click.command("dashboard")
@repo_option
def dashboard_command(repo: Path | None) -> None:
    """A full-screen live view of the run: what needs you, every task, the selected task's
    pane, brief, review and ledger; keys (shown in the footer) attach, send, retry and pass
    the gates. `q` quits."""
    from loop_orchestrator.dashboard.app import run_dashboard

    run_dashboard(resolve_repo(repo))
