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

This module is the sessions' end, on every hook event's path: the standard library's
lightest parts only (``listener`` is the supervisor's end).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

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
