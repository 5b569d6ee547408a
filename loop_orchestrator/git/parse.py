"""Parsing git's machine output: NUL-separated fields, ``diff --raw``, ``status``,
``worktree list``, C-quoted paths and the added lines of a ``-U0`` patch.

Pure functions on text: they run nothing (``gitutil.git`` runs git).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


def split_z(text: str) -> list[str]:
    """NUL-separated output into fields, without the empty tail."""
    return [f for f in text.split("\0") if f]


@dataclass(frozen=True)
class Change:
    """One changed path; ``status`` is A, M, D or T. A rename is a ``D`` plus an ``A``."""

    status: str
    path: str
    old_mode: str
    new_mode: str


def parse_raw_diff(text: str) -> list[Change]:
    """``git diff --raw -z --no-renames`` output into changes.

    Each record is ``:<old mode> <new mode> <old sha> <new sha> <status>\\0<path>\\0``.
    """
    fields = text.split("\0")
    changes: list[Change] = []
    i = 0
    while i < len(fields) - 1:
        meta = fields[i]
        if not meta.startswith(":"):
            i += 1
            continue
        old_mode, new_mode, _old, _new, status = meta[1:].split(" ")
        changes.append(Change(status[:1], fields[i + 1], old_mode, new_mode))
        i += 2
    return changes


@dataclass(frozen=True)
class StatusEntry:
    xy: str
    path: str


#: the ``xy`` of a path the index holds unmerged (``git status``'s "Unmerged" codes: both
#: deleted, added by us, deleted by them, added by them, deleted by us, both added, both
#: modified)
UNMERGED = frozenset({"DD", "AU", "UD", "UA", "DU", "AA", "UU"})


def parse_status(text: str) -> list[StatusEntry]:
    """``git status --porcelain=v1 -z --no-renames`` output into entries."""
    return [StatusEntry(rec[:2], rec[3:]) for rec in split_z(text)]


@dataclass(frozen=True)
class WorktreeInfo:
    path: Path
    head: str | None
    branch: str | None  # short name, None when detached
    locked: bool
    prunable: bool


def parse_worktrees(text: str) -> list[WorktreeInfo]:
    """``git worktree list --porcelain -z`` output into records."""
    infos: list[WorktreeInfo] = []
    record: dict[str, str] = {}

    def flush() -> None:
        if "worktree" in record:
            branch = record.get("branch")
            if branch is not None and branch.startswith("refs/heads/"):
                branch = branch[len("refs/heads/") :]
            infos.append(
                WorktreeInfo(
                    Path(record["worktree"]),
                    record.get("HEAD"),
                    branch,
                    "locked" in record,
                    "prunable" in record,
                )
            )
        record.clear()

    for field in text.split("\0"):
        if not field:
            flush()
            continue
        key, _, value = field.partition(" ")
        record[key] = value
    flush()
    return infos


_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def unquote_path(text: str) -> str:
    """Undo git's C-style quoting of a path (``"a\\tb"``); plain paths pass through."""
    if len(text) < 2 or not (text.startswith('"') and text.endswith('"')):
        return text
    body = text[1:-1]
    out = bytearray()
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\" or i + 1 == len(body):
            out += ch.encode("utf-8")
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _C_ESCAPES:
            out.append(_C_ESCAPES[nxt])
            i += 2
        elif re.fullmatch(r"[0-7]{3}", body[i + 1 : i + 4]):
            out.append(int(body[i + 1 : i + 4], 8))
            i += 4
        else:
            out += ch.encode("utf-8")
            i += 1
    return out.decode("utf-8", "replace")


_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _header_path(line: str) -> str | None:
    """The new-side path of a ``+++ b/path`` line, None for ``/dev/null``."""
    raw = line[4:]
    # git appends a TAB to ---/+++ names containing a space (for GNU patch).
    if raw.endswith("\t"):
        raw = raw[:-1]
    if raw == "/dev/null":
        return None
    raw = unquote_path(raw)
    return raw[2:] if raw.startswith("b/") else raw


def parse_added_lines(text: str) -> dict[str, list[tuple[int, str]]]:
    """Added lines per file (new-side line numbers) from a ``-U0`` patch.

    Hunks are walked by their line counts, so a content line such as ``++ x`` (shown as
    ``+++ x``) is never taken for a file header.
    """
    added: dict[str, list[tuple[int, str]]] = {}
    path: str | None = None
    old_left = new_left = 0
    lineno = 0
    # split("\n"), not splitlines(): content may hold \r, \x0b or U+2028.
    for line in text.split("\n"):
        if old_left > 0 or new_left > 0:
            tag = line[:1]
            if tag == "+":
                if path is not None:
                    added.setdefault(path, []).append((lineno, line[1:]))
                lineno += 1
                new_left -= 1
            elif tag == "-":
                old_left -= 1
            elif tag == " ":
                lineno += 1
                old_left -= 1
                new_left -= 1
            continue
        if line.startswith("diff --git "):
            path = None
        elif line.startswith("+++ "):
            path = _header_path(line)
        elif line.startswith("@@ "):
            match = _HUNK.match(line)
            if match is None:
                continue
            old_left = int(match.group(1)) if match.group(1) is not None else 1
            lineno = int(match.group(2))
            new_left = int(match.group(3)) if match.group(3) is not None else 1
    return added
