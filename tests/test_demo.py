"""`lo-orch demo` as a user runs it: the whole flow, then the merged project's tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from loop_orchestrator.runstate import private


def test_demo_runs_the_whole_flow_and_cleans_up(tmux_socket: str, tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
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
