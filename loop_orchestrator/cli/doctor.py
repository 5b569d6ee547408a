"""`lo-orch doctor`: check the tools, the agent CLI, its login state and the plugin."""

from __future__ import annotations

from pathlib import Path

import click

from loop_orchestrator.cli.common import repo_option
from loop_orchestrator.cli.render import table

_LABEL = {"ok": "ok", "warn": "warn", "fail": "FAIL", "info": "-"}


@click.command("doctor")
@repo_option
def doctor_command(repo: Path | None) -> None:
    """Check git, tmux, the agent CLI, its login state and the plugin.

    Prints one row per check and what to do about each problem; exits 1 when something
    required (git, tmux, the agent CLI, the bundled plugin) is missing or unusable.
    The login check is offline and best effort: it never contacts the API. With
    [cluster] backend = "ray" it also joins the cluster and checks every node (versions,
    tmux and the agent CLI where sessions run, session slots, the plan's node labels).
    """
    from loop_orchestrator.commands import doctor as doctoring

    report = doctoring.doctor(repo)
    checks = report.checks
    table(["check", "status", "detail"], [[c.name, _LABEL[c.status], c.detail] for c in checks])
    advice = [c for c in checks if c.hint and c.status != "ok"]
    if advice:
        click.echo("")
        for c in advice:
            click.echo(f"{c.name}: {c.hint}")
    if report.error is not None:
        raise report.error
