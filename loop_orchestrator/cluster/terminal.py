"""The terminal relay behind `lo-orch attach TASK` for a session on another node when
``[cluster] ssh`` is empty: read-write, like a local attach.

Two halves that know nothing of Ray:

- ``TerminalHost`` runs on the node (composed into the node's actor): it starts a program
  (``tmux -L <socket> attach -t <target>``) on a new pseudo-terminal and offers plain calls
  to read its output, type into it, resize it and end it.
- ``relay(endpoint, ...)`` runs on the user's terminal: raw mode, keys to the remote
  program, its output to the screen, SIGWINCH to a resize, until the remote program exits
  (tmux's own detach key ends the remote ``tmux attach``, so it ends the relay too).

``endpoint`` is any object with TerminalHost's five methods as plain blocking calls (the
Ray backend wraps the node's actor in one). The relay reads from one thread and writes from
another, so the actor behind it must take concurrent calls (``max_concurrency`` > 1), or
every key waits for the read in flight (at most ``READ_TIMEOUT``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import select
import signal
import struct
import termios
import threading
import time
import tty
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Protocol

from loop_orchestrator import proc

log = logging.getLogger(__name__)

#: the longest a relay's read waits on the node before asking again
READ_TIMEOUT = 0.5
#: the terminal type a program on the node's pty gets when the node's environment has none
DEFAULT_TERM = "xterm-256color"
#: how long typed input waits for a program that reads none before it is dropped
WRITE_TIMEOUT = 5.0
#: how long ``close`` waits for the program to end after SIGHUP before SIGKILL
CLOSE_GRACE = 2.0
#: exit code of a relay ended by SIGTERM/SIGHUP (128 + signal, as a shell reports it)
_SIGNAL_EXIT: dict[int, int] = {
    signal.SIGTERM: 128 + signal.SIGTERM,
    signal.SIGHUP: 128 + signal.SIGHUP,
}


class Endpoint(Protocol):
    """What ``relay`` needs: TerminalHost's methods as plain blocking calls."""

    def open(self, argv: list[str], rows: int, cols: int) -> str: ...

    def read(self, term_id: str, timeout: float) -> bytes | None: ...

    def write(self, term_id: str, data: bytes) -> None: ...

    def resize(self, term_id: str, rows: int, cols: int) -> None: ...

    def close(self, term_id: str) -> None: ...


@dataclass
class _Terminal:
    pid: int
    master: int
    #: held while writing to, resizing and closing the fd
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: held while reaping the pid
    reap_lock: threading.Lock = field(default_factory=threading.Lock)
    #: held while reading and while closing the fd: a close never frees the fd number
    #: under a read in flight (another terminal could get it, and the read its output)
    reading: threading.RLock = field(default_factory=threading.RLock)
    exited: bool = False  # reaped: the pid may belong to someone else now, never signal it
    closed: bool = False  # the master fd is closed


def _ready(fd: int, events: int, timeout: float) -> bool:
    """Whether ``fd`` is ready for ``events`` (or hung up) within ``timeout`` seconds:
    poll(), not select(), which refuses fd 1024 and above (a node's actor process holds
    many files)."""
    poller = select.poll()
    poller.register(fd, events)
    return bool(poller.poll(max(0.0, timeout) * 1000))


class TerminalHost:
    """Programs on pseudo-terminals of this machine, by id; safe to call from many threads."""

    def __init__(self) -> None:
        self._terms: dict[str, _Terminal] = {}
        self._lock = threading.Lock()

    def open(self, argv: list[str], rows: int, cols: int) -> str:
        """Start ``argv`` on a new pty of ``rows`` x ``cols``; the id of its terminal."""
        pid, master = proc.spawn_in_pty(argv, _clamp(rows), _clamp(cols), env=_pty_env())
        os.set_blocking(master, False)  # a program that reads no input never blocks a write
        term_id = uuid.uuid4().hex
        with self._lock:
            self._terms[term_id] = _Terminal(pid, master)
        log.info("terminal opened", extra={"term": term_id, "pid": pid})
        return term_id

    def read(self, term_id: str, timeout: float) -> bytes | None:
        """What the program wrote within ``timeout`` seconds (b"" if nothing); None once it
        exited (or the terminal was closed, or never existed)."""
        term = self._get(term_id)
        if term is None:
            return None
        with term.reading:
            if term.closed:
                return None
            try:
                if not _ready(term.master, select.POLLIN, timeout):
                    return b"" if not self._reaped(term) else None
                data = os.read(term.master, 65536)
            except OSError as exc:  # EIO: every holder of the pty's other side is gone
                if exc.errno != errno.EIO:
                    raise
                data = b""
            if data:
                return data
            self._finish(term_id, term)
        return None

    def write(self, term_id: str, data: bytes) -> None:
        """Type ``data`` into the program (nothing once it exited)."""
        term = self._get(term_id)
        if term is None:
            return
        view = memoryview(data)
        deadline = time.monotonic() + WRITE_TIMEOUT
        with term.lock:  # closed is checked under the lock the fd is closed under
            while view and not term.closed:
                try:
                    written = os.write(term.master, view)
                except BlockingIOError:  # the program reads no input: wait a little
                    if time.monotonic() > deadline:
                        log.warning("terminal input dropped", extra={"term": term_id})
                        return
                    _ready(term.master, select.POLLOUT, 0.1)
                    continue
                except OSError as exc:
                    if exc.errno in (errno.EIO, errno.EBADF):
                        return
                    raise
                view = view[written:]

    def resize(self, term_id: str, rows: int, cols: int) -> None:
        """Set the terminal's size; the kernel sends the program SIGWINCH."""
        term = self._get(term_id)
        if term is None:
            return
        with term.lock, contextlib.suppress(OSError):
            if not term.closed:
                fcntl.ioctl(term.master, termios.TIOCSWINSZ, _winsize(rows, cols))

    def close(self, term_id: str) -> None:
        """End the program this host started for ``term_id`` (SIGHUP to its process group,
        SIGKILL after ``CLOSE_GRACE``) and free the terminal; a second call does nothing."""
        term = self._get(term_id)
        if term is None:
            return
        if not self._reaped(term):
            self._signal(term, signal.SIGHUP)
            self._kill_after_grace(term)
        with term.reading:  # after a read in flight (it ends: the program is gone)
            self._finish(term_id, term)
        log.info("terminal closed", extra={"term": term_id, "pid": term.pid})

    def pid(self, term_id: str) -> int | None:
        """The pid of the program of ``term_id`` while it runs (for checks and tests)."""
        term = self._get(term_id)
        return None if term is None or self._reaped(term) else term.pid

    def _get(self, term_id: str) -> _Terminal | None:
        with self._lock:
            return self._terms.get(term_id)

    def _signal(self, term: _Terminal, sig: int) -> None:
        # the session (and process group) spawn_in_pty started: its id is the pid; never
        # signalled once reaped, so a recycled pid cannot be hit
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(term.pid, sig)

    def _kill_after_grace(self, term: _Terminal) -> None:
        """Give the program ``CLOSE_GRACE`` seconds to end, then SIGKILL its group and reap
        it."""
        deadline = time.monotonic() + CLOSE_GRACE
        while not self._reaped(term) and time.monotonic() < deadline:
            time.sleep(0.02)
        if not self._reaped(term):
            self._signal(term, signal.SIGKILL)
            self._reap(term, block=True)

    def _reaped(self, term: _Terminal) -> bool:
        return self._reap(term, block=False)

    def _reap(self, term: _Terminal, *, block: bool) -> bool:
        with term.reap_lock:
            if term.exited:
                return True
            try:
                pid, _ = os.waitpid(term.pid, 0 if block else os.WNOHANG)
            except ChildProcessError:
                pid = term.pid
            if pid == term.pid:
                term.exited = True
            return term.exited

    def _finish(self, term_id: str, term: _Terminal) -> None:
        """The program ended (or is being ended): reap it, close the fd, forget the id."""
        if not self._reap(term, block=False):
            # it closed the pty but still runs: give it a moment, then end it
            self._kill_after_grace(term)
        with term.lock:
            if not term.closed:
                term.closed = True
                os.close(term.master)
        with self._lock:
            self._terms.pop(term_id, None)


def _pty_env() -> dict[str, str]:
    """The node's environment for a program on a new pty: without ``TMUX``/``TMUX_PANE``
    (a node started from inside tmux would make `tmux attach` refuse to nest) and with a
    ``TERM`` (a node started by a service manager has none, and tmux will not draw)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    if env.get("TERM", "dumb") == "dumb":
        env["TERM"] = DEFAULT_TERM
    return env


def _clamp(n: int) -> int:
    return max(1, min(int(n), 10000))


def _winsize(rows: int, cols: int) -> bytes:
    return struct.pack("HHHH", _clamp(rows), _clamp(cols), 0, 0)


def terminal_size(fd: int) -> tuple[int, int]:
    """(rows, cols) of the terminal on ``fd``; 24x80 when it is not a terminal."""
    try:
        rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
    except OSError:
        return 24, 80
    return (rows or 24), (cols or 80)


@contextlib.contextmanager
def _raw(fd: int) -> Iterator[None]:
    """The terminal on ``fd`` in raw mode, restored however the block ends."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@dataclass
class _Flags:
    resized: bool = False
    stopped_by: int = 0  # the signal that asked the relay to stop


@contextlib.contextmanager
def _signals(wake: int) -> Iterator[_Flags]:
    """While the block runs: SIGWINCH marks a resize, SIGTERM/SIGHUP mark a stop; each
    wakes the loop through ``wake`` (the loop then restores the terminal on its way out).
    Only the main thread can set handlers; elsewhere the block runs without them."""
    flags = _Flags()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGWINCH:
            flags.resized = True
        else:
            flags.stopped_by = signum
        with contextlib.suppress(OSError):
            os.write(wake, b"s")

    previous: dict[int, signal._HANDLER] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (int(signal.SIGWINCH), *_SIGNAL_EXIT):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        yield flags
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def relay(endpoint: Endpoint, *, stdin_fd: int, stdout_fd: int, argv: Sequence[str] = ()) -> int:
    """Connect the local terminal to a program on the node until it exits or the user
    detaches: opens it with ``endpoint.open(argv, rows, cols)`` (an endpoint bound to one
    task may ignore an empty ``argv`` and open its own), puts ``stdin_fd`` in raw mode
    (restored on every way out), forwards keys, output and window sizes, and closes the
    remote terminal at the end. 0 when the remote program ended or stdin closed; 128+N when
    signal N (SIGTERM, SIGHUP) stopped the relay."""
    rows, cols = terminal_size(stdin_fd if os.isatty(stdin_fd) else stdout_fd)
    term_id = endpoint.open(list(argv), rows, cols)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    done = threading.Event()
    failure: list[BaseException] = []

    def pump() -> None:
        """Remote output to the local screen, until the program exits or the relay stops."""
        try:
            while not done.is_set():
                data = endpoint.read(term_id, READ_TIMEOUT)
                if data is None:
                    break
                view = memoryview(data)
                while view:
                    view = view[os.write(stdout_fd, view) :]
        except BaseException as exc:  # handed to the main thread, which re-raises it
            failure.append(exc)
        finally:
            done.set()
            with contextlib.suppress(OSError):
                os.write(wake_w, b"x")

    reader = threading.Thread(target=pump, name="lo-orch-relay", daemon=True)
    code = 0
    # signals outside raw mode: a SIGTERM while the terminal is restored is still caught
    try:
        with _signals(wake_w) as flags, _raw(stdin_fd):
            reader.start()
            while not done.is_set() and not flags.stopped_by:
                ready, _, _ = select.select([stdin_fd, wake_r], [], [])
                if wake_r in ready:
                    os.read(wake_r, 512)
                if flags.stopped_by:
                    break
                if flags.resized:
                    flags.resized = False
                    endpoint.resize(term_id, *terminal_size(stdin_fd))
                if stdin_fd in ready and not done.is_set():
                    keys = os.read(stdin_fd, 4096)
                    if not keys:  # stdin closed: nobody types any more
                        break
                    endpoint.write(term_id, keys)
            if flags.stopped_by:
                code = _SIGNAL_EXIT[flags.stopped_by]
    finally:
        done.set()
        try:
            endpoint.close(term_id)
        finally:
            reader.join(READ_TIMEOUT + 5.0)
            os.close(wake_r)
            os.close(wake_w)
    if failure:
        raise failure[0]
    return code
