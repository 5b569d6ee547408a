"""`lo-orch demo`: the whole flow on a throwaway repository with the simulator."""

from __future__ import annotations

import click

from loop_orchestrator.cli.render import printer


@click.command("demo")
@click.option(
    "--keep",
    is_flag=True,
    help="Keep the throwaway repository and its run state (ledger, reviews, "
    "evidence) to inspect; Gate 2 still closes the sessions and removes the "
    "worktrees, as in a real run.",
)
@click.option(
    "--agent",
    type=click.Choice(["scripted", "claude", "qwen", "cline", "vibe", "aider", "opencode"]),
    default="scripted",
    show_default=True,
    help="scripted: no install needed; claude: real Claude Code sessions (the "
    "`claude` on PATH) driven offline by a built-in scripted model; qwen: real Qwen Code "
    "sessions (the `qwen` on PATH), the same way; cline: real Cline CLI sessions (the "
    "`cline` on PATH); vibe: real Mistral Vibe sessions (the `vibe` on PATH); aider: real "
    "aider sessions (the `aider` on PATH); opencode: real opencode sessions (the "
    "`opencode` on PATH), the same way.",
)
def demo_command(keep: bool, agent: str) -> None:
    """The whole flow on a throwaway repo with the scripted agent (no Claude login)."""
    from loop_orchestrator.commands import demo as demos

    result = demos.demo(keep=keep, agent=agent, progress=printer())
    for line in result.report:
        click.echo(line)
