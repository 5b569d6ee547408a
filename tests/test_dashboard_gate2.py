"""The dashboard's Gate 2 screen: choose a file and a hunk, `c` comments on it, `x` sends
the comments back, `y` merges (tests/test_dashboard.py merges through it); each through the
function of the command it mirrors (`lo-orch comment`, `request-changes`, `merge`).

The hunk a comment points at is a pure function of the file's diff (``view.split_hunks``),
tested in milliseconds; the screen runs under Textual's pilot on a real one-task run at
Gate 2 (real git, the scripted agent in real tmux on a private socket).
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from helpers.runs import approve, only
from helpers.wait import wait_in_app
from textual.widgets import Input, OptionList, Static

from loop_orchestrator.commands import merge as merging
from loop_orchestrator.commands import review
from loop_orchestrator.dashboard import app as dashboard
from loop_orchestrator.dashboard import screens, view
from loop_orchestrator.runstate.state import RunPhase, Store
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.supervisor.main import Supervisor
from loop_orchestrator.workspace.comments import Answer

FILE = """diff --git a/x.py b/x.py
index 1111111..2222222 100644
--- a/x.py
+++ b/x.py
@@ -1,3 +1,4 @@
 a
-b
+B
+C
 c
@@ -10,2 +11,0 @@ def f():
-gone1
-gone2
@@ -20,0 +19,1 @@
+new
@@ -30,5 +30,3 @@
 k1
-r1
-r2
 k2
 k3
@@ -40,2 +38,1 @@
-r3
 k4
"""


def test_each_hunk_points_at_the_reviewed_line_it_is_about() -> None:
    hunks = view.split_hunks(FILE)
    assert [h.text.split("\n", 1)[0][:9] for h in hunks] == [
        "@@ -1,3 +",
        "@@ -10,2 ",
        "@@ -20,0 ",
        "@@ -30,5 ",
        "@@ -40,2 ",
    ]
    # the first added line; after a removal with nothing in its place, the line before
    # it; a removal at the top of a hunk, the line after it
    assert [h.line for h in hunks] == [2, 11, 19, 30, 38]
    assert "".join(h.text for h in hunks) == FILE[FILE.index("@@") :]


def test_a_file_without_hunks_or_gone_is_commented_on_as_a_whole() -> None:
    binary = (
        "diff --git a/b.bin b/b.bin\nindex 1..2 100644\nBinary files a/b.bin and b/b.bin differ\n"
    )
    assert view.split_hunks(binary) == [view.Hunk(binary, None)]
    gone = "diff --git a/g.py b/g.py\ndeleted file mode 100644\n--- a/g.py\n+++ /dev/null\n"
    gone += "@@ -1,2 +0,0 @@\n-a\n-b\n"
    assert [h.line for h in view.split_hunks(gone)] == [None]


@pytest.mark.timeout(120)
def test_gate2_screen_comments_on_a_hunk_and_sends_the_comments_back(
    demo_files: demo.DemoFiles,
) -> None:
    repo = demo_files.repo
    only(demo_files, "tokenize")
    settings = demo.demo_settings(demo_files.script)
    approve(demo_files, settings)
    assert Supervisor(repo, settings).run().state == "review"
    reviewed = merging.review(repo)
    long_text = "x" * 4001

    async def scenario() -> None:
        app = dashboard.Dashboard(repo, watch=False)
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.press("m")
            shown = app.screen
            assert isinstance(shown, screens.Gate2)
            gate: screens.Gate2 = shown
            paths = [p for p, _ in gate.files]
            assert "textstats/tokenize.py" in paths
            # choose the file, then its last hunk (tab: to the hunks)
            for _ in range(paths.index("textstats/tokenize.py")):
                await pilot.press("down")
            assert gate.files[gate.current][0] == "textstats/tokenize.py"
            hunks = gate.query_one("#hunks", OptionList)
            assert hunks.option_count == len(gate.hunks) >= 1
            await pilot.press("tab", "end")
            assert gate.hunk == len(gate.hunks) - 1
            path, line = gate.target()  # type: ignore[misc]
            assert line == gate.hunks[-1].line and line is not None

            # x with nothing recorded sends nothing
            await pilot.press("x")
            await pilot.pause()
            assert len(app.screen_stack) == 2 and app.screen is gate

            # a comment too long is refused with the command's error; the screen stays
            await pilot.press("c")
            app.screen.query_one("#answer", Input).value = long_text
            await pilot.press("enter")
            await pilot.pause()
            assert app.last_error is not None and "4000" in app.last_error
            assert app.screen is gate and gate.pending == []

            await pilot.press("c")
            app.screen.query_one("#answer", Input).value = "Name the words"
            await pilot.press("enter")
            await wait_in_app(pilot, lambda: gate.pending, 10, "the comment recorded")
            assert app.last_error is None
            notes = str(gate.query_one("#gate2-notes-text", Static).render())
            assert "Comments to send back (1" in notes and "Name the words" in notes

            # Gate 2 opened again: the comment recorded is listed once, as one to send
            # back (not also among the review's notes)
            await pilot.press("escape", "m")
            await pilot.pause()
            reopened = app.screen
            assert isinstance(reopened, screens.Gate2) and reopened is not gate
            gate = reopened
            recorded = review.comments(repo).comments[0].id
            notes = str(gate.query_one("#gate2-notes-text", Static).render())
            assert "Comments to send back (1" in notes and notes.count(recorded) == 1, notes

            # a hurried Enter on the question sends nothing
            await pilot.press("x", "enter")
            await pilot.pause()
            assert app.screen is gate
            assert Store.for_repo(repo).read_run().phase == RunPhase.AWAITING_MERGE_REVIEW
            await pilot.press("x", "y")
            await wait_in_app(
                pilot,
                lambda: app.snapshot is not None and "Gate 2 waiting" not in app.snapshot.gates,
                10,
                "the run to leave Gate 2",
            )
            assert app.last_error is None and len(app.screen_stack) == 1
            found = review.comments(repo)
            assert len(found.comments) == 1
            made = found.comments[0]
            # what `lo-orch comment textstats/tokenize.py:LINE "Name the words"` records
            assert (made.task, made.path, made.line, made.text) == (
                "tokenize",
                path,
                line,
                "Name the words",
            )
            assert made.routed_by == "owns" and made.source == "person"
            assert made.commit == reviewed.commit
            assert found.states[made.id] == "requested"

            # Gate 2 again after a round: the diff since the last review first, each
            # comment of the request answered or not; d shows the whole diff
            again = dataclasses.replace(
                reviewed,
                since=reviewed.state.base_sha,
                diff_since="".join(
                    d for p, d in view.split_diff(reviewed.diff) if p.startswith("textstats/")
                ),
                answers=[Answer(made, True)],
            )
            later = screens.Gate2(again, comment=app.gate2_comment)
            await app.push_screen(later)
            await pilot.pause()
            title = str(later.query_one("#gate2-title").render())
            assert "the diff since the last review" in title
            assert [p for p, _ in later.files] == ["textstats/tokenize.py"]
            assert len(view.split_diff(again.diff)) > 1
            notes = str(later.query_one("#gate2-notes-text", Static).render())
            assert f"answered: {made.id} on {made.path}:{made.line}" in notes
            assert "NOT answered" not in notes
            await pilot.press("d")
            assert [p for p, _ in later.files] == [p for p, _ in view.split_diff(again.diff)]
            assert "d: the diff since the last review" in str(
                later.query_one("#gate2-title").render()
            )

    asyncio.run(scenario())
