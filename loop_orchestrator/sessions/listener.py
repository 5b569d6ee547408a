"""The supervisor's end of the inbox: it listens on the run's socket, asks the kernel who is
calling, and hands each message to the supervisor's loop with the task it really comes from.

The sessions' end (``inbox.send``/``inbox.leave``) explains the protocol. The compiled
client (``client.c``) speaks *wire 1*: a header line (``"wire": 1``) that is the Python
client's message without its payload, then, for a hook event, the event's JSON as Claude
Code gave it. This end makes the same message of it as the Python client would
(``hooks.read_payload``, ``hooks.hook_message``), judges it the same way, and answers
``lo-orch-reply EXIT NOUT NERR`` and the bytes to print, rendered as the Python client
renders them (``hooks.hook_outcome``, ``hooks.signal_result``). A PermissionRequest a
person answers is waited for here, the connection held open. Anything this end cannot make
a message of gets no answer: the compiled client then hands it to the Python client.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loop_orchestrator.errors import StateError
from loop_orchestrator.files import NOFOLLOW_DIR, open_regular
from loop_orchestrator.sessions import hooks
from loop_orchestrator.sessions.inbox import CLIENT_TIMEOUT, INBOX_DIR, MAX_MESSAGE, address

#: the largest hook event the compiled client sends as it came (its ``RAW_MAX``; a larger
#: one goes through the Python client, which trims it)
RAW_MAX = 256 * 1024
#: the compiled client's wire
WIRE = 1
#: how long a worker that served a connection waits for the next one before it ends
WORKER_IDLE = 30.0
#: the most workers kept waiting: a session that opens connections by the hundred leaves
#: no more threads behind than this once they are answered
MAX_IDLE = 32


@dataclass
class Request:
    """One message from a session, with who the kernel says sent it."""

    message: dict[str, Any]
    task: str | None  # the task whose session the sender descends from; None: no session
    pid: int | None
    attested: bool
    _answer: queue.Queue[Any] = field(default_factory=lambda: queue.Queue(maxsize=1))

    def answer(self, reply: Any) -> None:
        with contextlib.suppress(queue.Full):
            self._answer.put_nowait(reply)


class Server:
    """Accepts sessions' messages and hands each, attested, to the supervisor's loop.

    ``identify(pid)`` names the task whose session ``pid`` descends from (or None);
    ``deliver(request)`` queues it for the loop, which answers with ``request.answer``.
    """

    def __init__(
        self,
        run_dir: Path,
        identify: Callable[[int], str | None],
        deliver: Callable[[Request], None],
        answer_timeout: float = CLIENT_TIMEOUT - 1,
    ) -> None:
        self.run_dir = run_dir
        self.identify = identify
        self.deliver = deliver
        self.answer_timeout = answer_timeout
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        #: connections for the workers waiting for one, and how many wait (``_hand``)
        self._waiting: queue.SimpleQueue[socket.socket] = queue.SimpleQueue()
        self._idle = 0
        self._idle_lock = threading.Lock()

    def start(self) -> None:
        self.sock.bind(address(self.run_dir))
        self.sock.listen(64)
        self._thread = threading.Thread(target=self._accept, name="lo-inbox", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._hand(conn)

    def _hand(self, conn: socket.socket) -> None:
        """Give a connection to a worker waiting for one, else to a new worker: every
        connection is served at once (a PermissionRequest may hold its worker for minutes),
        and a session's tool calls do not start a thread each (a third of the listener's
        CPU per message)."""
        with self._idle_lock:
            if self._idle:
                self._idle -= 1
                self._waiting.put(conn)
                return
        threading.Thread(
            target=self._work, args=(conn,), name="lo-inbox-worker", daemon=True
        ).start()

    def _work(self, conn: socket.socket) -> None:
        """Serve ``conn``, then the connections handed over while waiting; end after
        ``WORKER_IDLE`` seconds without one."""
        while True:
            with conn:
                self._serve(conn)
                # counted as waiting before the close: a session's next message, sent once
                # it has this answer, finds this worker
                with self._idle_lock:
                    if self._idle >= MAX_IDLE:
                        return
                    self._idle += 1
            try:
                conn = self._waiting.get(timeout=WORKER_IDLE)
            except queue.Empty:
                with self._idle_lock:
                    try:  # handed over after the wait gave up (counted as taken): serve it
                        conn = self._waiting.get_nowait()
                    except queue.Empty:
                        self._idle -= 1
                        return

    def _serve(self, conn: socket.socket) -> None:
        """Read one message from ``conn`` and answer it (the caller closes ``conn``)."""
        conn.settimeout(5.0)
        try:
            pid, uid, _gid = struct.unpack(
                "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            )
            data = b""
            while len(data) <= MAX_MESSAGE and b"\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            head, _, rest = data.partition(b"\n")
            message = json.loads(head) if len(head) <= MAX_MESSAGE else None
            wire = isinstance(message, dict) and message.get("wire") == WIRE
            while wire and len(rest) <= RAW_MAX:  # a hook event's JSON, to the end
                chunk = conn.recv(65536)
                if not chunk:
                    break
                rest += chunk
        except (OSError, ValueError):
            return
        if uid != os.getuid() or not isinstance(message, dict):
            return
        if wire:
            answer = self._wire(conn, pid, message, rest) if len(rest) <= RAW_MAX else None
            if answer is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(answer)
            return
        reply = self._ask(message, pid)
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps(reply).encode("utf-8"))

    def _ask(self, message: dict[str, Any], pid: int, task: str | None = None) -> Any:
        """Hand one message to the loop (its sender's task asked of the kernel, unless
        ``task`` is already known); the loop's answer, or None."""
        sender = task if task is not None else self.identify(pid)
        request = Request(message, sender, pid, attested=True)
        self.deliver(request)
        try:
            return request._answer.get(timeout=self.answer_timeout)
        except queue.Empty:
            return None

    def _wire(
        self, conn: socket.socket, pid: int, head: dict[str, Any], rest: bytes
    ) -> bytes | None:
        """The compiled client's report: the same message the Python client sends, judged
        the same way; the answer as it prints it, or None (it hands the report on)."""
        kind, task = head.get("type"), head.get("task")
        if not isinstance(task, str):
            return None
        if kind == "hook":
            event = head.get("event")
            raw = rest.decode("utf-8", "replace")
            payload = hooks.read_payload(event, raw) if isinstance(event, str) else None
            if payload is None or not isinstance(event, str):
                return wire_reply(hooks.QUIET.exit_code, "", "")  # (what the client says)
            bin_set = head.get("bin") == "$LO_ORCH_BIN"
            message = hooks.hook_message(event, task, payload, bin_set=bin_set)
            sender = self.identify(pid)
            reply = self._ask(message, pid, sender)
            if reply is None:
                return None
            outcome = hooks.hook_outcome(event, reply)
            if isinstance(outcome, str):
                waited = self._await_permission(conn, pid, sender, task, outcome)
                if waited is None:
                    return None
                outcome = waited
            return wire_reply(outcome.exit_code, outcome.stdout, outcome.stderr)
        phase, note = head.get("phase"), head.get("note")
        note = (note.strip() or None) if isinstance(note, str) else None
        unclear = phase not in hooks.SIGNAL_PHASES or (phase == "blocked" and not note)
        if kind != "signal" or unclear:
            return None  # the Python client says what is wrong
        signal = {"type": "signal", "task": task, "phase": phase, "note": note}
        reply = self._ask(signal, pid)
        if reply is None:
            return None
        try:
            result = hooks.signal_result(str(phase), reply)
        except StateError as exc:
            return wire_reply(exc.exit_code, "", f"Error: {exc.render()}\n")
        return wire_reply(0, hooks.signal_printed(task, result), "")

    def _await_permission(
        self, conn: socket.socket, pid: int, sender: str | None, task: str, request_id: str
    ) -> hooks.HookOutcome | None:
        """Wait, the client's connection held, for a person's answer to its PermissionRequest
        (as the Python client's ``_await_answer`` does); None once the client is gone."""
        poll = {"type": "permission", "task": task, "id": request_id}
        hung_up = select.poll()
        hung_up.register(conn, select.POLLHUP)
        deadline = time.monotonic() + hooks.PERMISSION_WAIT
        while time.monotonic() < deadline:
            if hung_up.poll(hooks.PERMISSION_POLL * 1000):
                return None  # Claude Code ended the hook (the dialog was answered there)
            outcome = hooks.permission_outcome(self._ask(poll, pid, sender))
            if outcome is not None:
                return outcome
        return hooks.QUIET


def wire_reply(code: int, out: str, err: str) -> bytes:
    """An answer on the compiled client's wire: its exit code and what it prints."""
    stdout, stderr = out.encode("utf-8"), err.encode("utf-8")
    return f"lo-orch-reply {code} {len(stdout)} {len(stderr)}\n".encode() + stdout + stderr


def drain(run_dir: Path, tasks: list[str]) -> list[Request]:
    """Every message left for a supervisor while none listened, oldest first (removed).

    Each task's folder is opened without following a symlink, and read and emptied
    through that one descriptor: only the regular files in it are read, a symlink among
    them is removed, never followed, and a folder replaced by a symlink is not read at all
    (nothing of anyone else's is read or removed). The supervisor looks at every task's
    folder about once a second: one open and one listing each, not a path walk and a glob.
    """
    folders: list[int] = []
    found: list[tuple[str, str, int]] = []
    try:
        for task in tasks:
            try:
                fd = os.open(run_dir / INBOX_DIR / task, NOFOLLOW_DIR)
            except OSError:  # none yet (the task never ran), or not a plain folder
                continue
            folders.append(fd)
            with os.scandir(fd) as entries:
                found += [
                    (e.name, task, fd)
                    for e in entries
                    if e.name.endswith(".json") and not e.name.startswith(".")
                ]
        requests = []
        for name, task, fd in sorted(found):  # (a name starts with its time in ns)
            message = _left_message(fd, name)
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=fd)
            if isinstance(message, dict):
                requests.append(Request(message, task, None, attested=False))
        return requests
    finally:
        for fd in folders:
            os.close(fd)


def _left_message(folder: int, name: str) -> Any:
    """The JSON of the regular file ``name`` in ``folder``, or None (gone, a symlink, a
    FIFO or anything else, not JSON, or longer than a message may be: a session's sparse
    file of gigabytes costs it nothing and would cost the supervisor that much memory)."""
    fd = open_regular(name, dir_fd=folder)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as fh:
        try:
            data = fh.read(MAX_MESSAGE + 1)
            return json.loads(data) if len(data) <= MAX_MESSAGE else None
        except (OSError, ValueError):
            return None
