"""`lo-orch doctor`: check the tools, the agent CLI, its login state and the plugin."""

from __future__ import annotations

from pathlib import Path

import click

from loop_orchestrator.cli.common import repo_option, resolve_repo
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
    from loop_orchestrator import config, doctor
    from loop_orchestrator.errors import ConfigError, LoOrchError

    root: Path | None
    try:
        root = resolve_repo(repo)
    except LoOrchError:
        if repo is not None:
            raise
        root = None  # outside a repository: still check the machine
    checks: list[doctor.Check] = []
    try:
        settings = config.load_settings(root)
    except ConfigError as exc:
        checks.append(doctor.Check("config", "fail", exc.message, exc.hint or ""))
        settings = config.Settings()
    checks += doctor.run_checks(root, settings)

    table(["check", "status", "detail"], [[c.name, _LABEL[c.status], c.detail] for c in checks])
    advice = [c for c in checks if c.hint and c.status != "ok"]
    if advice:
        click.echo("")
        for c in advice:
            click.echo(f"{c.name}: {c.hint}")
    failed = [c.name for c in checks if c.status == "fail"]
    if failed:
        raise LoOrchError(
            f"{len(failed)} required check{'s' if len(failed) != 1 else ''} failed: "
            + ", ".join(failed),
            hint="Fix the rows marked FAIL and run `lo-orch doctor` again.",
        )
