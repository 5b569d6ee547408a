"""`lo-orch permit`: a person answers a session's permission request (issue 17)."""

from __future__ import annotations

from pathlib import Path

import click

from loop_orchestrator.cli.common import echo, repo_option, resolve_repo


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
