"""How sessions report to the supervisor: a socket the kernel vouches for, and a fallback.

`lo-orch signal` and `lo-orch hook` never write a task's status. They send one JSON line
to the running supervisor over a Unix socket (Linux abstract namespace, so no file an
agent could replace) and wait for its answer. The supervisor asks the kernel who is
calling (``SO_PEERCRED``: the caller's pid, which the caller cannot choose) and walks that
pid's parent chain to the tmux pane of one task's session: the event belongs to *that*
task, whatever the message or the caller's environment claims. A message that names
another task, or comes from no managed session, is refused and logged.

When no supervisor listens (it crashed, or is being restarted), the client leaves the
message in ``.orchestration/inbox/<task>/`` and the next supervisor reads it as
*unattested*: a hint, never a decision (an unattested signal only makes the supervisor ask
the session to signal again; an unattested UserPromptSubmit only keeps a prompt from being
sent twice).

The client half is standard library only: it runs on every hook event.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import queue
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

INBOX_DIR = "inbox"
#: the largest message accepted (a hook payload is trimmed by the client well below)
MAX_MESSAGE = 64 * 1024
#: how long a client waits for the supervisor's answer
CLIENT_TIMEOUT = 10.0


def address(run_dir: Path) -> str:
    """The abstract socket name of the supervisor of ``run_dir`` (``.orchestration``)."""
    digest = hashlib.sha256(str(run_dir.resolve()).encode("utf-8")).hexdigest()[:32]
    return f"\0lo-orch/{digest}"


# client -------------------------------------------------------------------------------


def send(
    run_dir: Path, message: dict[str, Any], timeout: float = CLIENT_TIMEOUT, wait: float = 0.0
) -> Any:
    """Send ``message`` to the running supervisor; its answer, or None when none listens.

    ``wait``: how long to keep trying while no supervisor listens (one being restarted).
    """
    deadline = time.monotonic() + wait
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(address(run_dir))
            break
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.2)
    try:
        sock.sendall(json.dumps(message).encode("utf-8") + b"\n")
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
        data = b"".join(chunks)
        return json.loads(data) if data.strip() else None
    except (OSError, ValueError):
        return None
    finally:
        sock.close()


def leave(run_dir: Path, task: str, message: dict[str, Any]) -> Path:
    """Leave ``message`` for the next supervisor (unattested); the file written."""
    folder = run_dir / INBOX_DIR / task
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{time.time_ns()}-{os.getpid()}.json"
    tmp = folder / f".{name}.tmp"
    tmp.write_text(json.dumps({**message, "left_at": time.time()}), encoding="utf-8")
    tmp.replace(folder / name)
    return folder / name


# server -------------------------------------------------------------------------------


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
