"""The supervisor's end of the inbox: it listens on the run's socket, asks the kernel who is
calling, and hands each message to the supervisor's loop with the task it really comes from.

The sessions' end (``inbox.send``/``inbox.leave``) explains the protocol.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loop_orchestrator.sessions.inbox import CLIENT_TIMEOUT, INBOX_DIR, MAX_MESSAGE, address


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
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5.0)
            try:
                pid, uid, _gid = struct.unpack(
                    "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
                )
                data = b""
                while len(data) <= MAX_MESSAGE and not data.endswith(b"\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                message = json.loads(data) if len(data) <= MAX_MESSAGE else None
            except (OSError, ValueError):
                return
            if uid != os.getuid() or not isinstance(message, dict):
                return
            request = Request(message, self.identify(pid), pid, attested=True)
            self.deliver(request)
            try:
                reply = request._answer.get(timeout=self.answer_timeout)
            except queue.Empty:
                reply = None
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps(reply).encode("utf-8"))


def drain(run_dir: Path, tasks: list[str]) -> list[Request]:
    """Every message left for a supervisor while none listened, oldest first (removed)."""
    found: list[tuple[str, Path]] = []
    for task in tasks:
        folder = run_dir / INBOX_DIR / task
        if folder.is_dir():
            found += [(task, p) for p in folder.glob("*.json")]
    requests = []
    for task, path in sorted(found, key=lambda tp: tp[1].name):
        try:
            message = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            message = None
        with contextlib.suppress(OSError):
            path.unlink()
        if isinstance(message, dict):
            requests.append(Request(message, task, None, attested=False))
    return requests
