"""The one gateway for subprocesses: argument lists, never a shell."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import resource
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loop_orchestrator.errors import CommandError, LoOrchError

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Result:
    cmd: list[str]
    returncode: int | None  # None: timed out
    stdout: str
    stderr: str
    duration: float
    #: the output's bytes as the command wrote them (``run(keep_bytes=True)``), else None
    raw_stdout: bytes | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0


#: the GitHub tokens ``lo-orch pr`` uses (docs/design.md section 12): never an agent
#: session's (tmux panes start without them, the sandbox unsets them)
TOKEN_VARIABLES = ("GITHUB_TOKEN", "GH_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN")


def without_tokens(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment (``base``, else ours) without ``TOKEN_VARIABLES``."""
    env = dict(os.environ if base is None else base)
    for name in TOKEN_VARIABLES:
        env.pop(name, None)
    return env


#: the ``GIT_*`` variables ``no_git_env`` keeps: identity and config that tests pin
_GIT_KEPT = frozenset(
    {
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
)


def no_git_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment without leaked ``GIT_*`` variables.

    A hook or an outer git (``GIT_DIR``, ``GIT_INDEX_FILE``...) would otherwise redirect git
    commands meant for a worktree. Identity and config variables that tests pin are kept.
    """
    env = dict(os.environ if base is None else base)
    for key in [k for k in env if k.startswith("GIT_") and k not in _GIT_KEPT]:
        del env[key]
    return env


#: how long the output of a killed command's group is still read (a process that left
#: the group with the pipes open would otherwise hold the caller for good)
DRAIN_TIMEOUT = 5.0


#: a check process's data memory bound when none is configured: this share of the
#: machine's memory, and never less than ``CHECK_MEMORY_FLOOR_MB``
CHECK_MEMORY_SHARE = 0.25
CHECK_MEMORY_FLOOR_MB = 2048


def check_memory_bound(setting_mb: int | None, machine_bytes: int | None) -> int | None:
    """The data memory bound (bytes) of each check process: ``setting_mb`` MiB when set, none
    for 0, else a quarter of ``machine_bytes`` with a floor of 2 GiB; None: no bound (also
    when the machine's memory is not known)."""
    if setting_mb == 0:
        return None
    if setting_mb is not None:
        return setting_mb * 2**20
    if not machine_bytes:
        return None
    return max(int(machine_bytes * CHECK_MEMORY_SHARE), CHECK_MEMORY_FLOOR_MB * 2**20)


def machine_memory() -> int | None:
    """The machine's physical memory in bytes, or None where it cannot be read."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory_limit(setting_mb: int | None) -> int | None:
    """``check_memory_bound`` on this machine (``[verify] check_memory_mb``)."""
    return check_memory_bound(setting_mb, machine_memory())


#: (program name, PATH) -> the file ``program`` found it to be
_programs: dict[tuple[str, str], str] = {}


def program(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The file a command named ``name`` runs, searched as ``exec`` searches the PATH of
    ``env`` (else ours), and remembered per name and PATH while it stays an executable file;
    None when ``name`` has a folder in it, when PATH holds a relative folder (which the
    command's own working folder would decide) or when nothing is found (``Popen`` searches
    and reports it). ``Popen`` joined every PATH folder with the name at every call, and the
    child tried each until one ran: 30 us of the 400 a git call cost the caller here
    (``benchmarks/commands.py``). A program installed in an earlier PATH folder after the
    first call is used from the next start of this process."""
    if "/" in name:
        return None
    path = (os.environ if env is None else env).get("PATH", os.defpath)
    found = _programs.get((name, path))
    if found is not None and os.access(found, os.X_OK):
        return found
    if any(not Path(folder).is_absolute() for folder in path.split(os.pathsep)):
        return None  # ("" counts too: the working folder, as exec takes it)
    found = shutil.which(name, path=path)
    if found is None:
        _programs.pop((name, path), None)
        return None
    _programs[(name, path)] = found
    return found


def run(
    cmd: Sequence[str],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float | None = None,
    check: bool = True,
    memory_limit: int | None = None,
    terminal: bool = False,
    keep_bytes: bool = False,
) -> Result:
    """Run ``cmd`` (an argument list) and capture its output as text (and with
    ``keep_bytes`` as bytes too: for output whose lengths are counted in bytes).

    With a ``timeout`` (a bounded call that never asks the person anything: checks, tmux,
    probes) the command runs in a session and process group of its own, and after the
    timeout, or when the caller is interrupted (Ctrl-C), the whole group is killed, not
    only the program started: a check that started a server or test workers leaves nothing
    running. Without one, or with ``terminal`` (git talking to a remote, whose ssh may ask
    for a passphrase on the person's terminal), the command keeps the caller's session and
    only the program itself is killed on a timeout or an interrupt.

    ``memory_limit``: the most data memory (``RLIMIT_DATA``, bytes) the command and every
    process it starts may each take; past it an allocation fails (Python's MemoryError,
    Node's heap out of memory) instead of the kernel's out-of-memory killer choosing a
    victim among the supervisor, the sessions and the person's programs. Set as the command
    starts (Linux; elsewhere not set).

    With ``check`` a non-zero exit or a timeout raises ``CommandError`` carrying the
    command, exit code, stdout and stderr; without it the caller reads ``Result``.
    """
    args = [str(c) for c in cmd]
    grouped = timeout is not None and not terminal
    start = time.monotonic()
    try:
        # bytes, read by ``_read_both`` and decoded by ``as_text``: text mode and
        # ``communicate`` cost the supervisor twice the CPU of the rest of a call (a tmux or
        # git call every few milliseconds; ``benchmarks/supervisor.py --tally``)
        child = subprocess.Popen(
            args,
            executable=program(args[0], env),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.PIPE if input is not None else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=grouped,
        )
    except FileNotFoundError as exc:
        msg = f"{args[0]} not found"
        raise LoOrchError(
            msg,
            hint=f"Install {args[0]} or put it on PATH.",
        ) from exc
    except PermissionError as exc:  # (exec found it only where it may not run)
        msg = f"{args[0]} cannot be run: {exc.strerror}"
        raise LoOrchError(
            msg,
            hint=f"Make {exc.filename or args[0]} executable (`chmod +x`), or put a "
            f"runnable {args[0]} first on PATH.",
        ) from exc
    if memory_limit is not None:
        _bound_memory(child, memory_limit)
    try:
        if input is not None:  # (rare: the standard library writes and reads at once)
            raw_out, raw_err = child.communicate(input.encode("utf-8"), timeout=timeout)
        else:
            raw_out, raw_err = _read_both(child, timeout)
    except subprocess.TimeoutExpired as exc:
        if grouped:
            kill_group(child)
        else:
            child.kill()
        out, err = _drain(child)
        if input is None:  # (``communicate`` goes on where it stopped; ours does not)
            out, err = as_text(exc.stdout) + out, as_text(exc.stderr) + err
        result = Result(args, None, out, err, time.monotonic() - start)
        log.debug("command timed out", extra={"cmd": args, "timeout": timeout})
        if check:
            raise CommandError(args, None, out, err) from None
        return result
    except BaseException:
        if grouped:
            kill_group(child)
        else:
            child.kill()
        child.wait()
        raise
    out, err = as_text(raw_out), as_text(raw_err)
    kept = raw_out if keep_bytes else None
    result = Result(args, child.returncode, out, err, time.monotonic() - start, kept)
    if check and child.returncode != 0:
        raise CommandError(args, child.returncode, out, err)
    return result


def _read_both(child: subprocess.Popen[bytes], timeout: float | None) -> tuple[bytes, bytes]:
    """Everything ``child`` writes to its two pipes until both close, then its exit; a
    ``TimeoutExpired`` carrying what was read once ``timeout`` seconds have passed."""
    assert child.stdout is not None and child.stderr is not None
    out, err = bytearray(), bytearray()
    read = {child.stdout.fileno(): out, child.stderr.fileno(): err}
    deadline = None if timeout is None else time.monotonic() + timeout
    poller = select.poll()
    for fd in read:
        poller.register(fd, select.POLLIN)
    try:
        while read:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = poller.poll(None if left is None else left * 1000)
            if not ready and left == 0.0:
                raise subprocess.TimeoutExpired(child.args, timeout or 0.0)
            for fd, _event in ready:
                chunk = os.read(fd, 65536)
                if chunk:
                    read[fd] += chunk
                else:
                    poller.unregister(fd)
                    del read[fd]
        child.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise subprocess.TimeoutExpired(
            child.args, timeout or 0.0, output=bytes(out), stderr=bytes(err)
        ) from None
    child.stdout.close()
    child.stderr.close()
    return bytes(out), bytes(err)


def _bound_memory(child: subprocess.Popen[bytes], limit: int) -> None:
    if not sys.platform.startswith("linux"):  # prlimit(2) is Linux's
        return
    with contextlib.suppress(ProcessLookupError, PermissionError, ValueError, OSError):
        resource.prlimit(child.pid, resource.RLIMIT_DATA, (limit, limit))


def kill_group(child: subprocess.Popen[Any]) -> None:
    """SIGKILL the process group ``child`` leads (started with ``start_new_session``: its id
    is the child's pid, so this ends only what this process started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)


def _drain(child: subprocess.Popen[bytes]) -> tuple[str, str]:
    """The output of a killed command, read for at most ``DRAIN_TIMEOUT``."""
    try:
        out, err = child.communicate(timeout=DRAIN_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        # a process outside the group still holds the pipes: keep what was read
        for pipe in (child.stdout, child.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        child.wait()
        return as_text(exc.stdout), as_text(exc.stderr)
    return as_text(out), as_text(err)


def as_text(data: bytes | str | None) -> str:
    """A command's output as text, as ``run`` gives it: UTF-8 (an invalid byte replaced),
    every line ending ``\\n`` (as Python's text mode reads it: ``\\r\\n`` and a lone ``\\r``
    too)."""
    if data is None:
        return ""
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    return data.replace("\r\n", "\n").replace("\r", "\n")


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


#: a child of ``spawn_piped``
Piped = subprocess.Popen[bytes]


def spawn_piped(argv: Sequence[str], env: Mapping[str, str]) -> Piped:
    """Start ``argv`` with its stdin and stdout on pipes (stderr discarded) in a session of
    its own, and do not wait for it: a client the caller talks to for as long as it runs
    (tmux's control mode). A Ctrl-C in the caller's terminal does not reach it; it ends
    when the caller closes its stdin, or exits. ``end_piped`` ends and reaps it."""
    return subprocess.Popen(
        [str(a) for a in argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=dict(env),
        start_new_session=True,
        close_fds=True,
    )


def end_piped(child: Piped, grace: float = 2.0) -> None:
    """Close ``child``'s pipes (so it ends, as a client does at the end of its input),
    kill it if it is still there after ``grace`` seconds, and reap it."""
    for pipe in (child.stdin, child.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    try:
        child.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


async def start_piped(argv: Sequence[str], env: Mapping[str, str]) -> asyncio.subprocess.Process:
    """Start ``argv`` for an asyncio caller, its stdin, stdout and stderr on pipes (a
    served dashboard page's own dashboard). The caller ends and reaps it."""
    # (imported here, the one user: asyncio was most of this module's import and a sixth
    # of the scripted agent's, which starts in every pane of a scripted run)
    import asyncio

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
