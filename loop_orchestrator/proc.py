"""The one gateway for subprocesses: argument lists, never a shell."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import shutil
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from loop_orchestrator.errors import CommandError, LoOrchError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Result:
    cmd: list[str]
    returncode: int | None  # None: timed out
    stdout: str
    stderr: str
    duration: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def no_git_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment without leaked ``GIT_*`` variables.

    A hook or an outer git (``GIT_DIR``, ``GIT_INDEX_FILE``...) would otherwise redirect git
    commands meant for a worktree. Identity and config variables that tests pin are kept.
    """
    env = dict(os.environ if base is None else base)
    keep = {
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_SYSTEM",
        "GIT_CONFIG_NOSYSTEM",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_ASKPASS",
        "GIT_TERMINAL_PROMPT",
        "GIT_EXEC_PATH",
    }
    for key in list(env):
        if key.startswith("GIT_") and key not in keep:
            del env[key]
    return env


def run(
    cmd: Sequence[str],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float | None = None,
    check: bool = True,
) -> Result:
    """Run ``cmd`` (an argument list) and capture its output as text.

    With ``check`` a non-zero exit or a timeout raises ``CommandError`` carrying the
    command, exit code, stdout and stderr; without it the caller reads ``Result``.
    """
    args = [str(c) for c in cmd]
    start = time.monotonic()
    try:
        proc = subprocess.run(
            args,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            input=input,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        msg = f"{args[0]} not found"
        raise LoOrchError(
            msg,
            hint=f"Install {args[0]} or put it on PATH.",
        ) from exc
    except subprocess.TimeoutExpired as exc:
        out = _text(exc.stdout)
        err = _text(exc.stderr)
        result = Result(args, None, out, err, time.monotonic() - start)
        log.debug("command timed out", extra={"cmd": args, "timeout": timeout})
        if check:
            raise CommandError(args, None, out, err) from exc
        return result
    result = Result(args, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)
    if check and proc.returncode != 0:
        raise CommandError(args, proc.returncode, proc.stdout, proc.stderr)
    return result


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data


def run_interactive(cmd: Sequence[str]) -> int:
    """Run ``cmd`` (an argument list) on the user's terminal, for as long as the person uses
    it (a tmux client): no capture, no timeout; its exit code."""
    log.debug("interactive: %s", list(cmd))
    return subprocess.run(list(cmd), check=False).returncode


def run_in_group(
    argv: list[str], stdin: str | None, timeout: float, cwd: Path | None = None
) -> int | None:
    """Run a program (a notification command) in its own process group and kill the whole
    group after ``timeout``: its exit code, or None when it was killed. Output is discarded."""
    child = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=cwd,
        start_new_session=True,
        text=True,
    )
    try:
        child.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)  # the group this call started, by its id
        child.wait()
        log.warning("command timed out; its process group was killed", extra={"cmd": argv[0]})
        return None
    except BrokenPipeError:  # it exited without reading stdin
        child.wait()
    if child.returncode:
        log.warning("command failed", extra={"cmd": argv[0], "exit_code": child.returncode})
    return child.returncode


def spawn_detached(argv: Sequence[str]) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a session of its own, with no terminal and no output, and do not
    wait for it (a watcher that must outlive its parent). The caller may ``poll()`` or
    ``wait()`` the returned child to reap it."""
    return subprocess.Popen(
        [str(a) for a in argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


async def start_piped(argv: Sequence[str], env: Mapping[str, str]) -> asyncio.subprocess.Process:
    """Start ``argv`` for an asyncio caller, its stdin, stdout and stderr on pipes (a
    served dashboard page's own dashboard). The caller ends and reaps it."""
    args = [str(a) for a in argv]
    process = await asyncio.create_subprocess_exec(
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env),
    )
    log.debug("started with pipes", extra={"cmd": args, "pid": process.pid})
    return process


def spawn_in_pty(
    argv: Sequence[str], rows: int, cols: int, env: Mapping[str, str] | None = None
) -> tuple[int, int]:
    """Start ``argv`` on a new pseudo-terminal of ``rows`` x ``cols``, as the leader of a new
    session whose controlling terminal it is (so it gets SIGWINCH on a resize and its
    process group id is its pid): ``(pid, master fd)``. The caller reads and writes the
    master, reaps the pid and closes the fd."""
    args = [str(a) for a in argv]
    exe = shutil.which(args[0]) if args else None
    if exe is None:
        msg = f"{args[0] if args else '(empty command)'} not found"
        raise LoOrchError(msg, hint=f"Install {args[0] if args else 'it'} or put it on PATH.")
    environ = dict(os.environ if env is None else env)
    size = struct.pack("HHHH", rows, cols, 0, 0)
    # forkpty, not Popen: Popen cannot make the pty the child's controlling terminal.
    # Between fork and exec the child only sets the size and execs (no locks, no logging).
    pid, master = os.forkpty()
    if pid == 0:  # pragma: no cover - the child; only exec or _exit from here
        try:
            fcntl.ioctl(0, termios.TIOCSWINSZ, size)
            os.execve(exe, args, environ)
        finally:
            os._exit(127)
    log.debug("started on a pty", extra={"cmd": args, "pid": pid})
    return pid, master
