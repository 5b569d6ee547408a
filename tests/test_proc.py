"""The subprocess gateway: the memory bound of a check's processes, its sessions, and what a
call gives back (as Popen's text mode reads it; a timeout keeps what was printed)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loop_orchestrator import proc
from loop_orchestrator.errors import CommandError, LoOrchError
from loop_orchestrator.proc import CHECK_MEMORY_FLOOR_MB, check_memory_bound

GIB = 2**30


def test_the_check_memory_bound_is_a_quarter_of_the_machine_with_a_floor() -> None:
    assert check_memory_bound(None, 64 * GIB) == 16 * GIB
    assert check_memory_bound(None, 4 * GIB) == CHECK_MEMORY_FLOOR_MB * 2**20
    assert check_memory_bound(None, None) is None  # the machine's memory is not known


def test_a_configured_bound_wins_and_zero_means_none() -> None:
    assert check_memory_bound(512, 64 * GIB) == 512 * 2**20
    assert check_memory_bound(512, None) == 512 * 2**20
    assert check_memory_bound(0, 64 * GIB) is None


def test_a_bounded_call_runs_in_its_own_session_a_terminal_one_keeps_ours() -> None:
    """A command with a timeout gets a session (and process group) of its own, so its whole
    group can be killed; a call that may ask the person (git with a remote: ssh reads the
    passphrase from the terminal) keeps the caller's session, as one without a timeout."""
    ask = [sys.executable, "-c", "import os; print(os.getsid(0))"]
    own = int(proc.run(ask, timeout=30).stdout)
    assert own != os.getsid(0)
    assert int(proc.run(ask, timeout=30, terminal=True).stdout) == os.getsid(0)
    assert int(proc.run(ask).stdout) == os.getsid(0)


#: programs whose output and exit the gateway must give back as Popen's text mode does
PROGRAMS = [
    ["sh", "-c", "printf 'a\\r\\nb\\rc\\n'; printf 'e\\r\\n' >&2; exit 3"],
    ["sh", "-c", "printf 'bad \\377\\376 utf-8 \\303\\251\\n'"],
    ["sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x; echo; echo done >&2"],
    ["sh", "-c", "exec 1>&- 2>&-; sleep 0.2; exit 4"],  # closes its outputs, exits later
]


def test_a_call_reads_as_popen_text_mode() -> None:
    """Output (line ends, bad UTF-8, large), stderr and exit code as ``subprocess.run`` in
    text mode gives them, with and without a timeout; input, large or not read at all."""
    for argv in PROGRAMS:
        want = subprocess.run(
            argv, capture_output=True, text=True, encoding="utf-8", errors="replace"
        )
        for timeout in (None, 30.0):
            got = proc.run(argv, timeout=timeout, check=False)
            assert (got.returncode, got.stdout, got.stderr) == (
                want.returncode,
                want.stdout,
                want.stderr,
            ), argv
    big = "line\r\n" * 200_000  # past a pipe's size: written while the output is read
    assert proc.run(["cat"], input=big, timeout=30).stdout == "line\n" * 200_000
    assert proc.run(["true"], input=big, timeout=30).returncode == 0  # never read: no error
    assert proc.run(["cat"], input="", timeout=30).stdout == ""


def test_a_timeout_keeps_what_was_printed_and_ends_the_group() -> None:
    """Past its timeout a command's whole group is killed, a child that holds its pipes too,
    and what it printed before is kept."""
    started = time.monotonic()
    got = proc.run(
        ["sh", "-c", "echo partial; echo half >&2; sleep 30 & wait"], timeout=0.5, check=False
    )
    assert got.returncode is None and got.stdout == "partial\n" and got.stderr == "half\n"
    assert time.monotonic() - started < 10
    with pytest.raises(CommandError):
        proc.run(["sh", "-c", "sleep 30"], timeout=0.3)


def test_a_command_that_closes_its_outputs_is_still_timed_out_when_it_keeps_running() -> None:
    """Once both pipes close, the wait for the exit keeps the call's deadline: a command that
    closed its outputs and runs on is killed at the timeout, its group with it."""
    started = time.monotonic()
    got = proc.run(["sh", "-c", "echo said; exec 1>&- 2>&-; sleep 30"], timeout=0.5, check=False)
    assert got.returncode is None and got.stdout == "said\n"
    assert time.monotonic() - started < 10
    with pytest.raises(CommandError):
        proc.run(["sh", "-c", "exec 1>&- 2>&-; sleep 30"], timeout=0.3)


def _tool(folder: Path, says: str, *, executable: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / "lo-test-tool"
    tool.write_text(f"#!/bin/sh\necho {says}\n", encoding="utf-8")
    tool.chmod(0o755 if executable else 0o644)


def test_a_program_is_the_one_exec_would_run_and_follows_the_path_it_is_given(
    tmp_path: Path,
) -> None:
    """The program a command runs is found on the PATH of the environment it is given, the
    first executable file as exec takes it (a file that cannot run is passed over); it is
    remembered, and looked up again once it is gone."""
    first, second, third = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    _tool(first, "first", executable=False)
    _tool(second, "second")
    _tool(third, "third")
    env = {**os.environ, "PATH": f"{first}:{second}:{third}"}
    assert proc.program("lo-test-tool", env) == str(second / "lo-test-tool")
    assert proc.run(["lo-test-tool"], env=env, timeout=30).stdout == "second\n"
    (second / "lo-test-tool").unlink()
    assert proc.run(["lo-test-tool"], env=env, timeout=30).stdout == "third\n"
    other = {**os.environ, "PATH": f"{first}:{third}"}
    assert proc.run(["lo-test-tool"], env=other, timeout=30).stdout == "third\n"
    (third / "lo-test-tool").unlink()
    with pytest.raises(LoOrchError, match="lo-test-tool cannot be run") as refused:
        proc.run(["lo-test-tool"], env=env, timeout=30)  # (only the one that cannot run)
    assert "chmod +x" in (refused.value.hint or "")
    (first / "lo-test-tool").unlink()
    with pytest.raises(LoOrchError, match="lo-test-tool not found"):
        proc.run(["lo-test-tool"], env=env, timeout=30)
    assert proc.program("lo-test-tool", env) is None


def test_a_relative_path_folder_is_left_to_the_commands_own_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative PATH folder means a different program in each working folder: the search
    is left to exec there, never done once from ours (which would run the wrong one)."""
    _tool(tmp_path / "ours" / "bin", "ours")
    monkeypatch.chdir(tmp_path / "ours")
    _tool(tmp_path / "one" / "bin", "one")
    _tool(tmp_path / "two" / "bin", "two")
    env = {**os.environ, "PATH": f"bin:{os.environ['PATH']}"}
    assert proc.program("lo-test-tool", env) is None
    for where in ("one", "two"):
        got = proc.run(["lo-test-tool"], env=env, cwd=tmp_path / where, timeout=30)
        assert got.stdout == f"{where}\n"
    assert proc.program(str(tmp_path / "one" / "bin" / "lo-test-tool"), env) is None


def test_the_environment_a_command_gets_follows_every_change_of_ours(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The cleaned environments are remembered between commands (they were 50 us of the
    supervisor's CPU per git or tmux call), never past a change: a variable set, changed or
    removed after the last command reaches the next; an answer changed by its caller changes
    no later one."""
    monkeypatch.setenv("LO_TEST_SEEN", "first")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "First Author")
    assert proc.no_git_env()["LO_TEST_SEEN"] == "first"
    assert proc.without_tokens()["LO_TEST_SEEN"] == "first"
    ident = ["git", "var", "GIT_AUTHOR_IDENT"]
    assert proc.run(ident, cwd=tmp_path, env=proc.no_git_env()).stdout.startswith("First Author")

    monkeypatch.setenv("GIT_AUTHOR_NAME", "Second Author")  # changed: the next command sees it
    assert proc.run(ident, cwd=tmp_path, env=proc.no_git_env()).stdout.startswith("Second Author")
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "elsewhere"))  # set: stripped still
    monkeypatch.setenv("GITHUB_TOKEN", "secret")
    assert "GIT_INDEX_FILE" not in proc.no_git_env()
    assert proc.no_git_env()["GITHUB_TOKEN"] == "secret"
    assert "GITHUB_TOKEN" not in proc.without_tokens()
    assert proc.without_tokens()["GIT_INDEX_FILE"] == str(tmp_path / "elsewhere")
    monkeypatch.delenv("LO_TEST_SEEN")  # removed: gone from both
    assert "LO_TEST_SEEN" not in proc.no_git_env()
    assert "LO_TEST_SEEN" not in proc.without_tokens()

    mine = proc.no_git_env()
    mine["LO_TEST_MINE"] = "x"
    del mine["PATH"]
    assert "LO_TEST_MINE" not in proc.no_git_env()
    assert proc.no_git_env()["PATH"] == os.environ["PATH"]
    # a given base is filtered as it is, whatever ours holds
    assert proc.no_git_env({"GIT_DIR": "d", "A": "1"}) == {"A": "1"}
    assert proc.without_tokens({"GH_TOKEN": "t", "A": "1"}) == {"A": "1"}
