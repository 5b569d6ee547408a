"""`lo-orch pr`: the pull request after Gate 2."""

from __future__ import annotations

from pathlib import Path

import click

from loop_orchestrator.cli.common import echo, repo_option, resolve_repo


@click.command("pr")
@click.option("--remote", help="The remote to push to (default: [pr] remote, origin).")
@click.option("--base", help="The pull request's base branch (default: the repository's).")
@click.option("--draft", is_flag=True, help="Open the pull request as a draft.")
@click.option(
    "--follow",
    "follow",
    is_flag=True,
    help="Then read its checks and review comments and route each to the task owning it.",
)
@repo_option
def pr_command(
    remote: str | None, base: str | None, draft: bool, follow: bool, repo: Path | None
) -> None:
    """After Gate 2: push the reviewed commit and open (or reuse) its GitHub pull request."""
    from loop_orchestrator.commands import pr as pulls

    root = resolve_repo(repo)
    done = pulls.pr(root, remote=remote, base=base, draft=draft)
    if done.pushed == "up_to_date":
        echo(f"{done.remote}/{done.branch} is already at {done.commit[:12]}: nothing pushed.")
    else:
        how = "new branch" if done.pushed == "create" else "fast-forward"
        echo(f"pushed {done.commit[:12]} to {done.remote}/{done.branch} ({how}, never forced).")
    verb = "updated" if done.reused else "opened"
    echo(f"pull request #{done.number} {verb} ({done.branch} -> {done.base}): {done.url}")
    if done.unreviewed:
        echo(
            f"{done.unreviewed} commit(s) on your local {done.branch} beyond the reviewed one "
            "were not pushed (Gate 2 did not review them); push them yourself if you want them."
        )
    for thread in done.answered:
        echo(f"answered {thread}")
    echo("lo-orch never merges the pull request: that is yours to do on GitHub.")
    if not follow:
        return
    for line in pulls.follow(root).lines():
        echo(line)
