"""`lo-orch comment`, `lo-orch comments`, `lo-orch request-changes`: review comments at
Gate 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click

from loop_orchestrator.cli.common import echo, repo_option, resolve_repo
from loop_orchestrator.cli.render import table

_WHERE = re.compile(r"^(?P<path>.+?):(?P<line>[0-9]+)$")


def _split_where(where: str) -> tuple[str, int | None]:
    """``PATH[:LINE]`` -> (path, line)."""
    found = _WHERE.match(where)
    return (where, None) if found is None else (found["path"], int(found["line"]))


@click.command("comment")
@click.option("--task", metavar="TASK", help="Address the comment to this task (no path needed).")
@click.argument("where_text", nargs=-1, required=True, metavar="[PATH[:LINE]] TEXT")
@repo_option
def comment_command(task: str | None, where_text: tuple[str, ...], repo: Path | None) -> None:
    """At Gate 2: a comment on the staged diff, for the task that wrote those lines.

    TEXT is one argument (quote it); put `--` before a TEXT that starts with a dash.
    """
    from loop_orchestrator.commands import review

    if len(where_text) > 2 or (task is None and len(where_text) != 2):
        msg = 'give PATH[:LINE] and TEXT (quoted), or --task TASK [PATH[:LINE]] "TEXT"'
        raise click.UsageError(msg)
    text = where_text[-1]
    path, line = _split_where(where_text[0]) if len(where_text) == 2 else (None, None)
    made = review.comment(resolve_repo(repo), path, line, text, task=task)
    where = f" on {made.path}" + (f":{made.line}" if made.line else "") if made.path else ""
    how = {"owns": "owns the path", "line": "changed the line", "task": "named with --task"}
    echo(
        f"comment {made.id}{where} recorded for task {made.task} ({how[made.routed_by]}); "
        "`lo-orch request-changes` sends it back"
    )


@click.command("comments")
@click.option("--json", "as_json", is_flag=True, help="Print the comments as JSON.")
@repo_option
def comments_command(as_json: bool, repo: Path | None) -> None:
    """The run's review comments: where each went, and whether it was answered."""
    from loop_orchestrator.commands import review

    found = review.comments(resolve_repo(repo))
    if as_json:
        click.echo(json.dumps(found.as_json(), indent=2))
        return
    if not found.comments:
        echo('no comments; make one at Gate 2 with `lo-orch comment PATH[:LINE] "..."`')
        return
    rows = []
    for c in found.comments:
        where = (c.path or "-") + (f":{c.line}" if c.line else "")
        answer = found.answered.get(c.id)
        said = "" if answer is None else ("answered" if answer else "not answered")
        rows.append([c.id, c.task, where, found.states[c.id], said, c.text.splitlines()[0]])
    table(["id", "task", "where", "state", "answer", "text"], rows, cut_last=True)


@click.command("request-changes")
@repo_option
def request_changes_command(repo: Path | None) -> None:
    """Send the recorded comments back: each addressed task gets a review round."""
    from loop_orchestrator.commands import review

    req = review.request_changes(resolve_repo(repo))
    echo(
        f"{len(req.comments)} comment(s) sent back to {', '.join(req.tasks)}; the running "
        "supervisor (or the next `lo-orch run`) opens their review rounds, then Gate 2 again"
    )
