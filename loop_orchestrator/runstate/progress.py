"""The status document behind `lo-orch status` and the dashboard: what each task waits for,
in plain words, and the table's rows and title (``commands.status`` calls it; the CLI and
the dashboard render it)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from loop_orchestrator.config import load_settings
from loop_orchestrator.cost import usage
from loop_orchestrator.errors import ClusterError, LoOrchError
from loop_orchestrator.plan import schedule
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.state import ACTIVE_PHASES, Phase, RunPhase, Store, TaskStatus
from loop_orchestrator.sessions.factory import run_backend
from loop_orchestrator.workspace.branches import Branches
from loop_orchestrator.workspace.workspace import instance_of


def status_document(repo: Path) -> dict[str, Any]:
    """``{"run": {...}, "tasks": [status objects]}`` (contract of `status --json`).

    Extended (additively): ``run.supervisor = {"alive", "pid"}`` — the process holding the
    supervisor lock now — and per task ``"waiting_for"``, what it waits for in plain words;
    ``run.usage``, the tasks' ``usage`` summed (usage.Usage.as_json; ``cost_usd`` None when
    any task's cost is unknown); ``run.quarantined``, ``[{"ref", "sha"}]``: what lo-orch
    found on a ref of the run that moved outside it, kept when it put the ref back (only
    those its refs book records for this run instance).
    """
    from loop_orchestrator.runstate.journal import Record
    from loop_orchestrator.supervisor.lock import lock_holder

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
    deps: dict[str, list[str]] = {}
    cap = 0
    try:
        plan, _ = runs.read_plan(store.dirs)
        order = {t.id: i for i, t in enumerate(plan.tasks)}
        deps = schedule.dependencies(plan)
        cap = plan.concurrency or load_settings(repo).run.concurrency
    except LoOrchError:
        pass
    statuses.sort(key=lambda s: (s.wave, order.get(s.task, 1 << 30), s.task))
    pid = lock_holder(store.dirs)
    phases = {s.task: s.phase for s in statuses}
    active = sum(1 for p in phases.values() if p in ACTIVE_PHASES)
    tasks = []
    for st in statuses:
        doc = st.model_dump(mode="json")
        doc["waiting_for"] = waiting_for(
            st,
            state.phase,
            alive=pid is not None,
            deps=deps.get(st.task, []),
            phases=phases,
            full=bool(cap) and active >= cap,
        )
        tasks.append(doc)
    run = state.model_dump(mode="json")
    run["supervisor"] = {"alive": pid is not None, "pid": pid}
    run["usage"] = usage.total(
        usage.Usage.from_json(t.get("usage")) for t in tasks if t.get("usage") is not None
    ).as_json()
    try:
        kept = Branches(repo, state.name, instance=instance_of(state.created_at)).kept()
    except (LoOrchError, OSError):
        # OSError: no private folder of the run here, and none can be made (a session on
        # a cluster node reads a copy of the run's files in a read-only sandbox)
        kept = []
    run["quarantined"] = [{"ref": ref, "sha": sha} for ref, sha in kept]
    return {"run": run, "tasks": tasks}


def quarantine_lines(doc: dict[str, Any]) -> list[str]:
    """What lo-orch put back and kept, in a person's words (one line a quarantine ref)."""
    lines = []
    for q in doc["run"].get("quarantined") or []:
        # refs/lo-orch/quarantine/<run>/<ref without refs/>/<time>
        ref = q["ref"].split("/", 4)[-1].rsplit("/", 1)[0].removeprefix("heads/")
        lines.append(
            f"{ref} was moved outside lo-orch and put back; what was found there is "
            f"kept: `git log {q['ref']}`"
        )
    return lines


#: hook events and signals as a person would say them (the status table's last activity)
PLAIN_EVENTS = {
    "SessionStart": "session started",
    "UserPromptSubmit": "prompt received",
    "Stop": "finished a turn",
    "StopFailure": "turn failed",
    "Notification": "asked for attention",
    "SessionEnd": "session ended",
    "PreCompact": "compacting its context",
    "plan_ready": "signalled plan ready",
    "impl_done": "signalled work done",
    "blocked": "signalled blocked",
}
_NOTIFICATIONS = {
    "permission_prompt": "asks for permission",
    "idle_prompt": "waiting for input",
}


def plain_event(task: dict[str, Any]) -> str:
    """The task's last session activity in plain words (never a hook name)."""
    event = task.get("last_event")
    if not event:
        return "-"
    if event == "Notification":
        return _NOTIFICATIONS.get(task.get("last_notification") or "", PLAIN_EVENTS[event])
    return PLAIN_EVENTS.get(event, str(event).replace("_", " "))


class Wait(StrEnum):
    """What a task waits for (``waiting_for`` says it in plain words)."""

    #: a person: help the blocked or failed task, then `lo-orch retry`
    RETRY = "retry"
    #: a person: Gate 2, `lo-orch merge`
    GATE_2 = "gate-2"
    #: a person: Gate 1, `lo-orch approve`
    GATE_1 = "gate-1"
    #: nothing: merged, done, or the run stopped
    MERGED = "merged"
    DONE = "done"
    STOPPED = "stopped"
    #: tasks it depends on, not integrated yet
    DEPENDENCIES = "dependencies"
    #: a free session slot (the concurrency limit)
    SLOT = "slot"
    #: a supervisor: none runs
    NO_SUPERVISOR = "no-supervisor"
    #: the supervisor to start it
    START = "start"
    #: a usage limit's reset (lo-orch resumes it then)
    LIMIT = "limit"
    #: a person: a permission request the PermissionRequest hook named (`lo-orch permit`)
    PERMISSION = "permission"
    #: a person: a permission prompt in its pane (`lo-orch attach`)
    PERMISSION_PROMPT = "permission-prompt"
    #: the agent: working, or starting
    AGENT = "agent"
    AGENT_START = "agent-start"
    #: verification of its commit
    VERIFICATION = "verification"
    #: its merge into staging
    STAGING = "staging"
    #: the supervisor's next step
    SUPERVISOR = "supervisor"


def wait_of(
    st: TaskStatus,
    run_phase: RunPhase,
    *,
    alive: bool,
    deps: list[str],
    phases: dict[str, Phase],
    full: bool,
) -> Wait:
    """What a task waits for: its dependencies, a free slot (the limit), the agent,
    verification, the supervisor, or a person."""
    if st.phase in (Phase.BLOCKED, Phase.FAILED):
        return Wait.RETRY
    if st.phase == Phase.INTEGRATED:
        if run_phase == RunPhase.AWAITING_MERGE_REVIEW:
            return Wait.GATE_2
        return Wait.MERGED if run_phase == RunPhase.MERGED else Wait.DONE
    if run_phase == RunPhase.AWAITING_PLAN_APPROVAL:
        return Wait.GATE_1
    if run_phase == RunPhase.STOPPED:
        return Wait.STOPPED
    if st.phase == Phase.PENDING:
        if _unmerged(deps, phases):
            return Wait.DEPENDENCIES
        if full:
            return Wait.SLOT
    if not alive:
        return Wait.NO_SUPERVISOR
    if st.phase == Phase.PENDING:
        return Wait.START
    if st.phase in (Phase.PLANNING, Phase.IMPLEMENTING, Phase.LAUNCHING):
        if st.limit_until and st.waiting_for:  # "waiting_limit: ...; lo-orch resumes it at"
            return Wait.LIMIT
        if st.waiting_for:  # a permission dialog, named by the PermissionRequest hook
            return Wait.PERMISSION
        if st.last_event == "Notification" and st.last_notification == "permission_prompt":
            return Wait.PERMISSION_PROMPT
        return Wait.AGENT if st.phase != Phase.LAUNCHING else Wait.AGENT_START
    if st.phase in (Phase.IMPL_DONE, Phase.VERIFYING):
        return Wait.VERIFICATION
    if st.phase == Phase.APPROVED:
        return Wait.STAGING
    return Wait.SUPERVISOR


def _unmerged(deps: list[str], phases: dict[str, Phase]) -> list[str]:
    return [d for d in deps if phases.get(d) != Phase.INTEGRATED]


#: each wait in plain words (``{task}``, ``{tasks}``, ``{named}``: the task, the tasks it
#: waits for, what the status names it waits for)
WAIT_TEXT = {
    Wait.RETRY: "a person: help it, then `lo-orch retry {task}`",
    Wait.GATE_2: "a person: Gate 2, `lo-orch merge`",
    Wait.GATE_1: "a person: Gate 1, `lo-orch approve`",
    Wait.MERGED: "nothing (merged)",
    Wait.DONE: "nothing (done)",
    Wait.STOPPED: "nothing (run stopped)",
    Wait.DEPENDENCIES: "tasks {tasks}",
    Wait.SLOT: "a free session slot (concurrency limit)",
    Wait.NO_SUPERVISOR: "the supervisor: none runs, `lo-orch run`",
    Wait.START: "the supervisor to start it",
    Wait.LIMIT: "{named}",
    Wait.PERMISSION: (
        "{named}; answer it with `lo-orch permit {task} allow|deny` "
        "(or in its pane: `lo-orch attach {task}`)"
    ),
    Wait.PERMISSION_PROMPT: "a person: a permission prompt, `lo-orch attach {task}`",
    Wait.AGENT: "the agent",
    Wait.AGENT_START: "the agent to start",
    Wait.VERIFICATION: "verification",
    Wait.STAGING: "merge into staging",
    Wait.SUPERVISOR: "the supervisor",
}


def waiting_for(
    st: TaskStatus,
    run_phase: RunPhase,
    *,
    alive: bool,
    deps: list[str],
    phases: dict[str, Phase],
    full: bool,
) -> str:
    """What a task waits for in plain words (with the command a person runs)."""
    wait = wait_of(st, run_phase, alive=alive, deps=deps, phases=phases, full=full)
    return WAIT_TEXT[wait].format(
        task=st.task, tasks=", ".join(_unmerged(deps, phases)), named=st.waiting_for or ""
    )


@dataclass(frozen=True)
class Panes:
    """What was seen of the run's panes: pane id -> alive, and why they could not be seen
    (the cluster's error, what is wrong and what to do), if so."""

    alive: dict[str, bool]
    problem: str | None = None


def panes_alive(repo: Path) -> Panes:
    """The run's panes ({} when its tmux session is gone); a cluster that cannot be reached
    is a problem to show, not a run whose panes are all gone."""
    state = Store.for_repo(repo).read_run()
    try:
        return Panes(run_backend(state).alive_panes())
    except ClusterError as exc:
        return Panes({}, exc.render())
    except LoOrchError:
        return Panes({})


def pane_cell(task: dict[str, Any], panes: Panes) -> str:
    """The task's pane in plain words: a merged task's pane was closed on purpose; one
    that could not be looked at is unknown."""
    pane_id = task.get("pane_id")
    if task.get("phase") == Phase.INTEGRATED.value:
        return "closed (done)"
    if not pane_id:
        return "-"
    if pane_id not in panes.alive:
        return "unknown" if panes.problem else "gone"
    return "alive" if panes.alive[pane_id] else "exited"


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


#: the columns of `lo-orch status` (the last one, the note, is cut to the width)
STATUS_HEADERS = (
    "task",
    "wave",
    "phase",
    "in phase",
    "waiting for",
    "rework",
    "last activity",
    "pane",
    "cost",
    "note",
)


def status_rows(
    repo: Path, doc: dict[str, Any], now: float | None = None, panes: Panes | None = None
) -> list[list[str]]:
    """One row per task for the status table, in plain words (``panes``: what was seen of
    the panes, looked at here when not given)."""
    now = time.time() if now is None else now
    alive = panes_alive(repo) if panes is None else panes
    rows = []
    for t in doc["tasks"]:
        since = t.get("phase_since") or t.get("updated_at")
        activity = plain_event(t)
        if activity != "-":
            activity += f" {age(t.get('last_event_at'), now)} ago"
        rows.append(
            [
                t["task"],
                str(t["wave"]),
                t["phase"],
                age(since, now),
                t.get("waiting_for") or "-",
                str(t["rework_count"]),
                activity,
                pane_cell(t, alive),
                usage.cell(t.get("usage")),
                " ".join((t.get("error") or t.get("note") or "").split()),
            ]
        )
    return rows


def with_nodes(
    doc: dict[str, Any], headers: Sequence[str], rows: list[list[str]]
) -> tuple[list[str], list[list[str]]]:
    """The status table with a ``node`` column after ``pane`` when some task's session runs
    on a cluster node (the task status' optional ``node``); else as it is."""
    nodes = [t.get("node") for t in doc["tasks"]]
    if not any(nodes):
        return list(headers), rows
    at = list(headers).index("pane") + 1
    return (
        [*headers[:at], "node", *headers[at:]],
        [[*row[:at], node or "-", *row[at:]] for row, node in zip(rows, nodes, strict=True)],
    )


def status_title(doc: dict[str, Any]) -> str:
    """The status header: the run's phase as it really is (a run whose supervisor is gone
    is not "running")."""
    run = doc["run"]
    sup = run.get("supervisor") or {}
    phase = run["phase"]
    title: str = f"Run {run['name']}: "
    if run.get("plan_name"):
        title = (
            f"Run {run['name']} (a new instance of run {run['plan_name']}, whose earlier "
            "worktrees and branches are left as they are): "
        )
    if phase == RunPhase.RUNNING.value:
        if sup.get("alive"):
            return title + f"running (supervisor pid {sup.get('pid')})"
        return title + "started, but no supervisor is running: `lo-orch run` resumes it"
    if phase == RunPhase.AWAITING_PLAN_APPROVAL.value:
        if run.get("approved_plan_sha256") == run.get("plan_sha256"):
            return title + "plan approved; `lo-orch run` starts it"
        return title + "waiting for Gate 1 (plan NOT approved: `lo-orch approve`)"
    if phase == RunPhase.AWAITING_MERGE_REVIEW.value:
        return title + "waiting for Gate 2: review and land it with `lo-orch merge`"
    if phase == RunPhase.MERGED.value:
        return title + f"merged ({(run.get('merged_commit') or '')[:12]})"
    return title + str(phase)
