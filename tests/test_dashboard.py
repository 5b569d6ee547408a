"""`lo-orch dashboard` driven by Textual's own test driver (``App.run_test``) against real
runs: real git, real tmux on a private socket, the scripted agent, a supervisor thread.

Each action is checked against the command it mirrors: the gates leave the same records as
`lo-orch approve` / `lo-orch merge` (apart from times, shas and paths), and a hurried
person (Enter on a gate's question, a plan changed while Gate 1 is shown) gets nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO_ROOT
from helpers.git import git
from helpers.runs import edit_script
from helpers.wait import wait_for, wait_in_app
from textual.widgets import DataTable, OptionList, Static

from loop_orchestrator.commands.plan import plan_from_file
from loop_orchestrator.config import Settings
from loop_orchestrator.dashboard import app as dashboard
from loop_orchestrator.dashboard import screens, view
from loop_orchestrator.errors import LoOrchError
from loop_orchestrator.permissions import requests as permissions
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate import private
from loop_orchestrator.runstate.journal import JOURNAL_FILE
from loop_orchestrator.runstate.state import Phase, RunDir, RunPhase, Store
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.supervisor.main import Outcome, Supervisor


def run_async(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "loop_orchestrator", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


class _TestOver(LoOrchError):
    """Stops a supervisor thread when its test ends."""


Starter = Callable[[Path, Settings], tuple[threading.Thread, list[Outcome]]]


@pytest.fixture
def supervise(tmux_socket: str) -> Iterator[Starter]:
    """Start a supervisor in a thread; each one still running when the test ends is stopped
    (and joined) before the test's tmux server is killed, so none goes on launching
    sessions, or leaks a server, after its test."""
    started: list[tuple[Supervisor, threading.Thread]] = []

    def start(repo: Path, settings: Settings) -> tuple[threading.Thread, list[Outcome]]:
        sup = Supervisor(repo, settings)
        out: list[Outcome] = []

        def run() -> None:
            with contextlib.suppress(_TestOver):
                out.append(sup.run())

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        started.append((sup, thread))
        return thread, out

    yield start
    for sup, thread in started:
        if thread.is_alive():
            sup.fatal = _TestOver("the test is over")
            sup.wake.set()
            thread.join(60)
            assert not thread.is_alive(), "a supervisor thread did not stop"


def table_phases(app: dashboard.Dashboard) -> dict[str, str]:
    table = app.query_one("#tasks", DataTable)
    return {str(k.value): str(table.get_cell(k, "phase")) for k in table.rows}


_TIME = re.compile(r"\d{4}-\d\d-\d\dT[\d:.+]+(Z|[+-]\d\d:\d\d)?")
_SHA = re.compile(r"\b[0-9a-f]{12,64}\b")


def masked(value: Any, repo: Path) -> Any:
    """A record with what must differ between two repositories (times, commit and journal
    hashes, paths, ids) replaced by placeholders."""
    if isinstance(value, dict):
        return {k: ("<t>" if k in ("ts", "mac") else masked(v, repo)) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v, repo) for v in value]
    if isinstance(value, str):
        # the demo's folder holds the repository and the plan file
        root = repo.parent
        text = value.replace(str(root.resolve()), "<root>").replace(str(root), "<root>")
        text = text.replace(str(private.state_home()), "<home>")
        return _SHA.sub("<sha>", _TIME.sub("<time>", text))
    return value


def records(repo: Path) -> dict[str, Any]:
    """What a gate writes: run.json, the ledger, the supervisor's journal."""
    rundir = RunDir(repo)
    name = Store(rundir).read_run().name
    journal = private.run_dir(repo, name) / JOURNAL_FILE
    lines = journal.read_text(encoding="utf-8").splitlines() if journal.exists() else []
    return {
        "run": masked(json.loads(rundir.run_json.read_text(encoding="utf-8")), repo),
        "ledger": [masked(e, repo) for e in Store(rundir).read_ledger()],
        "journal": [masked(json.loads(x), repo) for x in lines],
    }


def plan(files: demo.DemoFiles) -> Settings:
    settings = demo.demo_settings(files.script)
    plan_from_file(files.repo, files.plan, settings)
    return settings


# Gate 1 ------------------------------------------------------------------------------


def test_gate1_from_the_dashboard_writes_what_approve_writes(
    tmp_path: Path, tmux_socket: str
) -> None:
    by_cli = demo.prepare_demo(tmp_path / "cli")
    by_ui = demo.prepare_demo(tmp_path / "ui")
    plan(by_cli)
    plan(by_ui)
    cli("approve", "--repo", str(by_cli.repo))

    async def scenario() -> None:
        app = dashboard.Dashboard(by_ui.repo)
        async with app.run_test(size=(140, 45)) as pilot:
            assert any("Gate 1" in n for n in app.snapshot.needs)  # type: ignore[union-attr]
            await pilot.press("g")
            shown = str(app.screen.query_one("#gate1-text", Static).render())
            assert "Conflict matrix: demo" in shown and "tokenize" in shown
            await pilot.press("a", "enter")  # a hurried Enter is "no"
            await pilot.pause()
            assert Store.for_repo(by_ui.repo).read_run().approved_plan_sha256 is None
            await pilot.press("a", "y")
            await wait_in_app(
                pilot,
                lambda: app.snapshot is not None and "Gate 1 approved" in app.snapshot.gates,
                10,
                "approval shown",
            )
            assert app.last_error is None
            assert app.snapshot is not None
            assert not any("Gate 1" in n for n in app.snapshot.needs)

    run_async(scenario())
    assert records(by_ui.repo) == records(by_cli.repo)


def test_the_clocks_tick_under_a_gate_and_while_the_app_closes(
    demo_files: demo.DemoFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's and the pane's clocks fire while Gate 1 is on top and while the app
    closes: neither crashes it (a tick under the gate looked for the main screen's widgets
    on the gate's, and one during the close for a widget already gone), and the main
    screen is filled again once the gate is closed."""
    plan(demo_files)
    monkeypatch.setattr(dashboard, "TICK_SECONDS", 0.02)
    monkeypatch.setattr(dashboard, "PANE_SECONDS", 0.01)

    async def scenario() -> None:
        app = dashboard.Dashboard(demo_files.repo)
        async with app.run_test(size=(140, 45)) as pilot:
            assert app.selected is not None
            await pilot.press("g")
            assert len(app.screen_stack) == 2
            before = app.reloads
            await pilot.pause(0.3)  # a dozen ticks of each clock under the gate
            assert app.reloads == before and app.last_error is None
            await pilot.press("escape")
            await wait_in_app(pilot, lambda: app.reloads > before, 5, "a reload after the gate")
            assert len(app.screen_stack) == 1
        # (run_test raises what the app raised, a tick during the close included)

    for _ in range(3):
        run_async(scenario())


def test_gate1_refuses_a_plan_changed_while_it_was_shown(demo_files: demo.DemoFiles) -> None:
    repo = demo_files.repo
    plan(demo_files)
    changed = demo_files.plan.read_text(encoding="utf-8").replace(
        "Build textstats", "Build textstats (edited)"
    )

    async def scenario() -> None:
        app = dashboard.Dashboard(repo)
        async with app.run_test(size=(140, 45)) as pilot:
            await pilot.press("g")
            # someone plans again while the person reads the old plan
            demo_files.plan.write_text(changed, encoding="utf-8")
            plan_from_file(repo, demo_files.plan, demo.demo_settings(demo_files.script))
            await pilot.press("a", "y")
            await pilot.pause()
            assert app.last_error is not None
            assert "the plan changed while Gate 1 was shown" in app.last_error

    run_async(scenario())
    assert Store.for_repo(repo).read_run().approved_plan_sha256 is None


def test_gates_from_a_dashboard_inside_a_managed_session_are_refused(
    demo_files: demo.DemoFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent that starts the dashboard (and feeds it keys) approves nothing: the gate
    function refuses, as `lo-orch approve` does (guard.refuse_in_session)."""
    repo = demo_files.repo
    plan(demo_files)
    monkeypatch.setenv("LO_ORCH_TASK", "slug")

    async def scenario() -> None:
        app = dashboard.Dashboard(repo)
        async with app.run_test(size=(140, 45)) as pilot:
            await pilot.press("g", "a", "y")
            await pilot.pause()
            assert app.last_error is not None
            assert "inside a managed agent session" in app.last_error

    run_async(scenario())
    assert Store.for_repo(repo).read_run().approved_plan_sha256 is None


# a run, followed live; Gate 2 ----------------------------------------------------------


def test_table_follows_the_run_and_gate2_writes_what_merge_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, supervise: Starter
) -> None:
    by_cli = demo.prepare_demo(tmp_path / "cli")
    settings = plan(by_cli)
    runs.approve_plan(by_cli.repo)
    assert Supervisor(by_cli.repo, settings).run().state == "review"
    cli("merge", "--yes", "--repo", str(by_cli.repo))

    by_ui = demo.prepare_demo(tmp_path / "ui")
    settings = plan(by_ui)
    runs.approve_plan(by_ui.repo)
    # only file events refresh it: the clock would come too late to matter
    monkeypatch.setattr(dashboard, "TICK_SECONDS", 3600.0)

    async def scenario() -> None:
        app = dashboard.Dashboard(by_ui.repo)
        async with app.run_test(size=(160, 50)) as pilot:
            assert set(table_phases(app).values()) == {"pending"}
            assert app.snapshot is not None
            assert any("No supervisor" in n for n in app.snapshot.needs) is False
            thread, out = supervise(by_ui.repo, settings)
            seen: set[str] = set()

            def progressed() -> bool:
                seen.update(table_phases(app).values())
                return (
                    app.snapshot is not None
                    and "Gate 2" in app.snapshot.gates
                    and ("Gate 2 waiting" in app.snapshot.gates)
                )

            await wait_in_app(pilot, progressed, 240, "the table to reach Gate 2")
            # it followed the run through its working phases (which one it caught depends on
            # the moment: a scripted session implements in a few tens of milliseconds)
            assert "integrated" in seen and seen & {"planning", "implementing", "verifying"}
            assert set(table_phases(app).values()) == {"integrated"}
            assert any("Gate 2" in n for n in app.snapshot.needs)
            thread.join(30)
            assert out and out[0].state == "review"

            await pilot.press("m")
            files = app.screen.query_one("#files", OptionList)
            paths = [str(files.get_option_at_index(i).prompt) for i in range(files.option_count)]
            assert "textstats/report.py" in paths
            gate = app.screen
            assert isinstance(gate, screens.Gate2)
            assert [p for p, _ in gate.files] == paths
            assert gate.current == 0
            await pilot.press("down")
            assert gate.current == 1  # the second file's diff, and only its own
            assert gate.files[1][1].startswith(f"diff --git a/{paths[1]} b/{paths[1]}")
            assert gate.files[1][1].count("diff --git") == 1
            await pilot.press("y", "escape")  # not now
            await pilot.pause()
            assert Store.for_repo(by_ui.repo).read_run().phase == RunPhase.AWAITING_MERGE_REVIEW
            await pilot.press("y", "y")
            await wait_in_app(
                pilot,
                lambda: "Gate 2 merged" in app.snapshot.gates,  # type: ignore[union-attr]
                30,
                "the merge shown",
            )
            assert app.last_error is None

    run_async(scenario())
    assert (
        git(by_ui.repo, "rev-parse", "feat/demo").strip()
        == Store.for_repo(by_ui.repo).read_run().merged_commit
    )
    ui, by = records(by_ui.repo), records(by_cli.repo)
    assert ui["run"] == by["run"]
    gate = [e for e in ui["ledger"] if e["event"] == "gate2_merged"]
    assert gate and gate == [e for e in by["ledger"] if e["event"] == "gate2_merged"]

    # the journal entries Gate 2 appended (after the supervisor's last one) are the same;
    # their seq counted from the first of them, since how many entries the supervisor wrote
    # before (one per activity a hook reported, among others) depends on the moment
    def after_review(journal: list[dict[str, Any]]) -> list[dict[str, Any]]:
        starts = [
            i
            for i, e in enumerate(journal)
            if e["kind"] == "run" and e["data"]["set"].get("phase") == "merged"
        ]
        first = journal[starts[0]]["seq"]
        return [{**e, "seq": e["seq"] - first} for e in journal[starts[0] :]]

    assert after_review(ui["journal"]) == after_review(by["journal"])


# send and retry ----------------------------------------------------------------------------


def _blocked_and_busy(files: demo.DemoFiles) -> None:
    """slug blocks itself (its session stays at the prompt); tokenize works on (hangs), so
    the supervisor keeps running."""

    def change(d: dict[str, Any]) -> None:
        d["slug"]["implement"] = [
            [{"signal": {"phase": "blocked", "note": "which max_length is right?"}}]
        ]
        d["tokenize"]["implement"] = [["hang"]]

    edit_script(files, change)


def test_keys_send_and_retry_do_what_the_footer_says(
    demo_files: demo.DemoFiles, supervise: Starter
) -> None:
    repo = demo_files.repo
    _blocked_and_busy(demo_files)
    settings = plan(demo_files)
    runs.approve_plan(repo)
    thread, _out = supervise(repo, settings)
    store = Store.for_repo(repo)
    wait_for(lambda: store.read_status("slug").phase == Phase.BLOCKED, 120, "slug blocked")

    async def scenario() -> None:
        app = dashboard.Dashboard(repo)
        async with app.run_test(size=(160, 50)) as pilot:

            def pane() -> str:
                return str(app.query_one("#pane-text", Static).render())

            footer = {
                b.key: b.description
                for (_, b, enabled, _tip) in app.active_bindings.values()
                if b.show and enabled
            }
            assert footer == {
                "q": "Quit",
                "a": "Attach",
                "s": "Send",
                "r": "Retry",
                "g": "Gate 1",
                "m": "Gate 2",
                "p": "Permit",
            }
            assert app.snapshot is not None
            assert any(
                n.startswith("slug is blocked: which max_length is right?")
                for n in app.snapshot.needs
            )
            table = app.query_one("#tasks", DataTable)
            table.move_cursor(row=list(table_phases(app)).index("slug"))
            await pilot.pause()
            assert app.selected == "slug"
            await wait_in_app(
                pilot, lambda: "blocked" in pane(), 10, "slug's pane in the preview", shown=pane
            )
            await pilot.press("2")
            brief = RunDir(repo).brief_path("slug").read_text(encoding="utf-8")
            assert str(app.query_one("#brief-text", Static).render()) == brief
            await pilot.press("3")
            assert str(app.query_one("#review-text", Static).render()) == ("No review yet.")
            await pilot.press("4")
            assert "task_blocked which max_length is right?" in str(
                app.query_one("#ledger-text", Static).render()
            )
            await pilot.press("1")

            await pilot.press("s")
            await pilot.press(*"use forty")
            await pilot.press("enter")
            await wait_in_app(
                pilot,
                lambda: any(
                    e["event"] == "message_delivered" and e.get("task") == "slug"
                    for e in store.read_ledger()
                ),
                30,
                "the message delivered",
            )
            await wait_in_app(
                pilot, lambda: "use forty" in pane(), 10, "the message on slug's screen", shown=pane
            )
            # the command does the same, through the same supervisor
            cli("send", "slug", "and keep the dash", "--repo", str(repo))
            await wait_in_app(
                pilot,
                lambda: "and keep the dash" in pane(),
                30,
                "the command's message on slug's screen",
                shown=pane,
            )
            await wait_in_app(
                pilot,
                lambda: (
                    [e["task"] for e in store.read_ledger() if e["event"] == "message_delivered"]
                    == ["slug"] * 2
                ),
                30,
                "two messages delivered",
            )

            await pilot.press("r", *"forty it is", "enter")
            await wait_in_app(
                pilot, lambda: store.read_status("slug").phase != Phase.BLOCKED, 10, "slug retried"
            )
            assert app.last_error is None
            retried = [e for e in store.read_ledger() if e["event"] == "task_retried"]
            assert [(e["task"], e["note"]) for e in retried] == [("slug", "forty it is")]

            # a task that is not blocked: retry says why, exactly as the CLI does
            table.move_cursor(row=list(table_phases(app)).index("tokenize"))
            await pilot.pause()
            await pilot.press("r", "enter")
            await pilot.pause()
            assert app.last_error is not None
            assert "only a blocked or failed task" in app.last_error
            await pilot.press("q")

    run_async(scenario())
    assert thread.is_alive()  # a daemon; its sessions die with the private tmux server


def test_send_refuses_bad_input_and_a_managed_session(demo_files: demo.DemoFiles) -> None:
    repo = demo_files.repo
    plan(demo_files)
    runs.approve_plan(repo)
    empty = cli("send", "slug", "  ", "--repo", str(repo), check=False)
    assert empty.returncode == 1 and "the message is empty" in empty.stderr
    unknown = cli("send", "nope", "hi", "--repo", str(repo), check=False)
    assert unknown.returncode == 1 and "no task 'nope'" in unknown.stderr
    idle = cli("send", "slug", "hi", "--repo", str(repo), check=False)
    assert idle.returncode == 1 and "has no session to send to" in idle.stderr
    # the hint's command exists and works
    assert cli("status", "--repo", str(repo)).returncode == 0
    # an agent must not speak for the person
    env = {**os.environ, "LO_ORCH_TASK": "slug"}
    script = 'env -u LO_ORCH_TASK "$@"; exit $?'
    agent = subprocess.run(
        [
            "sh",
            "-c",
            script,
            "sh",
            sys.executable,
            "-m",
            "loop_orchestrator",
            "send",
            "slug",
            "approve yourself",
            "--repo",
            str(repo),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert agent.returncode == 1
    assert "inside a managed agent session" in agent.stderr
    assert not any(e["event"] == "message_sent" for e in Store.for_repo(repo).read_ledger())


def test_dashboard_without_a_run_says_what_to_do(git_repo: Path) -> None:
    result = cli("dashboard", "--repo", str(git_repo), check=False)
    assert result.returncode == 1
    assert result.stderr.startswith(f"Error: no run in {git_repo}")
    assert "lo-orch plan FILE" in result.stderr
    assert result.stdout == ""  # nothing drawn


# attach: a real terminal ----------------------------------------------------------------


def test_attach_suspends_the_dashboard_and_resumes_it(
    demo_files: demo.DemoFiles, tmux_socket: str, supervise: Starter
) -> None:
    """The dashboard in a real terminal (a pane of a second, private tmux server): `a`
    hands the terminal to `tmux attach` of the run's session; when that client detaches,
    the dashboard is back."""
    repo = demo_files.repo
    _blocked_and_busy(demo_files)
    settings = plan(demo_files)
    runs.approve_plan(repo)
    supervise(repo, settings)
    store = Store.for_repo(repo)
    wait_for(lambda: store.read_status("slug").phase == Phase.BLOCKED, 120, "slug blocked")
    viewer = f"{tmux_socket}-viewer"
    env_args = [
        f"{k}={v}"
        for k, v in os.environ.items()
        if k.startswith(("LO_ORCH_", "HOME", "XDG_", "GIT_CONFIG"))
    ]
    dashboard_argv = shlex.join(
        [
            "env",
            *env_args,
            f"PYTHONPATH={REPO_ROOT}",
            sys.executable,
            "-m",
            "loop_orchestrator",
            "dashboard",
            "--repo",
            str(repo),
        ]
    )
    # the shell prints the dashboard's exit code (tmux does not always record a dead pane's)
    command = shlex.join(["sh", "-c", f'{dashboard_argv}; echo "dashboard-exit=$?"'])

    def tmux(*args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", viewer, *args], capture_output=True, text=True, check=False
        ).stdout

    def screen() -> str:
        return tmux("capture-pane", "-p", "-t", "=view:")

    try:
        subprocess.run(
            [
                "tmux",
                "-L",
                viewer,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                "view",
                "-x",
                "150",
                "-y",
                "45",
                ";",
                "set-option",
                "-g",
                "remain-on-exit",
                "on",
                ";",
                "respawn-pane",
                "-k",
                "-t",
                "=view:",
                command,
            ],
            check=True,
        )
        try:
            wait_for(lambda: "Needs you" in screen(), 30, "the dashboard on screen")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the terminal shows:\n{screen()}") from None
        # the cursor starts on the first task (tokenize, hanging in its session)
        tmux("send-keys", "-t", "=view:", "a")

        def attached() -> list[str]:
            """The terminals attached to the run's session (the supervisor's control-mode
            client is attached too, and is none)."""
            fields = "#{session_name} #{client_control_mode} #{client_name}"
            listed = subprocess.run(
                ["tmux", "-L", tmux_socket, "list-clients", "-F", fields],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.split("\n")
            return [line.split(" ", 2)[2] for line in listed if line.startswith("lo-demo 0 ")]

        wait_for(
            lambda: "Needs you" not in screen() and attached(),
            20,
            "the run's session attached",
        )
        for client in attached():
            subprocess.run(["tmux", "-L", tmux_socket, "detach-client", "-t", client], check=True)
        wait_for(lambda: "Needs you" in screen(), 20, "the dashboard back")

        def quit_pressed() -> bool:
            # a key typed while the app is still taking the terminal back can be lost: press
            # q again until the dashboard has quit
            if "dashboard-exit=" in screen():
                return True
            tmux("send-keys", "-t", "=view:", "q")
            time.sleep(1)
            return False

        try:
            wait_for(quit_pressed, 30, "the dashboard quit")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the terminal shows:\n{screen()}") from None
        assert "dashboard-exit=0" in screen()
    finally:
        subprocess.run(["tmux", "-L", viewer, "kill-server"], capture_output=True, check=False)


# what needs a person; file events ---------------------------------------------------------


def _doc(
    phase: str,
    *,
    alive: bool = True,
    tasks: list[dict[str, Any]] | None = None,
    approved: bool = True,
) -> dict[str, Any]:
    return {
        "run": {
            "phase": phase,
            "plan_sha256": "a",
            "approved_plan_sha256": "a" if approved else None,
            "supervisor": {"alive": alive, "pid": None},
        },
        "tasks": tasks or [],
    }


def test_needs_you_names_each_thing_a_person_must_do() -> None:
    assert view.needs_you(_doc("running")) == []
    assert view.needs_you(_doc("running", alive=False)) == [
        "No supervisor is running: `lo-orch run` resumes the run"
    ]
    assert view.needs_you(_doc("awaiting_plan_approval", approved=False)) == [
        "Gate 1: the plan waits for your approval (g)"
    ]
    # approved but not started: not a gate any more
    assert view.needs_you(_doc("awaiting_plan_approval")) == []
    assert view.needs_you(_doc("awaiting_merge_review")) == [
        "Gate 2: review the diff and merge it (m)"
    ]
    tasks: list[dict[str, Any]] = [
        {"task": "a", "phase": "blocked", "error": "needs\n ownership of x.py"},
        {"task": "b", "phase": "failed", "note": None},
        {
            "task": "c",
            "phase": "implementing",
            "waiting_for": "a person: Claude Code asks permission to use Bash: curl x",
        },
        {"task": "d", "phase": "implementing", "waiting_for": "the agent"},
    ]
    assert view.needs_you(_doc("running", tasks=tasks), ["r1"]) == [
        "r1",
        "a is blocked: needs ownership of x.py (r retries)",
        "b is failed: no reason given (r retries)",
        "c: a person: Claude Code asks permission to use Bash: curl x",
    ]
    # c's request is listed by the permission module: not twice
    assert (
        view.needs_you(_doc("running", tasks=tasks), ["c asks"], frozenset({"c"}))[-1]
        == "b is failed: no reason given (r retries)"
    )


def test_split_diff_gives_each_file_its_own_diff() -> None:
    diff = (
        "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"
        "diff --git a/d/y z.py b/d/y z.py\nnew file mode 100644\n+diff --git inside\n"
    )
    files = view.split_diff(diff)
    assert [p for p, _ in files] == ["x.py", "d/y z.py"]
    assert files[0][1].endswith("+b\n") and "y z" not in files[0][1]
    assert files[1][1].endswith("+diff --git inside\n")
    assert view.split_diff("") == []


def test_reloads_on_file_events_and_not_on_its_own_reads(
    demo_files: demo.DemoFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = demo_files.repo
    plan(demo_files)
    runs.approve_plan(repo)
    monkeypatch.setattr(dashboard, "TICK_SECONDS", 3600.0)

    async def scenario() -> None:
        app = dashboard.Dashboard(repo)
        async with app.run_test(size=(140, 45)) as pilot:
            await pilot.pause(1.5)
            idle = app.reloads
            await pilot.pause(1.5)
            assert app.reloads == idle, "its own reads made it reload"
            assert idle <= 2
            assert app.selected == "tokenize"  # the first row
            await pilot.press("4")  # its ledger
            assert "Nothing in the ledger yet." in str(
                app.query_one("#ledger-text", Static).render()
            )
            # another process's write is a file event: shown at once
            Store.for_repo(repo).append_ledger("note", task="tokenize", message="hello there")
            await wait_in_app(
                pilot,
                lambda: "hello there" in str(app.query_one("#ledger-text", Static).render()),
                5,
                "the ledger line",
            )
            assert app.reloads > idle

    run_async(scenario())


# permission requests (issue 17a's `lo-orch permit`) -----------------------------------------


def test_permit_key_answers_like_lo_orch_permit(demo_files: demo.DemoFiles) -> None:
    repo = demo_files.repo
    plan(demo_files)
    runs.approve_plan(repo)
    store = permissions.Permissions.for_repo(repo)
    asked = {}
    for task in ("tokenize", "slug"):
        req = store.new_request(task, "Bash", {"tool_summary": "pytest -q", "cwd": "/w"})
        store.write(req)
        asked[task] = req.id
    cli("permit", "tokenize", "allow", "--repo", str(repo))

    async def present() -> None:
        app = dashboard.Dashboard(repo)
        async with app.run_test(size=(140, 45)) as pilot:
            assert app.snapshot is not None
            assert any(n.startswith("slug asks to use Bash: pytest -q") for n in app.snapshot.needs)
            assert not any(n.startswith("tokenize asks") for n in app.snapshot.needs)
            await pilot.press("p", "escape")  # not now
            open_req = store.get(asked["slug"])
            assert open_req is not None and open_req.state == "open"
            await pilot.press("p", "a")
            await pilot.pause()
            assert app.last_error is None

    run_async(present())
    ui, by = store.get(asked["slug"]), store.get(asked["tokenize"])
    assert ui is not None and by is not None
    assert (
        (ui.state, ui.decision, ui.decided_by)
        == (by.state, by.decision, by.decided_by)
        == ("answered", "allow", "person")
    )
    answers = [e for e in Store.for_repo(repo).read_ledger() if e["event"] == "permission_answered"]
    assert [
        {k: v for k, v in e.items() if k not in ("ts", "task", "request")} for e in answers
    ] == [
        {
            "event": "permission_answered",
            "decision": "allow",
            "tool": "Bash",
            "message": "pytest -q",
            "by": "person",
        }
    ] * 2


# the README's screenshot -------------------------------------------------------------------

SCREENSHOT = REPO_ROOT / "docs" / "dashboard.svg"
#: set to 1 to write docs/dashboard.svg from the real app (the test checks it otherwise)
UPDATE_ENV = "LO_ORCH_UPDATE_SCREENSHOT"
#: read at import: the isolation fixture removes every LO_ORCH_* variable from the tests
UPDATE = os.environ.get(UPDATE_ENV) == "1"


def screen_text(svg: str) -> str:
    """What an SVG screenshot says above the task's details, and its footer, with what
    differs from run to run (digits, paths, spacing) left out."""
    import html

    rows: dict[float, list[tuple[float, str]]] = {}
    for m in re.finditer(r'<text[^>]*\bx="([\d.]+)"[^>]*\by="([\d.]+)"[^>]*>(.*?)</text>', svg):
        rows.setdefault(float(m.group(2)), []).append(
            (float(m.group(1)), html.unescape(m.group(3)))
        )
    lines = ["".join(t for _, t in sorted(parts)) for _, parts in sorted(rows.items())]
    cut = next(i for i, line in enumerate(lines) if "Pane(1)" in re.sub(r"\s", "", line))
    footer = [line for line in lines if "q Quit" in line.replace("\xa0", " ")]
    kept = [*lines[: cut + 1], *footer]
    text = re.sub(r"/\S+", "<path>", "\n".join(kept))
    return re.sub(r"\d+", "#", re.sub(r"\s+", "", text))


def test_screenshot_in_the_readme_is_the_real_app(
    demo_files: demo.DemoFiles, supervise: Starter
) -> None:
    repo = demo_files.repo
    _blocked_and_busy(demo_files)
    settings = plan(demo_files)
    runs.approve_plan(repo)
    supervise(repo, settings)
    store = Store.for_repo(repo)
    # (and each session's last hook fired: the table's "last activity" is part of the text)
    wait_for(
        lambda: (
            store.read_status("slug").phase == Phase.BLOCKED
            and store.read_status("slug").last_event == "Stop"
            and store.read_status("tokenize").phase == Phase.IMPLEMENTING
            and store.read_status("tokenize").last_event == "UserPromptSubmit"
        ),
        120,
        "slug blocked, tokenize at work",
    )
    svg: list[str] = []

    async def scenario() -> None:
        app = dashboard.Dashboard(repo)
        async with app.run_test(size=(150, 42)) as pilot:
            table = app.query_one("#tasks", DataTable)
            table.move_cursor(row=list(table_phases(app)).index("slug"))
            await wait_in_app(
                pilot,
                lambda: "blocked" in str(app.query_one("#pane-text", Static).render()),
                10,
                "slug's pane",
            )
            await pilot.pause()
            svg.append(app.export_screenshot(title="lo-orch dashboard"))

    run_async(scenario())
    assert "slugisblocked:whichmax_lengthisright?" in screen_text(svg[0])
    assert "qQuitaAttachsSendrRetrygGate#mGate#" in screen_text(svg[0])  # the footer
    if UPDATE:
        SCREENSHOT.parent.mkdir(exist_ok=True)
        SCREENSHOT.write_text(svg[0], encoding="utf-8")
    assert SCREENSHOT.exists(), f"no {SCREENSHOT}: run this test with {UPDATE_ENV}=1"
    assert screen_text(SCREENSHOT.read_text(encoding="utf-8")) == screen_text(svg[0]), (
        f"{SCREENSHOT} is not what the dashboard shows now: run this test with "
        f"{UPDATE_ENV}=1 and commit the file"
    )


def test_table_shows_the_node_column_of_a_run_on_a_cluster(demo_files: demo.DemoFiles) -> None:
    """A task whose session runs on a cluster node adds `lo-orch status`'s node column; the
    dashboard shows the same columns, and a reload with the column still there keeps it.
    (Before Gate 1 the table reads the status files, which this test writes as a backend
    does.)"""
    repo = demo_files.repo
    plan(demo_files)
    store = Store.for_repo(repo)

    async def scenario() -> None:
        app = dashboard.Dashboard(repo, watch=False)
        async with app.run_test(size=(160, 45)) as pilot:
            await pilot.pause()
            table = app.query_one("#tasks", DataTable)
            assert "node" not in [str(c.value) for c in table.columns]
            st = store.read_status("tokenize")
            st.node = "worker-1 (10.0.0.7, n1)"
            store.write_status(st)
            app.reload()
            await pilot.pause()
            headers = [str(c.value) for c in table.columns]
            assert headers == list(view.load_snapshot(repo).headers)
            assert headers[headers.index("pane") + 1] == "node"
            assert str(table.get_cell("tokenize", "node")) == "worker-1 (10.0.0.7, n1)"
            others = [str(k.value) for k in table.rows if k.value != "tokenize"]
            assert others and all(str(table.get_cell(t, "node")) == "-" for t in others)
            app.reload()  # the same columns again: cells are updated in place
            await pilot.pause()
            assert [str(c.value) for c in table.columns] == headers
            assert str(table.get_cell("tokenize", "node")) == "worker-1 (10.0.0.7, n1)"

    run_async(scenario())


def test_file_events_while_a_gate_or_message_screen_is_shown_are_read_after_it(
    demo_files: demo.DemoFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process writes while Gate 1 or the send box is on top: the dashboard neither
    crashes nor loses the write; the line is shown once the screen is closed (by the file
    event's reload: the slow clock is off)."""
    repo = demo_files.repo
    plan(demo_files)
    monkeypatch.setattr(dashboard, "TICK_SECONDS", 3600.0)
    store = Store.for_repo(repo)

    async def scenario() -> None:
        app = dashboard.Dashboard(repo)
        async with app.run_test(size=(140, 45)) as pilot:
            await pilot.pause(0.5)
            await pilot.press("4")  # the selected task's ledger, shown under the screens
            for key in ("g", "s"):
                await pilot.press(key)
                await pilot.pause(0.3)
                assert len(app.screen_stack) > 1, key
                store.append_ledger("note", task="tokenize", message=f"under {key}")
                await pilot.pause(dashboard.MIN_RELOAD_SECONDS + 0.2)  # a reload falls due
                await pilot.press("escape")
                await pilot.pause(0.3)
                assert len(app.screen_stack) == 1 and app.last_error is None
            await wait_in_app(
                pilot,
                lambda: "under s" in str(app.query_one("#ledger-text", Static).render()),
                5,
                "the line written under the send box",
            )
            assert "under g" in str(app.query_one("#ledger-text", Static).render())

    run_async(scenario())
