"""Typed core functions behind the commands that are not owned by one domain module."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from loop_orchestrator import plan as planmod
from loop_orchestrator import runs, workspace
from loop_orchestrator.config import Settings
from loop_orchestrator.errors import LoOrchError
from loop_orchestrator.runs import PlanSummary
from loop_orchestrator.state import Store


def plan_from_file(repo: Path, file: Path, settings: Settings) -> PlanSummary:
    """`lo-orch plan FILE`: validate everything, then record the run."""
    plan = planmod.load_plan(file)
    return record_plan(repo, plan, settings, source=file)


def record_plan(
    repo: Path, plan: planmod.Plan, settings: Settings, *, source: Path | None
) -> PlanSummary:
    base_ref = plan.base or "HEAD"
    base_sha = workspace.rev_parse(repo, base_ref)
    ws = workspace.Workspace(repo, plan.run_name, settings.workspace)
    ws.check_branch_names([t.id for t in plan.tasks])
    ws.ensure_excludes()
    return runs.create_run(
        repo, plan, source=source, settings=settings, base_sha=base_sha, base_ref=base_ref
    )


def plan_from_goal(repo: Path, goal: str, settings: Settings) -> PlanSummary:
    """`lo-orch plan --goal`: the planning agent drafts a plan file, then as `plan FILE`."""
    from loop_orchestrator.intake import goal as intake_goal

    draft = intake_goal.draft_from_goal(repo, goal, settings)
    summary = plan_from_file(repo, draft.path, settings)
    summary.notes.extend(draft.notes)
    return summary


def plan_from_issue(
    repo: Path, key: str, settings: Settings, *, done: Sequence[str] = ()
) -> PlanSummary:
    """`lo-orch plan --issue`: parent and children from the tracker, drafted, recorded.

    ``done`` names child keys to treat as done (partial resume) besides the tracker's own.
    """
    from loop_orchestrator.intake import issue as intake_issue

    draft = intake_issue.draft_from_issue(repo, key, settings, done_keys=done)
    summary = plan_from_file(repo, draft.path, settings)
    summary.notes.extend(draft.notes)
    return summary


def status_document(repo: Path) -> dict[str, Any]:
    """``{"run": {...}, "tasks": [status objects]}`` (contract of `status --json`)."""
    from loop_orchestrator.record import Record

    store = Store.for_repo(repo)
    state = store.read_run()
    if Record.exists(repo, state.name) and state.approved_plan_sha256:
        # an approved run: what the supervisor recorded, not files anyone can edit
        rec = Record.open(repo, state.name)
        if rec.run.created_at == state.created_at:
            state = rec.run
            statuses = list(rec.tasks().values())
        else:
            statuses = store.list_statuses_lenient()
    else:
        statuses = store.list_statuses_lenient()
    order: dict[str, int] = {}
    try:
        plan, _ = runs.read_plan(store.dirs)
        order = {t.id: i for i, t in enumerate(plan.tasks)}
    except LoOrchError:
        pass
    statuses.sort(key=lambda s: (s.wave, order.get(s.task, 1 << 30), s.task))
    return {
        "run": state.model_dump(mode="json"),
        "tasks": [s.model_dump(mode="json") for s in statuses],
    }


def panes_alive(repo: Path) -> dict[str, bool]:
    """pane id -> alive for the run's tmux session ({} when there is none)."""
    from loop_orchestrator.sessions import TmuxBackend, run_socket

    state = Store.for_repo(repo).read_run()
    try:
        return TmuxBackend(state.name, socket=run_socket(state)).alive_panes()
    except LoOrchError:
        return {}


def alive_cell(pane_id: str | None, alive: dict[str, bool]) -> str:
    if not pane_id:
        return "-"
    if pane_id not in alive:
        return "gone"
    return "yes" if alive[pane_id] else "dead"


def age(iso: str | None, now: float | None = None) -> str:
    """``12s``, ``5m``, ``3h`` since an ISO timestamp; ``-`` when unknown."""
    if not iso:
        return "-"
    try:
        then = datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return "-"
    secs = max(0, int((now if now is not None else time.time()) - then))
    if secs < 120:
        return f"{secs}s"
    if secs < 7200:
        return f"{secs // 60}m"
    return f"{secs // 3600}h"


def watch_status(repo: Path) -> None:
    """A live status table until Ctrl-C (rich Live)."""
    from rich.live import Live
    from rich.table import Table

    def build() -> Table:
        doc = status_document(repo)
        table = Table(title=f"Run {doc['run']['name']}: {doc['run']['phase']}")
        for h in ("task", "wave", "phase", "rework", "last event", "age", "pane", "note"):
            table.add_column(h)
        now = time.time()
        alive = panes_alive(repo)
        for t in doc["tasks"]:
            table.add_row(
                t["task"],
                str(t["wave"]),
                t["phase"],
                str(t["rework_count"]),
                t.get("last_event") or "-",
                age(t.get("updated_at"), now),
                alive_cell(t.get("pane_id"), alive),
                (t.get("error") or t.get("note") or "")[:60],
            )
        return table

    with Live(build(), refresh_per_second=2) as live:
        while True:
            time.sleep(1)
            live.update(build())
