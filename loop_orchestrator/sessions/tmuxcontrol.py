"""One tmux control-mode client (``tmux -C``) through which a long-lived process (the
supervisor) sends its tmux commands as lines, in place of a tmux process per command.

A request is the call's commands on one line, then ``display-message -p <nonce>`` on a line
of its own (a command list ends at its first failure; the next line runs whatever happened).
tmux answers every command it runs with a block, ``%begin T N F``, its output, ``%end T N F``
(``%error`` when it failed); a block whose only line is the nonce ends the request. The
answer is what a tmux process would have given: the output of the blocks that ended well
as its stdout, a failed block's text as its stderr.

Nothing of a pane's text reaches this stream but through ``capture-pane``, which writes it as
it is: a program in a pane can print a line that reads ``%end T N F``. The reader takes
the stream only as tmux writes it (``Reader``): a block ends with its own begin's three
numbers, and N, a counter of the whole server, rises from block to block. A printed end
that closes a block early leaves the real end stray, unless a printed begin opens another
block: one of the same N (which must rise), or of a later one, inside which the real end
then stands. Each of these is refused at once, the client closed, and a request that only
reads is answered by a tmux process instead (``READS``). The nonce is random per request
and never shown to a pane, so no printed block can end a request.

The client is started with the session's name, attached before anything is sent (tmux may
answer a line read from stdin before the attach it was started with), and ends when its
stdin closes: the server holds the client's pipes, so it ends with the process that made
it, killed or not.

Decisions (quoting, which calls may go here, the reader) are pure; ``Control`` is the
pipe around them, and ``Channel`` decides when a backend has one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import select
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from loop_orchestrator import proc
from loop_orchestrator.sessions.tmuxargs import Sep, commands

log = logging.getLogger(__name__)

#: commands a request may hold: none of them ends the client's session (kill-session,
#: kill-server: run by a tmux process, as the connection ends with them) or reads stdin
COMMANDS = frozenset(
    {
        "capture-pane",
        "delete-buffer",
        "display-message",
        "if-shell",
        "kill-pane",
        "list-panes",
        "new-window",
        "paste-buffer",
        "respawn-pane",
        "select-layout",
        "send-keys",
        "set-option",
        "show-options",
        "split-window",
    }
)
#: commands that change nothing: a request of these alone is asked again of a tmux
#: process when the connection broke before its answer (any other might have run)
READS = frozenset({"capture-pane", "display-message", "list-panes", "show-options"})

#: the first tmux whose clients take flags (``attach-session -f``)
MIN_VERSION = (3, 2)
#: seconds before another attach after the first that failed; doubled at each failure
RETRY = 1.0
#: ... up to this
RETRY_MOST = 60.0

#: a word the line protocol cannot carry (it would end the line, or be taken apart)
_UNSENDABLE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_GUARD = re.compile(r"^%(begin|end|error) (\d+) (\d+) (\d+)$")


class ProtocolError(Exception):
    """The stream is not as tmux writes it (a pane printed protocol lines, or a bug)."""


def quote(word: str) -> str | None:
    """``word`` as one word of tmux's command language, or None when it cannot be sent
    on a line (a control character other than tab, or bytes that are not UTF-8: a path's
    ``surrogateescape``, which a tmux process gets as they are). Single quotes keep
    everything as it is; a word holding one is double-quoted, with ``\\``, ``"`` and ``$``
    escaped."""
    if _UNSENDABLE.search(word) or not _utf8(word):
        return None
    if "'" not in word:
        return f"'{word}'"
    escaped = word.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def supported(version: tuple[int, int] | None) -> bool:
    """Whether tmux ``version`` (None: it did not say) takes the client flags a control
    client is attached with; an older one runs every call as a process."""
    return version is not None and version >= MIN_VERSION


def retry_after(failures: int) -> float:
    """Seconds to wait after ``failures`` attaches in a row failed (a server with no
    session yet, or one that refuses control clients: not a process a second)."""
    return min(RETRY * 2.0 ** max(failures - 1, 0), RETRY_MOST)


def _utf8(word: str) -> bool:
    try:
        word.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def request_line(args: Sequence[str | Sep]) -> str | None:
    """The line for a call's ``args`` (words, ``THEN`` between commands), or None when the
    call must be run by a tmux process: an option before the command (``-V``), a command
    this client does not run (``COMMANDS``), or a word no line can carry."""
    words: list[str] = []
    expect_command = True
    for arg in args:
        if isinstance(arg, Sep):
            words.append(arg.value)
            expect_command = True
            continue
        if expect_command and arg not in COMMANDS:
            return None
        expect_command = False
        quoted = quote(arg)
        if quoted is None:
            return None
        words.append(quoted)
    return " ".join(words) if words and not expect_command else None


def reads_only(args: Sequence[str | Sep]) -> bool:
    """Whether every command of ``args`` only reads (``READS``)."""
    return all(name in READS for name in commands(args))


@dataclass
class Block:
    """One command's answer: its number, whether it ended well, its output lines."""

    number: int
    ok: bool = True
    lines: list[bytes] = field(default_factory=list)


class Reader:
    """Lines of the client's stdout in, finished blocks out; ``ProtocolError`` at the
    first line tmux would not have written there. Lines outside blocks are notifications
    (``%window-add`` ...), passed over but one: ``%session-changed``, the client attached
    (``attached``)."""

    def __init__(self) -> None:
        self._open: tuple[bytes, Block] | None = None  # (its begin's numbers, the block)
        self._closed = b""  # the numbers of the block closed last
        self._last = -1
        self.attached = False

    def feed(self, line: bytes) -> Block | None:
        guard = _GUARD.match(line.decode("ascii", "replace")) if line[:1] == b"%" else None
        if self._open is not None:
            numbers, block = self._open
            if guard is not None and guard.group(1) != "begin":
                ends = line.split(b" ", 1)[1]
                if ends == numbers:
                    self._open = None
                    self._closed = numbers
                    block.ok = guard.group(1) == "end"
                    return block
                if ends == self._closed:
                    # the real end of the block a printed end closed early, inside the
                    # block a printed begin opened
                    msg = f"the end of a closed block inside another: {line[:80]!r}"
                    raise ProtocolError(msg)
            block.lines.append(line)  # (any other line is the command's output)
            return None
        if guard is None:
            if not line.startswith(b"%"):
                msg = f"text outside a block: {line[:80]!r}"
                raise ProtocolError(msg)
            if line.startswith(b"%exit"):
                msg = f"the client exits: {line[:80]!r}"
                raise ProtocolError(msg)
            self.attached = self.attached or line.startswith(b"%session-changed ")
            return None  # a notification
        if guard.group(1) != "begin":
            msg = f"an end with no begin: {line[:80]!r}"
            raise ProtocolError(msg)
        number = int(guard.group(3))
        if number <= self._last:
            msg = f"command number {number} again (after {self._last})"
            raise ProtocolError(msg)
        self._last = number
        self._open = (line.split(b" ", 1)[1], Block(number))
        return None


def answer(blocks: Sequence[Block]) -> tuple[bool, str, str]:
    """(ok, stdout, stderr) of a request's blocks (its nonce's not among them), as a tmux
    process would have given them: the lines of the blocks that ended well, a failed
    block's lines as the error."""
    out = b"".join(line + b"\n" for b in blocks if b.ok for line in b.lines)
    err = b"".join(line + b"\n" for b in blocks if not b.ok for line in b.lines)
    return all(b.ok for b in blocks), proc.as_text(out), proc.as_text(err)


class Lost(Exception):
    """The client ended, broke the protocol or did not answer in time: closed. ``sent``:
    whether the request reached it (if so its commands may have run)."""

    def __init__(self, reason: str, *, sent: bool) -> None:
        super().__init__(reason)
        self.sent = sent


class Control:
    """A control-mode client attached to one session (``-f no-output,ignore-size``: no
    pane output reaches it and it sizes no window; ``-E``: the session's environment is
    left as it is). One request at a time; safe from any thread."""

    def __init__(self, child: proc.Piped) -> None:
        self._child = child
        self._reader = Reader()
        self._lines: deque[bytes] = deque()  # read, not yet fed
        self._partial = b""  # the start of the line being read
        self._lock = threading.Lock()
        self.closed = False

    @classmethod
    def open(
        cls, tmux: Sequence[str], session: str, env: dict[str, str], timeout: float
    ) -> Control | None:
        """A client of ``tmux`` (the program and its server options) attached to the
        session named exactly ``session``, ready for requests; None when it cannot attach
        (no such session, or the server is gone)."""
        argv = [*tmux, "-C", "attach-session", "-E", "-f", "no-output,ignore-size"]
        child = proc.spawn_piped([*argv, "-t", f"={session}"], env)
        control = cls(child)
        try:
            # tmux may answer a line read from stdin before the attach it was started
            # with: nothing is sent before the attach is done (``Reader.attached``)
            with control._lock:
                deadline = time.monotonic() + timeout
                while not control._reader.attached:
                    control._reader.feed(control._next_line(deadline))
            control._request(None, timeout)
        except (Lost, ProtocolError, OSError):
            control.close()
            return None
        return control

    @property
    def pid(self) -> int:
        return self._child.pid

    def run(self, line: str, timeout: float) -> tuple[bool, str, str]:
        """Send one request; (ok, stdout, stderr). ``Lost`` when no answer came: the
        client is closed (and if the request was ``sent``, its commands may have run)."""
        return answer(self._request(line, timeout))

    def _request(self, line: str | None, timeout: float) -> list[Block]:
        nonce = secrets.token_hex(16).encode("ascii")
        data = b"" if line is None else line.encode("utf-8") + b"\n"
        data += b"display-message -p " + nonce + b"\n"
        with self._lock:
            try:
                if self.closed or self._child.poll() is not None:
                    msg = "the client had ended"
                    raise Lost(msg, sent=False)
                self._write(data)
            except (OSError, Lost) as exc:
                self._close_locked()
                raise Lost(str(exc), sent=False) from exc
            try:
                blocks: list[Block] = []
                deadline = time.monotonic() + timeout
                while True:
                    block = self._next_block(deadline)
                    if block.lines == [nonce]:
                        return blocks
                    blocks.append(block)
            except (OSError, ProtocolError, Lost) as exc:
                self._close_locked()
                raise Lost(str(exc), sent=True) from exc

    def _write(self, data: bytes) -> None:
        stdin = self._child.stdin
        assert stdin is not None
        stdin.write(data)
        stdin.flush()

    def _next_block(self, deadline: float) -> Block:
        while True:
            block = self._reader.feed(self._next_line(deadline))
            if block is not None:
                return block

    def _next_line(self, deadline: float) -> bytes:
        stdout = self._child.stdout
        assert stdout is not None
        while not self._lines:
            left = deadline - time.monotonic()
            poller = select.poll()  # (not select(): a long-lived process may hold fd 1024)
            poller.register(stdout.fileno(), select.POLLIN)
            if left <= 0 or not poller.poll(left * 1000):
                msg = "no answer in time"
                raise Lost(msg, sent=True)
            chunk = os.read(stdout.fileno(), 65536)
            if not chunk:
                msg = "the client ended"
                raise Lost(msg, sent=True)
            *done, self._partial = (self._partial + chunk).split(b"\n")
            self._lines.extend(done)
        return self._lines.popleft()

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        """End the client: its stdin closed (it detaches and exits), killed if it lingers;
        reaped either way."""
        if not self.closed:
            self.closed = True
            proc.end_piped(self._child)


class Channel:
    """The control client a serving backend's calls go through, and when to have one:
    attached at the first call while serving (``start`` to ``stop``), on a tmux that takes
    client flags; after an attach that failed, tried again ``retry_after`` later; after
    ``LOSSES`` clients lost in one serve, never again (a pane that keeps printing protocol
    lines would otherwise cost a new client at each look). ``Control`` is the pipe."""

    #: clients lost in one serve (ended, broke the protocol, no answer in time) after which
    #: every call is a tmux process again
    LOSSES = 3

    def __init__(
        self,
        tmux: Callable[[], list[str]],
        session: str,
        version: Callable[[], tuple[int, int] | None],
        env: Callable[[], dict[str, str]],
        on_attach: Sequence[str],
    ) -> None:
        """``tmux``: the program and its server options; ``version``: the server's tmux
        version; ``env``: the environment the client starts with; ``on_attach``: a call
        made through each client first (the session made to outlive it)."""
        self._tmux = tmux
        self._session = session
        self._version = version
        self._env = env
        self._on_attach = on_attach
        self.control: Control | None = None
        self._lock = threading.Lock()
        self._serving = False
        self._retry_at = 0.0
        self._failures = 0  # attaches that failed in a row
        self.losses = 0

    def start(self) -> None:
        self._serving = True
        self.losses = 0

    def stop(self) -> None:
        self._serving = False
        self.close()

    def close(self) -> None:
        """Close the client (the session is about to end, or the serve)."""
        with self._lock:
            control, self.control = self.control, None
        if control is not None:
            control.close()

    def session_made(self) -> None:
        """The session was just made: a client may attach at the next call."""
        self._retry_at, self._failures = 0.0, 0

    def call(self, args: Sequence[str | Sep], timeout: float) -> proc.Result | None:
        """The call answered by the client, or None when a tmux process must run it: not
        serving, a call the client does not run (``request_line``), no client attached,
        or one lost before the call reached it, or before it answered a call that only
        reads (any other might have run: it is answered as a failure, as a timed-out
        process is)."""
        line = request_line(args) if self._serving else None
        control = self._client(timeout) if line is not None else None
        if line is None or control is None:
            return None
        start = time.monotonic()
        try:
            ok, out, err = control.run(line, timeout)
        except Lost as exc:
            self._lost(control, exc, args)
            if not exc.sent or reads_only(args):
                return None
            err = f"the tmux control client was lost before it answered: {exc}"
            return proc.Result(["tmux", "-C", line], None, "", err, time.monotonic() - start)
        return proc.Result(["tmux", "-C", line], 0 if ok else 1, out, err, time.monotonic() - start)

    def _lost(self, control: Control, exc: Lost, args: Sequence[str | Sep]) -> None:
        """Count a lost client once: the calls that waited for it while it was lost find it
        ended too (with 16 sessions at once, one lost client was counted several times
        and every call went to a tmux process for the rest of the run)."""
        with self._lock:
            if self.control is not control:
                return  # (counted by the call that lost it, or closed by ``close``)
            self.control = None
            self.losses += 1
        log.warning(
            "tmux control client lost",
            extra={"session": self._session, "reason": str(exc), "call": commands(args)},
        )

    def _client(self, timeout: float) -> Control | None:
        with self._lock:
            if self.control is not None and not self.control.closed:
                return self.control
            now = time.monotonic()
            if now < self._retry_at or self.losses >= self.LOSSES:
                return None
            if not supported(self._version()):
                return None
            self.control = Control.open(self._tmux(), self._session, self._env(), timeout)
            if self.control is None:
                self._failures += 1
                self._retry_at = now + retry_after(self._failures)
                return None
            self._failures = 0
            line = request_line(self._on_attach)
            if line is not None:
                with contextlib.suppress(Lost):
                    self.control.run(line, timeout)
            return self.control
