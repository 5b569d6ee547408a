"""`lo-orch hook` and `lo-orch signal`: they carry a session's report to the supervisor, which
decides; a report for another task, or from outside any session, changes nothing.

Real processes, a real inbox socket and the supervisor's real judging code (``Reports``
over a real ``Record``); the tmux pane a session runs in is stood for by a process whose
pid is registered as that task's pane (as ``Supervisor._identify`` does with tmux's
``pane_pid``). Payloads are shaped like Claude Code 2.1.332's.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import REPO_ROOT
from helpers.git import git
from helpers.served import Served, env_for, lo_orch_env, serve, start_run, sub_env, working
from hypothesis import given, settings
from hypothesis import strategies as st

from loop_orchestrator.cli import session as session_cli
from loop_orchestrator.cli.main import cli, run_cli
from loop_orchestrator.files import ORCH_DIR, WORKTREES_DIR
from loop_orchestrator.plan import validation as plan_checks
from loop_orchestrator.runstate.journal import Record
from loop_orchestrator.runstate.state import (
    Phase,
    RunDir,
    Store,
    TaskStatus,
)
from loop_orchestrator.sessions import hooks, inbox, listener
from loop_orchestrator.supervisor.lifecycle import MAX_STOP_BLOCKS, NOT_LOGGED_IN_ERROR
from loop_orchestrator.supervisor.reports import Reports

SID = "5b0f4c1e-7d7a-4b7e-9a57-3f1f0d7e2c11"


@pytest.fixture
def served(git_repo: Path) -> Iterator[Served]:
    with serve(
        git_repo, {"alpha": working(Phase.PLANNING), "beta": working(Phase.IMPLEMENTING)}
    ) as s:
        yield s


def payload(event: str, cwd: Path | str, **fields: Any) -> str:
    return json.dumps(
        {
            "session_id": SID,
            "transcript_path": f"/tmp/{SID}.jsonl",
            "cwd": str(cwd),
            "hook_event_name": event,
            "permission_mode": "bypassPermissions",
            **fields,
        }
    )


Done = subprocess.CompletedProcess[str]


def from_beta_session(s: Served, args: list[str], env: dict[str, str]) -> Done:
    """Run `lo-orch ARGS` as a process of beta's session (its pane's pid is a shell)."""
    shell = subprocess.Popen(
        ["sh", "-c", 'read go; "$0" -m loop_orchestrator "$@"', sys.executable, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=sub_env(**env),
    )
    s.panes["beta"] = shell.pid  # registered before the shell starts lo-orch
    out, err = shell.communicate("go\n", timeout=60)
    return subprocess.CompletedProcess(shell.args, shell.returncode, out, err)


# constants that mirror plan without importing it ---------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.text(alphabet="abcz09-_A.\n/ ", max_size=45),
        st.from_regex(plan_checks.ID_RE),
        st.text(max_size=45),
    )
)
def test_task_ids_are_checked_as_plan_validation_does(text: str) -> None:
    assert hooks.is_task_id(text) == bool(plan_checks.ID_RE.fullmatch(text))


def test_mirrored_constants_agree_with_plan() -> None:
    for name in ("a", "a" * 40, "0-x", "t001"):
        assert hooks.is_task_id(name)
    for name in ("", "a" * 41, "-a", "A", "a\n", "a/b", "..", "é"):
        assert not hooks.is_task_id(name)
    assert (hooks.ORCH_DIR, hooks.WORKTREES_DIR) == (ORCH_DIR, WORKTREES_DIR)
    assert {Phase(p) for p in hooks.SIGNAL_PHASES} == {
        Phase.PLAN_READY,
        Phase.IMPL_DONE,
        Phase.BLOCKED,
    }
    assert tuple(session_cli.SIGNAL_CHOICES) == hooks.SIGNAL_PHASES


#: how each program a session runs starts lo-orch: ``$LO_ORCH_BIN`` (``python -m
#: loop_orchestrator``, also what the plugin's hooks/lo-hook runs) and the ``lo-orch``
#: console script (the module and function pyproject.toml names)
STARTS = {
    "python -m": "runpy.run_module('loop_orchestrator', run_name='__main__')",
    "lo-orch": "from {module} import {function}\n    {function}()",
}


def _console_script() -> tuple[str, str]:
    import tomllib

    doc = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    module, function = doc["project"]["scripts"]["lo-orch"].split(":")
    return module, function


def test_every_start_goes_through_the_one_entry_module() -> None:
    assert _console_script() == ("loop_orchestrator.entry", "main")
    main = (REPO_ROOT / "loop_orchestrator" / "__main__.py").read_text(encoding="utf-8")
    assert "from loop_orchestrator.entry import main" in main
    assert "lo-orch hook" in (REPO_ROOT / "hooks" / "lo-hook").read_text(encoding="utf-8")


@pytest.mark.parametrize("start", STARTS.values(), ids=STARTS.keys())
def test_hook_path_imports_no_heavy_module(served: Served, start: str) -> None:
    """`$LO_ORCH_BIN hook Stop` and `lo-orch hook Stop`, a managed session held by the Stop
    gate: no click, pydantic, filelock, threads or logging on the hook's side (the
    supervisor does the work)."""
    module, function = _console_script()
    code = (
        "import sys\n"
        "import runpy\n"
        "sys.argv = ['lo-orch', 'hook', 'Stop']\n"
        f"try:\n    {start.format(module=module, function=function)}\n"
        "except SystemExit as exc:\n    code = exc.code\n"
        "heavy = [m for m in ('click', 'pydantic', 'filelock', 'libtmux', 'rich', 'jinja2',"
        " 'git', 'yaml', 'watchdog', 'loop_orchestrator.runstate.state',"
        " 'loop_orchestrator.sessions.listener', 'loop_orchestrator.cli.main',"
        " 'threading', 'logging', 'queue', 'dataclasses') if m in sys.modules]\n"
        "print(code, heavy, file=sys.stderr)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=payload("Stop", served.repo),
        capture_output=True,
        text=True,
        check=True,
        env=sub_env(**env_for(served.run_dir)),
    )
    assert out.stderr.strip().splitlines()[-1] == "2 []"
    assert served.status().last_event == "Stop"


def test_each_answer_goes_out_its_own_way() -> None:
    block = hooks.HookOutcome(hooks.HookAnswer.BLOCK, "signal first")
    assert (block.exit_code, block.stdout, block.stderr) == (2, "", "signal first")
    decide = hooks.HookOutcome(hooks.HookAnswer.DECIDE, '{"hookSpecificOutput": {}}')
    assert (decide.exit_code, decide.stdout, decide.stderr) == (0, decide.text, "")
    quiet = hooks.HookOutcome(hooks.HookAnswer.QUIET, "anything")
    assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, "", "")
    assert hooks.QUIET.answer is hooks.HookAnswer.QUIET


# locating the task -------------------------------------------------------------------------


def test_unmanaged_session_is_silent_and_writes_nothing(git_repo: Path) -> None:
    outcome = hooks.run_hook("Stop", payload("Stop", git_repo, stop_hook_active=False), {})
    assert outcome == hooks.QUIET
    assert not (git_repo / ORCH_DIR).exists()


@pytest.mark.parametrize(
    "raw", ["", "not json", "[1, 2]", "null", '{"cwd": 5}', '{"cwd": "relative/.worktrees/alpha"}']
)
def test_bad_payloads_are_silent(served: Served, raw: str) -> None:
    assert hooks.run_hook("Stop", raw, {}) == hooks.QUIET
    assert served.ledger("hook") == []


@pytest.mark.parametrize(
    "env_change",
    [
        {"LO_ORCH_TASK": "nope"},
        {"LO_ORCH_TASK": "../x"},
        {"LO_ORCH_RUN_DIR": "relative"},
        {"LO_ORCH_RUN_DIR": "/nonexistent/.orchestration"},
    ],
)
def test_env_pointing_nowhere_is_silent(served: Served, env_change: dict[str, str]) -> None:
    env = {**env_for(served.run_dir), **env_change}
    assert hooks.run_hook("Stop", payload("Stop", served.repo), env) == hooks.QUIET
    assert served.ledger("hook") == []


# what a hook records -----------------------------------------------------------------------


def test_session_start_is_recorded_by_the_supervisor(served: Served) -> None:
    outcome = hooks.run_hook(
        "SessionStart",
        payload("SessionStart", served.repo, source="startup"),
        env_for(served.run_dir),
    )
    assert outcome == hooks.QUIET
    st = served.status()
    assert (st.last_event, st.session_id) == ("SessionStart", SID)
    assert served.view()["last_event"] == "SessionStart"
    [line] = served.ledger("hook")
    assert line == {**line, "task": "alpha", "hook_event": "SessionStart", "source": "startup"}


def test_session_id_already_known_is_not_overwritten(served: Served) -> None:
    served.set("alpha", session_id="known")
    hooks.run_hook("Stop", payload("Stop", served.repo), env_for(served.run_dir))
    assert served.status().session_id == "known"


def test_prompt_text_is_not_logged_only_its_size_and_digest(served: Served) -> None:
    secret = "the prompt says: token sk-live-123"
    hooks.run_hook(
        "UserPromptSubmit",
        payload("UserPromptSubmit", served.repo, prompt=secret),
        env_for(served.run_dir),
    )
    ledger_text = RunDir(served.repo).ledger.read_text()
    assert "sk-live-123" not in ledger_text
    [line] = served.ledger("hook")
    assert line["prompt_chars"] == len(secret)
    assert line["prompt_sha256"] == hashlib.sha256(secret.encode()).hexdigest()[:16]
    assert served.status().prompt_submitted_at


def test_stop_failure_not_logged_in_sets_the_error(served: Served) -> None:
    hooks.run_hook(
        "StopFailure",
        payload("StopFailure", served.repo, error="authentication_failed"),
        env_for(served.run_dir),
    )
    assert served.status().error == NOT_LOGGED_IN_ERROR
    hooks.run_hook(
        "StopFailure",
        payload("StopFailure", served.repo, error="rate_limit"),
        env_for(served.run_dir),
    )
    assert served.status().error == NOT_LOGGED_IN_ERROR  # another failure changes nothing
    assert [r["error"] for r in served.ledger("hook")] == ["authentication_failed", "rate_limit"]


def test_notification_type_is_kept(served: Served) -> None:
    hooks.run_hook(
        "Notification",
        payload(
            "Notification",
            served.repo,
            notification_type="permission_prompt",
            message="Claude needs your permission" * 20,
        ),
        env_for(served.run_dir),
    )
    assert served.status().last_notification == "permission_prompt"
    [line] = served.ledger("hook")
    assert line["notification_type"] == "permission_prompt"
    # the message is logged, cut to 200 characters (it reached the ledger before the inbox)
    assert line["message"] == ("Claude needs your permission" * 20)[:200]


# the Stop gate ---------------------------------------------------------------------------


def test_stop_gate_holds_a_session_that_has_not_reported_then_lets_it_go(served: Served) -> None:
    stop = payload("Stop", served.repo, stop_hook_active=False)
    outcome = hooks.run_hook("Stop", stop, env_for(served.run_dir, LO_ORCH_BIN="lo"))
    assert outcome.exit_code == 2
    assert "`$LO_ORCH_BIN signal plan_ready`" in outcome.stderr
    again = payload("Stop", served.repo, stop_hook_active=True)
    assert hooks.run_hook("Stop", again, env_for(served.run_dir)) == hooks.QUIET
    assert [r["decision"] for r in served.ledger("hook")] == ["block", "allow"]
    assert served.status().turn_ended_at is not None


def test_stop_gate_is_bounded(served: Served) -> None:
    stop = payload("Stop", served.repo, stop_hook_active=False)
    codes = [hooks.run_hook("Stop", stop, env_for(served.run_dir)).exit_code for _ in range(5)]
    assert codes == [2] * MAX_STOP_BLOCKS + [0] * (5 - MAX_STOP_BLOCKS)
    assert served.status().stop_blocks == MAX_STOP_BLOCKS


def test_stop_gate_lets_a_session_stop_before_its_next_prompt_arrived(served: Served) -> None:
    """plan_ready accepted, phase implementing set, the implement prompt not yet delivered:
    the turn that ends now is the planning turn, and is not held for not implementing."""
    served.set("alpha", phase=Phase.IMPLEMENTING, delivered="planning:0")
    stop = payload("Stop", served.repo, stop_hook_active=False)
    assert hooks.run_hook("Stop", stop, env_for(served.run_dir)) == hooks.QUIET


def test_a_signal_resets_the_stop_gate_count(served: Served) -> None:
    stop = payload("Stop", served.repo, stop_hook_active=False)
    hooks.run_hook("Stop", stop, env_for(served.run_dir))
    assert served.status().stop_blocks == 1
    hooks.signal_task(served.run_dir, "plan_ready", task="alpha")
    assert served.status().stop_blocks == 0


# signals -----------------------------------------------------------------------------------


def invoke(args: list[str], env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def run_main(
    args: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
) -> tuple[int, str, str]:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    code = run_cli(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_signal_plan_ready_from_planning(served: Served) -> None:
    result = lo_orch_env(
        ["signal", "plan_ready", "--note", "plan in plans/alpha.md"], env_for(served.run_dir)
    )
    assert result.returncode == 0, result.stderr
    assert "alpha: planning -> plan_ready" in result.stdout
    st = served.status()
    assert st.phase is Phase.PLAN_READY
    assert st.note == "plan in plans/alpha.md"
    assert served.view()["phase"] == "plan_ready"
    [line] = served.ledger("signal")
    assert line == {**line, "task": "alpha", "phase": "plan_ready", "previous": "planning"}


def test_signal_from_a_worktree_finds_the_main_checkout(
    served: Served, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    wt = served.repo / WORKTREES_DIR / "alpha"
    git(served.repo, "worktree", "add", "-q", "-b", "lo/r/alpha", str(wt))
    monkeypatch.chdir(wt)
    code, _out, err = run_main(
        ["signal", "plan_ready"], monkeypatch, capsys, {"LO_ORCH_TASK": "alpha"}
    )
    assert code == 0, err
    assert served.status().phase is Phase.PLAN_READY


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
    served: Served,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    phase: Phase,
    signal: str,
    expected: str,
) -> None:
    served.set("alpha", **working(phase))
    code, _, err = run_main(["signal", signal], monkeypatch, capsys, env_for(served.run_dir))
    assert code == 1
    assert err.startswith("Error: task alpha is in phase ")
    assert expected in err
    assert served.status().phase is phase
    assert served.ledger("signal") == []
    assert served.ledger("signal_rejected")


def test_impl_done_before_the_rework_prompt_arrived_is_refused(served: Served) -> None:
    served.set("alpha", phase=Phase.IMPLEMENTING, rework_count=1, delivered="implementing:0")
    result = lo_orch_env(["signal", "impl_done"], env_for(served.run_dir))
    assert result.returncode == 1
    assert "has not reached the session yet" in result.stderr
    assert served.status().phase is Phase.IMPLEMENTING


def test_signal_blocked_needs_a_note_and_an_active_task(
    served: Served, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_main(["signal", "blocked"], monkeypatch, capsys, env_for(served.run_dir))
    assert code == 2
    assert "needs a note" in err
    code, _out, err = run_main(
        ["signal", "blocked", "--note", "needs app/db.py"],
        monkeypatch,
        capsys,
        env_for(served.run_dir),
    )
    assert code == 0, err
    st = served.status()
    assert (st.phase, st.error) == (Phase.BLOCKED, "needs app/db.py")
    served.set("alpha", phase=Phase.PENDING)
    code, _, err = run_main(
        ["signal", "blocked", "--note", "x"], monkeypatch, capsys, env_for(served.run_dir)
    )
    assert code == 1
    assert "needs a task with a live session" in err


def test_repeated_signal_changes_nothing(served: Served) -> None:
    served.set("alpha", **working(Phase.PLAN_READY))
    result = invoke(["signal", "plan_ready"], env=env_for(served.run_dir))
    assert result.exit_code == 0
    assert "already plan_ready" in result.output
    assert served.ledger("signal") == []


def test_signal_without_task_or_unknown_task(
    served: Served, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_main(
        ["signal", "plan_ready", "--repo", str(served.repo)], monkeypatch, capsys, {}
    )
    assert code == 2
    assert "LO_ORCH_TASK is not set" in err
    code, _, err = run_main(
        ["signal", "plan_ready", "--task", "nope"],
        monkeypatch,
        capsys,
        {"LO_ORCH_RUN_DIR": str(served.run_dir)},
    )
    assert code == 1
    assert "no task 'nope'" in err
    code, _, err = run_main(["signal", "done"], monkeypatch, capsys, env_for(served.run_dir))
    assert code == 2
    assert re.search(r"plan_ready|impl_done|blocked", err)


def test_hook_command_via_click_keeps_exit_code_and_stderr(served: Served) -> None:
    result = CliRunner().invoke(
        cli,
        ["hook", "Stop"],
        input=payload("Stop", served.repo, stop_hook_active=False),
        env=env_for(served.run_dir, LO_ORCH_BIN="lo"),
    )
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "signal plan_ready" in result.stderr
    unmanaged = CliRunner().invoke(cli, ["hook", "Stop"], input="{}", env={})
    assert unmanaged.exit_code == 0
    assert unmanaged.output == ""


# attacks: a report for another task, from outside, or written as a file ------------------


def test_a_session_cannot_signal_for_another_task(served: Served) -> None:
    """alpha's session (this process) claims beta's impl_done, by flag and by environment."""
    by_flag = lo_orch_env(["signal", "impl_done", "--task", "beta"], env_for(served.run_dir))
    by_env = lo_orch_env(["signal", "impl_done"], env_for(served.run_dir, task="beta"))
    for result in (by_flag, by_env):
        assert result.returncode == 1
        assert "came from the session of task alpha" in result.stderr
    assert served.status("beta").phase is Phase.IMPLEMENTING
    rejected = served.ledger("event_rejected")
    assert len(rejected) == 2
    assert all(r["task"] == "beta" for r in rejected)


def test_beta_s_own_session_can_signal_beta(served: Served) -> None:
    """The positive control of the attack above: the same command from beta's session."""
    result = from_beta_session(
        served, ["signal", "impl_done"], env_for(served.run_dir, task="beta")
    )
    assert result.returncode == 0, result.stderr
    assert served.status("beta").phase is Phase.IMPL_DONE


def test_a_hook_cannot_speak_for_another_task(served: Served) -> None:
    hooks.run_hook(
        "UserPromptSubmit",
        payload("UserPromptSubmit", served.repo, prompt="x"),
        env_for(served.run_dir, task="beta"),
    )
    assert served.status("beta").prompt_submitted_at is None
    assert served.ledger("event_rejected")


def test_a_process_outside_every_session_is_refused(served: Served) -> None:
    """A user's shell, a stray script, or an agent that left its pane's process tree."""
    served.panes.clear()
    result = lo_orch_env(["signal", "plan_ready"], env_for(served.run_dir))
    assert result.returncode == 1
    assert "from outside any session" in result.stderr
    assert served.status().phase is Phase.PLANNING


def test_writing_the_status_file_moves_nothing(served: Served) -> None:
    """The agent writes its own status as approved with a commit it made itself."""
    path = RunDir(served.repo).status_path("alpha")
    forged = {**served.view(), "phase": "approved", "commit": "f" * 40}
    path.write_text(json.dumps(forged), encoding="utf-8")
    assert served.status().phase is Phase.PLANNING
    assert served.rec.check_view() == ["status/alpha.json"]
    assert served.view()["phase"] == "planning"


# no supervisor listening ------------------------------------------------------------------


def test_without_a_supervisor_a_hook_is_silent_and_left_for_the_next_one(git_repo: Path) -> None:
    rec = start_run(git_repo)
    rec.update_task("alpha", **working(Phase.PLANNING))
    outcome = hooks.run_hook(
        "UserPromptSubmit",
        payload("UserPromptSubmit", git_repo, prompt="p"),
        env_for(RunDir(git_repo).root),
    )
    assert outcome == hooks.QUIET
    [left] = listener.drain(RunDir(git_repo).root, ["alpha", "beta"])
    assert not left.attested
    assert left.message["event"] == "UserPromptSubmit"
    assert Record.open(git_repo, "demo").task("alpha").prompt_submitted_at is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, 30.0),
        ("5", 5.0),
        ("0.5", 0.5),
        ("-3", 0.0),
        ("1e9", 600.0),
        ("nan", 30.0),
        ("x", 30.0),
    ],
)
def test_how_long_a_signal_waits_for_a_supervisor_is_a_setting_of_the_session(
    value: str | None, seconds: float
) -> None:
    env = {} if value is None else {hooks.SIGNAL_WAIT_ENV: value}
    assert hooks.signal_wait(env) == seconds


def test_a_signal_waits_as_long_as_its_environment_says(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = start_run(git_repo)
    rec.update_task("alpha", **working(Phase.PLANNING))
    monkeypatch.setenv(hooks.SIGNAL_WAIT_ENV, "0.4")
    started = time.monotonic()
    result = hooks.signal_task(RunDir(git_repo).root, "plan_ready", task="alpha")
    took = time.monotonic() - started
    assert not result.changed and "supervisor is not running" in result.message
    assert 0.4 <= took < 5  # not the 30 s default


def test_without_a_supervisor_a_signal_is_kept_and_only_asked_about_again(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = start_run(git_repo)
    rec.update_task("alpha", **working(Phase.PLANNING))
    monkeypatch.setattr(hooks, "SIGNAL_WAIT", 0.3)
    result = hooks.signal_task(RunDir(git_repo).root, "plan_ready", task="alpha")
    assert not result.changed
    assert "supervisor is not running" in result.message
    asked: list[tuple[str, str]] = []
    store = Store.for_repo(git_repo)
    reports = Reports(
        rec, store, ["alpha", "beta"], lambda *a, **k: None, lambda t, sig: asked.append((t, sig))
    )
    # a forged one for beta, left by alpha's agent as a file
    inbox.leave(
        RunDir(git_repo).root, "beta", {"type": "signal", "task": "beta", "phase": "impl_done"}
    )
    for request in listener.drain(RunDir(git_repo).root, ["alpha", "beta"]):
        assert reports.handle(request) is None
    assert asked == [("alpha", "plan_ready")]  # beta is not implementing: nothing to ask
    assert rec.task("alpha").phase is Phase.PLANNING  # a hint, never a decision
    assert rec.task("beta").phase is Phase.PENDING


def test_a_message_left_in_one_tasks_inbox_for_another_task_is_refused(git_repo: Path) -> None:
    """alpha's agent leaves, in its own inbox folder (on a node, the only one it has), a
    prompt arrival and a signal claiming beta: not even a hint for beta (the arrival would
    have stopped beta's interrupted prompt from being sent again)."""
    rec = start_run(git_repo)
    rec.update_task("alpha", **working(Phase.IMPLEMENTING))
    rec.update_task(
        "beta",
        phase=Phase.PLANNING,
        delivering="planning:0",
        delivery_started_at="2026-01-01T00:00:00+00:00",
    )
    run_dir = RunDir(git_repo).root
    for message in (
        {"type": "hook", "event": "UserPromptSubmit", "task": "beta", "payload": {}},
        {"type": "signal", "task": "beta", "phase": "plan_ready"},
    ):
        inbox.leave(run_dir, "alpha", message)
    events: list[tuple[str, str | None]] = []
    asked: list[tuple[str, str]] = []
    reports = Reports(
        rec,
        Store.for_repo(git_repo),
        ["alpha", "beta"],
        lambda event, task=None, **_: events.append((event, task)),
        lambda t, sig: asked.append((t, sig)),
    )
    for request in listener.drain(run_dir, ["alpha", "beta"]):
        reports.handle(request)
    assert events == [("event_rejected", "beta"), ("event_rejected", "beta")]
    assert asked == []
    beta = rec.task("beta")
    assert (beta.phase, beta.delivered, beta.delivering) == (Phase.PLANNING, None, "planning:0")
    assert beta.prompt_submitted_at is None


def test_a_report_is_logged_before_the_status_shows_it(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []
    real = Record.publish_task

    def publish(self: Record, status: TaskStatus) -> None:
        seen.append([r["event"] for r in Store.for_repo(served.repo).read_ledger()])
        real(self, status)

    monkeypatch.setattr(Record, "publish_task", publish)
    hooks.run_hook("SessionStart", payload("SessionStart", served.repo), env_for(served.run_dir))
    hooks.signal_task(served.run_dir, "plan_ready", task="alpha")
    assert seen[0][-1:] == ["hook"]
    assert seen[1][-1:] == ["signal"]


def test_the_prompt_submit_hook_confirms_the_delivery_at_once(served: Served) -> None:
    """A fast session signals right after its prompt arrived, before the deliverer has
    looked again: the hook itself records the arrival, so the signal is judged against
    the prompt the session has (a benchmark run of 64 tasks lost a task to this race)."""
    served.set("alpha", delivered=None, delivering="planning:0")
    submit = payload("UserPromptSubmit", served.repo, prompt="plan it")
    hooks.run_hook("UserPromptSubmit", submit, env_for(served.run_dir))
    assert served.status().delivered == "planning:0"
    assert hooks.signal_task(served.run_dir, "plan_ready", task="alpha").changed
    # a submit with no delivery under way (a nudge, the user typing) confirms nothing
    served.set("alpha", phase=Phase.IMPLEMENTING, delivered="planning:0", delivering=None)
    hooks.run_hook("UserPromptSubmit", submit, env_for(served.run_dir))
    assert served.status().delivered == "planning:0"


def test_a_prompt_submit_with_an_empty_prompt_confirms_no_delivery(served: Served) -> None:
    """Qwen Code fires UserPromptSubmit again, with an empty prompt, when it sends a tool's
    result on: a prompt pasted meanwhile (which it drops) must not count as arrived."""
    served.set("alpha", delivered=None, delivering="planning:0")
    empty = payload("UserPromptSubmit", served.repo, prompt="")
    hooks.run_hook("UserPromptSubmit", empty, env_for(served.run_dir))
    st = served.status()
    assert (st.delivered, st.delivering, st.prompt_submitted_at) == (None, "planning:0", None)
    assert served.ledger("hook")[-1]["empty_prompt"] is True
    hooks.run_hook(
        "UserPromptSubmit",
        payload("UserPromptSubmit", served.repo, prompt="x"),
        env_for(served.run_dir),
    )
    assert served.status().delivered == "planning:0"


def test_a_prompt_arrival_left_while_no_supervisor_listened_lets_the_signal_count(
    served: Served,
) -> None:
    """Killed mid-delivery: the prompt's UserPromptSubmit was left in the inbox, the fast
    session signalled and waits for a supervisor. The new one reads the inbox first, so the
    signal is judged against the prompt the session had (a SIGKILL test hung on this)."""
    served.set(
        "alpha",
        delivered=None,
        delivering="planning:0",
        delivery_started_at="2026-01-01T00:00:00+00:00",
    )
    inbox.leave(
        served.run_dir,
        "alpha",
        {"type": "hook", "event": "UserPromptSubmit", "task": "alpha", "payload": {}},
    )
    store = Store.for_repo(served.repo)
    reports = Reports(
        served.rec, store, ["alpha", "beta"], lambda *a, **k: None, lambda t, sig: None
    )
    for request in listener.drain(served.run_dir, ["alpha", "beta"]):
        reports.handle(request)
    st = served.status()
    assert (st.delivered, st.delivering) == ("planning:0", None)
    assert hooks.signal_task(served.run_dir, "plan_ready", task="alpha").changed
