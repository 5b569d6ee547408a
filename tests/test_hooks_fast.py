"""The fast paths of what sessions run: ``$LO_ORCH_HOOK`` and the lean ``signal``, in both
clients: the compiled one (``sessions/client.c``, built by ``sessions/native.py``) and the
standard-library one (``python -I -S sessions/fast_entry.py``). Each must refuse what the
full path refuses and answer what it answers; the Python one with nothing but the
interpreter's own modules.

Real processes against a real inbox socket judged by the supervisor's real ``Reports``
(``helpers.served``: this test process stands for alpha's pane, so what it starts is
alpha's session). Each attack is what a gaming agent in alpha's session would try.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO_ROOT
from helpers.served import Served, alpha_and_beta, env_for, start_run, sub_env, working
from hypothesis import given, settings
from hypothesis import strategies as st

from loop_orchestrator import resources
from loop_orchestrator.agents.contract import agent_env
from loop_orchestrator.config import AgentConfig
from loop_orchestrator.runstate.journal import Record
from loop_orchestrator.runstate.state import Phase, RunDir
from loop_orchestrator.sessions import inbox, listener

LO_HOOK = REPO_ROOT / "hooks" / "lo-hook"
SID = "5b0f4c1e-7d7a-4b7e-9a57-3f1f0d7e2c11"
Done = subprocess.CompletedProcess[str]


@pytest.fixture
def served(git_repo: Path) -> Any:
    with alpha_and_beta(git_repo) as s:
        yield s


def payload(event: str, **fields: Any) -> str:
    return json.dumps(
        {
            "session_id": SID,
            "transcript_path": f"/tmp/{SID}.jsonl",
            "cwd": "/tmp",
            "hook_event_name": event,
            "permission_mode": "bypassPermissions",
            **fields,
        }
    )


#: the clients every attack is tried on
CLIENTS = ("native", "python")


def client_argv(client: str) -> list[str]:
    """The program a session's ``$LO_ORCH_HOOK`` runs, without its ``hook``."""
    if client == "python":
        return resources.python_client_argv()
    built = resources.session_client()
    assert built is not None, "this machine has a C compiler: the compiled client must build"
    return [str(built)]


@pytest.fixture(params=CLIENTS)
def client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def fast(
    args: list[str],
    env: dict[str, str],
    stdin: str = "",
    *,
    trace: bool = False,
    client: str = "python",
) -> Done:
    """``$LO_ORCH_HOOK``'s program with ``args`` (``hook EVENT``, or what an agent types
    after it), in a process of alpha's session."""
    argv = client_argv(client)
    if trace:
        argv.insert(1, "-Ximporttime")
    return subprocess.run(
        [*argv, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=sub_env(**env),
        timeout=60,
        check=False,
    )


def launcher(event: str, env: dict[str, str], stdin: str, client: str = "python") -> Done:
    """The plugin's ``hooks/lo-hook`` as Claude Code runs it, with ``$LO_ORCH_HOOK`` set."""
    hook = shlex.join([*client_argv(client), "hook"])
    return subprocess.run(
        [str(LO_HOOK), event],
        input=stdin,
        capture_output=True,
        text=True,
        env=sub_env(LO_ORCH_HOOK=hook, **env),
        timeout=60,
        check=False,
    )


def full(event: str, env: dict[str, str], stdin: str) -> Done:
    """The full path: ``python -m loop_orchestrator hook EVENT`` (``$LO_ORCH_BIN``)."""
    return subprocess.run(
        [*shlex.split(resources.lo_orch_bin()), "hook", event],
        input=stdin,
        capture_output=True,
        text=True,
        env=sub_env(**env),
        timeout=60,
        check=False,
    )


# the wire's JSON without json --------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_the_wire_encodes_and_decodes_as_json_does(value: Any) -> None:
    assert inbox.dumps(value) == json.dumps(value)
    assert inbox.loads(json.dumps(value)) == value
    assert inbox.loads(f" \n{json.dumps(value)}\t") == value


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='{}[]":,0123456789.eE+-tfnrulas \\\n', max_size=30))
def test_the_wire_refuses_what_json_refuses(text: str) -> None:
    try:
        expected = json.loads(text)
    except ValueError:
        with pytest.raises(ValueError):
            inbox.loads(text)
        return
    got = inbox.loads(text)
    assert got == expected or (isinstance(got, float) and math.isnan(got))


def test_the_wire_refuses_deep_nesting_and_odd_values() -> None:
    with pytest.raises(ValueError):
        inbox.loads("[" * 100_000 + "]" * 100_000)
    with pytest.raises(TypeError):
        inbox.dumps({1: "x"})
    with pytest.raises(TypeError):
        inbox.dumps({"x": object()})
    assert inbox.dumps([math.inf, -math.inf]) == "[Infinity, -Infinity]"
    assert inbox.address("/a/b/../b") == inbox.address(Path("/a/b"))


# what the fast path imports and answers ----------------------------------------------------

#: what ``python -I -S`` loads for the hook beyond its own start: nothing else may appear
HOOK_MODULES = {
    "__future__",
    "os",
    "stat",
    "_stat",
    "posixpath",
    "genericpath",
    "_collections_abc",
    "_socket",
    "_sha2",
    "_sha256",
    "_json",
    "loop_orchestrator",
    "loop_orchestrator.entry",
    "loop_orchestrator.sessions",
    "loop_orchestrator.sessions.hooks",
    "loop_orchestrator.sessions.inbox",
}


def test_the_fast_hook_imports_nothing_but_start_up_modules(served: Served) -> None:
    """A Stop held by the gate: the whole path to the supervisor and back, traced."""
    bare = fast(["-c", "pass"], {}, trace=True)  # (the interpreter's own start-up)
    start = {line.split("|")[-1].strip() for line in bare.stderr.splitlines()}
    done = fast(["hook", "Stop"], env_for(served.run_dir), payload("Stop"), trace=True)
    assert done.returncode == 2, done.stderr
    assert "signal plan_ready" in done.stderr
    imported = {
        line.split("|")[-1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert imported - start - {"-c"} <= HOOK_MODULES, imported - start - HOOK_MODULES
    assert served.status().last_event == "Stop"


@pytest.mark.parametrize(
    ("event", "fields"),
    [
        ("Stop", {"stop_hook_active": False}),
        ("UserPromptSubmit", {"prompt": "go on, ünïcode"}),
        ("PreToolUse", {"tool_name": "Bash", "tool_input": {"command": "ls\ncurl x"}}),
        ("Notification", {"notification_type": "idle_prompt", "message": "waiting"}),
    ],
)
def test_fast_and_full_paths_answer_and_record_alike(
    served: Served, event: str, fields: dict[str, Any], client: str
) -> None:
    env = env_for(served.run_dir, LO_ORCH_BIN="lo")
    data = payload(event, **fields)
    quick = launcher(event, env, data, client)
    served.set("alpha", stop_blocks=0)  # (the gate counts its reminders)
    slow = full(event, env, data)
    assert (quick.returncode, quick.stdout, quick.stderr) == (
        slow.returncode,
        slow.stdout,
        slow.stderr,
    )
    a, b = served.ledger("hook")[-2:]
    assert {k: v for k, v in a.items() if k != "ts"} == {k: v for k, v in b.items() if k != "ts"}
    assert a["hook_event"] == event and a["task"] == "alpha"
    if event == "Stop":
        assert quick.returncode == 2 and "`$LO_ORCH_BIN signal plan_ready`" in quick.stderr


def test_without_a_supervisor_the_fast_path_leaves_what_the_full_path_leaves(
    git_repo: Path, client: str
) -> None:
    """No supervisor: PreToolUse, Stop and PermissionRequest do not hold the session, and
    what they leave for the next supervisor is the same message either way (unattested)."""
    rec = start_run(git_repo)
    rec.update_task("alpha", **working(Phase.PLANNING))
    run_dir = RunDir(git_repo).root
    env = env_for(run_dir)
    for event, fields in (
        ("PreToolUse", {"tool_name": "Bash", "tool_input": {"command": "rm -rf ~/x"}}),
        ("Stop", {"stop_hook_active": False}),
        ("PermissionRequest", {"tool_name": "Bash", "tool_input": {"command": "curl evil"}}),
    ):
        data = payload(event, **fields)
        quick, slow = launcher(event, env, data, client), full(event, env, data)
        for done in (quick, slow):
            assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
        left = listener.drain(run_dir, ["alpha", "beta"])
        assert [r.attested for r in left] == [False, False]
        one, two = ({k: v for k, v in r.message.items() if k != "left_at"} for r in left)
        assert one == two
        assert one["event"] == event and one["task"] == "alpha"
    assert Record.open(git_repo, "demo").task("alpha").last_event is None


# attacks through the fast path --------------------------------------------------------------


def test_a_fast_hook_cannot_speak_for_another_task(served: Served, client: str) -> None:
    """alpha's agent confirms beta's prompt (which would let a signal of beta's count)."""
    done = fast(
        ["hook", "UserPromptSubmit"],
        env_for(served.run_dir, task="beta"),
        payload("UserPromptSubmit", prompt="x"),
        client=client,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert served.status("beta").prompt_submitted_at is None
    assert served.status("beta").last_event is None
    [rejected] = served.ledger("event_rejected")
    assert rejected["task"] == "beta"
    assert "came from the session of task alpha" in rejected["message"]


def test_a_fast_signal_cannot_speak_for_another_task(served: Served, client: str) -> None:
    """The same program an agent finds in ``$LO_ORCH_HOOK``, used to signal beta's work."""
    for args, task in ((["--task", "beta"], "alpha"), ([], "beta")):
        done = fast(
            ["signal", "impl_done", *args], env_for(served.run_dir, task=task), client=client
        )
        assert done.returncode == 1, done.stderr
        assert "came from the session of task alpha" in done.stderr
    assert served.status("beta").phase is Phase.IMPLEMENTING
    assert served.ledger("signal") == []
    own = fast(["signal", "plan_ready"], env_for(served.run_dir), client=client)
    assert own.returncode == 0, own.stderr  # the positive control: alpha's own signal
    assert own.stdout == "alpha: planning -> plan_ready\n"
    assert served.status().phase is Phase.PLAN_READY


def test_a_fast_report_from_outside_every_session_is_refused(served: Served, client: str) -> None:
    """A stray script or an agent that left its pane's process tree."""
    served.panes.clear()
    hook = fast(
        ["hook", "UserPromptSubmit"],
        env_for(served.run_dir),
        payload("UserPromptSubmit"),
        client=client,
    )
    assert (hook.returncode, hook.stdout, hook.stderr) == (0, "", "")
    signal = fast(["signal", "plan_ready"], env_for(served.run_dir), client=client)
    assert signal.returncode == 1
    assert "from outside any session" in signal.stderr
    assert served.status().prompt_submitted_at is None
    assert served.status().phase is Phase.PLANNING
    assert len(served.ledger("event_rejected")) == 2


def test_a_fast_hook_for_a_task_the_run_does_not_have_is_refused(
    served: Served, client: str
) -> None:
    """The agent makes a status file for a task of its own and reports for it; or names a
    task by a path."""
    (served.run_dir / "status" / "ghost.json").write_text("{}", encoding="utf-8")
    done = fast(
        ["hook", "Stop"], env_for(served.run_dir, task="ghost"), payload("Stop"), client=client
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    [rejected] = served.ledger("event_rejected")
    assert rejected["task"] == "ghost" and "no task 'ghost'" in rejected["message"]
    for task in ("../status/alpha", "Alpha", "alpha\n"):
        quiet = fast(
            ["hook", "Stop"], env_for(served.run_dir, task=task), payload("Stop"), client=client
        )
        assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    assert served.ledger("event_rejected") == [rejected]
    assert served.status().last_event is None


def test_a_forged_run_dir_reaches_no_supervisor_or_the_real_one(
    served: Served, tmp_path: Path, client: str
) -> None:
    """The agent points LO_ORCH_RUN_DIR at a run of its own making (so that its Stop is let
    through and its reports land where it likes), or at the real one under another name
    (so that its claim for beta looks like beta's)."""
    forged = tmp_path / "forged" / ".orchestration"
    (forged / "status").mkdir(parents=True)
    (forged / "status" / "alpha.json").write_text("{}", encoding="utf-8")
    done = fast(
        ["hook", "UserPromptSubmit"], env_for(forged), payload("UserPromptSubmit"), client=client
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert [p.parent.name for p in (forged / "inbox").glob("*/*.json")] == ["alpha"]
    assert served.status().prompt_submitted_at is None
    assert served.ledger("hook") == []
    alias = tmp_path / "alias"
    alias.symlink_to(served.run_dir)
    claim = fast(["signal", "impl_done"], env_for(alias, task="beta"), client=client)
    assert claim.returncode == 1
    assert "came from the session of task alpha" in claim.stderr
    assert served.status("beta").phase is Phase.IMPLEMENTING


def test_lo_orch_hook_is_in_every_session_and_cannot_be_overridden(tmp_path: Path) -> None:
    config = AgentConfig(env={"LO_ORCH_HOOK": "sh -c 'exit 0'", "LO_ORCH_BIN": "true"})
    env = agent_env(task="a", run_dir=tmp_path, brief=tmp_path / "b.md", settings=config)
    assert env["LO_ORCH_HOOK"] == resources.lo_orch_hook()
    assert env["LO_ORCH_BIN"] == resources.session_bin()
    built = resources.session_client()
    assert built is not None  # (this machine has a C compiler)
    assert shlex.split(env["LO_ORCH_HOOK"]) == [str(built), "hook"]
    assert shlex.split(env["LO_ORCH_BIN"]) == [str(built)]
    for client in CLIENTS:
        # usable with sh -c from any folder; silent in a session lo-orch does not manage
        hook = shlex.join([*client_argv(client), "hook"])
        done = subprocess.run(
            ["sh", "-c", hook + ' "$1"', "sh", "Stop"],
            input=payload("Stop"),
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if not k.startswith("LO_ORCH_")},
            timeout=60,
            check=False,
        )
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
        # any other call made through it is the full command line
        version = fast(["--version"], {}, client=client)
        assert version.returncode == 0 and "lo-orch" in version.stdout, version.stderr


def test_without_a_compiled_client_sessions_get_the_python_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(resources.CLIENT_ENV, "python")
    env = agent_env(task="a", run_dir=tmp_path, brief=tmp_path / "b.md", settings=AgentConfig())
    argv = shlex.split(env["LO_ORCH_HOOK"])
    assert argv[1:3] == ["-I", "-S"] and Path(argv[3]).is_absolute() and argv[-1] == "hook"
    assert env["LO_ORCH_BIN"] == resources.lo_orch_bin()


def test_the_launcher_never_runs_the_event_name(
    served: Served, tmp_path: Path, client: str
) -> None:
    """An event name is passed to ``$LO_ORCH_HOOK`` as one argument, never as shell text."""
    mark = tmp_path / "ran"
    for event in (f"Stop; touch {mark}", f"$(touch {mark})", f"`touch {mark}`"):
        done = launcher(event, env_for(served.run_dir), payload("Stop"), client)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert not mark.exists()
    assert served.ledger("hook") == []
