"""A run's life on disk before and around the supervisor: create from a plan, Gate 1.

``create_run`` is `lo-orch plan`: everything is validated and computed first, then written
(plan.json, conflict matrix, run.json, one pending status per task). ``approve_plan`` is
Gate 1, bound to the plan's sha256; ``load_approved`` is what `lo-orch run` checks.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loop_orchestrator import templating
from loop_orchestrator.config import Settings
from loop_orchestrator.errors import GateError, StateError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.plan import loading, schedule
from loop_orchestrator.plan import model as planmod
from loop_orchestrator.plan.model import Plan
from loop_orchestrator.runstate import journal as record
from loop_orchestrator.runstate.journal import NoRecordError, Record
from loop_orchestrator.runstate.state import (
    ACTIVE_PHASES,
    Phase,
    RunDir,
    RunPhase,
    RunState,
    Store,
    TaskStatus,
    now_iso,
)
from loop_orchestrator.sessions.guard import refuse_in_session
from loop_orchestrator.supervisor import lifecycle

if TYPE_CHECKING:
    from loop_orchestrator.runstate.journal import Record


@dataclass(frozen=True)
class PlanSummary:
    """What Gate 1 shows a person: the split, the waves, the ownership matrix."""

    run: RunState
    plan: Plan
    waves: list[list[str]]
    deps: dict[str, list[str]]
    concurrency: int
    matrix_path: Path
    replaced_previous: bool = False
    #: extra lines for the person (where a drafted plan was saved, what the agent cost)
    notes: tuple[str, ...] = ()
    #: the checkout the run works on, and its main checkout when that is a linked worktree
    checkout: Path | None = None
    main_checkout: Path | None = None
    #: a numbered instance (``run.plan_name`` set): what holds each name it passed over
    held: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: what Gate 1 says of a numbered instance (None: the run has its plan's name)
    instance_note: str | None = None


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def effective_concurrency(plan: Plan, settings: Settings) -> int:
    return plan.concurrency or settings.run.concurrency


def ignored_labels_note(plan: Plan, settings: Settings) -> str | None:
    """A warning when tasks ask for node labels that the local tmux backend ignores."""
    if settings.cluster.backend != "tmux":
        return None
    asking = [t.id for t in plan.tasks if t.node_labels]
    if not asking:
        return None
    return (
        f"Warning: node_labels of {', '.join(asking)} are ignored: [cluster] backend = "
        '"tmux" runs every session on this machine (set backend = "ray" to place them by '
        "label; docs/cluster.md)."
    )


def _shared_paths(plan: Plan) -> list[dict[str, Any]]:
    owners: dict[str, list[str]] = {}
    for t in plan.tasks:
        for p in t.owns:
            owners.setdefault(p, []).append(t.id)
    return [{"path": p, "tasks": ts} for p, ts in owners.items() if len(ts) > 1]


def _write_plan_json(
    rundir: RunDir, plan: Plan, source: Path | None, waves: list[list[str]]
) -> str:
    sha = planmod.plan_hash(plan)
    doc = {
        "sha256": sha,
        "source": str(source) if source else None,
        "source_sha256": file_sha256(source) if source and source.exists() else None,
        "waves": waves,
        "plan": plan.model_dump(mode="json"),
    }
    atomic_write_text(rundir.plan_json, json.dumps(doc, indent=2) + "\n")
    return sha


def read_plan(rundir: RunDir) -> tuple[Plan, dict[str, Any]]:
    """The plan in plan.json (re-validated) and the document around it."""
    path = rundir.plan_json
    if not path.exists():
        msg = f"no plan in {rundir.root}"
        raise StateError(
            msg,
            hint="Create one with `lo-orch plan FILE`.",
        )
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        msg = f"{path} is not valid JSON: {exc}"
        raise StateError(msg, hint="Run `lo-orch plan FILE` again.") from exc
    plan = loading.validate_plan_data(doc.get("plan"), str(path))
    return plan, doc


def _in_progress(store: Store) -> list[TaskStatus]:
    return [s for s in store.list_statuses() if s.phase != Phase.PENDING]


def refuse_run_in_progress(store: Store) -> bool:
    """Refuse to plan over a run whose tasks started and that is not merged or stopped.

    Returns whether a previous (unstarted or finished) run exists and will be replaced.
    """
    if not store.has_run():
        return False
    previous = store.read_run()
    started = _in_progress(store)
    if previous.phase not in (RunPhase.MERGED, RunPhase.STOPPED) and started:
        msg = f"run {previous.name!r} is in progress ({len(started)} task(s) started)"
        raise StateError(
            msg,
            hint="Finish it with `lo-orch run` and `lo-orch merge`, or abandon it with "
            "`lo-orch cleanup --abandon`, before planning a new run.",
        )
    return True


def create_run(
    repo: Path,
    plan: Plan,
    *,
    source: Path | None,
    settings: Settings,
    base_sha: str,
    base_ref: str,
    created_at: str | None = None,
    run_name: str | None = None,
) -> PlanSummary:
    """Record a validated plan as the repository's current run (awaiting Gate 1).

    ``run_name``: the instance of the plan's name the run is (``workspace.instances``;
    default the plan's name itself).
    """
    rundir = RunDir(repo)
    store = Store(rundir)
    cap = effective_concurrency(plan, settings)
    deps = schedule.dependencies(plan)
    waves = schedule.waves(plan, cap)
    wave_of = {tid: n for n, w in enumerate(waves, start=1) for tid in w}

    replaced = refuse_run_in_progress(store)

    run_name = run_name or plan.run_name
    now = created_at or now_iso()
    state = RunState(
        name=run_name,
        repo=str(rundir.repo),
        base_ref=base_ref,
        base_sha=base_sha,
        staging_branch=f"lo/{run_name}/staging",
        feature_branch=f"feat/{run_name}",
        plan_sha256=planmod.plan_hash(plan),
        plan_source=str(source.resolve()) if source else None,
        plan_source_sha256=file_sha256(source) if source and source.exists() else None,
        created_at=now,
        plan_name=plan.run_name if run_name != plan.run_name else None,
    )
    matrix = templating.render(
        "conflict_matrix.md.j2",
        run=run_name,
        goal=plan.goal,
        sha256=state.plan_sha256,
        waves=waves,
        tasks=plan.tasks,
        wave_of=wave_of,
        deps=deps,
        done_tasks=plan.done_tasks,
        shared=_shared_paths(plan),
    )

    # Everything is computed: now write. A previous (finished or unstarted) run's
    # per-task files are cleared so `status` shows exactly this plan.
    if replaced:
        for folder in (rundir.status_dir, rundir.briefs_dir, rundir.plans_dir):
            if folder.is_dir():
                shutil.rmtree(folder)
    rundir.root.mkdir(parents=True, exist_ok=True)
    _write_plan_json(rundir, plan, source, waves)
    atomic_write_text(rundir.conflict_matrix, matrix)
    for t in plan.tasks:
        store.write_status(TaskStatus(task=t.id, wave=wave_of[t.id]))
    store.write_run(state)
    store.append_ledger(
        "plan_recorded",
        run=run_name,
        plan_sha256=state.plan_sha256,
        tasks=len(plan.tasks),
        waves=len(waves),
        base_sha=base_sha,
        **({"plan_name": state.plan_name} if state.plan_name else {}),
    )
    note = ignored_labels_note(plan, settings)
    return PlanSummary(
        state,
        plan,
        waves,
        deps,
        cap,
        rundir.conflict_matrix,
        replaced,
        notes=(note,) if note else (),
    )


def approve_plan(repo: Path, *, shown_sha256: str | None = None) -> tuple[RunState, Plan]:
    """Gate 1: approve the current plan, bound to its sha256, and begin the run's record.

    The approval is kept in the supervisor's own record (``record.start``), not only in
    ``run.json``: an agent that edits ``run.json`` approves nothing. ``shown_sha256``: the
    plan a person was shown (the dashboard); compared with the plan read here, the one
    approved, so a plan written since (even during this call) is refused, not approved.
    """

    refuse_in_session("lo-orch approve")
    store = Store.for_repo(repo)
    state = store.read_run()
    plan, _ = read_plan(store.dirs)
    check_plan_unchanged(state, plan)
    sha = planmod.plan_hash(plan)
    if shown_sha256 is not None and sha != shown_sha256:
        # the person approves what they saw, not a plan written since
        msg = "the plan changed while Gate 1 was shown; nothing was approved"
        raise StateError(msg, hint="Press g to review the current plan.")

    def approve(s: RunState) -> None:
        s.approved_plan_sha256 = sha
        s.approved_at = now_iso()

    state = store.update_run(approve)
    waves = _waves_of(store)
    record.start(repo, state, [TaskStatus(task=t.id, wave=waves.get(t.id, 0)) for t in plan.tasks])
    store.append_ledger("gate1_approved", run=state.name, plan_sha256=sha)
    return state, plan


def _waves_of(store: Store) -> dict[str, int]:
    """Each task's wave as `lo-orch plan` published it (display only)."""
    waves = {}
    for st in store.list_statuses_lenient():
        waves[st.task] = st.wave
    return waves


def open_record(repo: Path) -> Record:
    """The supervisor's record of the repository's current run (raises if none)."""

    store = Store.for_repo(repo)
    return Record.open(repo, store.read_run().name)


def check_plan_unchanged(state: RunState, plan: Plan) -> None:
    """Refuse when plan.json or its source file changed since `lo-orch plan`."""
    sha = planmod.plan_hash(plan)
    if sha != state.plan_sha256:
        msg = "the recorded plan changed since `lo-orch plan` (its sha256 differs)"
        raise GateError(
            msg,
            hint="Run `lo-orch plan FILE` again and approve the result.",
        )
    if state.plan_source and state.plan_source_sha256:
        source = Path(state.plan_source)
        if source.exists() and file_sha256(source) != state.plan_source_sha256:
            msg = f"{source} was edited after `lo-orch plan`"
            raise GateError(
                msg,
                hint=f"Run `lo-orch plan {source}` again, review it and `lo-orch approve`.",
            )


def load_approved(repo: Path) -> tuple[Record, Plan]:
    """The run's record and plan, only if Gate 1 approved exactly this plan.

    The approval is the one in the supervisor's record; ``plan.json`` must still hash to
    it (an edited plan is refused, whatever ``run.json`` says).
    """

    store = Store.for_repo(repo)
    state = store.read_run()
    plan, _ = read_plan(store.dirs)
    check_plan_unchanged(state, plan)  # the clearest message when a file was edited
    try:
        rec = open_record(repo)
    except NoRecordError:
        rec = None
    # an approval recorded for an earlier plan of the same run name is no approval
    approved = (
        rec.state.approved_plan_sha256 if rec and rec.run.created_at == state.created_at else None
    )
    sha = planmod.plan_hash(plan)
    if approved != sha:
        what = "has not been approved" if not approved else "changed after it was approved"
        msg = f"the plan of run {state.name!r} {what} (Gate 1)"
        raise GateError(
            msg,
            hint="Review it with `lo-orch status` and the conflict matrix, then `lo-orch approve`.",
        )
    assert rec is not None
    check_plan_unchanged(rec.run, plan)
    return rec, plan


def retry_task(
    repo: Path, task: str, *, note: str | None = None, budget: float | None = None
) -> TaskStatus:
    """A person unblocks a blocked or failed task: it goes back to work with a fresh rework
    budget and relaunch, through a new rework round whose review carries ``note``. After
    the integration command failed in a way lo-orch could not route, a person can also
    send an integrated task back (its branch gets staging merged in first).

    A task that never got a worktree starts from the top; one that was planning plans
    again; anything further gets a rework prompt. The supervisor (running, or the next
    `lo-orch run`) delivers the prompt, relaunching the session if it is gone.

    ``budget`` (dollars, `--budget`) becomes the task's total budget, over the plan's and
    the config's, and lets it start although the run's budget is spent. A task blocked for
    its budget and retried without a larger one is blocked again at its next turn end.
    """

    refuse_in_session("lo-orch retry")
    store = Store.for_repo(repo)
    rec, _plan = load_approved(repo)
    state = rec.run
    st = rec.task(task)
    failed_integration = bool(state.integration) and not (state.integration or {}).get("passed")
    reopen = st.phase == Phase.INTEGRATED and failed_integration
    if st.phase not in (Phase.BLOCKED, Phase.FAILED) and not reopen:
        msg = (
            f"task {task!r} is {st.phase.value}; only a blocked or failed task (or, after "
            "the integration command failed, an integrated one) can be retried"
        )
        raise StateError(msg, hint="`lo-orch status` shows every task's phase.")
    if budget is not None and not (budget > 0 and math.isfinite(budget)):
        msg = f"--budget must be a positive number of dollars, not {budget!r}"
        raise StateError(msg, hint=f"For example: `lo-orch retry {task} --budget 5`.")
    spent = (st.usage or {}).get("cost_usd")
    if budget is not None and isinstance(spent, (int, float)) and budget <= spent:
        msg = (
            f"--budget {budget:g} is not more than task {task!r} has spent already "
            f"(${spent:.4f}); the budget is the task's total, not an addition"
        )
        raise StateError(
            msg,
            hint=f"Give a larger total, e.g. `lo-orch retry {task} "
            f"--budget {math.ceil(spent * 2 + 1)}`.",
        )
    reason = st.error or st.note or st.phase.value
    if reopen:
        reason = (
            f"its work is merged, but the integration command "
            f"`{(state.integration or {}).get('command')}` fails on staging "
            f"(output under {store.dirs.task_evidence_dir('_integration')})"
        )
    who = note or "a person asked to try again"
    changes: dict[str, Any] = {
        "error": None,
        "relaunches": 0,
        "node_losses": 0,
        "nudged": False,
        "delivered": None,
        "delivering": None,
        "stop_blocks": 0,
        "limit_until": None,
        "limit_kind": None,
        "note": f"retried: {who}",
    }
    if budget is not None:
        changes["budget_usd"] = budget
    plan_written = store.dirs.agent_plan_path(task).exists()
    if not st.worktree:
        event = lifecycle.Event.RETRY_START
    elif st.rework_count == 0 and not st.commit and not plan_written:
        event = lifecycle.Event.RETRY_PLAN
    else:
        event = lifecycle.Event.RETRY_IMPLEMENT
        round_no = st.rework_count + 1
        review = store.dirs.review_path(task, round_no)
        atomic_write_text(
            review,
            (
                f"# Review of task `{task}`, round {round_no}: retried by a person\n\n"
                f"The task was {st.phase.value}: {reason}\n\n"
                f"What the person says: {who}\n\n"
                "Pick up from where the work stands in your worktree, run every check of the "
                "definition of done yourself, then signal `impl_done`. Never weaken, skip or "
                "delete a test to pass a check.\n"
            ),
        )
        changes |= {"rework_count": round_no, "extra_rounds": round_no}
    changes["phase"] = lifecycle.next_phase(st.phase, event)
    store.append_ledger(
        "task_retried",
        task=task,
        run=state.name,
        phase=changes["phase"].value,
        previous=st.phase.value,
        reason=reason,
        note=note,
        **({"budget_usd": budget} if budget is not None else {}),
    )
    new = rec.update_task(task, **changes)
    if state.phase in (RunPhase.AWAITING_MERGE_REVIEW,) or reopen:
        # the reviewed result left this task out: it must be integrated and tested again
        rec.update_run(phase=RunPhase.RUNNING)
    return new


#: the longest message a person can send to a session (a prompt, not a file)
MAX_MESSAGE_CHARS = 8000


def send_message(repo: Path, task: str, text: str) -> str:
    """A person's words for ``task``'s session (`lo-orch send`): recorded in the supervisor's
    record, and delivered by the supervisor like any prompt (bracketed paste, Enter,
    confirmed), never typed into the pane by this process. The message's id.

    Refused from inside a managed session: an agent must not speak for the person.
    """

    refuse_in_session("lo-orch send")
    body = text.strip()
    if not body:
        msg = "the message is empty"
        raise StateError(
            msg,
            hint=f"Say what the session should do, e.g. "
            f'`lo-orch send {task} "run the tests again"`.',
        )
    if len(body) > MAX_MESSAGE_CHARS:
        msg = f"the message has {len(body)} characters; at most {MAX_MESSAGE_CHARS} are sent"
        raise StateError(
            msg,
            hint="Put long text in a file in the task's worktree and send "
            "a short message that names it.",
        )
    rec, _plan = load_approved(repo)
    st = rec.task(task)  # an unknown task: StateError naming it
    # a blocked session may be waiting for exactly these words
    if st.phase not in ACTIVE_PHASES | {Phase.BLOCKED} or not st.pane_id:
        msg = f"task {task!r} is {st.phase.value} and has no session to send to"
        raise StateError(
            msg,
            hint="`lo-orch status` shows which tasks have a session; a "
            f"blocked or failed one goes back to work with `lo-orch retry {task} "
            '--note "..."`.',
        )
    mid = uuid.uuid4().hex[:12]
    rec.append("message", id=mid, task=task, text=body)
    Store.for_repo(repo).append_ledger("message_sent", task=task, id=mid, chars=len(body))
    return mid
