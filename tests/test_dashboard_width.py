"""The dashboard's task table at 80 and 200 columns: a task's name, wave, phase and cost are
never cut; the long columns wrap, or give way when even wrapped they do not fit.

The layout rule is a pure function (``view.fit_columns``), tested in milliseconds; the app
is rendered at both widths under Textual's pilot, and the real `lo-orch dashboard` in a
tmux pane (a private server) is read with capture-pane at 80 columns, then resized to 200.
"""

from __future__ import annotations

import asyncio
import html
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.wait import wait_for

from loop_orchestrator.commands.plan import plan_from_file
from loop_orchestrator.dashboard import app as dashboard
from loop_orchestrator.dashboard import view
from loop_orchestrator.runstate.progress import STATUS_HEADERS
from loop_orchestrator.runstate.state import Phase, Store
from loop_orchestrator.simulator import demo_flow as demo

LONG_NOTE = (
    "the verifier found that tests/test_report.py::test_empty_input fails on the parent "
    "commit and on the task's commit alike, so it proves nothing about the change"
)


def _row(task: str, phase: str, cost: str, waiting: str = "nothing (done)") -> list[str]:
    return [task, "12", phase, "3m", waiting, "2", "Stop 4s ago", "closed (done)", cost, LONG_NOTE]


ROWS = [
    _row("tokenize-the-input", "integrated", "$12.3456"),
    _row("slug", "implementing", "unknown", "a person: the session asks on screen " * 3),
    _row("counts", "verifying", "-", "the verifier: tests, diff heuristics and the judge"),
]


@pytest.mark.parametrize("width", [80, 120, 200])
def test_whole_columns_are_never_cut_and_the_table_fits(width: int) -> None:
    headers = list(STATUS_HEADERS)
    widths = view.fit_columns(headers, ROWS, width)
    for h in view.WHOLE_COLUMNS:
        i = headers.index(h)
        assert widths[h] == max(len(h), *(len(r[i]) for r in ROWS)), h
    used = sum(w + view.CELL_PADDING for w in widths.values()) + view.SCROLLBAR
    assert used <= width
    assert list(widths) == [h for h in headers if h in widths]  # the status order kept
    for h, w in widths.items():
        if h not in view.WRAPPING_COLUMNS:  # a short column is whole or not shown
            i = headers.index(h)
            assert w == max(len(h), *(len(r[i]) for r in ROWS)), h


def test_long_columns_give_way_at_80_and_wrap_at_200() -> None:
    headers = list(STATUS_HEADERS)
    narrow = view.fit_columns(headers, ROWS, 80)
    # the note and the last activity give way first; waiting for stays, wrapped
    assert "note" not in narrow and "last activity" not in narrow
    assert narrow["waiting for"] >= view.WRAP_MIN
    wide = view.fit_columns(headers, ROWS, 200)
    assert set(wide) == set(headers)
    # the width left over is shared by the long columns: neither takes it all
    assert abs(wide["waiting for"] - wide["note"]) <= 1
    assert view.WRAP_MIN < wide["note"] < len(LONG_NOTE)
    assert wide["last activity"] == len("last activity")  # its widest cell, no more
    used = sum(w + view.CELL_PADDING for w in wide.values()) + view.SCROLLBAR
    assert used == 200


def test_a_column_added_on_a_cluster_gives_way_before_the_whole_ones() -> None:
    at = STATUS_HEADERS.index("pane") + 1
    headers = [*STATUS_HEADERS[:at], "node", *STATUS_HEADERS[at:]]
    rows = [[*r[:at], "worker-17 (10.0.0.7, n1)", *r[at:]] for r in ROWS]
    widths = view.fit_columns(headers, rows, 80)
    assert {"task", "wave", "phase", "cost"} <= set(widths)
    assert sum(w + view.CELL_PADDING for w in widths.values()) + view.SCROLLBAR <= 80


def test_wrap_cell_folds_and_marks_what_is_left_out() -> None:
    assert view.wrap_cell("nothing (done)", 20) == ["nothing (done)"]
    assert view.wrap_cell("a b c d e f g h", 3, lines=2) == ["a b", "c …"]
    assert view.wrap_cell("x" * 30, 12) == ["x" * 12, "x" * 12, "x" * 6]
    assert view.wrap_cell("", 12) == [""]


# the app, and the real dashboard in tmux ------------------------------------------------


def _seed(root: Path) -> tuple[Path, dict[str, tuple[str, str, str]]]:
    """A planned demo run whose tasks stand in several phases, with a cost measured, a cost
    nobody measured and none yet, and long notes; task -> (wave, phase, cost cell)."""
    files = demo.prepare_demo(root)
    plan_from_file(files.repo, files.plan, demo.demo_settings(files.script))
    store = Store.for_repo(files.repo)
    phases = [Phase.INTEGRATED, Phase.IMPLEMENTING, Phase.VERIFYING, Phase.BLOCKED]
    costs: list[tuple[dict[str, Any] | None, str]] = [
        ({"cost_usd": 12.3456, "input_tokens": 10}, "$12.3456"),
        ({"cost_usd": None, "measured": False, "input_tokens": 3}, "unknown"),
        (None, "-"),
        ({"cost_usd": 0.5, "input_tokens": 1}, "$0.5000"),
    ]
    expected: dict[str, tuple[str, str, str]] = {}
    for st, phase, (usage, cell) in zip(store.list_statuses_lenient(), phases, costs, strict=False):
        st.phase = phase
        st.usage = usage
        # the session's words, markup-like ones too, are shown as they are
        st.note = f"[/] {LONG_NOTE}" if st.task == "counts" else LONG_NOTE
        store.write_status(st)
        expected[st.task] = (str(st.wave), phase.value, cell)
    return files.repo, expected


def _check_rows(lines: list[str], expected: dict[str, tuple[str, str, str]], width: int) -> None:
    """Each task's row on ``lines`` starts with its name, wave and phase, and holds its cost
    cell, each a whole word."""
    for task, (wave, phase, cost) in expected.items():
        found = [ln for ln in lines if ln.split()[:1] == [task]]
        assert found, f"no row for {task} at {width} columns:\n" + "\n".join(lines)
        words = found[0].split()
        assert words[:3] == [task, wave, phase], found[0]
        assert cost in words, f"{task}'s cost {cost!r} not whole at {width}: {found[0]!r}"


def _svg_lines(svg: str) -> list[str]:
    rows: dict[float, list[tuple[float, str]]] = {}
    for m in re.finditer(r'<text[^>]*\bx="([\d.]+)"[^>]*\by="([\d.]+)"[^>]*>(.*?)</text>', svg):
        rows.setdefault(float(m.group(2)), []).append(
            (float(m.group(1)), html.unescape(m.group(3)).replace("\xa0", " "))
        )
    return ["".join(t for _, t in sorted(parts)) for _, parts in sorted(rows.items())]


def test_the_app_shows_phase_wave_task_and_cost_whole_at_80_and_200(
    tmp_path: Path, tmux_socket: str
) -> None:
    repo, expected = _seed(tmp_path)
    shown: dict[int, list[str]] = {}

    async def scenario(width: int) -> None:
        app = dashboard.Dashboard(repo, watch=False)
        async with app.run_test(size=(width, 40)) as pilot:
            await pilot.pause()
            shown[width] = _svg_lines(app.export_screenshot())

    for width in (80, 200):
        asyncio.run(scenario(width))
        _check_rows(shown[width], expected, width)
    header80 = next(ln for ln in shown[80] if ln.split()[:2] == ["task", "wave"])
    header200 = next(ln for ln in shown[200] if ln.split()[:2] == ["task", "wave"])
    assert "note" not in header80 and header80.rstrip().endswith("cost")
    assert "note" in header200 and "last activity" in header200
    # at 200 the note wraps: its words after the first line are on the rows below
    text200 = "\n".join(shown[200])
    assert "alike, so it proves nothing" in " ".join(text200.split())
    assert "[/] the verifier" in text200


def _tmux(socket: str, *args: str, check: bool = True) -> str:
    return subprocess.run(
        ["tmux", "-L", socket, "-f", "/dev/null", *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=10,
    ).stdout


def test_the_real_dashboard_in_tmux_at_80_then_200_columns(
    tmp_path: Path, tmux_socket: str
) -> None:
    repo, expected = _seed(tmp_path)
    # (the test process's COLUMNS and LINES would pin the app's size: a tmux pane's own
    # size is what a person's terminal gives)
    argv = [sys.executable, "-m", "loop_orchestrator", "dashboard", "--repo", str(repo)]
    cmd = shlex.join(["env", "-u", "COLUMNS", "-u", "LINES", *argv])
    _tmux(tmux_socket, "new-session", "-d", "-s", "dash", "-x", "80", "-y", "45", cmd)

    def screen() -> list[str]:
        return _tmux(tmux_socket, "capture-pane", "-p", "-t", "dash").splitlines()

    def rows_shown(width: int) -> bool:
        lines = screen()
        try:
            _check_rows(lines, expected, width)
        except AssertionError:
            return False
        header = next((ln for ln in lines if ln.split()[:2] == ["task", "wave"]), "")
        return ("note" in header) == (width == 200)

    wait_for(
        lambda: rows_shown(80), 30, "the table at 80 columns", shown=lambda: "\n".join(screen())
    )
    assert all(len(ln) <= 80 for ln in screen())
    _tmux(tmux_socket, "resize-window", "-t", "dash", "-x", "200", "-y", "45")
    wait_for(
        lambda: rows_shown(200), 15, "the table at 200 columns", shown=lambda: "\n".join(screen())
    )
    _tmux(tmux_socket, "send-keys", "-t", "dash", "q")
    # its pane closes with it (and the session, its only pane)
    wait_for(
        lambda: "dash" not in _tmux(tmux_socket, "list-sessions", "-F", "#S", check=False),
        15,
        "the dashboard to quit on q",
    )
