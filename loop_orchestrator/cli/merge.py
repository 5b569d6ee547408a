"""`lo-orch merge` (Gate 2) and `lo-orch cleanup`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from loop_orchestrator.cli.common import echo, repo_option, resolve_repo
from loop_orchestrator.errors import GateError

if TYPE_CHECKING:
    from loop_orchestrator.commands.merge import CleanupResult


@click.command("merge")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (for scripts).")
@click.option("--branch", help="The feature branch to set (default: feat/<run>).")
@click.option("--into", "merge_into", help="Also merge the feature branch into this local branch.")
@repo_option
def merge_command(yes: bool, branch: str | None, merge_into: str | None, repo: Path | None) -> None:
    """Gate 2: show the whole diff, confirm, move the feature branch to the reviewed commit."""
    from loop_orchestrator.commands import merge as merging

    root = resolve_repo(repo)
    rev = merging.review(root, branch=branch)
    header = (
        f"Run {rev.state.name}: {rev.state.base_sha[:12]}..{rev.commit[:12]} "
        f"-> {rev.feature}\n\n{rev.stat}\n"
        "\nWhat it cost (actual, from each session's transcript):\n"
        + "".join(f"  {line}\n" for line in rev.costs)
    )
    if rev.since:
        header += f"\nSince the last review ({rev.since[:12]}):\n" + "".join(
            f"  {'answered' if a.answered else 'NOT answered'}: comment {a.comment.id} "
            f"({a.comment.task}) on {a.comment.path or 'the task'}"
            + (f":{a.comment.line}" if a.comment.line else "")
            + f": {a.comment.text.splitlines()[0][:80]}\n"
            for a in rev.answers
        )
    if sys.stdout.isatty():
        since = f"\nDiff since the last review:\n{rev.diff_since}\nWhole diff:" if rev.since else ""
        click.echo_via_pager(header + since + "\n" + rev.diff)
    else:
        click.echo(header)
        if rev.since:
            click.echo(f"Diff since the last review ({rev.since[:12]}..{rev.commit[:12]}):")
            click.echo(rev.diff_since)
            click.echo("Whole diff:")
        click.echo(rev.diff)
    if rev.state.skipped_tasks:
        click.echo("Left out (blocked or failed): " + ", ".join(rev.state.skipped_tasks))
    if rev.notes:
        click.echo("For you to judge (disputed findings, checks that could not be sure):")
        for line in rev.notes:
            click.echo(f"  - {line}")
    for c in rev.unsent:
        click.echo(
            f"Comment {c.id} for {c.task} is recorded but not sent back: "
            "`lo-orch request-changes` sends it (a merge leaves it unanswered)."
        )
    if not yes:
        if not sys.stdin.isatty():
            msg = "Gate 2 needs a confirmation"
            raise GateError(msg, hint="Run `lo-orch merge --yes` to confirm without a terminal.")
        click.confirm(f"Set {rev.feature} to {rev.commit[:12]}?", abort=True)
    done = merging.merge(root, rev, merge_into=merge_into)
    echo(
        f"{rev.feature} is now {rev.commit[:12]} (run {done.state.name} merged). "
        "Nothing was pushed."
    )
    _show_cleanup(done.cleanup)


def _show_cleanup(result: CleanupResult) -> None:
    """What a clean-up did, saying plainly what it kept and how to finish it."""
    echo(f"session killed: {'yes' if result.session_killed else 'no (none running)'}")
    echo(f"worktrees removed: {', '.join(result.removed) or 'none'}")
    if result.kept_dirty:
        echo(
            "kept, with changes of yours (yours until you say otherwise): "
            + ", ".join(result.kept_dirty)
        )
        for task in result.kept_dirty:
            if task in result.details:
                echo(f"  {task}: {result.details[task]}")
    echo(f"branches deleted: {', '.join(result.branches_deleted) or 'none'}")
    if result.branches_kept:
        echo("branches kept (not merged): " + ", ".join(result.branches_kept))
    if result.kept_dirty:
        echo(
            "Save or discard the changes in the kept worktrees (e.g. `git -C <worktree> "
            "stash -u`, or move your files elsewhere), then `lo-orch cleanup` removes them."
        )
    if result.refs_deleted:
        echo(f"cluster refs deleted: {len(result.refs_deleted)}")
    if result.refs_kept:
        echo(
            "kept, edits of yours lo-orch saved from a remote task's local worktree before "
            "a sync replaced them:"
        )
        for ref in result.refs_kept:
            echo(f"  {ref}")
        echo(
            "See one with `git show --stat <ref>`, bring a file back with `git checkout "
            "<ref> -- <path>`; once you have what you need, `git update-ref -d <ref>`."
        )
    if result.earlier:
        echo("kept from earlier runs of the same name (lo-orch leaves them as they are):")
        for name, items in result.earlier.items():
            echo(f"  {name}: {', '.join(items)}")


@click.command("cleanup")
@click.option("--abandon", is_flag=True, help="Also mark an unfinished run as stopped.")
@repo_option
def cleanup_command(abandon: bool, repo: Path | None) -> None:
    """Remove clean worktrees and kill this run's sessions; dirty worktrees are kept."""
    from loop_orchestrator.commands import merge as merging

    _show_cleanup(merging.cleanup(resolve_repo(repo), abandon=abandon))
