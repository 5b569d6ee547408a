"""The task table at 80 and 200 columns, in the dashboard and in `lo-orch status`: a task's
name, wave, phase and cost are never cut; the long columns wrap, or give way when even
wrapped they do not fit.

The layout rule is a pure function (``columns.fit_columns``), tested in milliseconds with
the frame of each table; the app is rendered at both widths under Textual's pilot, and the
real `lo-orch dashboard`, `lo-orch status` and `status --watch` in tmux panes (a private
server) are read with capture-pane at 80 columns and at 200.
"""

from __future__ import annotations

import asyncio
import html
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.wait import wait_for
from rich.console import Console

from loop_orchestrator import columns
from loop_orchestrator.cli import render
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
#: task -> (wave, phase, cost cell) of ``ROWS``
EXPECTED_ROWS = {r[0]: (r[1], r[2], r[8]) for r in ROWS}


#: the frames of the two tables laid out by the rule: the dashboard's and `lo-orch status`'s
FRAMES = {"dashboard": view.TABLE_FRAME, "status": render.RICH_FRAME}


@pytest.mark.parametrize("frame", FRAMES.values(), ids=FRAMES.keys())
@pytest.mark.parametrize("width", [80, 120, 200])
def test_whole_columns_are_never_cut_and_the_table_fits(width: int, frame: columns.Frame) -> None:
    headers = list(STATUS_HEADERS)
    widths = columns.fit_columns(headers, ROWS, width, frame)
    for h in columns.WHOLE_COLUMNS:
        i = headers.index(h)
        assert widths[h] == max(len(h), *(len(r[i]) for r in ROWS)), h
    assert frame.used(widths) <= width
    assert list(widths) == [h for h in headers if h in widths]  # the status order kept
    for h, w in widths.items():
        if h not in columns.WRAPPING_COLUMNS:  # a short column is whole or not shown
            i = headers.index(h)
            assert w == max(len(h), *(len(r[i]) for r in ROWS)), h


@pytest.mark.parametrize("frame", FRAMES.values(), ids=FRAMES.keys())
def test_long_columns_give_way_at_80_and_wrap_at_200(frame: columns.Frame) -> None:
    headers = list(STATUS_HEADERS)
    narrow = columns.fit_columns(headers, ROWS, 80, frame)
    # the note and the last activity give way first; waiting for stays, wrapped
    assert "note" not in narrow and "last activity" not in narrow
    assert narrow["waiting for"] >= columns.WRAP_MIN
    wide = columns.fit_columns(headers, ROWS, 200, frame)
    assert set(wide) == set(headers)
    # the width left over is shared by the long columns: neither takes it all
    assert abs(wide["waiting for"] - wide["note"]) <= 1
    assert columns.WRAP_MIN < wide["note"] < len(LONG_NOTE)
    assert wide["last activity"] == len("last activity")  # its widest cell, no more
    assert frame.used(wide) == 200


def test_a_column_added_on_a_cluster_gives_way_before_the_whole_ones() -> None:
    at = STATUS_HEADERS.index("pane") + 1
    headers = [*STATUS_HEADERS[:at], "node", *STATUS_HEADERS[at:]]
    rows = [[*r[:at], "worker-17 (10.0.0.7, n1)", *r[at:]] for r in ROWS]
    for frame in FRAMES.values():
        widths = columns.fit_columns(headers, rows, 80, frame)
        assert {"task", "wave", "phase", "cost"} <= set(widths)
        assert frame.used(widths) <= 80


def test_wrap_cell_folds_and_marks_what_is_left_out() -> None:
    assert columns.wrap_cell("nothing (done)", 20) == ["nothing (done)"]
    assert columns.wrap_cell("a b c d e f g h", 3, lines=2) == ["a b", "c …"]
    assert columns.wrap_cell("x" * 30, 12) == ["x" * 12, "x" * 12, "x" * 6]
    assert columns.wrap_cell("", 12) == [""]


@pytest.mark.parametrize("width", [80, 200])
def test_the_status_table_is_as_wide_as_its_frame_says(width: int) -> None:
    """``RICH_FRAME`` is what rich draws: the fitted table fills the width and no more, and
    a note's brackets are shown, not read as markup."""
    console = Console(width=width, file=io.StringIO(), color_system=None)
    rows = [[*r[:-1], "[/] " + r[-1]] for r in ROWS]
    console.print(render.fitted_table(STATUS_HEADERS, rows, width))
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert {len(ln) for ln in lines} == {width}
    _check_rows([_unboxed(ln) for ln in lines], EXPECTED_ROWS, width)
    assert ("[/] the verifier" in "".join(lines)) == (width == 200)


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


def _unboxed(line: str) -> str:
    """A line of a rich table with its column borders as spaces."""
    return re.sub("[│┃]", " ", line)


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


# `lo-orch status` and `status --watch` on a terminal (a tmux pane) ---------------------


def _status_in_pane(socket: str, name: str, width: int, repo: Path, *flags: str) -> None:
    """`lo-orch status FLAGS` in a new pane ``width`` columns wide, on its own terminal size
    (the test's COLUMNS unset); the pane stays once it is done."""
    argv = [sys.executable, "-m", "loop_orchestrator", "status", *flags, "--repo", str(repo)]
    # (the shell outlives a Ctrl-C of the command: `trap`)
    cmd = f"trap : INT; {shlex.join(['env', '-u', 'COLUMNS', '-u', 'LINES', *argv])}; "
    cmd += "echo '-- end'; read x"
    _tmux(socket, "new-session", "-d", "-s", name, "-x", str(width), "-y", "45", cmd)


def _pane_lines(socket: str, name: str) -> list[str]:
    return _tmux(socket, "capture-pane", "-p", "-t", name).splitlines()


def _table_shown(lines: list[str], expected: dict[str, tuple[str, str, str]], width: int) -> bool:
    """The rich table on ``lines`` has every task's row whole, fits ``width``, and shows the
    note at 200 columns only."""
    rows = [_unboxed(ln) for ln in lines]
    try:
        _check_rows(rows, expected, width)
    except AssertionError:
        return False
    header = next((ln for ln in rows if ln.split()[:2] == ["task", "wave"]), "")
    return header.split()[-1:] == (["note"] if width == 200 else ["cost"]) and all(
        len(ln) <= width for ln in lines
    )


def test_lo_orch_status_on_a_terminal_keeps_phase_wave_task_and_cost_whole(
    tmp_path: Path, tmux_socket: str
) -> None:
    repo, expected = _seed(tmp_path)
    for width in (80, 200):  # both panes at once
        _status_in_pane(tmux_socket, f"w{width}", width, repo)
    for width in (80, 200):
        name = f"w{width}"
        wait_for(
            lambda n=name: "-- end" in _pane_lines(tmux_socket, n),  # type: ignore[misc]
            30,
            f"lo-orch status at {width} columns",
            shown=lambda n=name: "\n".join(_pane_lines(tmux_socket, n)),  # type: ignore[misc]
        )
        lines = _pane_lines(tmux_socket, name)
        assert _table_shown(lines, expected, width), "\n".join(lines)
    text200 = " ".join(" ".join(_unboxed(ln) for ln in _pane_lines(tmux_socket, "w200")).split())
    # the note wraps onto the rows below, its words as the session wrote them
    assert "[/] the verifier" in text200


def test_lo_orch_status_watch_follows_the_terminal_from_80_to_200_columns(
    tmp_path: Path, tmux_socket: str
) -> None:
    repo, expected = _seed(tmp_path)
    _status_in_pane(tmux_socket, "watch", 80, repo, "--watch")
    for width in (80, 200):
        if width == 200:
            _tmux(tmux_socket, "resize-window", "-t", "watch", "-x", "200", "-y", "45")
        wait_for(
            lambda w=width: _table_shown(  # type: ignore[misc]
                _pane_lines(tmux_socket, "watch"), expected, w
            ),
            30,
            f"the live table at {width} columns",
            shown=lambda: "\n".join(_pane_lines(tmux_socket, "watch")),
        )
    _tmux(tmux_socket, "send-keys", "-t", "watch", "C-c")
    wait_for(lambda: "-- end" in _pane_lines(tmux_socket, "watch"), 15, "status --watch to stop")
    assert "Traceback" not in "\n".join(_pane_lines(tmux_socket, "watch"))
