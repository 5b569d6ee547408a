"""`lo-orch demo` as a user runs it: the whole flow, then the merged project's tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli import INTERRUPTIBLE
from helpers.wait import wait_for

from loop_orchestrator.runstate import private


def test_demo_runs_the_whole_flow_and_cleans_up(tmux_socket: str, tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("LO_ORCH_SCRIPTED_TRANSCRIPTS")  # (as a user has it: unset)
    result = subprocess.run(
        [sys.executable, "-m", "loop_orchestrator", "demo"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(
        r"Demo finished in [\d.]+s: 4 tasks, 3 waves, 1 rework round\(s\), "
        r"merged into feat/demo\.",
        out,
    )
    assert "Merged project's tests: Ran 18 tests" in out
    assert "rework: counts round 1:" in out and "done.failed" in out
    assert "Gate 1 approved" in out and "Gate 2 approved" in out
    # the throwaway repository is gone without --keep, and so is its private state
    assert not list(tmp_path.glob("lo-orch-demo-*"))
    state_home = private.state_home()
    assert not state_home.exists() or not list(state_home.glob("textstats-*"))
    # nor is any file of its scripted agents (transcripts, the prompts they got) left
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_demo_keep_leaves_the_repository_for_inspection(tmux_socket: str, tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "loop_orchestrator", "demo", "--keep"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    (root,) = tmp_path.glob("lo-orch-demo-*")
    repo = root / "textstats"
    log = subprocess.run(
        ["git", "log", "--format=%s", "feat/demo"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for task in ("tokenize", "slug", "counts", "report"):
        assert f"lo-orch: task {task}" in log
    assert (repo / ".orchestration" / "reviews" / "counts-r1.md").is_file()
    assert f"Repository:   {repo}" in result.stdout


@pytest.mark.parametrize("server", ["its own", "the caller's"])
def test_a_demo_interrupted_while_its_sessions_work_leaves_none_of_them_running(
    server: str, tmux_socket: str, tmp_path: Path
) -> None:
    """Ctrl-C while the agents work: the files stay for inspection, the sessions end (their
    model endpoint is gone with the demo; left running they would work on unseen)."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    if server == "its own":
        del env["LO_ORCH_TMUX_SOCKET"]
    demo = subprocess.Popen(
        [*INTERRUPTIBLE, "demo"],  # (as from a terminal, wherever the suite runs)
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )

    socket = tmux_socket if server == "the caller's" else f"lo-demo-{demo.pid}"

    def agent_pids() -> list[int]:
        out = subprocess.run(
            ["tmux", "-L", socket, "list-panes", "-a", "-F", "#{@lo_task} #{pane_pid}"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        rows = [ln.rsplit(" ", 1) for ln in out.splitlines()]
        return [int(pid) for task, pid in rows if task.strip()]

    try:
        try:
            wait_for(lambda: bool(agent_pids()), timeout=120, what="an agent pane of the demo")
            pids = agent_pids()
            demo.send_signal(signal.SIGINT)
            _out, err = demo.communicate(timeout=60)
        finally:
            if demo.poll() is None:
                demo.kill()
                demo.wait()
        check_nothing_left(demo.returncode, err, socket, pids, tmp_path)
        socket_file = Path(os.environ["TMUX_TMPDIR"]) / f"tmux-{os.getuid()}" / socket
        # its own server's socket file goes with it; the caller's server is left as it was
        assert socket_file.exists() == (server == "the caller's")
    finally:
        if server == "its own":  # a failed test leaves nothing either (the fixture's is ended)
            subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, check=False)


def check_nothing_left(
    returncode: int, err: str, socket: str, pids: list[int], tmp_path: Path
) -> None:
    assert returncode != 0
    sessions = subprocess.run(
        ["tmux", "-L", socket, "list-sessions", "-F", "#{session_name}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    assert "lo-demo" not in sessions, err

    def gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_for(lambda: all(map(gone, pids)), timeout=10, what=f"the agents {pids} ended")
    # kept for inspection: the repository and its run state
    (root,) = tmp_path.glob("lo-orch-demo-*")
    assert (root / "textstats" / ".git").exists()
