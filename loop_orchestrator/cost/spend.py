"""The supervisor's own book of what each task's session spent: spend no agent can shrink.

Claude Code's transcript (``usage.transcript_path``) is written by the session's own
process, and the session can run any command as the user: it can truncate or edit its
transcript to under-report what it spent and slip under its budget. So lo-orch does not
take the transcript's *current* content as the spend. It keeps its own book, in the run's
private folder (``private.run_dir``: outside the repository, named to no agent), of every
assistant message it has ever read there — its ``message.id``, round, model and tokens —
and prices the book, not the file:

- it reads the transcript at every hook event the session sends (``PreToolUse`` fires
  before each tool runs, so the message that asks for a tool is in the book before that
  tool could touch the file; ``Stop``/``StopFailure``/``SessionEnd`` at each turn's end);
- a message once booked stays booked: lines that vanish or whose figures shrink never
  lower the spend (a message's figures can only grow, to their largest seen);
- a transcript that got shorter than when last read, or that lost a message the book
  holds, is tampering: ``observe`` says so once per read (the supervisor ledgers it as
  ``transcript_tampered`` and notes it on the task's usage).

Limits: a message that calls no tool (a turn's last words) is read at the turn's ``Stop``;
a command started in the background by an earlier tool could erase it in between, so such
a message may go unseen (its tokens are small: no tool call). Every message is re-read
from the whole file at each event (simple; a long transcript costs a parse per tool call).
The real API has no proxy here that lo-orch could count at (the scripted endpoint's own
log is test-only), so the transcript, booked as it grows, is the best source.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loop_orchestrator.cost.usage import TOKEN_KEYS, Message, parse_transcript

#: the book's file in the run's private folder
BOOK_FILE = "spend.jsonl"


@dataclass
class Seen:
    """What one read of a transcript found."""

    #: messages booked for the first time (or whose figures grew)
    new: int = 0
    #: why the transcript looks tampered with (empty: it does not)
    tampered: list[str] = field(default_factory=list)
    #: malformed lines in this read
    bad: int = 0
    missing: bool = False


class SpendBook:
    """Every message's usage lo-orch has read, per task, appended to ``path`` (JSON lines)
    so a restarted supervisor keeps what it saw."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        #: task -> key -> message
        self._book: dict[str, dict[str, Message]] = {}
        #: (task, session) -> size in bytes when last read
        self._sizes: dict[tuple[str, str], int] = {}
        #: (task, session) -> the keys booked from that session
        self._keys: dict[tuple[str, str], set[str]] = {}
        self._load()

    def _load(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        for line in text.splitlines():
            try:
                entry = json.loads(line)
                self._apply(entry)
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line (a crash mid-append)

    def _apply(self, entry: dict[str, Any]) -> None:
        task, session = str(entry["task"]), str(entry["session"])
        if "size" in entry:
            self._sizes[(task, session)] = int(entry["size"])
            return
        msg = Message(
            str(entry["key"]),
            int(entry["round"]),
            str(entry["model"]),
            {k: int(entry[k]) for k in TOKEN_KEYS},
        )
        self._book.setdefault(task, {})[msg.key] = msg
        self._keys.setdefault((task, session), set()).add(msg.key)

    def _append(self, entries: list[dict[str, Any]]) -> None:
        if not entries:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = "".join(json.dumps(e, sort_keys=True) + "\n" for e in entries)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, data.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        for e in entries:
            self._apply(e)

    def observe(self, task: str, session_id: str, transcript: Path) -> Seen:
        """Read ``transcript`` (of ``task``'s session ``session_id``) into the book."""
        with self._lock:
            seen = Seen()
            try:
                raw = transcript.read_bytes()
            except FileNotFoundError:
                seen.missing = True
                raw = b""
            except OSError:
                seen.missing = True
                return seen
            text = raw.decode("utf-8", errors="replace")
            messages, seen.bad = parse_transcript(text)
            book = self._book.get(task, {})
            entries: list[dict[str, Any]] = []
            for m in messages:
                old = book.get(m.key)
                if old is not None and all(m.counts[k] <= old.counts[k] for k in TOKEN_KEYS):
                    if any(m.counts[k] < old.counts[k] for k in TOKEN_KEYS):
                        seen.tampered.append(
                            f"message {m.key} reports fewer tokens than when first read"
                        )
                    continue
                counts = (
                    m.counts
                    if old is None
                    else {k: max(m.counts[k], old.counts[k]) for k in TOKEN_KEYS}
                )
                entries.append(
                    {
                        "task": task,
                        "session": session_id,
                        "key": m.key,
                        "round": m.round if old is None else old.round,
                        "model": m.model if old is None else old.model,
                        **counts,
                    }
                )
                seen.new += 1
            size = len(raw)
            last = self._sizes.get((task, session_id))
            if last is not None and size < last:
                seen.tampered.append(f"the transcript shrank from {last} to {size} bytes")
            present = {m.key for m in messages}
            gone = self._keys.get((task, session_id), set()) - present
            if gone and not (last is not None and size < last):
                seen.tampered.append(
                    f"{len(gone)} message(s) lo-orch had read are gone from the transcript"
                )
            elif gone:
                seen.tampered[-1] += f" ({len(gone)} message(s) lo-orch had read are gone)"
            if size != last:
                entries.append({"task": task, "session": session_id, "size": size})
            self._append(entries)
            return seen

    def messages(self, task: str) -> list[Message]:
        """Every message booked for ``task``, in the order first read."""
        with self._lock:
            return list(self._book.get(task, {}).values())
