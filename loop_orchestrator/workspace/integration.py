"""Integration and Gate 2: test staging as a whole, show the whole diff, land it, clean up.

Nothing reaches the feature branch except through ``merge``: it moves the branch to exactly
the staging commit the person reviewed, without a new merge commit, and refuses when
staging moved since the review. Integration, the review and the merge first compare the
run's refs with what lo-orch recorded (``Workspace.check_refs``) and work on the recorded
shas only, so a ref an agent moved is never tested, shown or landed.
"""

from __future__ import annotations

import contextlib
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from loop_orchestrator import proc
from loop_orchestrator.cluster import refs as cluster_refs
from loop_orchestrator.config import Settings, load_settings, load_tool_profile
from loop_orchestrator.cost import usage
from loop_orchestrator.errors import GateError, LoOrchError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.git import checkouts as tempcheckout
from loop_orchestrator.git import gateway as gitutil
from loop_orchestrator.plan.model import Plan
from loop_orchestrator.proc import check_memory_limit
from loop_orchestrator.runstate import comments as review_comments
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.journal import Record
from loop_orchestrator.runstate.state import (
    Phase,
    RunDir,
    RunPhase,
    RunState,
    Store,
    now_iso,
)
from loop_orchestrator.sessions.factory import run_backend
from loop_orchestrator.sessions.guard import refuse_in_session
from loop_orchestrator.verify import load_verdict
from loop_orchestrator.verify.review import gate2_notes
from loop_orchestrator.workspace import comments, instances, workspace


@dataclass
class IntegrationResult:
    passed: bool
    commit: str
    command: str | None
    exit_code: int | None
    summary: str
    evidence: Path | None
    output: str = ""


def integration_command(plan: Plan, settings: Settings, repo: Path) -> str | None:
    """Plan `verify` > settings [verify] command > the tool profile's `verify` role."""
    if plan.verify:
        return plan.verify
    if settings.verify.command:
        return settings.verify.command
    role = load_tool_profile(repo).get("verify", {})
    cmd = role.get("command") or (role.get("ref") if role.get("kind") == "cli" else None)
    return str(cmd) if cmd else None


def integrate(
    repo: Path, settings: Settings, plan: Plan, *, skipped: list[str], record: Record
) -> IntegrationResult:
    """Run the integration command on staging in a clean checkout; on success the run
    waits for Gate 2 (``awaiting_merge_review``), as the supervisor's record says."""
    store = Store.for_repo(repo)
    state = record.run
    ws = workspace.Workspace.for_run(repo, state, settings.workspace)
    commit = ws.branches.recorded(ws.staging_branch)
    command = integration_command(plan, settings, repo)
    evidence = store.dirs.task_evidence_dir("_integration")
    evidence.mkdir(parents=True, exist_ok=True)
    exit_code: int | None = 0
    if command:
        argv = shlex.split(command)
        with tempcheckout.temp_checkout(repo, commit, link_dependencies=True) as tree:
            result = proc.run(
                argv,
                cwd=tree,
                check=False,
                timeout=settings.verify.integration_timeout,
                memory_limit=check_memory_limit(settings.verify.check_memory_mb),
            )
        exit_code = result.returncode
        stem = f"integration-{commit[:12]}"
        atomic_write_text(evidence / f"{stem}.stdout.txt", result.stdout)
        atomic_write_text(evidence / f"{stem}.stderr.txt", result.stderr)
        atomic_write_text(
            evidence / f"{stem}.json",
            json.dumps(
                {
                    "command": argv,
                    "exit_code": exit_code,
                    "duration": result.duration,
                    "commit": commit,
                    "at": now_iso(),
                },
                indent=2,
            )
            + "\n",
        )
        if not result.ok:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-30:])
            summary = (
                f"integration command `{command}` "
                + ("timed out" if exit_code is None else f"exited {exit_code}")
                + f" on staging {commit[:12]}; output in {evidence}\n{tail}"
            )
            record.update_run(
                integration={
                    "command": command,
                    "exit_code": exit_code,
                    "commit": commit,
                    "passed": False,
                }
            )
            return IntegrationResult(
                False,
                commit,
                command,
                exit_code,
                summary,
                evidence,
                output=result.stdout + "\n" + result.stderr,
            )
        summary = f"integration command `{command}` passed on staging {commit[:12]}"
    else:
        summary = (
            f"no integration command configured (plan `verify`, [verify] command or the "
            f"tool profile's verify role); staging is {commit[:12]}"
        )

    record.update_run(
        integration={"command": command, "exit_code": exit_code, "commit": commit, "passed": True},
        skipped_tasks=skipped,
        phase=RunPhase.AWAITING_MERGE_REVIEW,
    )
    return IntegrationResult(True, commit, command, exit_code, summary, evidence)


@dataclass(frozen=True)
class Review:
    """What Gate 2 shows: bound to one staging commit."""

    state: RunState
    commit: str
    stat: str
    diff: str
    feature: str
    #: disputed findings and heuristic warnings of the integrated tasks, for the person
    notes: list[str] = field(default_factory=list)
    #: what each task's session cost, and the run's total (usage.summary_lines)
    costs: list[str] = field(default_factory=list)
    #: after review rounds: the staging commit the last changes were requested on, the
    #: diff since then, and each comment of that request answered (its lines changed) or not
    since: str | None = None
    diff_since: str = ""
    answers: list[comments.Answer] = field(default_factory=list)
    #: the comments recorded and not sent back yet, oldest first (`lo-orch request-changes`
    #: sends them; a merge leaves them unanswered)
    unsent: list[review_comments.Comment] = field(default_factory=list)


def _verdict_notes(repo: Path, rec: Record) -> list[str]:
    """Disputes and warnings of the verdicts the supervisor recorded."""

    rundir = RunDir(repo)
    verdicts = {}
    for tid, st in rec.tasks().items():
        if st.phase != Phase.INTEGRATED or not st.commit:
            continue
        verdict = load_verdict(rundir, tid, st.commit)
        # only the file the supervisor recorded: an edited one is not shown as its word
        if verdict is not None and rec.verdict_matches(tid, st.commit, verdict.model_dump_json()):
            verdicts[tid] = verdict
    return gate2_notes(verdicts)


def review(repo: Path, *, branch: str | None = None) -> Review:
    """What Gate 2 shows, from the supervisor's record (``run.json`` is only its view)."""
    refuse_in_session("lo-orch merge")
    rec = runs.open_record(repo)
    state = rec.run
    if state.phase != RunPhase.AWAITING_MERGE_REVIEW:
        raise _not_at_gate2(state)
    ws = workspace.Workspace.for_run(repo, state, load_settings(repo).workspace)
    commit = ws.branches.recorded(ws.staging_branch)
    base = ws.branches.base(state.base_sha)
    integration = state.integration or {}
    recorded = review_comments.of(rec)
    if recorded.pending():
        msg = "changes were requested and no supervisor has opened their review rounds yet"
        raise GateError(msg, hint="Run `lo-orch run`: the sessions get the comments first.")
    if integration.get("commit") != commit:
        msg = "staging moved since the integration tests ran"
        raise GateError(
            msg,
            hint="Run `lo-orch run` again to re-test it before the review.",
        )
    since, answers = comments.answers(repo, rec, commit)
    return Review(
        state=state,
        commit=commit,
        since=since,
        diff_since=gitutil.diff_text(repo, since, commit) if since else "",
        answers=answers,
        stat=gitutil.diff_stat(repo, base, commit),
        diff=gitutil.diff_text(repo, base, commit),
        feature=branch or state.feature_branch,
        notes=_verdict_notes(repo, rec),
        unsent=recorded.unsent(),
        costs=usage.summary_lines(
            {t: st.usage for t, st in runs.open_record(repo).tasks().items()},
            usage.headless_lines(
                RunDir(repo).evidence_dir,
                Store.for_repo(repo).read_ledger(),
                load_settings(repo).auditor.llm,
            ),
        ),
    )


def _not_at_gate2(state: RunState) -> GateError:
    """Why there is nothing to merge, and the next step that works from here."""
    name = state.name
    if state.phase == RunPhase.MERGED:
        sha = (state.merged_commit or "")[:12]
        msg = f"run {name!r} is already merged: {state.feature_branch} was set to {sha}"
        return GateError(
            msg,
            hint=f"Nothing more to do for it (`git log {state.feature_branch}`)."
            f" A new run needs a name of its own ({state.feature_branch} is yours "
            "now; plan field `name:`) and starts with `lo-orch plan FILE`.",
        )
    if state.phase == RunPhase.STOPPED:
        msg = f"run {name!r} was abandoned (`lo-orch cleanup --abandon`); nothing to merge"
        return GateError(msg, hint="Plan a new run with `lo-orch plan FILE`.")
    if state.phase == RunPhase.AWAITING_PLAN_APPROVAL:
        msg = f"run {name!r} has not started: its plan waits for Gate 1"
        return GateError(msg, hint="Approve it with `lo-orch approve`, then `lo-orch run`.")
    msg = f"run {name!r} is still running, not waiting for the merge review"
    return GateError(
        msg,
        hint="`lo-orch run` supervises it to Gate 2 (it stops there when "
        "every task is integrated and the integration command passed); "
        "`lo-orch status` shows what each task waits for.",
    )


@dataclass(frozen=True)
class Merged:
    """What Gate 2 did: the run's new state and what the clean-up removed or kept."""

    state: RunState
    cleanup: CleanupResult


def merge(repo: Path, reviewed: Review, *, merge_into: str | None = None) -> Merged:
    """Gate 2 passed: move the feature branch to exactly the reviewed commit, clean up."""
    refuse_in_session("lo-orch merge")
    store = Store.for_repo(repo)
    rec = runs.open_record(repo)
    state = rec.run
    if (
        state.phase != RunPhase.AWAITING_MERGE_REVIEW
        or (state.integration or {}).get("commit") != reviewed.commit
    ):
        msg = f"run {state.name!r} changed since the review was shown"
        raise GateError(msg, hint="Run `lo-orch merge` again to review the current result.")
    ws = workspace.Workspace.for_run(repo, state, load_settings(repo).workspace)
    ws.finish(reviewed.commit, feature=reviewed.feature, merge_into=merge_into)
    store.append_ledger(
        "gate2_merged", run=state.name, commit=reviewed.commit, feature=reviewed.feature
    )

    state = rec.update_run(
        phase=RunPhase.MERGED,
        # the branch Gate 2 set (`--branch` included): `lo-orch pr` pushes this one
        feature_branch=reviewed.feature,
        reviewed_commit=reviewed.commit,
        merged_commit=reviewed.commit,
        merged_at=now_iso(),
    )
    # staging is now the feature branch's history: keeping it would only invite a stale
    # staging for the next run of the same name
    cleaned = cleanup(repo, delete_staging=True)
    # checked once more (nothing may have moved it during the clean-up), then it is the
    # user's: lo-orch no longer watches or moves it
    ws.branches.check_refs()
    if gitutil.rev_parse(repo, reviewed.feature) != reviewed.commit:
        msg = f"{reviewed.feature} is not at the reviewed commit {reviewed.commit[:12]}"
        raise GateError(msg, hint="Inspect it with `git log`; nothing else was changed.")
    ws.branches.hand_over(reviewed.feature)
    return Merged(state, cleaned)


def reopen(repo: Path, tasks: list[str]) -> RunState:
    """A merged run back at Gate 2 for review rounds of ``tasks`` (what its pull request
    asked of them): staging recreated at the merged commit, each task's branch and
    worktree made again from it. The feature branch stays the user's: the next Gate 2 only
    moves it forward (``Staging.finish``), never over a commit of theirs."""
    refuse_in_session("lo-orch pr")
    rec = runs.open_record(repo)
    state = rec.run
    merged = state.merged_commit
    if state.phase != RunPhase.MERGED or not merged:
        msg = f"run {state.name!r} is {state.phase.value}, not merged: nothing to reopen"
        raise GateError(msg, hint="`lo-orch status` shows where it is.")
    ws = workspace.Workspace.for_run(repo, state, load_settings(repo).workspace)
    book = ws.branches
    if book.refs.get(book.staging_ref) is None:
        problem = book.clash(book.staging_branch, book.tips())
        book.raise_clashes([problem] if problem else [])
        book.create(book.staging_branch, merged)
    elif book.recorded(book.staging_branch) != merged:
        msg = f"{book.staging_branch} is not at the merged commit {merged[:12]}"
        raise GateError(msg, hint="`lo-orch status` shows the run; nothing was changed.")
    for task in tasks:
        ws.run_setup(ws.ensure_worktree(task))  # as at the task's first launch
    Store.for_repo(repo).append_ledger("run_reopened", run=state.name, commit=merged, tasks=tasks)
    return rec.update_run(phase=RunPhase.AWAITING_MERGE_REVIEW)


@dataclass(frozen=True)
class CleanupResult:
    session_killed: bool
    removed: list[str]
    kept_dirty: list[str]
    branches_deleted: list[str]
    branches_kept: list[str]
    #: why each kept worktree or branch was kept
    details: dict[str, str] = field(default_factory=dict)
    #: the run's cluster refs deleted (``refs/lo-orch/cluster/<run>/<task>/head`` ...)
    refs_deleted: list[str] = field(default_factory=list)
    #: a person's edits lo-orch saved from a remote task's local worktree (never deleted)
    refs_kept: list[str] = field(default_factory=list)
    #: a numbered instance: what still holds each earlier name of its plan's name (earlier
    #: runs' kept worktrees and branches, never touched), name -> what
    earlier: dict[str, list[str]] = field(default_factory=dict)


def cleanup(repo: Path, *, abandon: bool = False, delete_staging: bool = False) -> CleanupResult:
    """Kill the run's tmux session by exact name; remove clean worktrees; delete merged
    task branches. Dirty worktrees and unmerged branches are kept and listed."""
    if abandon:
        refuse_in_session("lo-orch cleanup --abandon")
    store = Store.for_repo(repo)
    state = store.read_run()
    plan, _ = runs.read_plan(store.dirs)
    backend = run_backend(state)
    killed = False
    with contextlib.suppress(LoOrchError):
        if backend.session_exists():
            backend.kill_session()
            killed = True
    rec = runs.open_record(repo) if Record.exists(repo, state.name) else None
    # the record's run when it is this run's (run.json is only its view)
    owner = rec.run if rec is not None and rec.run.created_at == state.created_at else state
    ws = workspace.Workspace.for_run(repo, owner, load_settings(repo).workspace)
    report = ws.cleanup([t.id for t in plan.tasks], delete_staging=delete_staging)
    if rec is None and abandon and state.phase == RunPhase.AWAITING_PLAN_APPROVAL:
        # never approved: there is no record, run.json is all there is
        store.append_ledger("run_abandoned", run=state.name)
        store.update_run(lambda s: setattr(s, "phase", RunPhase.STOPPED))
    if rec is not None:
        if abandon and rec.run.phase not in (RunPhase.MERGED,):
            store.append_ledger("run_abandoned", run=state.name)
            rec.update_run(phase=RunPhase.STOPPED)
        for st in rec.tasks().values():
            if st.phase in (Phase.INTEGRATED,) and st.pane_id:
                rec.update_task(st.task, pane_id=None)
    refs_deleted, refs_kept = _cluster_refs(repo, state.name, rec, report.kept_dirty)
    store.append_ledger(
        "cleanup",
        removed=report.removed,
        kept_dirty=report.kept_dirty,
        branches_deleted=report.branches_deleted,
        session_killed=killed,
        refs_deleted=refs_deleted,
        refs_kept=refs_kept,
    )
    return CleanupResult(
        killed,
        report.removed,
        report.kept_dirty,
        report.branches_deleted,
        report.branches_kept,
        report.details,
        refs_deleted,
        refs_kept,
        instances.earlier(repo, owner.name, owner.plan_name),
    )


def _cluster_refs(
    repo: Path, run: str, rec: Record | None, kept_dirty: list[str]
) -> tuple[list[str], list[str]]:
    """Drop the run's cluster working refs (``head``, ``wip``, ``out``, ``applied``) of every
    task whose worktree is gone, once the run is over (merged or stopped) or the task is
    integrated: a task still to be resumed keeps its checkpoint. ``kept/`` refs (a person's
    saved edits) stay and are listed."""

    found = cluster_refs.listing(repo, run)
    if not found:
        return [], []
    over = rec is None or rec.run.phase in (RunPhase.MERGED, RunPhase.STOPPED)
    tasks = rec.tasks() if rec is not None else {}
    names = {ref[len(cluster_refs.prefix(run)) :].partition("/")[0] for ref in found}
    done = {
        t
        for t in names
        if t not in kept_dirty and (over or (t in tasks and tasks[t].phase == Phase.INTEGRATED))
    }
    deleted = cluster_refs.drop(repo, run, done)
    return sorted(deleted), cluster_refs.kept(repo, run)
