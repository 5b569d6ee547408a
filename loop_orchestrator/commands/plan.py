"""`lo-orch plan` (a plan from a file, a goal or an issue, recorded as the run) and `lo-orch
approve` (Gate 1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from loop_orchestrator.commands.repo import find_repo
from loop_orchestrator.config import Settings, load_settings
from loop_orchestrator.cost import usage
from loop_orchestrator.errors import GitError, UsageError
from loop_orchestrator.git import gateway as gitutil
from loop_orchestrator.git.gateway import git
from loop_orchestrator.plan import loading
from loop_orchestrator.plan import model as planmod
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.create import PlanSummary as PlanSummary
from loop_orchestrator.runstate.state import Store, now_iso
from loop_orchestrator.supervisor import notify
from loop_orchestrator.workspace import instances, workspace


def plan(
    repo: Path | None,
    *,
    file: Path | None = None,
    goal: str | None = None,
    issue: str | None = None,
    done: Sequence[str] = (),
    concurrency: int | None = None,
) -> PlanSummary:
    """`lo-orch plan FILE | --goal TEXT | --issue KEY [--done KEY]... [--concurrency N]`:
    exactly one source; nothing is written when the plan is invalid.

    ``repo`` is a folder in the repository (None: the current directory), found after the
    arguments are checked (a wrong call is a usage error wherever it is made).
    """
    given = [x for x in (file, goal, issue) if x]
    if len(given) != 1:
        msg = "give exactly one of FILE, --goal TEXT or --issue KEY"
        raise UsageError(msg, hint="For example: `lo-orch plan examples/plan.yaml`.")
    if done and issue is None:
        msg = "--done only goes with --issue KEY"
        raise UsageError(msg, hint="For example: `lo-orch plan --issue ABC-1 --done ABC-3`.")
    repo = find_repo(repo)
    overrides = {"run": {"concurrency": concurrency}} if concurrency else None
    settings = load_settings(repo, overrides=overrides)
    if file is not None:
        return plan_from_file(repo, file, settings)
    if goal is not None:
        return plan_from_goal(repo, goal, settings)
    assert issue is not None
    return plan_from_issue(repo, issue, settings, done=done)


def plan_from_file(repo: Path, file: Path, settings: Settings) -> PlanSummary:
    """`lo-orch plan FILE`: validate everything, then record the run."""
    loaded = loading.load_plan(file)
    return record_plan(repo, loaded, settings, source=file)


def record_plan(
    repo: Path, plan: planmod.Plan, settings: Settings, *, source: Path | None
) -> PlanSummary:
    """Record a validated plan as the repository's run, awaiting Gate 1."""
    head = git(repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
    if not plan.base and not head.ok:
        msg = f"{repo} has no commits yet: a run starts from a commit (its base)"
        raise GitError(
            msg,
            hint="Commit your files first (`git add -A && git commit -m "
            '"initial"`), then plan again. Nothing was written.',
        )
    base_ref = plan.base or "HEAD"
    base_sha = gitutil.rev_parse(repo, base_ref)
    runs.refuse_run_in_progress(Store.for_repo(repo))  # the clearest message first
    # the new run is a new instance: what an earlier run of the same name left is not its
    # own, and where that still holds the name the run gets a numbered name of its own
    choice = instances.choose(plan.run_name, instances.look(repo))
    created_at = now_iso()
    ws = workspace.Workspace(
        repo, choice.run, settings.workspace, instance=workspace.instance_of(created_at)
    )
    ws.check_branch_names([t.id for t in plan.tasks])
    ws.ensure_excludes()
    summary = runs.create_run(
        repo,
        plan,
        source=source,
        settings=settings,
        base_sha=base_sha,
        base_ref=base_ref,
        created_at=created_at,
        run_name=choice.run,
    )
    forecast = (
        usage.forecast_line(
            [t.complexity for t in plan.tasks],
            usage.prices_from(settings),
            settings.agent.model,
            run_budget=settings.run.max_cost_usd,
        )
        if settings.agent.kind == "claude"
        else f"Cost forecast: unknown (the agent, kind {settings.agent.kind}, is not Claude Code)."
    )
    summary = replace(
        summary,
        notes=(*summary.notes, forecast),
        checkout=repo,
        main_checkout=workspace.main_checkout(repo),
        held=choice.held,
        instance_note=(
            instances.notice(choice.run, choice.plan_name, summary.run.feature_branch)
            if choice.numbered
            else None
        ),
    )
    notify.for_plan(repo, choice.run, settings.notify, created_at, len(plan.tasks))
    return summary


def plan_from_goal(repo: Path, goal: str, settings: Settings) -> PlanSummary:
    """`lo-orch plan --goal`: the planning agent drafts a plan file, then as `plan FILE`."""
    # deferred: intake (a planner, trackers) costs `lo-orch plan FILE` 0.2 s it never uses
    from loop_orchestrator.intake import goal as intake_goal

    draft = intake_goal.draft_from_goal(repo, goal, settings)
    summary = plan_from_file(repo, draft.path, settings)
    summary = replace(summary, notes=(*summary.notes, *draft.notes))
    # what the planning calls cost, for Gate 2 (the new run's ledger)
    Store.for_repo(repo).append_ledger(
        "planning_usage",
        calls=draft.usage.calls,
        turns=draft.usage.turns,
        cost_usd=draft.usage.cost_usd,
        session_ids=draft.usage.session_ids,
    )
    return summary


def plan_from_issue(
    repo: Path, key: str, settings: Settings, *, done: Sequence[str] = ()
) -> PlanSummary:
    """`lo-orch plan --issue`: parent and children from the tracker, drafted, recorded.

    ``done`` names child keys to treat as done (partial resume) besides the tracker's own.
    """
    # deferred: as intake.goal above
    from loop_orchestrator.intake import issue as intake_issue

    draft = intake_issue.draft_from_issue(repo, key, settings, done_keys=done)
    summary = plan_from_file(repo, draft.path, settings)
    return replace(summary, notes=(*summary.notes, *draft.notes))


@dataclass(frozen=True)
class Approved:
    """What Gate 1 approved."""

    run: str
    plan_sha256: str
    tasks: int
    #: what the person should know (e.g. node labels the local backend ignores)
    note: str | None = None


def approve(repo: Path, *, shown_sha256: str | None = None) -> Approved:
    """`lo-orch approve`: Gate 1, bound to the plan's sha256.

    ``shown_sha256``: the plan a person was shown (the dashboard); a plan written since is
    refused, not approved.
    """
    state, approved = runs.approve_plan(repo, shown_sha256=shown_sha256)
    return Approved(
        run=state.name,
        plan_sha256=state.approved_plan_sha256 or "",
        tasks=len(approved.tasks),
        note=runs.ignored_labels_note(approved, load_settings(repo)),
    )
