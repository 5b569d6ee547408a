"""The dashboard's dialogs and gate screens. A gate is a person's act: its question's default is
"no", and only `y` says yes."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.syntax import Syntax
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, Label, OptionList, Static

from loop_orchestrator.dashboard.view import split_diff


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
        yield Label(
            f"Gate 2: run {rev.state.name}, {rev.state.base_sha[:12]}.."
            f"{rev.commit[:12]} -> {rev.feature}",
            classes="screen-title",
        )
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

        self.app.push_screen(
            Confirm(f"Set {self.review.feature} to {self.review.commit[:12]} (Gate 2)?"), answered
        )

    def action_back(self) -> None:
        self.dismiss(False)
