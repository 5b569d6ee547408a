"""The dashboard app: the layout, the file watching, and the actions (each through the
function of the command it mirrors; the package docstring says which)."""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from rich.markup import escape
from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.message import Message
from textual.widgets import DataTable, Footer, Static, TabbedContent
from textual.widgets import TabPane as Tab

from loop_orchestrator import proc
from loop_orchestrator.columns import fit_columns, fitted_cells
from loop_orchestrator.commands import merge as merging
from loop_orchestrator.commands import plan as planning
from loop_orchestrator.commands import review as reviewing
from loop_orchestrator.commands import run as running
from loop_orchestrator.commands import session
from loop_orchestrator.dashboard.screens import Answer, Ask, Gate1, Gate2
from loop_orchestrator.dashboard.view import (
    TABLE_FRAME,
    Snapshot,
    comment_line,
    gate1_text,
    ledger_lines,
    load_snapshot,
    pane_preview,
    pending_requests,
    read_text,
    review_text,
)
from loop_orchestrator.errors import LoOrchError, StateError
from loop_orchestrator.runstate.state import RunDir, Store

#: file events closer together than this are one reload
DEBOUNCE_SECONDS = 0.2
#: and a busy run (64 sessions writing) is read at most once in this long, like
#: `status --watch` (benchmarks/dashboard.py)
MIN_RELOAD_SECONDS = 1.0
#: the clock for the ages and the supervisor's liveness (a dead process writes no file)
TICK_SECONDS = 5.0
#: how often the selected task's pane is captured while its tab is shown
PANE_SECONDS = 1.0


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
    #files { width: 40; height: 1fr; }
    #hunks { height: 1fr; }
    /* the chosen hunk keeps its diff colours readable */
    #hunks > .option-list--option-highlighted { background: $primary 25%; }
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

    def __init__(
        self, repo: Path, *, clock: Callable[[], float] = time.time, watch: bool = True
    ) -> None:
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
        #: the task table's columns and widths and its rows' heights, as last filled
        self._table_shape: tuple[list[tuple[str, int]], list[int]] | None = None

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
        self.reload()
        self.set_interval(TICK_SECONDS, lambda: self._on_tick(self.reload))
        self.set_interval(PANE_SECONDS, lambda: self._on_tick(self.refresh_pane))
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
        # the run's private folder: permission requests live there
        with contextlib.suppress(LoOrchError, ValueError):
            from loop_orchestrator.runstate import private

            name = Store.for_repo(self.repo).read_run().name
            self._observer.schedule(
                Handler(), str(private.run_dir(self.repo, name)), recursive=True
            )
        self._observer.daemon = True
        self._observer.start()

    def _on_tick(self, fill: Callable[[], None]) -> None:
        """A timer's refresh, while the main screen shows: under a gate or message screen
        a query would look on the screen shown (the next tick after it closes fills the
        widgets), and while the app closes its widgets go one by one."""
        if len(self.screen_stack) > 1:
            return
        with contextlib.suppress(NoMatches):
            fill()

    @on(Changed)
    def changed(self) -> None:
        if not self._pending:
            self._pending = True
            wait = max(DEBOUNCE_SECONDS, self._last_reload + MIN_RELOAD_SECONDS - time.monotonic())
            self.set_timer(wait, self._debounced)

    def _debounced(self) -> None:
        if len(self.screen_stack) > 1:
            # a gate or message screen is on top: the widgets to fill are under it, and a
            # query would look on the screen shown. Read the run once it is closed.
            self.set_timer(DEBOUNCE_SECONDS, self._debounced)
            return
        self._pending = False
        self._on_tick(self.reload)

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
        """The task table at the terminal's width (``columns.fit_columns``): the columns that
        fit, the long ones wrapped; refilled in place while its shape stays the same."""
        table = self.query_one("#tasks", DataTable)
        widths = fit_columns(snap.headers, snap.rows, self.size.width, TABLE_FRAME)
        cells = fitted_cells(snap.headers, snap.rows, widths)
        heights = [max(len(c) for c in row) for row in cells]
        shape = (list(widths.items()), heights)
        wanted = [row[0] for row in snap.rows]
        if shape != self._table_shape:
            # the first reading, another width, a column more (a task's session now runs
            # on a cluster node: `lo-orch status`'s node column), or a cell that wraps into
            # more lines or fewer
            table.clear(columns=True)
            for h, w in widths.items():
                table.add_column(h, key=h, width=w)
            self._table_shape = shape
        keys = [str(r.value) for r in table.rows]
        texts = [[Text("\n".join(c)) for c in row] for row in cells]
        if keys == wanted:
            for key, row in zip(wanted, texts, strict=True):
                for h, cell in zip(widths, row, strict=True):
                    if table.get_cell(key, h) != cell:
                        table.update_cell(key, h, cell)
        else:
            table.clear()
            # Text, never markup: a task's note is the session's words
            for key, row, height in zip(wanted, texts, heights, strict=True):
                table.add_row(*row, key=key, height=height)
            if self.selected in wanted:
                table.move_cursor(row=wanted.index(self.selected))
        if wanted and self.selected not in wanted:
            self.selected = wanted[min(table.cursor_row, len(wanted) - 1)]

    def on_resize(self) -> None:
        if self.snapshot is not None and len(self.screen_stack) == 1:
            self._fill_table(self.snapshot)

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
                Text(read_text(brief) if brief.exists() else f"No brief for {task} yet.")
            )
        elif tab == "review":
            self.query_one("#review-text", Static).update(Text(review_text(self.repo, task)))
        elif tab == "ledger":
            self.query_one("#ledger-text", Static).update(
                Text("\n".join(ledger_lines(self.repo, task)) or "Nothing in the ledger yet.")
            )

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
            # the pane's own lines, cut at the edge rather than folded (a screen's layout)
            Text(
                pane_preview(self.repo, self.snapshot.doc, self.selected),
                no_wrap=True,
                overflow="crop",
            )
        )
        # the bottom of a screen is where a session asks and answers
        self.query_one("#pane VerticalScroll", VerticalScroll).scroll_end(animate=False)

    def action_tab(self, tab: str) -> None:
        self.query_one("#details", TabbedContent).active = tab
        self.show_details()

    # acting ------------------------------------------------------------------------
    def fail(self, exc: LoOrchError) -> None:
        from loop_orchestrator.hints import for_user

        self.last_error = for_user(f"Error: {exc.render()}")
        self.notify(escape(self.last_error), severity="error", timeout=15)
        self.reload()

    def done(self, message: str) -> None:
        from loop_orchestrator.hints import for_user

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
            argv = list(session.attach(self.repo, task).argv)
        except LoOrchError as exc:
            self.fail(exc)
            return
        try:
            with self.suspend():
                # the person's terminal, for as long as they stay attached
                proc.run_interactive(argv)
        except SuspendNotSupported:
            self.fail(
                LoOrchError(
                    "this terminal cannot hand over to tmux",
                    hint=f"Run `lo-orch attach {task}` in a shell.",
                )
            )
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
                sent = session.send(self.repo, task, text)
            except LoOrchError as exc:
                self.fail(exc)
                return
            self.done(f"Message {sent.message_id} for {task} recorded; the supervisor delivers it.")

        self.push_screen(
            Ask(
                f"Message for {task}'s session (Enter sends, Esc cancels):",
                "what the session should do",
            ),
            answered,
        )

    def action_retry(self) -> None:
        """`lo-orch retry TASK --note NOTE`."""
        task = self._chosen()
        if task is None:
            return

        def answered(note: str | None) -> None:
            if note is None:
                return
            try:
                st = running.retry(self.repo, task, note=note.strip() or None)
            except LoOrchError as exc:
                self.fail(exc)
                return
            self.done(f"Task {task} is {st.phase.value} again (rework round {st.rework_count}).")

        self.push_screen(
            Ask(
                f"Retry {task}: what changed, or what it should do now "
                "(Enter retries, Esc cancels)",
                "a note for its review",
            ),
            answered,
        )

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
                # the person approves what they saw, not a plan written since
                done = planning.approve(self.repo, shown_sha256=shown_sha)
            except LoOrchError as exc:
                self.fail(exc)
                return
            self.done(
                f"Approved plan {done.plan_sha256[:12]} of run "
                f"{done.run} ({done.tasks} tasks). Next: `lo-orch run`."
            )

        self.push_screen(Gate1(text), answered)

    def action_gate2(self) -> None:
        """`lo-orch merge`: the changed files and each file's hunks; `c` comments on a hunk
        (``gate2_comment``), `x` sends the comments back (``gate2_request_changes``), `y`
        merges."""
        try:
            rev = merging.review(self.repo)
        except LoOrchError as exc:
            self.fail(exc)
            return
        # listed once, by the screen, as the comments to send back (not among the notes)
        unsent = [comment_line(c) for c in rev.unsent]

        def answered(choice: str | None) -> None:
            if choice == "request-changes":
                self.gate2_request_changes()
                return
            if choice != "merge":
                return
            try:
                merged = merging.merge(self.repo, rev)
            except LoOrchError as exc:
                self.fail(exc)
                return
            kept = merged.cleanup.kept_dirty
            self.done(
                f"{rev.feature} is now {rev.commit[:12]} (run {merged.state.name} "
                "merged). Nothing was pushed."
                + (f" Kept, with changes of yours: {', '.join(kept)}." if kept else "")
                + (
                    " Left as they are, from earlier runs of the same name: "
                    f"{', '.join(merged.cleanup.earlier)} (`lo-orch cleanup` lists them)."
                    if merged.cleanup.earlier
                    else ""
                )
            )

        self.push_screen(Gate2(rev, comment=self.gate2_comment, comments=unsent), answered)

    def gate2_comment(self, path: str, line: int | None, text: str) -> str | None:
        """`lo-orch comment PATH[:LINE] TEXT` from the Gate 2 screen: the comment's line to
        show, or None when it was refused (the error is shown; the screen stays)."""
        from loop_orchestrator.hints import for_user

        try:
            made = reviewing.comment(self.repo, path, line, text)
        except LoOrchError as exc:
            # the Gate 2 screen is on top: say it there, read the run once it is closed
            self.last_error = for_user(f"Error: {exc.render()}")
            self.notify(escape(self.last_error), severity="error", timeout=15)
            return None
        self.last_error = None
        self.notify(
            escape(
                for_user(
                    f"Comment {made.id} recorded for {made.task}; x sends it back "
                    "(`lo-orch request-changes`)."
                )
            ),
            timeout=8,
        )
        return comment_line(made)

    def gate2_request_changes(self) -> None:
        """`lo-orch request-changes`: every recorded comment back to its task."""
        try:
            req = reviewing.request_changes(self.repo)
        except LoOrchError as exc:
            self.fail(exc)
            return
        self.done(
            f"{len(req.comments)} comment(s) sent back to {', '.join(req.tasks)}: the running "
            "supervisor (or the next `lo-orch run`) opens their review rounds; Gate 2 comes "
            "back after."
        )

    def action_permit(self) -> None:
        """`lo-orch permit TASK allow|deny [--always] --id ID` for the oldest open request
        of the selected task (of any task when the selected one has none)."""
        try:
            requests = pending_requests(self.repo)
        except LoOrchError as exc:
            self.fail(exc)
            return
        mine = [r for r in requests if r.task == self.selected] or requests
        if not mine:
            self.fail(
                StateError(
                    "no session is waiting for a permission now",
                    hint="`lo-orch status` shows what each task waits for.",
                )
            )
            return
        req = mine[0]

        def answered(choice: tuple[str, bool] | None) -> None:
            if choice is None:
                return
            decision, always = choice
            try:
                session.permit(
                    self.repo,
                    req.task,
                    "allow" if decision == "allow" else "deny",
                    always=always,
                    request_id=req.id,
                )
            except LoOrchError as exc:
                self.fail(exc)
                return
            self.done(
                f"{req.task}: {decision} {req.tool} ({req.id})"
                + (" — and the same for the rest of this run." if always else ".")
            )

        self.push_screen(Answer(req), answered)


def run_dashboard(repo: Path) -> None:
    """`lo-orch dashboard`: until `q` (exit 0)."""

    Store.for_repo(repo).read_run()  # no run: the same clear error as `lo-orch status`
    # what the actions import lazily, imported while sys.stdout is still the terminal's
    for name in (
        "loop_orchestrator.supervisor.main",
        "loop_orchestrator.workspace.integration",
        "loop_orchestrator.runstate.journal",
    ):
        importlib.import_module(name)
    with contextlib.suppress(KeyboardInterrupt):
        Dashboard(repo).run()
