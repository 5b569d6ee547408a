"""`lo-orch attach [TASK]`: the argv it builds and its errors (never actually attaches)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers.runs import run_state

from loop_orchestrator.cli.main import run_cli
from loop_orchestrator.errors import TmuxError
from loop_orchestrator.runstate.state import Store, TaskStatus
from loop_orchestrator.sessions.attach import attach_command
from loop_orchestrator.sessions.backend import LaunchSpec
from loop_orchestrator.sessions.tmux import TmuxBackend


def make_run(repo: Path, name: str = "demo", panes: dict[str, str | None] | None = None) -> None:
    store = Store.for_repo(repo)
    store.write_run(run_state(repo, name))
    for task, pane in (panes or {}).items():
        store.write_status(TaskStatus(task=task, pane_id=pane))


def tmux_path() -> str:
    return subprocess.run(
        ["sh", "-c", "command -v tmux"], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_attach_without_a_session_is_a_clear_error(
    tmux_socket: str, git_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_run(git_repo)
    with pytest.raises(TmuxError, match=r"run demo has no tmux session \(lo-demo\)"):
        attach_command(git_repo, None)
    assert run_cli(["attach", "--repo", str(git_repo)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: run demo has no tmux session (lo-demo)")
    assert "lo-orch run" in err


def test_attach_focuses_the_task_pane(tmux_socket: str, git_repo: Path) -> None:
    backend = TmuxBackend("demo")
    panes = [backend.launch(LaunchSpec(f"t{i}", git_repo, ["sleep", "60"])) for i in range(6)]
    make_run(git_repo, panes={"t5": panes[5], "t0": panes[0], "idle": None})
    argv = attach_command(git_repo, "t5")
    assert argv == [
        tmux_path(),
        "-L",
        tmux_socket,
        "select-window",
        "-t",
        panes[5],
        ";",
        "select-pane",
        "-t",
        panes[5],
        ";",
        "attach-session",
        "-t",
        "=lo-demo",
    ]
    # run it without the attach: the task's window and pane become the current ones
    shown = subprocess.run(
        [*argv[:-3], "display-message", "-p", "-t", "=lo-demo:", "#{pane_id}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert shown == panes[5]
    assert attach_command(git_repo, None)[-3:] == ["attach-session", "-t", "=lo-demo"]

    with pytest.raises(TmuxError, match="task idle has no session"):
        attach_command(git_repo, "idle")
    backend.kill_pane(panes[0])
    with pytest.raises(TmuxError, match=r"the pane of task t0 \(%\d+\) no longer exists"):
        attach_command(git_repo, "t0")


def test_attach_inside_tmux_switches_or_nests(
    tmux_socket: str, git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = TmuxBackend("demo")
    pane = backend.launch(LaunchSpec("t", git_repo, ["sleep", "60"]))
    make_run(git_repo, panes={"t": pane})
    socket_path = subprocess.run(
        ["tmux", "-L", tmux_socket, "display-message", "-p", "#{socket_path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    monkeypatch.setenv("TMUX", f"{socket_path},1,0")  # a client of this very server
    argv = attach_command(git_repo, "t")
    assert argv[0] == tmux_path()
    assert argv[-3:] == ["switch-client", "-t", "=lo-demo"]
    monkeypatch.setenv("TMUX", "/tmp/tmux-0/someone-elses,1,0")  # another server
    argv = attach_command(git_repo, "t")
    assert argv[:3] == ["env", "-u", "TMUX"]
    assert argv[-3:] == ["attach-session", "-t", "=lo-demo"]


def test_attach_command_execs_tmux(
    tmux_socket: str, git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = TmuxBackend("demo")
    pane = backend.launch(LaunchSpec("t", git_repo, ["sleep", "60"]))
    make_run(git_repo, panes={"t": pane})
    execs: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(os, "execvp", lambda f, a: execs.append((f, list(a))))
    assert run_cli(["attach", "t", "--repo", str(git_repo)]) == 0
    assert execs == [(tmux_path(), attach_command(git_repo, "t"))]


def test_attach_unknown_task(
    tmux_socket: str, git_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_run(git_repo)
    TmuxBackend("demo").ensure_session()
    assert run_cli(["attach", "nope", "--repo", str(git_repo)]) == 1
    assert "no status for task 'nope'" in capsys.readouterr().err


def test_attach_finds_the_server_the_run_recorded(
    tmux_socket: str, git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From another terminal (no LO_ORCH_TMUX_SOCKET) attach uses the run's own server."""
    backend = TmuxBackend("demo", socket=tmux_socket)
    pane = backend.launch(LaunchSpec("t1", git_repo, ["sleep", "60"]))
    make_run(git_repo, panes={"t1": pane})
    store = Store.for_repo(git_repo)
    state = store.read_run()
    state.tmux_socket = tmux_socket
    store.write_run(state)
    monkeypatch.delenv("LO_ORCH_TMUX_SOCKET")

    argv = attach_command(git_repo, "t1")

    assert argv[1:3] == ["-L", tmux_socket]
    assert argv[-3:] == ["attach-session", "-t", "=lo-demo"]
