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

Each read goes on from where the last one stopped (the end of the last whole line read),
so a tool call costs the parse of what was written since, not of the whole transcript: the
read starts over from the top, and looks for messages gone, when the file is another one
(device and inode), got shorter than that offset, or no longer holds the last bytes read
just before it (``TAIL_BYTES``). A line still being written (no newline yet) is read, and
read again once whole.

Limits: a message that calls no tool (a turn's last words) is read at the turn's ``Stop``
(waited for a second there: Claude Code may write it while the hook runs);
a command started in the background by an earlier tool could erase it in between, so such
a message may go unseen (its tokens are small: no tool call). A rewrite of the part read
before that keeps the file as long, the inode and those last bytes is not reported as
tampering (what was booked stays booked: the spend does not drop).
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

from loop_orchestrator.cost.usage import TOKEN_KEYS, Message, parse_lines

#: the book's file in the run's private folder
BOOK_FILE = "spend.jsonl"
#: the bytes just before a transcript's read offset that must be unchanged to read on
TAIL_BYTES = 4096


@dataclass
class _Cursor:
    """Where the last read of one session's transcript stopped."""

    ident: tuple[int, int]  # (device, inode) of the file read
    offset: int  # bytes read: the end of the last whole line
    round_no: int  # the rework round the lines read so far left
    tail: bytes  # the last ``TAIL_BYTES`` bytes before ``offset``
    bad: int  # malformed whole lines read so far


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
        #: (task, session) -> where its transcript's last read stopped (not kept on disk: a
        #: restarted supervisor reads each transcript from the top once)
        self._cursors: dict[tuple[str, str], _Cursor] = {}
        #: task -> how often its booked messages changed (``version``)
        self._versions: dict[str, int] = {}
        #: task -> (round, model) -> [messages booked, their tokens added up]: kept as each
        #: message is booked, so pricing a task's spend costs the same however long its
        #: transcripts grow (``totals``)
        self._sums: dict[str, dict[tuple[int, str], tuple[int, dict[str, int]]]] = {}
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
        book = self._book.setdefault(task, {})
        old = book.get(msg.key)
        book[msg.key] = msg
        sums = self._sums.setdefault(task, {})
        if old is not None:
            _add(sums, old, -1)
        _add(sums, msg, 1)
        self._keys.setdefault((task, session), set()).add(msg.key)
        self._versions[task] = self._versions.get(task, 0) + 1

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
        """Read ``transcript`` (of ``task``'s session ``session_id``) into the book, on from
        where the last read stopped when the file is still the one read then."""
        with self._lock:
            seen = Seen()
            key = (task, session_id)
            cursor = self._cursors.get(key)
            try:
                with transcript.open("rb") as fh:
                    st = os.fstat(fh.fileno())
                    ident = (st.st_dev, st.st_ino)
                    if cursor is not None and not _reads_on(fh, cursor, ident, st.st_size):
                        cursor = None
                    fh.seek(cursor.offset if cursor is not None else 0)
                    raw = fh.read()
            except FileNotFoundError:
                seen.missing = True
                ident, raw, cursor = (0, 0), b"", None
            except OSError:
                seen.missing = True
                return seen
            start = cursor.offset if cursor is not None else 0
            whole = raw[: raw.rfind(b"\n") + 1]
            text = whole.decode("utf-8", errors="replace")
            round_no = cursor.round_no if cursor is not None else 0
            messages, bad, after = parse_lines(text.splitlines(), round_no)
            if len(whole) < len(raw):  # a line being written: read it now and once whole
                partial = raw[len(whole) :].decode("utf-8", errors="replace")
                messages += parse_lines([partial], after)[0] if _is_json(partial) else []
            bad += cursor.bad if cursor is not None else 0
            seen.bad = bad
            entries = self._book_entries(task, session_id, messages, seen)
            size = start + len(raw)
            last = self._sizes.get(key)
            if last is not None and size < last:
                seen.tampered.append(f"the transcript shrank from {last} to {size} bytes")
            if cursor is None:  # read from the top: a message lo-orch read must be there
                present = {m.key for m in messages}
                gone = self._keys.get(key, set()) - present
                if gone and not (last is not None and size < last):
                    seen.tampered.append(
                        f"{len(gone)} message(s) lo-orch had read are gone from the transcript"
                    )
                elif gone:
                    seen.tampered[-1] += f" ({len(gone)} message(s) lo-orch had read are gone)"
            if size != last:
                entries.append({"task": task, "session": session_id, "size": size})
            self._append(entries)
            if not seen.missing:
                tail = ((cursor.tail if cursor is not None else b"") + whole)[-TAIL_BYTES:]
                self._cursors[key] = _Cursor(ident, start + len(whole), after, tail, bad)
            else:
                self._cursors.pop(key, None)
            return seen

    def _book_entries(
        self, task: str, session_id: str, messages: list[Message], seen: Seen
    ) -> list[dict[str, Any]]:
        """The book's entries for what ``messages`` add (new, or grown figures); a message
        whose figures shrank is tampering (``seen``)."""
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
        return entries

    def offset(self, task: str, session_id: str) -> int:
        """Where the next read of the session's transcript starts (0: from the top)."""
        with self._lock:
            cursor = self._cursors.get((task, session_id))
            return cursor.offset if cursor is not None else 0

    def version(self, task: str) -> int:
        """Changes with every message booked for ``task`` (to price the book only then)."""
        with self._lock:
            return self._versions.get(task, 0)

    def messages(self, task: str) -> list[Message]:
        """Every message booked for ``task``, in the order first read."""
        with self._lock:
            return list(self._book.get(task, {}).values())

    def totals(self, task: str) -> list[Message]:
        """The tokens booked for ``task`` added up per round and model, one ``Message`` each
        (``usage.price`` of these is ``usage.price`` of ``messages``; kept as messages are
        booked, not added up again at each ask)."""
        with self._lock:
            return [
                Message(f"{rnd}:{model}", rnd, model, dict(counts))
                for (rnd, model), (_n, counts) in self._sums.get(task, {}).items()
            ]


def _add(sums: dict[tuple[int, str], tuple[int, dict[str, int]]], m: Message, sign: int) -> None:
    """Add ``m``'s tokens to (``sign`` -1: take them from) its round and model's sum; a sum
    no message is in any more is dropped."""
    key = (m.round, m.model)
    n, counts = sums.get(key, (0, dict.fromkeys(TOKEN_KEYS, 0)))
    n += sign
    if n <= 0:
        sums.pop(key, None)
        return
    for k in TOKEN_KEYS:
        counts[k] += sign * m.counts.get(k, 0)
    sums[key] = (n, counts)


def _reads_on(fh: Any, cursor: _Cursor, ident: tuple[int, int], size: int) -> bool:
    """Whether the open transcript ``fh`` is still the file ``cursor`` read, as long at
    least, with the same last bytes before the offset: then it is read on from there."""
    if ident != cursor.ident or size < cursor.offset:
        return False
    fh.seek(cursor.offset - len(cursor.tail))
    return bool(fh.read(len(cursor.tail)) == cursor.tail)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
