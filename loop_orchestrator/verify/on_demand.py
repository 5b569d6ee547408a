"""``lo-orch audit TASK``: verification on demand, on the task's current commit."""

from __future__ import annotations

from pathlib import Path

from loop_orchestrator.config import Settings
from loop_orchestrator.errors import GitError, StateError
from loop_orchestrator.git import gateway as gitutil
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.state import Store
from loop_orchestrator.verify.models import Verdict
from loop_orchestrator.verify.verdict import verify_task
from loop_orchestrator.workspace import workspace


def task_commit(repo: Path, run_name: str, task_id: str, status_commit: str | None) -> str:
    """The commit to audit: the one in the task's status, else its branch tip."""

    if status_commit:
        return gitutil.rev_parse(repo, status_commit)
    branch = f"lo/{run_name}/{task_id}"
    try:
        return gitutil.rev_parse(repo, branch)
    except GitError as exc:
        msg = f"task {task_id!r} has no commit yet (no commit in its status, no branch {branch})"
        raise StateError(
            msg,
            hint="Audit it after its session signals impl_done and the supervisor commits it.",
        ) from exc


def audit_task(repo: Path, task_id: str, settings: Settings, *, use_llm: bool = True) -> Verdict:
    """Run every check on ``task_id``'s current commit against where the task began."""

    store = Store.for_repo(repo)
    rec, plan = runs.load_approved(repo)
    state = rec.run
    try:
        task = plan.task(task_id)
    except KeyError:
        known = ", ".join(t.id for t in plan.tasks) or "none"
        msg = f"no task {task_id!r} in the plan of run {state.name!r}"
        raise StateError(msg, hint=f"Known tasks: {known}.") from None
    status_commit = rec.task(task_id).commit
    commit = task_commit(repo, state.name, task_id, status_commit)
    brief_path = store.dirs.brief_path(task_id)
    brief = brief_path.read_text(encoding="utf-8") if brief_path.exists() else ""
    if not use_llm:
        settings = settings.model_copy(deep=True)
        settings.auditor.llm = "off"

    # measured from where the task began (staging at launch), not from the run's base,
    # which lacks the producers' work the task started from
    try:
        start = workspace.Workspace.for_run(repo, state, settings.workspace).task_start(task_id)
    except GitError:
        start = state.base_sha
    return verify_task(
        repo, store.dirs, task, start, commit, brief=brief, settings=settings, all_tasks=plan.tasks
    )
