"""Gates are a person's act: approve, merge (--yes too), retry, comment, request-changes and
cleanup --abandon are refused from inside a managed session, found by process ancestry (real
processes: a shell started with LO_ORCH_TASK, a real tmux pane, the sandbox's PID
namespace)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from helpers.git import git
from helpers.wait import wait_for

from loop_orchestrator.cli.main import run_cli
from loop_orchestrator.commands import review
from loop_orchestrator.commands.plan import plan_from_file
from loop_orchestrator.config import Settings
from loop_orchestrator.resources import lo_orch_bin
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.state import Phase, RunDir, RunPhase, Store
from loop_orchestrator.sessions import sandbox
from loop_orchestrator.sessions.backend import LaunchSpec
from loop_orchestrator.sessions.guard import SessionGateError
from loop_orchestrator.sessions.tmux import TmuxBackend
from loop_orchestrator.workspace import workspace

RUN = "gates"
PLAN = {
    "goal": "gates",
    "name": RUN,
    "tasks": [
        {
            "id": "alpha",
            "title": "Alpha",
            "objective": "x",
            "owns": ["app/alpha.py"],
            "done": [{"criterion": "runs", "check": "python -c pass"}],
        }
    ],
}
SETTINGS = Settings.model_validate({"agent": {"kind": "scripted", "script": "s.yaml"}})
LO_ORCH = shlex.split(lo_orch_bin())


def record(repo: Path, tmp_path: Path) -> Store:
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(PLAN), encoding="utf-8")
    plan_from_file(repo, plan, SETTINGS)
    return Store(RunDir(repo))


def at_gate2(repo: Path, tmp_path: Path) -> None:
    """A run waiting for the merge review (staging at base, integration passed)."""
    store = record(repo, tmp_path)
    runs.approve_plan(repo)
    state = store.read_run()
    ws = workspace.Workspace.for_run(repo, state, SETTINGS.workspace)
    sha = ws.create_staging(state.base_sha)

    # what the supervisor would have recorded (the files are only its published view)
    rec = runs.open_record(repo)
    rec.update_run(
        phase=RunPhase.AWAITING_MERGE_REVIEW,
        integration={"commit": sha, "passed": True, "exit_code": 0},
    )
    rec.update_task("alpha", phase=Phase.INTEGRATED)


def commented(repo: Path, tmp_path: Path) -> None:
    """At Gate 2 with a person's comment recorded for alpha."""
    at_gate2(repo, tmp_path)
    review.comment(repo, None, None, "rename it", task="alpha")


def blocked(repo: Path, tmp_path: Path) -> None:
    record(repo, tmp_path)
    runs.approve_plan(repo)
    runs.open_record(repo).update_task("alpha", phase=Phase.BLOCKED, error="needs a person")


def unapproved(repo: Path, tmp_path: Path) -> None:
    record(repo, tmp_path)


#: gate -> (arguments, set-up, what a person's call changes)
GATES: dict[str, tuple[list[str], Callable[[Path, Path], None], Callable[[Path], bool]]] = {
    "approve": (
        ["approve"],
        unapproved,
        lambda r: Store(RunDir(r)).read_run().approved_plan_sha256 is not None,
    ),
    "merge --yes": (
        ["merge", "--yes"],
        at_gate2,
        lambda r: f"feat/{RUN}" in git(r, "branch", "--list", f"feat/{RUN}"),
    ),
    "retry": (
        ["retry", "alpha"],
        blocked,
        lambda r: Store(RunDir(r)).read_status("alpha").phase != Phase.BLOCKED,
    ),
    # an agent must not speak for the person: its own comments would be sent back to it
    "comment": (
        ["comment", "--task", "alpha", "ship it"],
        at_gate2,
        lambda r: bool(runs.open_record(r).comments().comments),
    ),
    "request-changes": (
        ["request-changes"],
        commented,
        lambda r: Store(RunDir(r)).read_run().phase == RunPhase.RUNNING,
    ),
    "cleanup --abandon": (
        ["cleanup", "--abandon"],
        unapproved,
        lambda r: Store(RunDir(r)).read_run().phase == RunPhase.STOPPED,
    ),
}


def snapshot(repo: Path) -> dict[str, str]:
    """What a gate changes: run.json, status files, ledger, every ref and worktree."""
    rundir = RunDir(repo)
    files = [rundir.run_json, rundir.ledger, *sorted(rundir.status_dir.glob("*.json"))]
    out = {str(p): p.read_text(encoding="utf-8") for p in files if p.exists()}
    out["refs"] = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    out["worktrees"] = git(repo, "worktree", "list", "--porcelain")
    return out


def from_session(repo: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """``lo-orch ARGS`` with LO_ORCH_TASK stripped, below a shell started with it (as an
    agent's Bash tool runs it). The trailing ``exit`` keeps the shell alive as a parent."""
    env = {**os.environ, "LO_ORCH_TASK": "alpha", "LO_ORCH_RUN_DIR": str(RunDir(repo).root)}
    script = 'env -u LO_ORCH_TASK -u LO_ORCH_RUN_DIR "$@"; exit $?'
    return subprocess.run(
        ["sh", "-c", script, "sh", *LO_ORCH, *args, "--repo", str(repo)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("gate", list(GATES))
def test_gate_refused_below_a_managed_ancestor_and_a_person_passes(
    gate: str, git_repo: Path, tmp_path: Path, tmux_socket: str
) -> None:
    args, setup, passed = GATES[gate]
    setup(git_repo, tmp_path)
    before = snapshot(git_repo)

    result = from_session(git_repo, args)

    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith(f"Error: `lo-orch {gate.split(' --yes')[0]}` is a person's"), (
        result.stderr
    )
    assert "inside a managed agent session" in result.stderr
    assert "started by lo-orch for task 'alpha'" in result.stderr
    assert "from their own terminal" in result.stderr
    assert "Traceback" not in result.stderr
    assert snapshot(git_repo) == before
    assert not passed(git_repo)

    person = subprocess.run(
        [*LO_ORCH, *args, "--repo", str(git_repo)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert person.returncode == 0, person.stdout + person.stderr
    assert passed(git_repo)


def test_merge_refused_from_a_real_tmux_pane(
    git_repo: Path, tmp_path: Path, tmux_socket: str
) -> None:
    at_gate2(git_repo, tmp_path)
    before = snapshot(git_repo)
    out, rc = tmp_path / "out.txt", tmp_path / "rc.txt"
    command = (
        f"env -u LO_ORCH_TASK -u LO_ORCH_RUN_DIR {lo_orch_bin()} merge --yes "
        f"--repo {shlex.quote(str(git_repo))} > {out} 2>&1; echo $? > {rc}"
    )
    backend = TmuxBackend("agents")
    backend.launch(LaunchSpec("alpha", git_repo, ["sh", "-c", command], {"LO_ORCH_TASK": "alpha"}))
    wait_for(lambda: rc.exists() and rc.read_text().strip(), 60, "the merge attempt's exit code")
    assert rc.read_text().strip() == "1", out.read_text()
    assert "`lo-orch merge` is a person's decision" in out.read_text()
    assert snapshot(git_repo) == before
    assert f"feat/{RUN}" not in git(git_repo, "branch", "--list")


def test_the_environment_variable_alone_is_enough_in_process(
    git_repo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Where /proc says nothing (or the variable is simply set), LO_ORCH_TASK still counts;
    the guard sits in the core functions, not only in click."""
    unapproved(git_repo, tmp_path)
    monkeypatch.setenv("LO_ORCH_TASK", "alpha")
    with pytest.raises(SessionGateError, match="LO_ORCH_TASK=alpha is set"):
        runs.approve_plan(git_repo)
    assert run_cli(["approve", "--repo", str(git_repo)]) == 1
    assert "Error: `lo-orch approve` is a person's decision" in capsys.readouterr().err
    monkeypatch.delenv("LO_ORCH_TASK")
    runs.approve_plan(git_repo)


DETACH = (
    # setsid + a double fork + env -i: no ancestor of the final lo-orch was started with
    # LO_ORCH_TASK; the outer shell waits so the sandbox (its PID namespace) stays up
    'setsid env -i PATH="$PATH" HOME="$HOME" sh -c \'("$@" > "$OUT" 2>&1; echo $? > "$RC") &\' '
    'sh "$@"; while [ ! -s "$RC" ]; do sleep 0.05; done'
)


def detached_approve(repo: Path, tmp_path: Path, wrap: Callable[[list[str]], list[str]]) -> str:
    out, rc = tmp_path / "detached.out", tmp_path / "detached.rc"
    env = {**os.environ, "LO_ORCH_TASK": "alpha", "OUT": str(out), "RC": str(rc)}
    argv = wrap(
        [
            "sh",
            "-c",
            DETACH.replace('"$OUT"', str(out)).replace('"$RC"', str(rc)),
            "sh",
            *LO_ORCH,
            "approve",
            "--repo",
            str(repo),
        ]
    )
    subprocess.run(argv, env=env, timeout=120, check=True)
    return rc.read_text().strip() + " " + out.read_text()


def test_a_detached_process_is_caught_inside_the_sandbox(git_repo: Path, tmp_path: Path) -> None:
    if not sandbox.available()[0]:
        pytest.skip("bubblewrap does not work here")
    unapproved(git_repo, tmp_path)
    worktree = RunDir(git_repo).worktree_path(RUN, "alpha")
    worktree.mkdir(parents=True)
    policy = sandbox.Policy.for_task(
        repo=git_repo, run_dir=RunDir(git_repo).root, worktree=worktree, task="alpha"
    )
    result = detached_approve(git_repo, tmp_path, lambda argv: sandbox.wrap(argv, policy))
    assert result.startswith("1 Error: `lo-orch approve` is a person's decision"), result
    assert Store(RunDir(git_repo)).read_run().approved_plan_sha256 is None


@pytest.mark.slow
def test_outside_the_sandbox_a_detached_process_escapes_the_ancestry_check(
    git_repo: Path, tmp_path: Path
) -> None:
    """The limit, shown (negative control for the test above): without the sandbox, setsid
    + double fork + env -i leaves no managed ancestor. Then only the sandbox's read-only
    `.orchestration/` and refs would stop a gate's writes."""
    unapproved(git_repo, tmp_path)
    result = detached_approve(git_repo, tmp_path, lambda argv: argv)
    assert result.startswith("0 "), result
    assert json.loads(RunDir(git_repo).run_json.read_text())["approved_plan_sha256"]
