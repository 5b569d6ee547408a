"""What the dashboard shows, as plain functions over the run's published state (the same
readers as `lo-orch status`), testable without a terminal."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loop_orchestrator.columns import Frame
from loop_orchestrator.commands import session
from loop_orchestrator.commands import status as statuses
from loop_orchestrator.config import load_settings
from loop_orchestrator.cost import usage
from loop_orchestrator.errors import LoOrchError
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.progress import quarantine_lines
from loop_orchestrator.runstate.state import Phase, RunDir, RunPhase, Store
from loop_orchestrator.sessions.factory import run_backend
from loop_orchestrator.workspace import instances

if TYPE_CHECKING:
    from loop_orchestrator.commands.review import Comment
    from loop_orchestrator.commands.session import PermissionRequest

#: the selected task's ledger lines shown
LEDGER_LINES = 40


@dataclass
class Snapshot:
    """One reading of the run's published state."""

    doc: dict[str, Any]
    title: str
    gates: str
    #: the table's columns: `lo-orch status`'s, with ``node`` on a cluster
    headers: list[str]
    rows: list[list[str]]
    needs: list[str]
    #: task -> its status document (from ``doc``)
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: open permission requests, oldest first
    requests: list[PermissionRequest] = field(default_factory=list)


def gates_line(doc: dict[str, Any]) -> str:
    """Gate 1 and Gate 2 in plain words."""
    run = doc["run"]
    approved = run.get("approved_plan_sha256")
    if approved and approved == run.get("plan_sha256"):
        g1 = f"Gate 1 approved {(run.get('approved_at') or '')[:19]}"
    else:
        g1 = "Gate 1 waiting (g)"
    phase = run.get("phase")
    if phase == RunPhase.MERGED.value:
        g2 = (
            f"Gate 2 merged {(run.get('merged_commit') or '')[:12]} into "
            f"{run.get('feature_branch')}"
        )
    elif phase == RunPhase.AWAITING_MERGE_REVIEW.value:
        g2 = "Gate 2 waiting (m)"
    else:
        g2 = "Gate 2 not yet"
    return f"{g1}  ·  {g2}  ·  spent {usage.cell(run.get('usage'))}"


def needs_you(
    doc: dict[str, Any], requests: list[str] | None = None, asking: frozenset[str] = frozenset()
) -> list[str]:
    """What waits for a person, most urgent first: permission requests, a gate, a missing
    supervisor, blocked or failed tasks (with their reason), sessions asking on screen
    (not again for the tasks in ``asking``, whose request is listed already)."""
    run = doc["run"]
    out = list(requests or [])
    phase = run.get("phase")
    if phase == RunPhase.AWAITING_PLAN_APPROVAL.value and (
        run.get("approved_plan_sha256") != run.get("plan_sha256")
    ):
        out.append("Gate 1: the plan waits for your approval (g)")
    if phase == RunPhase.AWAITING_MERGE_REVIEW.value:
        out.append("Gate 2: review the diff and merge it (m)")
    if phase == RunPhase.RUNNING.value and not (run.get("supervisor") or {}).get("alive"):
        out.append("No supervisor is running: `lo-orch run` resumes the run")
    out += quarantine_lines(doc)
    for t in doc["tasks"]:
        why = " ".join((t.get("error") or t.get("note") or "").split())
        if t["phase"] in (Phase.BLOCKED.value, Phase.FAILED.value):
            out.append(f"{t['task']} is {t['phase']}: {why or 'no reason given'} (r retries)")
        elif (
            t["task"] not in asking
            and str(t.get("waiting_for")).startswith("a person")
            and (t["phase"] != Phase.INTEGRATED.value)
            and phase
            not in (RunPhase.AWAITING_PLAN_APPROVAL.value, RunPhase.AWAITING_MERGE_REVIEW.value)
        ):
            out.append(f"{t['task']}: {t['waiting_for']}")
    return out


def pending_requests(repo: Path) -> list[PermissionRequest]:
    """The run's open permission requests (``session.pending``), oldest first."""
    return list(session.pending(repo))


def request_line(req: PermissionRequest) -> str:
    what = req.command or req.file or req.summary or ""
    where = f" in {req.cwd}" if req.cwd else ""
    return f"{req.task} asks to use {req.tool}: {what}{where} (p answers)"


def load_snapshot(repo: Path, now: float | None = None) -> Snapshot:
    """The run as `lo-orch status --json` publishes it, in the dashboard's words."""
    report = statuses.status(repo, now=now)
    doc = report.document
    requests = pending_requests(repo)
    return Snapshot(
        doc=doc,
        title=report.title,
        gates=gates_line(doc),
        headers=list(report.headers),
        rows=[list(r) for r in report.rows],
        needs=needs_you(
            doc, [request_line(r) for r in requests], frozenset(r.task for r in requests)
        ),
        tasks={t["task"]: t for t in doc["tasks"]},
        requests=requests,
    )


def latest_review(rundir: RunDir, task: str) -> Path | None:
    """The task's last review file (``reviews/<task>-rN.md`` with the largest N)."""
    best: tuple[int, Path] | None = None
    for path in rundir.reviews_dir.glob(f"{task}-r*.md"):
        m = re.fullmatch(rf"{re.escape(task)}-r(\d+)\.md", path.name)
        if m and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), path)
    return best[1] if best else None


def read_text(path: Path, limit: int = 20000) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return text if len(text) <= limit else text[:limit] + "\n… (cut)"


def review_text(repo: Path, task: str) -> str:
    """The task's latest review and the names of its evidence files."""
    rundir = RunDir(repo)
    path = latest_review(rundir, task)
    parts = [f"{path.name}\n\n{read_text(path)}" if path else "No review yet."]
    evidence = rundir.task_evidence_dir(task)
    if evidence.is_dir():
        files = sorted(p for p in evidence.rglob("*") if p.is_file())
        if files:
            parts.append(f"Evidence ({evidence}):")
            parts.extend(f"  {p.relative_to(evidence)}  {p.stat().st_size} bytes" for p in files)
    return "\n".join(parts)


def ledger_lines(repo: Path, task: str, limit: int = LEDGER_LINES) -> list[str]:
    """The task's last ledger events, one line each."""
    lines = []
    for e in Store.for_repo(repo).read_ledger():
        if e.get("task") != task:
            continue
        rest = e.get("message") or ", ".join(
            f"{k}={v}" for k, v in e.items() if k not in ("ts", "event", "task")
        )
        rest = " ".join(str(rest).split())
        lines.append(f"{str(e.get('ts', ''))[11:19]} {e.get('event')} {rest}")
    return lines[-limit:]


def pane_preview(repo: Path, doc: dict[str, Any], task: str) -> str:
    """What the task's pane shows now (only that pane is captured)."""
    from loop_orchestrator.runstate.state import RunState

    t = next((x for x in doc["tasks"] if x["task"] == task), None)
    if t is None or not t.get("pane_id"):
        return f"{task} has no session ({t['phase'] if t else 'unknown task'})."
    if t["phase"] == Phase.INTEGRATED.value:
        return f"{task} is done: its pane was closed."
    run = RunState.model_validate(doc["run"])
    try:
        backend = run_backend(run)
        return str(backend.capture(t["pane_id"], lines=0)).rstrip()
    except LoOrchError as exc:
        return f"(no screen: {exc.message})"


def gate1_text(repo: Path) -> tuple[str, str]:
    """(the plan sha256 shown, the Gate 1 summary and conflict matrix as text)."""
    from loop_orchestrator.plan import schedule

    store = Store.for_repo(repo)
    state = store.read_run()
    plan, _ = runs.read_plan(store.dirs)
    deps = schedule.dependencies(plan)
    waves = {s.task: s.wave for s in store.list_statuses_lenient()}
    lines = [
        f"Run {state.name}: {plan.goal}",
        *(
            [instances.notice(state.name, state.plan_name, state.feature_branch)]
            if state.plan_name
            else []
        ),
        f"Base {state.base_ref} @ {state.base_sha[:12]}; plan sha256 {state.plan_sha256[:12]}",
        "",
        f"{'task':<20} {'wave':>4}  {'owns':<40} depends on",
    ]
    for t in plan.tasks:
        lines.append(
            f"{t.id:<20} {waves.get(t.id, 0):>4}  {', '.join(t.owns)[:40]:<40} "
            f"{', '.join(deps[t.id]) or '-'}"
        )
    lines += [
        "",
        f"{len(plan.tasks)} sessions, at most "
        f"{plan.concurrency or load_settings(repo).run.concurrency} at once.",
        "",
    ]
    lines.append(read_text(store.dirs.conflict_matrix))
    return state.plan_sha256, "\n".join(lines)


def split_diff(diff: str) -> list[tuple[str, str]]:
    """A unified diff cut into (path, that file's diff), in order."""
    out: list[tuple[str, str]] = []
    chunks = re.split(r"(?m)^(?=diff --git )", diff)
    for chunk in chunks:
        if not chunk.startswith("diff --git "):
            continue
        head = chunk.split("\n", 1)[0]
        m = re.match(r"diff --git a/(.*) b/(.*)$", head)
        out.append((m.group(2) if m else head, chunk))
    return out


# the task table at any width ---------------------------------------------------------

#: what the dashboard's DataTable draws besides its columns' text: one cell of padding each
#: side of a column, and its vertical scrollbar
TABLE_FRAME = Frame(per_column=2, fixed=2)


# Gate 2: the hunks of a file's diff ----------------------------------------------------

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class Hunk:
    """One hunk of a file's diff: its text (the ``@@`` line and what follows) and the line of
    the reviewed commit a comment on it points at (None: the file is gone there)."""

    text: str
    line: int | None


def split_hunks(file_diff: str) -> list[Hunk]:
    """A file's diff (one ``diff --git`` section) cut into its hunks, in order; a diff with
    none (a binary file, a mode change) is one hunk of its header, on no line."""
    gone = "\n+++ /dev/null" in file_diff
    chunks = re.split(r"(?m)^(?=@@ )", file_diff)
    hunks = []
    for chunk in chunks[1:]:
        m = _HUNK.match(chunk)
        if m is None:
            continue
        new_start, new_count = int(m.group(3)), int(m.group(4) or 1)
        hunks.append(Hunk(chunk, None if gone else _comment_line(chunk, new_start, new_count)))
    return hunks or [Hunk(file_diff, None)]


def _comment_line(hunk: str, start: int, count: int) -> int | None:
    """The reviewed commit's line a comment on ``hunk`` points at: its first added line;
    for one that only removes lines, the line before them (else the one after). ``start``
    and ``count`` are the new side's (an empty side starts at the line before it)."""
    if count == 0:
        return start or None
    line, removed = start, None
    for text in hunk.splitlines()[1:]:
        if text.startswith("+"):
            return line
        if text.startswith(" "):
            line += 1
        elif text.startswith("-") and removed is None:
            removed = line
    if removed is None:
        return start
    return removed - 1 if removed > start else removed


def comment_line(c: Comment) -> str:
    """A recorded comment in one line: its id, where it points, its task and its words."""
    where = (c.path or "-") + (f":{c.line}" if c.line else "")
    words = " ".join(c.text.split())
    return f"{c.id} on {where} for {c.task}: {words[:60] + '…' if len(words) > 60 else words}"
