"""A remote session's transcript, kept on the supervisor's machine too.

Claude Code keeps a session's conversation in ``<config dir>/projects/<cwd>/<session
id>.jsonl`` on the node that runs it. The supervisor needs it at home: it books the task's
spend from it before each tool may run (``supervisor_limits``, ``spend.py``), ``lo-orch
status`` and Gate 2 price it, and a session relaunched on another node after a lost node
resumes from it (``--resume`` finds nothing there otherwise and the session ends at once).

So the node's actor sends, with every request of the session (a hook fires before each
tool runs), what was added to the transcript since it last sent (``Tail.delta``), and the
supervisor writes it into its copy at the path the transcript would have had had the
session run here (``LaunchSpec.transcript``): every reader finds it where it always looks.
What is written after the session's last request (Claude Code may write a turn's final
message after its Stop hook ran) follows with the relay's next poll, and once more just
before the supervisor ends the session.
A relaunch on another node takes that copy along, and the new node starts its ``Tail``
from it.

The copy is the node's file, byte for byte: a transcript rewritten rather than appended to
(a session that truncates it to spend less) is sent whole, so the copy shrinks like the
original and the spend book logs the tampering (it never books less). Only a regular file
is read (a link the session planted is not followed), at most ``MAX_BYTES``.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loop_orchestrator.files import atomic_write_bytes, stat_key

#: the largest transcript carried (a long Claude Code session writes a few MB)
MAX_BYTES = 256 << 20


class Tail:
    """The node's side: what of the transcript at ``path`` the supervisor lacks. ``have``
    is what it already holds (a relaunch's copy); ``read(path, limit)`` gives the bytes of
    a regular file, or None."""

    def __init__(
        self, path: Path, read: Callable[[Path, int], bytes | None], have: bytes = b""
    ) -> None:
        self.path = path
        self._read = read
        self._lock = threading.Lock()
        self._size = len(have)
        self._digest = hashlib.sha256(have).digest()
        #: the file as last read (``_seen``): unchanged since, it is not read again (the
        #: relay asks every poll). The ctime is in it: a rewrite cannot set it back.
        self._seen: tuple[int, int, int, int] | None = None

    def delta(self) -> dict[str, Any] | None:
        """``{"offset", "data"}``: the bytes from ``offset`` on (0 and the whole file when
        what was sent before changed); None when nothing is new or there is no file."""
        with self._lock:
            try:
                st = os.lstat(self.path)
            except OSError:
                return None
            seen = stat_key(st)
            if seen == self._seen:
                return None
            data = self._read(self.path, MAX_BYTES)
            if data is None:
                return None
            self._seen = seen  # (taken before the read: a change since is read next time)
            grown = len(data) >= self._size
            if grown and hashlib.sha256(data[: self._size]).digest() == self._digest:
                if len(data) == self._size:
                    return None
                offset = self._size
            else:
                offset = 0
            self._size, self._digest = len(data), hashlib.sha256(data).digest()
            return {"offset": offset, "data": data[offset:]}


def keep(copy: Path, delta: dict[str, Any]) -> bool:
    """Put ``delta`` (from ``Tail.delta``) into the supervisor's ``copy``; False when it
    does not follow on from the copy (the caller asks the node for the whole file)."""
    offset, data = delta.get("offset"), delta.get("data")
    if not isinstance(offset, int) or not isinstance(data, bytes) or offset < 0:
        return False
    copy.parent.mkdir(parents=True, exist_ok=True)
    if offset == 0:
        atomic_write_bytes(copy, data)
        return True
    try:
        fd = os.open(copy, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
    except OSError:
        return False
    with os.fdopen(fd, "ab") as fh:
        if os.fstat(fh.fileno()).st_size != offset:
            return False
        fh.write(data)
    return True
