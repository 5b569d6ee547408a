"""hooks/lo-hook and `lo-orch hook` as Claude Code runs them: real processes, timed."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import REPO_ROOT
from helpers.served import serve, working

from loop_orchestrator.runstate.state import Phase, Store

LO_HOOK = REPO_ROOT / "hooks" / "lo-hook"
SID = "0d7e2c11-5b0f-4c1e-7d7a-4b7e9a573f1f"


PYCACHE = Path(tempfile.gettempdir()) / f"lo-orch-test-pycache-{os.getuid()}"


def clean_env(**extra: str) -> dict[str, str]:
    """The hook's environment: no LO_ORCH_* and a PATH without any lo-orch.

    Byte code is cached (outside the checkout), as for an installed lo-orch: timing the
    compilation of every module on every run would measure the test box, not the hook.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("LO_ORCH_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    env["PATH"] = "/usr/bin:/bin"
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update(extra)
    return env


def lo_orch_bin() -> str:
    """LO_ORCH_BIN as the supervisor sets it: a command line usable with `sh -c`."""
    return f"{shlex.quote(sys.executable)} -m loop_orchestrator"


def stop_payload(cwd: Path, active: bool = False) -> bytes:
    return json.dumps(
        {
            "session_id": SID,
            "transcript_path": "/tmp/t.jsonl",
            "cwd": str(cwd),
            "hook_event_name": "Stop",
            "permission_mode": "bypassPermissions",
            "stop_hook_active": active,
            "last_assistant_message": "Done.",
        }
    ).encode()


def run(
    argv: list[str], *, cwd: Path, env: dict[str, str], data: bytes
) -> tuple[subprocess.CompletedProcess[bytes], float]:
    """Run one hook process; returns it and its wall time."""
    proc, wall, _ = timed(argv, cwd=cwd, env=env, data=data)
    return proc, wall


def timed(
    argv: list[str], *, cwd: Path, env: dict[str, str], data: bytes
) -> tuple[subprocess.CompletedProcess[bytes], float, float]:
    """Run one process; returns it, its wall time and its CPU time (user + system).

    CPU time is what the hook costs whatever else the machine is doing (the test box runs
    other suites at the same time); wall time is what Claude Code waits.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, input=data, capture_output=True, timeout=30)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc, wall, cpu


def spy(folder: Path) -> Path:
    """A fake `lo-orch` on PATH that records its arguments and stdin."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "lo-orch"
    script.write_text(
        '#!/bin/sh\nprintf "%s\\n" "$@" > "$SPY_OUT.args"\ncat > "$SPY_OUT.stdin"\nexit 0\n'
    )
    script.chmod(0o755)
    return folder


def test_launcher_is_executable_posix_sh() -> None:
    assert os.access(LO_HOOK, os.X_OK)
    assert LO_HOOK.read_text().startswith("#!/bin/sh\n")
    subprocess.run(["sh", "-n", str(LO_HOOK)], check=True)


def test_unmanaged_session_exits_at_once_without_running_lo_orch(tmp_path: Path) -> None:
    spy_dir = spy(tmp_path / "bin")
    env = clean_env(PATH=f"{spy_dir}:/usr/bin:/bin", SPY_OUT=str(tmp_path / "spy"))
    times = []
    for _ in range(7):
        proc, took = run([str(LO_HOOK), "Stop"], cwd=tmp_path, env=env, data=stop_payload(tmp_path))
        assert proc.returncode == 0
        assert proc.stdout == b""
        assert proc.stderr == b""
        times.append(took)
    assert not (tmp_path / "spy.args").exists(), "lo-orch ran for an unmanaged session"
    assert statistics.median(times) < 0.1, times


def test_worktree_cwd_without_env_runs_lo_orch_from_path(tmp_path: Path) -> None:
    wt = tmp_path / "repo" / ".worktrees" / "r" / "alpha"
    wt.mkdir(parents=True)
    spy_dir = spy(tmp_path / "bin")
    env = clean_env(PATH=f"{spy_dir}:/usr/bin:/bin", SPY_OUT=str(tmp_path / "spy"))
    data = stop_payload(wt)
    proc, _ = run([str(LO_HOOK), "Stop"], cwd=wt, env=env, data=data)
    assert proc.returncode == 0
    assert (tmp_path / "spy.args").read_text().splitlines() == ["hook", "Stop"]
    assert (tmp_path / "spy.stdin").read_bytes() == data


def test_worktree_cwd_without_any_lo_orch_is_silent(tmp_path: Path) -> None:
    wt = tmp_path / "repo" / ".worktrees" / "r" / "alpha"
    wt.mkdir(parents=True)
    proc, _ = run([str(LO_HOOK), "Stop"], cwd=wt, env=clean_env(), data=stop_payload(wt))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")


def test_managed_stop_block_keeps_exit_code_2_through_the_launcher(
    git_repo: Path, tmp_path: Path, stack: contextlib.ExitStack
) -> None:
    served = stack.enter_context(serve(git_repo, {"alpha": working(Phase.PLANNING)}))
    store = Store.for_repo(git_repo)
    # a LO_ORCH_BIN whose path has a space: the launcher must keep it one word
    odd = tmp_path / "lo orch"
    odd.mkdir()
    wrapper = odd / "lo-orch"
    wrapper.write_text(f'#!/bin/sh\nexec {lo_orch_bin()} "$@"\n')
    wrapper.chmod(0o755)
    env = clean_env(
        LO_ORCH_TASK="alpha",
        LO_ORCH_RUN_DIR=str(store.dirs.root),
        LO_ORCH_BIN=shlex.quote(str(wrapper)),
    )
    proc, _ = run([str(LO_HOOK), "Stop"], cwd=git_repo, env=env, data=stop_payload(git_repo))
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == b""
    assert b"$LO_ORCH_BIN signal plan_ready" in proc.stderr
    assert served.status().last_event == "Stop"
    again, _ = run(
        [str(LO_HOOK), "Stop"], cwd=git_repo, env=env, data=stop_payload(git_repo, active=True)
    )
    assert (again.returncode, again.stderr) == (0, b"")


@pytest.mark.slow
def test_managed_hook_is_fast(git_repo: Path, stack: contextlib.ExitStack) -> None:
    """`lo-orch hook` in a managed session, the real process: budget 150 ms.

    Asserted on CPU time (robust on a busy test box) with a generous wall-time bound; what
    they catch is a heavy import (pydantic, filelock, rich...) creeping onto the hook path,
    which alone costs about the whole budget.
    """
    served = stack.enter_context(serve(git_repo, {"alpha": working(Phase.PLAN_READY)}))
    store = Store.for_repo(git_repo)
    env = clean_env(
        LO_ORCH_TASK="alpha", LO_ORCH_RUN_DIR=str(store.dirs.root), LO_ORCH_BIN=lo_orch_bin()
    )
    argv = ["sh", "-c", f'{lo_orch_bin()} hook "$1"', "sh", "UserPromptSubmit"]
    walls, cpus = [], []
    for i in range(10):
        data = json.dumps(
            {
                "session_id": SID,
                "cwd": str(git_repo),
                "prompt": f"go {i}",
                "hook_event_name": "UserPromptSubmit",
            }
        ).encode()
        proc, wall, cpu = timed(argv, cwd=git_repo, env=env, data=data)
        assert proc.returncode == 0, proc.stderr
        walls.append(wall)
        cpus.append(cpu)
    assert served.status().last_event == "UserPromptSubmit"
    assert len([r for r in store.read_ledger() if r["event"] == "hook"]) == 10
    # the first run may compile byte code
    cpu, wall = statistics.median(cpus[1:]), statistics.median(walls[1:])
    print(f"lo-orch hook: median cpu {cpu * 1000:.0f} ms, wall {wall * 1000:.0f} ms")
    assert cpu < 0.15, [round(t * 1000) for t in cpus]
    assert wall < 0.6, [round(t * 1000) for t in walls]


@pytest.mark.slow
def test_unmanaged_lo_orch_hook_is_silent_and_fast(tmp_path: Path) -> None:
    argv = ["sh", "-c", f'{lo_orch_bin()} hook "$1"', "sh", "Stop"]
    cpus = []
    for _ in range(6):
        proc, _, cpu = timed(argv, cwd=tmp_path, env=clean_env(), data=stop_payload(tmp_path))
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
        cpus.append(cpu)
    assert statistics.median(cpus[1:]) < 0.15, cpus
