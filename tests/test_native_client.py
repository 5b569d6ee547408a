"""The compiled client of what sessions run (``sessions/client.c``, built by
``sessions/native.py``): it answers hook events and signals itself, the same answers as the
Python client, and hands everything else to the Python client with the same arguments and
the same standard input.

Clients built here name a recorder as their Python client (``LO_FAST``), so a test sees
whether the compiled client answered or handed over, and exactly what it handed over. Real
processes against a real inbox socket judged by the supervisor's real ``Reports``
(``helpers.served``: this test process stands for alpha's pane).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers.served import Served, alpha_and_beta, env_for, serve, start_run, sub_env, working
from helpers.wait import wait_for

from loop_orchestrator import readiness, resources
from loop_orchestrator.permissions.desk import Desk
from loop_orchestrator.permissions.requests import Permissions
from loop_orchestrator.runstate.state import Phase, RunDir
from loop_orchestrator.sessions import hooks, listener, native
from loop_orchestrator.sessions.inbox import address as inbox_address

SID = "5b0f4c1e-7d7a-4b7e-9a57-3f1f0d7e2c11"
Done = subprocess.CompletedProcess[bytes]

#: the Python client a test client hands over to: it writes its arguments and standard
#: input beside $MARK
RECORDER = ["/bin/sh", "-c", 'printf "%s\\n" "$@" > "$MARK.args"; cat > "$MARK.stdin"', "fast"]
#: the full command line of a test client
FULL = ["/bin/sh", "-c", 'printf "full:%s\\n" "$@"', "full"]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built, why = native.locate_or_build(FULL, RECORDER, [tmp_path_factory.mktemp("builds")])
    assert built is not None, why
    return built


@pytest.fixture
def served(git_repo: Path) -> Any:
    with alpha_and_beta(git_repo) as s:
        yield s


def payload(event: str, **fields: Any) -> bytes:
    return json.dumps(
        {"session_id": SID, "cwd": "/tmp", "hook_event_name": event, **fields}
    ).encode()


def run(
    program: Path | list[str], args: list[str], env: dict[str, str], stdin: bytes = b""
) -> Done:
    argv = [str(program)] if isinstance(program, Path) else program
    return subprocess.run(
        [*argv, *args],
        input=stdin,
        capture_output=True,
        env=sub_env(**env),
        timeout=60,
        check=False,
    )


def handed(mark: Path) -> tuple[list[str], bytes] | None:
    """What the client handed to its Python client (arguments, standard input), if it did."""
    if not Path(f"{mark}.args").exists():
        return None
    return Path(f"{mark}.args").read_text().splitlines(), Path(f"{mark}.stdin").read_bytes()


def test_it_answers_hooks_and_signals_itself_as_the_python_client_does(
    served: Served, recording: Path, tmp_path: Path
) -> None:
    mark = tmp_path / "mark"
    env = env_for(served.run_dir, MARK=str(mark), LO_ORCH_BIN="lo")
    python = resources.python_client_argv()
    stop = run(recording, ["hook", "Stop"], env, payload("Stop", stop_hook_active=False))
    assert stop.returncode == 2 and b"`$LO_ORCH_BIN signal plan_ready`" in stop.stderr
    served.set("alpha", stop_blocks=0)
    assert (stop.returncode, stop.stdout, stop.stderr) == (
        (
            p := run(python, ["hook", "Stop"], env, payload("Stop", stop_hook_active=False))
        ).returncode,
        p.stdout,
        p.stderr,
    )
    tool = payload("PreToolUse", tool_name="Bash", tool_input={"command": "ls\ncurl x"})
    assert run(recording, ["hook", "PreToolUse"], env, tool).returncode == 0
    a, b, c = served.ledger("hook")[-3:]  # (Stop by each client, then the tool call)
    assert {k: v for k, v in a.items() if k != "ts"} == {k: v for k, v in b.items() if k != "ts"}
    assert c["hook_event"] == "PreToolUse" and c["tool_summary"] == "ls curl x"
    signal = run(recording, ["signal", "plan_ready"], env)
    assert (signal.returncode, signal.stdout) == (0, b"alpha: planning -> plan_ready\n")
    assert served.status().phase is Phase.PLAN_READY
    again = run(recording, ["signal", "plan_ready", "--note=twice"], env)
    assert again.stdout == b"alpha: already plan_ready; nothing changed\n"
    refused = run(recording, ["signal", "impl_done"], env)
    same = run(python, ["signal", "impl_done"], env)
    assert refused.returncode == 1 and refused.stderr.startswith(b"Error: task alpha is in phase")
    assert (refused.returncode, refused.stdout, refused.stderr) == (
        same.returncode,
        same.stdout,
        same.stderr,
    )
    blocked = run(recording, ["signal", "blocked", "--note", 'needs "db" \\ access\n\tnow'], env)
    assert blocked.returncode == 0, blocked.stderr
    assert served.status().note == 'needs "db" \\ access\n\tnow'
    assert handed(mark) is None  # every answer above came from the compiled client


def test_a_payload_that_is_no_event_is_answered_with_silence(
    served: Served, recording: Path, tmp_path: Path
) -> None:
    mark = tmp_path / "mark"
    env = env_for(served.run_dir, MARK=str(mark))
    for stdin in (b"not json", b"[1, 2]", b'{"a": ', b"  \n", b"\xff\xfe{}"):
        done = run(recording, ["hook", "Stop"], env, stdin)
        assert (done.returncode, done.stdout, done.stderr) == (0, b"", b""), stdin
    assert served.ledger("hook") == [] and served.status().last_event is None
    assert handed(mark) is None


@pytest.mark.parametrize(
    ("case", "args"),
    [
        ("no supervisor", ["hook", "Stop"]),
        ("too large to send as it came", ["hook", "PreToolUse"]),
        ("located by its folder", ["hook", "Stop"]),
        ("a signal for a named task", ["signal", "impl_done", "--task", "beta"]),
        ("blocked without a note", ["signal", "blocked"]),
        ("a signal with a dispute", ["signal", "impl_done", "--dispute", "tests.x", "--note", "n"]),
    ],
)
def test_what_it_does_not_answer_goes_to_the_python_client_unchanged(
    git_repo: Path, recording: Path, tmp_path: Path, case: str, args: list[str]
) -> None:
    mark = tmp_path / "mark"
    stdin = payload("Stop", last_assistant_message="ünï " * 3) if args[0] == "hook" else b""
    if case == "no supervisor":
        start_run(git_repo).update_task("alpha", **working(Phase.PLANNING))
        env = env_for(RunDir(git_repo).root, MARK=str(mark))
        done = run(recording, args, env, stdin)
    else:
        with serve(git_repo, {"alpha": working(Phase.PLANNING)}) as served:
            env = env_for(served.run_dir, MARK=str(mark))
            if case == "too large to send as it came":
                stdin = payload("PreToolUse", tool_input={"content": "x" * listener.RAW_MAX})
            if case == "located by its folder":
                env = {"MARK": str(mark), "LO_ORCH_TASK": "", "LO_ORCH_RUN_DIR": ""}
            done = run(recording, args, env, stdin)
            assert served.ledger("hook") == [] and served.ledger("signal") == []
    assert done.returncode == 0, done.stderr
    assert handed(mark) == (args, stdin)


def test_any_other_call_is_the_full_command_line(recording: Path) -> None:
    for args in (["status", "--json"], ["hook"], ["hook", "--help"], ["signal"], ["x", "y z"]):
        done = run(recording, args, {})
        assert done.stdout.decode().splitlines() == [f"full:{a}" for a in args], args
    assert run(recording, [], {}).stdout == b"full:\n"  # (printf with no arguments)


def test_command_lines_reach_the_program_byte_for_byte(tmp_path: Path) -> None:
    """The generated lines quote whatever a path may hold: quotes, backslashes, newlines,
    trigraphs, non-ASCII, shell characters."""
    odd = ['a"b', "c\\d", "e\nf", "??=", "ünï", "$HOME `x`", "'q'", "%s%n"]
    printer = ["/bin/sh", "-c", 'printf "[%s]" "$@"', "printer", *odd]
    built, why = native.locate_or_build(printer, RECORDER, [tmp_path])
    assert built is not None, why
    done = run(built, ["last"], {})
    assert done.stdout.decode() == "".join(f"[{a}]" for a in [*odd, "last"])


def test_a_build_is_kept_and_reused_and_each_install_has_its_own(tmp_path: Path) -> None:
    one, _ = native.locate_or_build(FULL, RECORDER, [tmp_path])
    again, _ = native.locate_or_build(FULL, RECORDER, [tmp_path])
    other, _ = native.locate_or_build([*FULL, "x"], RECORDER, [tmp_path])
    assert one is not None and one == again and other is not None and other != one
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [one.parent.name, other.parent.name]
    )
    assert [p.name for p in one.parent.iterdir()] == [native.NAME]  # nothing half-built left


def test_without_a_compiler_sessions_keep_the_python_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    built, why = native.locate_or_build(FULL, RECORDER, [tmp_path / "builds"])
    assert built is None and "no C compiler" in why
    assert not (tmp_path / "builds").exists()


def test_wire_replies_carry_the_exit_code_and_both_streams() -> None:
    reply = listener.wire_reply(2, "", "ünï\n")
    assert reply == b"lo-orch-reply 2 0 6\n" + "ünï\n".encode()  # (bytes, not characters)
    assert listener.RAW_MAX == 256 * 1024
    source = native.SOURCE.read_text()
    assert "#define RAW_MAX (256 * 1024)" in source  # the two ends agree
    # the client waits for a person as long as Claude Code lets the hook run (hooks.json),
    # longer than the supervisor waits before it answers with silence
    assert "#define PERMISSION_TIMEOUT 3600" in source and hooks.PERMISSION_WAIT < 3600


def test_sessions_get_the_compiled_client_built_for_this_install() -> None:
    built = resources.session_client()
    assert built is not None and built.parent.parent in native.folders()
    assert shlex.split(resources.lo_orch_hook()) == [str(built), "hook"]
    version = run(built, ["--version"], {})
    assert version.returncode == 0 and b"lo-orch" in version.stdout


def test_doctor_says_which_client_sessions_get(monkeypatch: pytest.MonkeyPatch) -> None:
    row = readiness.check_session_client()
    assert (row.status, row.detail) == ("ok", f"compiled: {resources.session_client()}")
    monkeypatch.setenv(resources.CLIENT_ENV, "python")
    row = readiness.check_session_client()
    assert row.status == "warn" and "LO_ORCH_CLIENT=python" in row.detail
    assert "apt-get install gcc" in row.hint


def test_a_permission_a_person_answers_is_waited_for_with_the_connection_held(
    git_repo: Path, tmp_path: Path
) -> None:
    """The supervisor holds the compiled client's connection while the person decides (the
    Python client would poll), and hands it the person's answer for Claude Code."""
    built = resources.session_client()
    assert built is not None
    perms = Permissions(tmp_path / "perms")
    desk = Desk(perms, [], [], None, log=lambda *a, **k: None)
    with serve(git_repo, {"alpha": working(Phase.IMPLEMENTING)}, desk=desk) as served:
        ask = payload("PermissionRequest", tool_name="Bash", tool_input={"command": "make up"})
        waiting = subprocess.Popen(
            [str(built), "hook", "PermissionRequest"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=sub_env(**env_for(served.run_dir)),
        )
        assert waiting.stdin is not None
        waiting.stdin.write(ask)
        waiting.stdin.close()
        wait_for(perms.open_requests, 20, "the request reaches the desk")
        [req] = perms.open_requests()
        assert req.task == "alpha" and waiting.poll() is None  # (it waits for the person)
        perms.settle(req.id, state="answered", decision="allow", decided_by="person")
        waiting.wait(20)
        assert waiting.stdout is not None and waiting.stderr is not None
        out, err = waiting.stdout.read(), waiting.stderr.read()
    assert waiting.returncode == 0, err
    decided = json.loads(out)["hookSpecificOutput"]
    assert decided["hookEventName"] == "PermissionRequest"
    assert decided["decision"]["behavior"] == "allow"


def test_the_client_compiles_without_a_warning(tmp_path: Path) -> None:
    source = native.generated_source(FULL, RECORDER, native.SOURCE.read_text())
    (tmp_path / "client.c").write_text(source)
    done = subprocess.run(
        ["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(tmp_path / "c"), "client.c"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def wire(run_dir: Path, head: dict[str, Any], body: bytes = b"") -> bytes:
    """One exchange on wire 1, as any program in alpha's session could make it."""
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(20)
        sock.connect(inbox_address(run_dir))
        sock.sendall(json.dumps({**head, "wire": 1}).encode() + b"\n" + body)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_the_wire_is_judged_like_the_python_clients_messages(served: Served) -> None:
    """A program that speaks the wire itself: for another task, for a permission poll (which
    only the supervisor's own wait sends), oversized, with a bare prompt."""
    for_beta = wire(
        served.run_dir, {"type": "hook", "event": "UserPromptSubmit", "task": "beta"}, b"{}"
    )
    assert for_beta == b"lo-orch-reply 0 0 0\n"
    assert served.status("beta").prompt_submitted_at is None
    [rejected] = served.ledger("event_rejected")
    assert "came from the session of task alpha" in rejected["message"]
    poll = {"type": "permission", "task": "alpha", "id": "alpha-1"}
    assert wire(served.run_dir, poll) == b""  # not a message of the wire: no answer
    huge = payload("PreToolUse", tool_input={"content": "x" * listener.RAW_MAX})
    assert (
        wire(served.run_dir, {"type": "hook", "event": "PreToolUse", "task": "alpha"}, huge) == b""
    )
    said = payload("UserPromptSubmit", prompt="the secret plan")
    ok = wire(served.run_dir, {"type": "hook", "event": "UserPromptSubmit", "task": "alpha"}, said)
    assert ok == b"lo-orch-reply 0 0 0\n"
    [hook] = served.ledger("hook")
    assert hook["prompt_chars"] == len("the secret plan") and "the secret plan" not in str(hook)
    assert served.ledger("signal") == []
