"""`lo-orch hook` and `lo-orch signal`: task lookup, recording, the Stop gate, transitions.

Real files, real processes, real lock files; payloads are shaped like the ones Claude Code
2.1.332 sends (see shared reference: SessionStart, UserPromptSubmit, StopFailure...).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import REPO_ROOT, git

from loop_orchestrator import hooks, plan
from loop_orchestrator.cli import hook_cmds
from loop_orchestrator.cli.main import cli, run_cli
from loop_orchestrator.state import ORCH_DIR, WORKTREES_DIR, Phase, RunDir, Store, TaskStatus

SID = "5b0f4c1e-7d7a-4b7e-9a57-3f1f0d7e2c11"


def sub_env(**extra: str) -> dict[str, str]:
    """The environment for a real `lo-orch` subprocess run from this checkout."""
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), **extra}


def make_task(
    repo: Path, task: str = "alpha", phase: Phase = Phase.PLANNING, **fields: Any
) -> Path:
    """A run dir with one task status; returns the absolute .orchestration folder."""
    store = Store.for_repo(repo)
    store.write_status(TaskStatus(task=task, phase=phase, **fields))
    return store.dirs.root


def payload(event: str, cwd: Path | str, **fields: Any) -> str:
    data = {
        "session_id": SID,
        "transcript_path": f"/tmp/{SID}.jsonl",
        "cwd": str(cwd),
        "hook_event_name": event,
        "permission_mode": "bypassPermissions",
        **fields,
    }
    return json.dumps(data)


def env_for(run_dir: Path, task: str = "alpha", **extra: str) -> dict[str, str]:
    return {"LO_ORCH_TASK": task, "LO_ORCH_RUN_DIR": str(run_dir), **extra}


def status_of(repo: Path, task: str = "alpha") -> dict[str, Any]:
    data: dict[str, Any] = json.loads(RunDir(repo).status_path(task).read_text())
    return data


def hook_records(repo: Path) -> list[dict[str, Any]]:
    return [r for r in Store.for_repo(repo).read_ledger() if r["event"] == "hook"]


# constants that mirror state/plan without importing them ---------------------------------


def test_mirrored_constants_agree_with_state_and_plan() -> None:
    assert hooks.ORCH_DIR == ORCH_DIR
    assert hooks.WORKTREES_DIR == WORKTREES_DIR
    assert hooks.TASK_ID_RE.pattern == plan.ID_RE.pattern
    assert set(hooks.GATED_PHASES) == {Phase.PLANNING.value, Phase.IMPLEMENTING.value}
    assert {Phase(p) for p in hooks.SIGNAL_PHASES} == {
        Phase.PLAN_READY, Phase.IMPL_DONE, Phase.BLOCKED,
    }
    assert tuple(hook_cmds.SIGNAL_CHOICES) == hooks.SIGNAL_PHASES


def test_hook_path_imports_no_heavy_module(git_repo: Path) -> None:
    """The real `lo-orch hook` entry, managed session, Stop block: no pydantic, filelock..."""
    run_dir = make_task(git_repo, phase=Phase.PLANNING)
    code = (
        "import sys\n"
        "from loop_orchestrator.cli.main import main\n"
        "sys.argv = ['lo-orch', 'hook', 'Stop']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code\n"
        "heavy = [m for m in ('pydantic', 'filelock', 'libtmux', 'rich', 'jinja2', 'git',"
        " 'yaml', 'watchdog', 'loop_orchestrator.state') if m in sys.modules]\n"
        "print(code, heavy, file=sys.stderr)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=payload("Stop", git_repo), capture_output=True,
        text=True, check=True, env=sub_env(**env_for(run_dir)),
    )
    assert out.stderr.strip().splitlines()[-1] == "2 []"
    assert status_of(git_repo)["last_event"] == "Stop"


# locating the task -------------------------------------------------------------------------


def test_unmanaged_session_is_silent_and_writes_nothing(git_repo: Path) -> None:
    outcome = hooks.run_hook("Stop", payload("Stop", git_repo, stop_hook_active=False), {})
    assert outcome == hooks.QUIET
    assert not (git_repo / ORCH_DIR).exists()


@pytest.mark.parametrize(
    "raw", ["", "not json", "[1, 2]", "null", '{"cwd": 5}', '{"cwd": "relative/.worktrees/alpha"}']
)
def test_bad_payloads_are_silent(git_repo: Path, raw: str) -> None:
    make_task(git_repo)
    assert hooks.run_hook("Stop", raw, {}) == hooks.QUIET
    assert hook_records(git_repo) == []


def test_env_identifies_the_task_and_records_session_start(git_repo: Path) -> None:
    run_dir = make_task(git_repo)
    outcome = hooks.run_hook(
        "SessionStart", payload("SessionStart", git_repo, source="startup", model="x"),
        env_for(run_dir),
    )
    assert outcome == hooks.QUIET
    status = status_of(git_repo)
    assert status["last_event"] == "SessionStart"
    assert status["session_id"] == SID
    assert status["last_event_at"] == status["updated_at"]
    # the file stays a valid TaskStatus for everyone else
    assert Store.for_repo(git_repo).read_status("alpha").last_event == "SessionStart"
    [record] = hook_records(git_repo)
    assert record["hook_event"] == "SessionStart"
    assert record["task"] == "alpha"
    assert record["session_id"] == SID
    assert record["source"] == "startup"


def test_session_id_already_known_is_not_overwritten(git_repo: Path) -> None:
    run_dir = make_task(git_repo, session_id="11111111-2222-3333-4444-555555555555")
    hooks.run_hook("SessionStart", payload("SessionStart", git_repo), env_for(run_dir))
    assert status_of(git_repo)["session_id"] == "11111111-2222-3333-4444-555555555555"
    assert status_of(git_repo)["last_event"] == "SessionStart"


@pytest.mark.parametrize(
    "env_change",
    [
        {"LO_ORCH_TASK": "beta"},  # no status file for that task
        {"LO_ORCH_TASK": "../alpha"},  # not a task id
        {"LO_ORCH_RUN_DIR": "relative/.orchestration"},
    ],
)
def test_env_pointing_nowhere_is_silent(git_repo: Path, env_change: dict[str, str]) -> None:
    run_dir = make_task(git_repo)
    before = status_of(git_repo)
    env = {**env_for(run_dir), **env_change}
    assert hooks.run_hook("Stop", payload("Stop", git_repo), env) == hooks.QUIET
    assert status_of(git_repo) == before
    assert hook_records(git_repo) == []


def test_cwd_in_worktree_identifies_the_launched_session_only(git_repo: Path) -> None:
    make_task(git_repo, session_id=SID, phase=Phase.IMPLEMENTING)
    sub = git_repo / WORKTREES_DIR / "alpha" / "app"
    sub.mkdir(parents=True)
    # a user's own claude in the same worktree (another session id) is left alone
    other = payload("Stop", sub, stop_hook_active=False) .replace(SID, "someone-else")
    assert hooks.run_hook("Stop", other, {}) == hooks.QUIET
    assert status_of(git_repo)["last_event"] is None
    # the session lo-orch launched is recognised from its cwd alone
    outcome = hooks.run_hook("Stop", payload("Stop", sub, stop_hook_active=False), {})
    assert outcome.exit_code == 2
    assert "lo-orch signal impl_done --task alpha" in outcome.stderr
    assert status_of(git_repo)["last_event"] == "Stop"


def test_cwd_under_unknown_worktree_is_silent(git_repo: Path) -> None:
    make_task(git_repo, session_id=SID)
    foreign = git_repo / WORKTREES_DIR / "gamma"
    foreign.mkdir(parents=True)
    assert hooks.run_hook("Stop", payload("Stop", foreign), {}) == hooks.QUIET
    assert hook_records(git_repo) == []


def test_corrupt_status_is_silent_and_logged(git_repo: Path) -> None:
    run_dir = make_task(git_repo)
    RunDir(git_repo).status_path("alpha").write_text("{broken", encoding="utf-8")
    outcome = hooks.run_hook("Stop", payload("Stop", git_repo), env_for(run_dir))
    assert outcome == hooks.QUIET
    log = (run_dir / "logs" / "hooks.log").read_text()
    assert "hook Stop for task alpha failed" in log
    assert "JSONDecodeError" in log


# what each event records -------------------------------------------------------------------


def test_prompt_text_is_not_logged_only_its_size_and_digest(git_repo: Path) -> None:
    run_dir = make_task(git_repo)
    prompt = "Implement the parser.\nSecret-ish detail: hunter2\nThird line"
    hooks.run_hook(
        "UserPromptSubmit", payload("UserPromptSubmit", git_repo, prompt=prompt), env_for(run_dir)
    )
    digest = hashlib.sha256(prompt.encode()).hexdigest()[:16]
    [record] = hook_records(git_repo)
    assert record["prompt_chars"] == len(prompt)
    assert record["prompt_sha256"] == digest
    assert "hunter2" not in (run_dir / "ledger.jsonl").read_text()
    status = status_of(git_repo)
    assert status["last_event"] == "UserPromptSubmit"
    assert status["last_prompt_sha256"] == digest
    assert status["prompt_submitted_at"] == status["last_event_at"]
    assert "hunter2" not in json.dumps(status)


def test_stop_failure_not_logged_in_sets_the_error(git_repo: Path) -> None:
    run_dir = make_task(git_repo)
    hooks.run_hook(
        "StopFailure",
        payload("StopFailure", git_repo, error="authentication_failed",
                last_assistant_message="Not logged in · Please run /login"),
        env_for(run_dir),
    )
    status = status_of(git_repo)
    assert status["error"] == hooks.NOT_LOGGED_IN_ERROR
    assert "/login" in status["error"]
    assert hook_records(git_repo)[0]["error"] == "authentication_failed"


def test_other_stop_failures_are_logged_without_an_error(git_repo: Path) -> None:
    run_dir = make_task(git_repo)
    hooks.run_hook("StopFailure", payload("StopFailure", git_repo, error="rate_limit"),
                   env_for(run_dir))
    assert status_of(git_repo)["error"] is None
    assert hook_records(git_repo)[0]["error"] == "rate_limit"


def test_notification_and_session_end_fields(git_repo: Path) -> None:
    run_dir = make_task(git_repo)
    env = env_for(run_dir)
    hooks.run_hook("Notification", payload(
        "Notification", git_repo, message="Claude needs your permission to use Bash",
        notification_type="permission_prompt"), env)
    hooks.run_hook("SessionEnd", payload("SessionEnd", git_repo, reason="prompt_input_exit"), env)
    note, end = hook_records(git_repo)
    assert note["notification_type"] == "permission_prompt"
    assert note["message"] == "Claude needs your permission to use Bash"
    assert end["reason"] == "prompt_input_exit"
    status = status_of(git_repo)
    assert status["last_event"] == "SessionEnd"
    assert status["last_notification"] == "permission_prompt"


# the Stop gate -----------------------------------------------------------------------------


def test_stop_gate_blocks_then_releases_on_stop_hook_active(git_repo: Path) -> None:
    run_dir = make_task(git_repo, phase=Phase.PLANNING)
    env = env_for(run_dir, LO_ORCH_BIN="/opt/lo/bin/lo-orch")
    first = hooks.run_hook("Stop", payload("Stop", git_repo, stop_hook_active=False), env)
    assert first.exit_code == 2
    assert first.stdout == ""
    assert "`$LO_ORCH_BIN signal plan_ready`" in first.stderr
    assert "signal blocked --note" in first.stderr
    # Claude continues because of the block; its next stop carries stop_hook_active
    second = hooks.run_hook("Stop", payload("Stop", git_repo, stop_hook_active=True), env)
    assert second == hooks.QUIET
    decisions = [r["decision"] for r in hook_records(git_repo)]
    assert decisions == ["block", "allow"]
    assert status_of(git_repo)["stop_blocks"] == 1


def test_stop_gate_is_bounded(git_repo: Path) -> None:
    run_dir = make_task(git_repo, phase=Phase.IMPLEMENTING)
    env = env_for(run_dir, LO_ORCH_BIN="lo")
    codes = [
        hooks.run_hook("Stop", payload("Stop", git_repo, stop_hook_active=False), env).exit_code
        for _ in range(5)
    ]
    assert codes == [2, 2, 2, 0, 0]
    assert status_of(git_repo)["stop_blocks"] == hooks.MAX_STOP_BLOCKS


@pytest.mark.parametrize("phase", [Phase.PLAN_READY, Phase.IMPL_DONE, Phase.BLOCKED,
                                   Phase.VERIFYING, Phase.LAUNCHING])
def test_stop_gate_lets_sessions_stop_outside_planning_and_implementing(
    git_repo: Path, phase: Phase
) -> None:
    run_dir = make_task(git_repo, phase=phase)
    outcome = hooks.run_hook("Stop", payload("Stop", git_repo, stop_hook_active=False),
                             env_for(run_dir))
    assert outcome == hooks.QUIET
    assert status_of(git_repo)["last_event"] == "Stop"


def test_signal_resets_the_stop_gate_count(git_repo: Path) -> None:
    run_dir = make_task(git_repo, phase=Phase.PLANNING)
    env = env_for(run_dir, LO_ORCH_BIN="lo")
    for _ in range(3):
        hooks.run_hook("Stop", payload("Stop", git_repo), env)
    hooks.signal_task(run_dir, "plan_ready", task="alpha")
    assert status_of(git_repo)["stop_blocks"] == 0
    Store.for_repo(git_repo).update_status("alpha", phase=Phase.IMPLEMENTING)
    outcome = hooks.run_hook("Stop", payload("Stop", git_repo), env)
    assert outcome.exit_code == 2
    assert "signal impl_done" in outcome.stderr


def test_hook_waits_for_the_store_lock(git_repo: Path) -> None:
    """The hook's flock and Store's filelock are the same lock (no lost update)."""
    run_dir = make_task(git_repo)
    store = Store.for_repo(git_repo)
    env = sub_env(**env_for(run_dir))
    with store.locked("status-alpha"):
        proc = subprocess.Popen(
            [sys.executable, "-c",
             "import sys; from loop_orchestrator.hooks import hook_main;"
             " sys.exit(hook_main('Notification'))"],
            stdin=subprocess.PIPE, env=env, cwd=git_repo,
        )
        assert proc.stdin is not None
        data = payload("Notification", git_repo, notification_type="idle_prompt")
        proc.stdin.write(data.encode())
        proc.stdin.close()
        time.sleep(0.8)  # the hook must still be waiting: nothing to poll for but its absence
        assert proc.poll() is None
        assert status_of(git_repo)["last_event"] is None
    assert proc.wait(timeout=20) == 0
    assert status_of(git_repo)["last_notification"] == "idle_prompt"


def test_concurrent_hooks_and_store_updates_lose_nothing(git_repo: Path) -> None:
    run_dir = make_task(git_repo)
    store = Store.for_repo(git_repo)
    env = sub_env(**env_for(run_dir))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c",
             "import sys; from loop_orchestrator.hooks import hook_main;"
             " sys.exit(hook_main('UserPromptSubmit'))"],
            stdin=subprocess.PIPE, env=env,
        )
        for _ in range(6)
    ]

    def bump() -> None:
        for i in range(10):
            store.update_status("alpha", rework_count=i + 1)

    t = threading.Thread(target=bump)
    t.start()
    for i, p in enumerate(procs):
        assert p.stdin is not None
        p.stdin.write(payload("UserPromptSubmit", git_repo, prompt=f"p{i}").encode())
        p.stdin.close()
    t.join()
    assert all(p.wait(timeout=30) == 0 for p in procs)
    status = store.read_status("alpha")
    assert status.rework_count == 10
    assert status.last_event == "UserPromptSubmit"
    assert len(hook_records(git_repo)) == 6


# signal ------------------------------------------------------------------------------------


def invoke(args: list[str], env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def run_main(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
             env: dict[str, str]) -> tuple[int, str, str]:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    code = run_cli(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_signal_plan_ready_from_planning(git_repo: Path) -> None:
    run_dir = make_task(git_repo, phase=Phase.PLANNING)
    result = invoke(["signal", "plan_ready", "--note", "plan in plans/alpha.md"],
                    env=env_for(run_dir))
    assert result.exit_code == 0, result.output
    assert "alpha: planning -> plan_ready" in result.output
    status = Store.for_repo(git_repo).read_status("alpha")
    assert status.phase is Phase.PLAN_READY
    assert status.note == "plan in plans/alpha.md"
    [record] = [r for r in Store.for_repo(git_repo).read_ledger() if r["event"] == "signal"]
    assert record == {**record, "task": "alpha", "phase": "plan_ready", "previous": "planning"}


def test_signal_impl_done_with_repo_and_task_options(git_repo: Path) -> None:
    make_task(git_repo, task="beta", phase=Phase.IMPLEMENTING)
    result = invoke(["signal", "impl_done", "--task", "beta", "--repo", str(git_repo)])
    assert result.exit_code == 0, result.output
    assert Store.for_repo(git_repo).read_status("beta").phase is Phase.IMPL_DONE


def test_signal_from_a_worktree_finds_the_main_checkout(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    make_task(git_repo, phase=Phase.IMPLEMENTING)
    wt = git_repo / WORKTREES_DIR / "alpha"
    git(git_repo, "worktree", "add", "-q", "-b", "lo/r/alpha", str(wt))
    monkeypatch.chdir(wt)
    code, _out, err = run_main(["signal", "impl_done"], monkeypatch, capsys,
                              {"LO_ORCH_TASK": "alpha"})
    assert code == 0, err
    assert Store.for_repo(git_repo).read_status("alpha").phase is Phase.IMPL_DONE


@pytest.mark.parametrize(
    ("phase", "signal", "expected"),
    [
        (Phase.IMPLEMENTING, "plan_ready", "only follows phase planning"),
        (Phase.PLANNING, "impl_done", "only follows phase implementing"),
        (Phase.PENDING, "plan_ready", "only follows phase planning"),
        (Phase.INTEGRATED, "impl_done", "only follows phase implementing"),
    ],
)
def test_signal_refuses_transitions_that_make_no_sense(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    phase: Phase, signal: str, expected: str,
) -> None:
    run_dir = make_task(git_repo, phase=phase)
    code, _, err = run_main(["signal", signal], monkeypatch, capsys, env_for(run_dir))
    assert code == 1
    assert err.startswith("Error: task alpha is in phase ")
    assert expected in err
    assert Store.for_repo(git_repo).read_status("alpha").phase is phase
    assert not any(r["event"] == "signal" for r in Store.for_repo(git_repo).read_ledger())


def test_signal_blocked_needs_a_note_and_an_active_task(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = make_task(git_repo, phase=Phase.IMPLEMENTING)
    code, _, err = run_main(["signal", "blocked"], monkeypatch, capsys, env_for(run_dir))
    assert code == 2
    assert "needs a note" in err
    code, _out, err = run_main(
        ["signal", "blocked", "--note", "needs app/db.py"], monkeypatch, capsys, env_for(run_dir)
    )
    assert code == 0, err
    status = Store.for_repo(git_repo).read_status("alpha")
    assert status.phase is Phase.BLOCKED
    assert status.error == "needs app/db.py"
    make_task(git_repo, task="idle", phase=Phase.PENDING)
    code, _, err = run_main(["signal", "blocked", "--note", "x"], monkeypatch, capsys,
                            env_for(run_dir, task="idle"))
    assert code == 1
    assert "needs a task with a live session" in err


def test_repeated_signal_changes_nothing(git_repo: Path) -> None:
    run_dir = make_task(git_repo, phase=Phase.PLAN_READY)
    result = invoke(["signal", "plan_ready"], env=env_for(run_dir))
    assert result.exit_code == 0
    assert "already plan_ready" in result.output
    assert not any(r["event"] == "signal" for r in Store.for_repo(git_repo).read_ledger())


def test_signal_without_task_or_unknown_task(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = make_task(git_repo)
    code, _, err = run_main(["signal", "plan_ready", "--repo", str(git_repo)], monkeypatch,
                            capsys, {})
    assert code == 2
    assert "LO_ORCH_TASK is not set" in err
    code, _, err = run_main(["signal", "plan_ready", "--task", "nope"], monkeypatch, capsys,
                            {"LO_ORCH_RUN_DIR": str(run_dir)})
    assert code == 1
    assert "no task 'nope'" in err
    code, _, err = run_main(["signal", "done"], monkeypatch, capsys, env_for(run_dir))
    assert code == 2
    assert re.search(r"plan_ready|impl_done|blocked", err)


def test_hook_command_via_click_keeps_exit_code_and_stderr(git_repo: Path) -> None:
    run_dir = make_task(git_repo, phase=Phase.PLANNING)
    result = CliRunner().invoke(
        cli, ["hook", "Stop"], input=payload("Stop", git_repo, stop_hook_active=False),
        env=env_for(run_dir, LO_ORCH_BIN="lo"),
    )
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "signal plan_ready" in result.stderr
    unmanaged = CliRunner().invoke(cli, ["hook", "Stop"], input="{}", env={})
    assert unmanaged.exit_code == 0
    assert unmanaged.output == ""


def test_a_hook_is_logged_before_the_status_shows_it(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor confirms a delivery the moment the status changes: by then the
    ledger must already hold the hook's line (cause before effect)."""
    run_dir = make_task(git_repo)
    logged_at_write: list[int] = []
    real_write = hooks._write_json_atomic

    def write(path: Path, data: Any) -> None:
        logged_at_write.append(len(hook_records(git_repo)))
        real_write(path, data)

    monkeypatch.setattr(hooks, "_write_json_atomic", write)
    hooks.run_hook("UserPromptSubmit", payload("UserPromptSubmit", git_repo, prompt="go"),
                   env_for(run_dir))
    assert logged_at_write == [1]
    assert status_of(git_repo)["last_event"] == "UserPromptSubmit"


def test_a_signal_is_logged_before_the_status_shows_it(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = make_task(git_repo, phase=Phase.IMPLEMENTING)
    store = Store.for_repo(git_repo)
    logged_at_write: list[int] = []
    real_write = Store._write_status

    def write(self: Store, status: TaskStatus) -> None:
        logged_at_write.append(sum(r["event"] == "signal" for r in store.read_ledger()))
        real_write(self, status)

    monkeypatch.setattr(Store, "_write_status", write)
    hooks.signal_task(run_dir, "impl_done", task="alpha")
    assert logged_at_write == [1]
    assert store.read_status("alpha").phase is Phase.IMPL_DONE
