"""`lo-orch plan` and `lo-orch approve` (Gate 1)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from loop_orchestrator.cli.common import echo, repo_option, resolve_repo
from loop_orchestrator.cli.render import table

if TYPE_CHECKING:
    from loop_orchestrator.commands.plan import PlanSummary


@click.command("plan")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--goal", help="Ask the agent (headless) to write a plan for this goal.")
@click.option("--issue", help="Build the plan from a parent issue (GitHub, Jira, Linear).")
@click.option(
    "--done",
    "done",
    multiple=True,
    metavar="KEY",
    help="With --issue: a child issue that is already done (repeatable).",
)
@click.option("--concurrency", type=click.IntRange(1, 64), help="Override the session cap.")
@repo_option
def plan_command(
    file: Path | None,
    goal: str | None,
    issue: str | None,
    done: tuple[str, ...],
    concurrency: int | None,
    repo: Path | None,
) -> None:
    """Validate a plan, schedule it and show the Gate 1 summary.

    Nothing is written when the plan is invalid; every problem is listed.
    """
    from loop_orchestrator.commands import plan as planning

    summary = planning.plan(
        repo,
        file=file,
        goal=goal,
        issue=issue,
        done=done,
        concurrency=concurrency,
    )
    show_summary(summary)


def show_summary(summary: PlanSummary) -> None:
    plan, run = summary.plan, summary.run
    wave_of = {tid: n for n, w in enumerate(summary.waves, start=1) for tid in w}
    click.echo(f"Run {run.name}: {plan.goal}")
    if summary.instance_note:
        click.echo(summary.instance_note + " Held by earlier runs:")
        for name, items in summary.held.items():
            click.echo(f"  {name}: {', '.join(items)}")
    click.echo(f"Base {run.base_ref} @ {run.base_sha[:12]}; plan sha256 {run.plan_sha256[:12]}")
    if summary.checkout is not None:
        where = f"Checkout {summary.checkout}"
        if summary.main_checkout is not None:
            where += f" (a linked worktree of {summary.main_checkout}; its own HEAD and run state)"
        click.echo(where)
    if summary.replaced_previous:
        click.echo("(replaces the previous, unstarted or finished, run)")
    click.echo("")
    table(
        ["task", "wave", "owns", "depends on", "done checks"],
        [
            [
                t.id,
                wave_of[t.id],
                ", ".join(t.owns),
                ", ".join(summary.deps[t.id]) or "-",
                len(t.done),
            ]
            for t in plan.tasks
        ],
        title="Tasks",
    )
    click.echo("")
    for n, wave in enumerate(summary.waves, start=1):
        click.echo(f"Wave {n}: {', '.join(wave)}")
    if plan.done_tasks:
        click.echo("Already done (no session): " + ", ".join(d.id for d in plan.done_tasks))
    sessions = len(plan.tasks)
    click.echo(
        f"\n{sessions} session{'s' if sessions != 1 else ''}, at most {summary.concurrency} "
        f"at once, in {len(summary.waves)} wave{'s' if len(summary.waves) != 1 else ''}."
    )
    click.echo(f"Ownership matrix: {summary.matrix_path}")
    for note in summary.notes:
        click.echo(note)
    echo("\nGate 1: review the split, then `lo-orch approve` and `lo-orch run`.")


@click.command("approve")
@repo_option
def approve_command(repo: Path | None) -> None:
    """Gate 1: approve the current plan (bound to its sha256)."""
    from loop_orchestrator.commands import plan as planning

    done = planning.approve(resolve_repo(repo))
    if done.note:
        echo(done.note)
    echo(
        f"Approved plan {done.plan_sha256[:12]} of run {done.run} ({done.tasks} tasks). "
        "Next: `lo-orch run`."
    )
