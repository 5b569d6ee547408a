"""The dashboard's dialogs and gate screens. A gate is a person's act: its question's default is
"no", and only `y` says yes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

from rich.syntax import Syntax
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from loop_orchestrator.dashboard.view import Hunk, split_diff, split_hunks


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
            yield Static(Text(r.command or r.file or r.summary or "(no details)"), id="request")
            yield Label(f"in {r.cwd or '?'}")
            yield Label(
                "a: allow   d: deny   A / D: the same for the rest of the run   Esc: not now"
            )
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


#: what the Gate 2 screen closes with: merge the reviewed commit, send the comments back
Gate2Choice = Literal["merge", "request-changes"]


class Gate2(Screen[Gate2Choice | None]):
    """The files of the reviewed diff (left) and the chosen file's hunks (right): `c`
    comments on the chosen hunk (for the task that wrote it), `x` sends the comments back
    (review rounds), `y` merges; `d` switches to the diff since the last review and back.

    ``comment(path, line, text)`` records a comment (the app's, through `lo-orch comment`'s
    function) and gives a line to show, or None when it was refused; ``comments`` are the
    lines of the comments recorded and not sent yet."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "comment", "Comment on the hunk"),
        Binding("x", "request_changes", "Request changes"),
        Binding("y,m", "merge", "Merge (set the feature branch)"),
        Binding("d", "since", "Diff since last review", show=False),
        Binding("escape,q", "back", "Back"),
    ]

    def __init__(
        self,
        review: Any,
        *,
        comment: Callable[[str, int | None, str], str | None] | None = None,
        comments: Sequence[str] = (),
    ) -> None:
        super().__init__()
        self.review = review
        self.commenter = comment
        #: the comments recorded and not sent back yet, one line each
        self.pending = list(comments)
        #: the diff since the last review is shown (there is one after a review round)
        self.since_shown = bool(review.since)
        self.files = split_diff(review.diff_since if self.since_shown else review.diff)
        #: the file whose hunks are shown (an index into ``files``)
        self.current = 0
        self.hunks: list[Hunk] = []
        #: the hunk a comment goes to (an index into ``hunks``)
        self.hunk = 0

    def compose(self) -> ComposeResult:
        yield Label(self._title(), id="gate2-title", classes="screen-title")
        with Horizontal():
            yield OptionList(*[path for path, _ in self.files], id="files")
            yield OptionList(id="hunks")
        with VerticalScroll(id="gate2-notes"):
            yield Static(id="gate2-notes-text")
        yield Footer()

    def _title(self) -> str:
        rev = self.review
        shown = (
            f"the diff since the last review ({rev.since[:12]}..{rev.commit[:12]}; "
            "d: the whole diff)"
            if self.since_shown
            else f"{rev.state.base_sha[:12]}..{rev.commit[:12]}"
            + ("; d: the diff since the last review" if rev.since else "")
        )
        return f"Gate 2: run {rev.state.name}, {shown} -> {rev.feature}"

    def on_mount(self) -> None:
        self.show_file(0)
        self.show_notes()

    def show_notes(self) -> None:
        rev = self.review
        notes = [*(f"cost: {c}" for c in rev.costs), *(f"note: {n}" for n in rev.notes)]
        if rev.state.skipped_tasks:
            notes.append("Left out (blocked or failed): " + ", ".join(rev.state.skipped_tasks))
        for a in rev.answers:
            c = a.comment
            where = (c.path or "-") + (f":{c.line}" if c.line else "")
            said = "answered" if a.answered else "NOT answered"
            notes.append(f"{said}: {c.id} on {where} ({c.task}) {first_line(c.text)}")
        if self.pending:
            notes.append(f"Comments to send back ({len(self.pending)}; x sends them):")
            notes.extend(f"  {line}" for line in self.pending)
        stat = rev.stat.strip().splitlines()
        self.query_one("#gate2-notes-text", Static).update(Text("\n".join([*stat[-1:], *notes])))

    def show_file(self, index: int) -> None:
        hunks = self.query_one("#hunks", OptionList)
        hunks.clear_options()
        if not self.files:
            self.hunks = []
            hunks.add_option(Option("The diff is empty.", disabled=True))
            return
        self.current = index
        self.hunks = split_hunks(self.files[index][1])
        hunks.add_options(
            [
                Option(Syntax(h.text.rstrip("\n"), "diff", theme="ansi_dark", word_wrap=True))
                for h in self.hunks
            ]
        )
        self.hunk = 0
        hunks.highlighted = 0

    @on(OptionList.OptionHighlighted, "#files")
    def file_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_index != self.current or not self.hunks:
            self.show_file(event.option_index)

    @on(OptionList.OptionHighlighted, "#hunks")
    def hunk_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self.hunk = event.option_index

    def target(self) -> tuple[str, int | None] | None:
        """Where a comment now goes: the chosen file, and the line of the chosen hunk."""
        if not self.files or not self.hunks:
            return None
        return self.files[self.current][0], self.hunks[min(self.hunk, len(self.hunks) - 1)].line

    def action_comment(self) -> None:
        target = self.target()
        if target is None or self.commenter is None:
            self.app.notify("There is nothing to comment on.", severity="warning")
            return
        path, line = target
        where = f"{path}:{line}" if line else path
        commenter = self.commenter

        def answered(text: str | None) -> None:
            if not text:
                return
            made = commenter(path, line, text)
            if made is not None:
                self.pending.append(made)
                self.show_notes()

        self.app.push_screen(
            Ask(
                f"Comment on {where}, for the task that wrote it (Enter records it, Esc cancels):",
                "what should change",
            ),
            answered,
        )

    def action_request_changes(self) -> None:
        if not self.pending:
            self.app.notify(
                "No comment to send back yet: choose a hunk and press c.", severity="warning"
            )
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.dismiss("request-changes")

        self.app.push_screen(
            Confirm(
                f"Send {len(self.pending)} comment(s) back? Each task they go to gets a review "
                "round, and Gate 2 comes back when they are done."
            ),
            answered,
        )

    def action_since(self) -> None:
        if not self.review.since:
            return
        self.since_shown = not self.since_shown
        self.files = split_diff(self.review.diff_since if self.since_shown else self.review.diff)
        files = self.query_one("#files", OptionList)
        files.clear_options()
        files.add_options([path for path, _ in self.files])
        self.query_one("#gate2-title", Label).update(self._title())
        self.current = 0
        self.show_file(0)

    def action_merge(self) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self.dismiss("merge")

        question = f"Set {self.review.feature} to {self.review.commit[:12]} (Gate 2)?"
        if self.pending:
            question += f" ({len(self.pending)} comment(s) not sent back are left as they are.)"
        self.app.push_screen(Confirm(question), answered)

    def action_back(self) -> None:
        self.dismiss(None)


def first_line(text: str, width: int = 60) -> str:
    """A comment's first line, cut to ``width``."""
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= width else line[: width - 1] + "…"
