"""`lo-orch dashboard`: one full-screen place to watch a run and answer it (issue 17).

The view is the run's published state, read by the same functions as `lo-orch status`
(``core.status_document``, ``core.status_rows``), refreshed when a file under
``.orchestration/`` changes (watchdog; a rename of a temp file counts) and on a slow clock
for the ages. Only the selected task's pane is captured, through the run's ``TmuxBackend``.

Every action calls the function behind the command it mirrors, so it keeps that command's
rules (a gate is refused from inside a managed session, Gate 2 is bound to the reviewed
commit): attach (``sessions.attach_command``, with the app suspended), send
(``runs.send_message``), retry (``runs.retry_task``), Gate 1 (``runs.approve_plan``) and
Gate 2 (``gate2.review`` then ``gate2.merge``). A gate is a person's act: each asks for a
confirmation whose default is "no".
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rich.markup import escape
from rich.syntax import Syntax
from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Input, Label, OptionList, Static, TabbedContent
from textual.widgets import TabPane as Tab

# imported before the app runs: libtmux reads sys.stdout.encoding at import, and inside a
# running Textual app sys.stdout is Textual's capture object, which has none
from loop_orchestrator import core, runs, sessions, usage
from loop_orchestrator.config import load_settings
from loop_orchestrator.errors import LoOrchError, StateError
from loop_orchestrator.state import Phase, RunDir, RunPhase, Store

log = logging.getLogger(__name__)

#: file events closer together than this are one reload
DEBOUNCE_SECONDS = 0.2
#: and a busy run (64 sessions writing) is read at most once in this long, like
#: `status --watch` (benchmarks/dashboard.py)
MIN_RELOAD_SECONDS = 1.0
#: the clock for the ages and the supervisor's liveness (a dead process writes no file)
TICK_SECONDS = 5.0
#: how often the selected task's pane is captured while its tab is shown
PANE_SECONDS = 1.0
LEDGER_LINES = 40


# what the view shows (plain functions, testable without a terminal) ----------------------


@dataclass
class Snapshot:
    """One reading of the run's published state."""

    doc: dict[str, Any]
    title: str
    gates: str
    rows: list[list[str]]
    needs: list[str]
    #: task -> its status document (from ``doc``)
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: open permission requests (``permissions.PermissionRequest``), oldest first
    requests: list[Any] = field(default_factory=list)


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
        g2 = (f"Gate 2 merged {(run.get('merged_commit') or '')[:12]} into "
              f"{run.get('feature_branch')}")
    elif phase == RunPhase.AWAITING_MERGE_REVIEW.value:
        g2 = "Gate 2 waiting (m)"
    else:
        g2 = "Gate 2 not yet"
    return f"{g1}  ·  {g2}  ·  spent {usage.cell(run.get('usage'))}"


def needs_you(doc: dict[str, Any], requests: list[str] | None = None) -> list[str]:
    """What waits for a person, most urgent first: permission requests, a gate, a missing
    supervisor, blocked or failed tasks (with their reason), sessions asking on screen."""
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
    for t in doc["tasks"]:
        why = " ".join((t.get("error") or t.get("note") or "").split())
        if t["phase"] in (Phase.BLOCKED.value, Phase.FAILED.value):
            out.append(f"{t['task']} is {t['phase']}: {why or 'no reason given'} (r retries)")
        elif t.get("waiting_for") and str(t["waiting_for"]).startswith("a person") and (
            t["phase"] != Phase.INTEGRATED.value
        ) and phase not in (RunPhase.AWAITING_PLAN_APPROVAL.value,
                            RunPhase.AWAITING_MERGE_REVIEW.value):
            out.append(f"{t['task']}: {t['waiting_for']}")
    return out


def permissions_module() -> Any | None:
    """``loop_orchestrator.permissions`` (issue 17a: `lo-orch permit`), when installed.

    Looked up by name so the dashboard works (without its permit action) in a tree that
    does not have it yet.
    """
    try:
        return importlib.import_module("loop_orchestrator.permissions")
    except ModuleNotFoundError:
        return None


def pending_requests(repo: Path) -> list[Any]:
    """The run's open permission requests (``permissions.pending``), [] without them."""
    perms = permissions_module()
    return list(perms.pending(repo)) if perms is not None else []


def request_line(req: Any) -> str:
    what = req.command or req.file or req.summary or ""
    where = f" in {req.cwd}" if req.cwd else ""
    return f"{req.task} asks to use {req.tool}: {what}{where} (p answers)"


def load_snapshot(repo: Path, now: float | None = None) -> Snapshot:
    """The run as `lo-orch status --json` publishes it, in the dashboard's words."""
    doc = core.status_document(repo)
    requests = pending_requests(repo)
    return Snapshot(
        doc=doc,
        title=core.status_title(doc),
        gates=gates_line(doc),
        rows=core.status_rows(repo, doc, now),
        needs=needs_you(doc, [request_line(r) for r in requests]),
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


def _read(path: Path, limit: int = 20000) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return text if len(text) <= limit else text[:limit] + "\n… (cut)"


def review_text(repo: Path, task: str) -> str:
    """The task's latest review and the names of its evidence files."""
    rundir = RunDir(repo)
    path = latest_review(rundir, task)
    parts = [f"{path.name}\n\n{_read(path)}" if path else "No review yet."]
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
            f"{k}={v}" for k, v in e.items() if k not in ("ts", "event", "task"))
        rest = " ".join(str(rest).split())
        lines.append(f"{str(e.get('ts', ''))[11:19]} {e.get('event')} {rest}")
    return lines[-limit:]


def pane_preview(repo: Path, doc: dict[str, Any], task: str) -> str:
    """What the task's pane shows now (only that pane is captured)."""
    from loop_orchestrator.state import RunState

    t = next((x for x in doc["tasks"] if x["task"] == task), None)
    if t is None or not t.get("pane_id"):
        return f"{task} has no session ({t['phase'] if t else 'unknown task'})."
    if t["phase"] == Phase.INTEGRATED.value:
        return f"{task} is done: its pane was closed."
    run = RunState.model_validate(doc["run"])
    try:
        backend = sessions.TmuxBackend(run.name, socket=sessions.run_socket(run))
        return str(backend.capture(t["pane_id"], lines=0)).rstrip()
    except LoOrchError as exc:
        return f"(no screen: {exc.message})"


def gate1_text(repo: Path) -> tuple[str, str]:
    """(the plan sha256 shown, the Gate 1 summary and conflict matrix as text)."""
    from loop_orchestrator import schedule

    store = Store.for_repo(repo)
    state = store.read_run()
    plan, _ = runs.read_plan(store.dirs)
    deps = schedule.dependencies(plan)
    waves = {s.task: s.wave for s in store.list_statuses_lenient()}
    lines = [f"Run {state.name}: {plan.goal}",
             f"Base {state.base_ref} @ {state.base_sha[:12]}; plan sha256 {state.plan_sha256[:12]}",
             "", f"{'task':<20} {'wave':>4}  {'owns':<40} depends on"]
    for t in plan.tasks:
        lines.append(f"{t.id:<20} {waves.get(t.id, 0):>4}  {', '.join(t.owns)[:40]:<40} "
                     f"{', '.join(deps[t.id]) or '-'}")
    lines += ["", f"{len(plan.tasks)} sessions, at most "
              f"{plan.concurrency or load_settings(repo).run.concurrency} at once.", ""]
    lines.append(_read(store.dirs.conflict_matrix))
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


# screens -------------------------------------------------------------------------------


class Confirm(ModalScreen[bool]):
    """A yes/no question; anything but `y` is no."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape,enter", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self.question, id="question")
            yield Label("y: yes   n / Esc / Enter: no")
        yield Footer()

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class Ask(ModalScreen[str | None]):
    """One line of text (Enter sends it, Esc cancels)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, prompt: str, placeholder: str = "") -> None:
        super().__init__()
        self.prompt = prompt
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self.prompt)
            yield Input(placeholder=self.placeholder, id="answer")
        yield Footer()

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class Answer(ModalScreen[tuple[str, bool] | None]):
    """A permission request: allow or deny it, once or for the rest of the run."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "answer('allow', False)", "Allow"),
        Binding("d", "answer('deny', False)", "Deny"),
        Binding("A", "answer('allow', True)", "Allow always"),
        Binding("D", "answer('deny', True)", "Deny always"),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(self, req: Any) -> None:
        super().__init__()
        self.req = req

    def compose(self) -> ComposeResult:
        r = self.req
        with Vertical(id="dialog"):
            yield Label(f"{r.task} asks to use {r.tool} ({r.id}, asked {r.asked_at[11:19]})")
            yield Static(Text(r.command or r.file or r.summary or "(no details)"),
                         id="request")
            yield Label(f"in {r.cwd or '?'}")
            yield Label("a: allow   d: deny   A / D: the same for the rest of the run   "
                        "Esc: not now")
        yield Footer()

    def action_answer(self, decision: str, always: bool) -> None:
        self.dismiss((decision, always))

    def action_cancel(self) -> None:
        self.dismiss(None)


class Gate1(Screen[bool]):
    """The plan summary and the conflict matrix; `a` approves (after a confirmation)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "approve", "Approve the plan"),
        Binding("escape,q", "back", "Back"),
    ]

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        yield Label("Gate 1: review the split, then approve it", classes="screen-title")
        with VerticalScroll():
            yield Static(Text(self.text), id="gate1-text")
        yield Footer()

    def action_approve(self) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self.dismiss(True)

        self.app.push_screen(Confirm("Approve this plan (Gate 1)?"), answered)

    def action_back(self) -> None:
        self.dismiss(False)


class Gate2(Screen[bool]):
    """The files of the reviewed diff (left) and each file's diff (right); `m` merges."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("m", "merge", "Merge (set the feature branch)"),
        Binding("escape,q", "back", "Back"),
    ]

    def __init__(self, review: Any) -> None:
        super().__init__()
        self.review = review
        self.files = split_diff(review.diff)
        #: the file whose diff is shown (an index into ``files``)
        self.current = 0

    def compose(self) -> ComposeResult:
        rev = self.review
        yield Label(f"Gate 2: run {rev.state.name}, {rev.state.base_sha[:12]}.."
                    f"{rev.commit[:12]} -> {rev.feature}", classes="screen-title")
        with Horizontal():
            yield OptionList(*[path for path, _ in self.files], id="files")
            with VerticalScroll(id="diff-scroll"):
                yield Static(id="diff")
        notes = [*(f"cost: {c}" for c in rev.costs), *(f"judge: {n}" for n in rev.notes)]
        if rev.state.skipped_tasks:
            notes.append("Left out (blocked or failed): " + ", ".join(rev.state.skipped_tasks))
        stat = rev.stat.strip().splitlines()
        yield Static(Text("\n".join([*stat[-1:], *notes])), id="gate2-notes")
        yield Footer()

    def on_mount(self) -> None:
        self.show_file(0)

    def show_file(self, index: int) -> None:
        diff = self.query_one("#diff", Static)
        if not self.files:
            diff.update("The diff is empty.")
            return
        self.current = index
        diff.update(Syntax(self.files[index][1], "diff", theme="ansi_dark", word_wrap=True))
        self.query_one("#diff-scroll", VerticalScroll).scroll_home(animate=False)

    @on(OptionList.OptionHighlighted, "#files")
    def highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self.show_file(event.option_index)

    def action_merge(self) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self.dismiss(True)

        self.app.push_screen(Confirm(
            f"Set {self.review.feature} to {self.review.commit[:12]} (Gate 2)?"), answered)

    def action_back(self) -> None:
        self.dismiss(False)


# the app -------------------------------------------------------------------------------


class Changed(Message):
    """Something under ``.orchestration/`` changed (posted from watchdog's thread)."""


class Dashboard(App[None]):
    """The dashboard over one repository's run."""

    TITLE = "lo-orch dashboard"
    CSS = """
    #title { text-style: bold; padding: 0 1; }
    #gates { color: $text-muted; padding: 0 1; }
    #needs { border: round $warning; padding: 0 1; height: auto; max-height: 8; }
    #needs.calm { border: round $success; }
    #tasks { height: 1fr; min-height: 6; }
    #details { height: 1fr; }
    #dialog { width: 80%; height: auto; border: thick $accent; padding: 1 2;
              background: $surface; }
    Confirm, Ask { align: center middle; }
    .screen-title { text-style: bold; padding: 0 1; }
    #files { width: 40; }
    #gate2-notes { height: auto; max-height: 8; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("a", "attach", "Attach"),
        Binding("s", "send", "Send"),
        Binding("r", "retry", "Retry"),
        Binding("g", "gate1", "Gate 1"),
        Binding("m", "gate2", "Gate 2"),
        Binding("p", "permit", "Permit"),
        Binding("1", "tab('pane')", "Pane", show=False),
        Binding("2", "tab('brief')", "Brief", show=False),
        Binding("3", "tab('review')", "Review", show=False),
        Binding("4", "tab('ledger')", "Ledger", show=False),
    ]

    def __init__(self, repo: Path, *, clock: Callable[[], float] = time.time,
                 watch: bool = True) -> None:
        super().__init__()
        self.repo = repo
        self.clock = clock
        self.watch_files = watch
        self.snapshot: Snapshot | None = None
        self.selected: str | None = None
        self.reloads = 0
        #: the last error an action met, as shown to the person (tests read it too)
        self.last_error: str | None = None
        self._observer: Any = None
        self._pending = False
        self._last_reload = 0.0

    # layout ------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(id="title")
        yield Static(id="gates")
        yield Static(id="needs")
        yield DataTable(id="tasks", cursor_type="row", zebra_stripes=True)
        with TabbedContent(id="details", initial="pane"):
            with Tab("Pane (1)", id="pane"), VerticalScroll():
                yield Static(id="pane-text")
            with Tab("Brief (2)", id="brief"), VerticalScroll():
                yield Static(id="brief-text")
            with Tab("Review (3)", id="review"), VerticalScroll():
                yield Static(id="review-text")
            with Tab("Ledger (4)", id="ledger"), VerticalScroll():
                yield Static(id="ledger-text")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#tasks", DataTable)
        for h in core.STATUS_HEADERS:
            table.add_column(h, key=h)
        self.reload()
        self.set_interval(TICK_SECONDS, self.reload)
        self.set_interval(PANE_SECONDS, self.refresh_pane)
        if self.watch_files:
            self._start_watching()

    def on_unmount(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)

    def _start_watching(self) -> None:
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer

        app = self
        # our own reads open files too: only changes count (inotify reports a temp file's
        # rename over a status file as a move)
        kinds = {"created", "modified", "moved", "deleted", "closed"}

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                if event.event_type in kinds and not event.is_directory:
                    app.post_message(Changed())

        root = RunDir(self.repo).root
        root.mkdir(parents=True, exist_ok=True)
        self._observer = Observer()
        self._observer.schedule(Handler(), str(root), recursive=True)
        # the run's private folder: permission requests (issue 17a) live there
        with contextlib.suppress(LoOrchError, ValueError):
            from loop_orchestrator import private

            name = Store.for_repo(self.repo).read_run().name
            self._observer.schedule(Handler(), str(private.run_dir(self.repo, name)),
                                    recursive=True)
        self._observer.daemon = True
        self._observer.start()

    @on(Changed)
    def changed(self) -> None:
        if not self._pending:
            self._pending = True
            wait = max(DEBOUNCE_SECONDS,
                       self._last_reload + MIN_RELOAD_SECONDS - time.monotonic())
            self.set_timer(wait, self._debounced)

    def _debounced(self) -> None:
        self._pending = False
        self.reload()

    # reading -----------------------------------------------------------------------
    def reload(self) -> None:
        """Read the run again and show it (keeps the selected task)."""
        self.reloads += 1
        self._last_reload = time.monotonic()
        try:
            snap = load_snapshot(self.repo, self.clock())
        except LoOrchError as exc:
            self.query_one("#title", Static).update(Text(f"Error: {exc.render()}"))
            return
        self.snapshot = snap
        self.query_one("#title", Static).update(Text(snap.title))
        self.query_one("#gates", Static).update(Text(snap.gates))
        needs = self.query_one("#needs", Static)
        needs.border_title = f"Needs you ({len(snap.needs)})"
        needs.set_class(not snap.needs, "calm")
        needs.update(Text("\n".join(f"• {n}" for n in snap.needs) or "Nothing needs you now."))
        self._fill_table(snap)
        self.show_details()

    def _fill_table(self, snap: Snapshot) -> None:
        table = self.query_one("#tasks", DataTable)
        keys = [str(r.value) for r in table.rows]
        wanted = [row[0] for row in snap.rows]
        if keys == wanted:
            for row in snap.rows:
                for h, cell in zip(core.STATUS_HEADERS, row, strict=True):
                    if table.get_cell(row[0], h) != cell:
                        table.update_cell(row[0], h, cell)
        else:
            table.clear()
            for row in snap.rows:
                table.add_row(*row, key=row[0])
            if self.selected in wanted:
                table.move_cursor(row=wanted.index(self.selected))
        if wanted and self.selected not in wanted:
            self.selected = wanted[min(table.cursor_row, len(wanted) - 1)]

    @on(DataTable.RowHighlighted, "#tasks")
    def highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None and event.row_key.value != self.selected:
            self.selected = str(event.row_key.value)
            self.show_details()

    def show_details(self) -> None:
        """Fill the tab that shows (the others are read when they are chosen)."""
        task = self.selected
        if task is None:
            return
        tab = self.query_one("#details", TabbedContent).active
        if tab == "pane":
            self.refresh_pane()
        elif tab == "brief":
            brief = RunDir(self.repo).brief_path(task)
            self.query_one("#brief-text", Static).update(
                Text(_read(brief) if brief.exists() else f"No brief for {task} yet."))
        elif tab == "review":
            self.query_one("#review-text", Static).update(Text(review_text(self.repo, task)))
        elif tab == "ledger":
            self.query_one("#ledger-text", Static).update(
                Text("\n".join(ledger_lines(self.repo, task)) or "Nothing in the ledger yet."))

    @on(TabbedContent.TabActivated, "#details")
    def tab_shown(self) -> None:
        self.show_details()

    def refresh_pane(self) -> None:
        """Capture the selected task's pane (only that one, only while its tab shows)."""
        if self.snapshot is None or self.selected is None:
            return
        if self.query_one("#details", TabbedContent).active != "pane":
            return
        self.query_one("#pane-text", Static).update(
            Text(pane_preview(self.repo, self.snapshot.doc, self.selected)))
        # the bottom of a screen is where a session asks and answers
        self.query_one("#pane VerticalScroll", VerticalScroll).scroll_end(animate=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # no `lo-orch permit` in this tree: no key for it either
        return action != "permit" or permissions_module() is not None

    def action_tab(self, tab: str) -> None:
        self.query_one("#details", TabbedContent).active = tab
        self.show_details()

    # acting ------------------------------------------------------------------------
    def fail(self, exc: LoOrchError) -> None:
        from loop_orchestrator.cli.common import for_user

        self.last_error = for_user(f"Error: {exc.render()}")
        self.notify(escape(self.last_error), severity="error", timeout=15)
        self.reload()

    def done(self, message: str) -> None:
        from loop_orchestrator.cli.common import for_user

        self.last_error = None
        self.notify(escape(for_user(message)), timeout=8)
        self.reload()

    def _chosen(self) -> str | None:
        if self.selected is None:
            self.fail(StateError("no task is selected", hint="Pick one in the table."))
        return self.selected

    def action_attach(self) -> None:
        """`lo-orch attach TASK`: the app steps aside while the tmux client runs."""
        from textual.app import SuspendNotSupported

        task = self._chosen()
        if task is None:
            return
        try:
            argv = sessions.attach_command(self.repo, task)
        except LoOrchError as exc:
            self.fail(exc)
            return
        try:
            with self.suspend():
                # the person's terminal, interactive, for as long as they stay attached:
                # no capture and no timeout (unlike proc.run)
                subprocess.run(argv, check=False)
        except SuspendNotSupported:
            self.fail(LoOrchError("this terminal cannot hand over to tmux",
                                  hint=f"Run `lo-orch attach {task}` in a shell."))
            return
        self.reload()

    def action_send(self) -> None:
        """`lo-orch send TASK MESSAGE`."""
        task = self._chosen()
        if task is None:
            return

        def answered(text: str | None) -> None:
            if text is None:
                return
            try:
                mid = runs.send_message(self.repo, task, text)
            except LoOrchError as exc:
                self.fail(exc)
                return
            self.done(f"Message {mid} for {task} recorded; the supervisor delivers it.")

        self.push_screen(Ask(f"Message for {task}'s session (Enter sends, Esc cancels):",
                             "what the session should do"), answered)

    def action_retry(self) -> None:
        """`lo-orch retry TASK --note NOTE`."""
        task = self._chosen()
        if task is None:
            return

        def answered(note: str | None) -> None:
            if note is None:
                return
            try:
                st = runs.retry_task(self.repo, task, note=note.strip() or None)
            except LoOrchError as exc:
                self.fail(exc)
                return
            self.done(f"Task {task} is {st.phase.value} again (rework round "
                      f"{st.rework_count}).")

        self.push_screen(Ask(f"Retry {task}: what changed, or what it should do now "
                             "(Enter retries, Esc cancels)", "a note for its review"), answered)

    def action_gate1(self) -> None:
        """`lo-orch approve`, after the plan summary and the conflict matrix."""
        try:
            shown_sha, text = gate1_text(self.repo)
        except LoOrchError as exc:
            self.fail(exc)
            return

        def answered(yes: bool | None) -> None:
            if not yes:
                return
            try:
                now_sha = Store.for_repo(self.repo).read_run().plan_sha256
                if now_sha != shown_sha:
                    # the person approves what they saw, not a plan written since
                    msg = "the plan changed while Gate 1 was shown; nothing was approved"
                    raise StateError(msg, hint="Press g to review the current plan.")
                state, plan = runs.approve_plan(self.repo)
            except LoOrchError as exc:
                self.fail(exc)
                return
            self.done(f"Approved plan {(state.approved_plan_sha256 or '')[:12]} of run "
                      f"{state.name} ({len(plan.tasks)} tasks). Next: `lo-orch run`.")

        self.push_screen(Gate1(text), answered)

    def action_gate2(self) -> None:
        """`lo-orch merge`: the file list and each file's diff, then the merge."""
        from loop_orchestrator import gate2

        try:
            rev = gate2.review(self.repo)
        except LoOrchError as exc:
            self.fail(exc)
            return

        def answered(yes: bool | None) -> None:
            if not yes:
                return
            try:
                merged = gate2.merge(self.repo, rev)
            except LoOrchError as exc:
                self.fail(exc)
                return
            kept = merged.cleanup.kept_dirty
            self.done(f"{rev.feature} is now {rev.commit[:12]} (run {merged.state.name} "
                      "merged). Nothing was pushed."
                      + (f" Kept, with changes of yours: {', '.join(kept)}." if kept else ""))

        self.push_screen(Gate2(rev), answered)


    def action_permit(self) -> None:
        """`lo-orch permit TASK allow|deny [--always] --id ID` for the oldest open request
        of the selected task (of any task when the selected one has none)."""
        perms = permissions_module()
        if perms is None:
            return
        try:
            requests = pending_requests(self.repo)
        except LoOrchError as exc:
            self.fail(exc)
            return
        mine = [r for r in requests if r.task == self.selected] or requests
        if not mine:
            self.fail(StateError("no session is waiting for a permission now",
                                 hint="`lo-orch status` shows what each task waits for."))
            return
        req = mine[0]

        def answered(choice: tuple[str, bool] | None) -> None:
            if choice is None:
                return
            decision, always = choice
            try:
                perms.answer(self.repo, req.task, decision, always=always, request_id=req.id)
            except LoOrchError as exc:
                self.fail(exc)
                return
            self.done(f"{req.task}: {decision} {req.tool} ({req.id})"
                      + (" — and the same for the rest of this run." if always else "."))

        self.push_screen(Answer(req), answered)


def run_dashboard(repo: Path) -> None:
    """`lo-orch dashboard`: until `q` (exit 0)."""
    import importlib

    Store.for_repo(repo).read_run()  # no run: the same clear error as `lo-orch status`
    # what the actions import lazily, imported while sys.stdout is still the terminal's
    for name in ("loop_orchestrator.supervisor", "loop_orchestrator.gate2",
                 "loop_orchestrator.record"):
        importlib.import_module(name)
    with contextlib.suppress(KeyboardInterrupt):
        Dashboard(repo).run()
