"""`lo-orch status`: the run's tasks, once or live."""

from __future__ import annotations

import json
from pathlib import Path

import click

from loop_orchestrator.cli.common import echo, repo_option, resolve_repo
from loop_orchestrator.cli.render import live_table, task_table


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print {run, tasks} as JSON.")
@click.option("--watch", is_flag=True, help="A live table, refreshed every second.")
@repo_option
def status_command(as_json: bool, watch: bool, repo: Path | None) -> None:
    """One row per task: phase and how long it has been in it, what it waits for, its
    last activity, its session's pane, its cost so far and note. On a terminal the task,
    wave, phase and cost are never cut: the long columns wrap, or give way."""
    from loop_orchestrator.commands import status as statuses

    root = resolve_repo(repo)
    if as_json:
        click.echo(json.dumps(statuses.status(root, rows=False).document, indent=2))
        return
    if watch:
        live_table(lambda: statuses.status(root))
        return
    report = statuses.status(root)
    echo(report.title)
    task_table(report.headers, report.rows)
    if report.spent is not None:
        echo(report.spent)
    for line in report.quarantined:
        echo(line)
    if report.panes_problem is not None:
        echo(f"Panes unknown: {report.panes_problem}")
