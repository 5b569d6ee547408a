"""Plumbing for ``workspace``: running git, parsing its machine output, secret patterns.

Nothing here decides policy; ``workspace`` does. Every git call goes through ``git()``:
an argument list via ``proc.run`` with leaked ``GIT_*`` variables removed, English
messages, and a ``GitError`` that carries the command's stderr on failure.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from loop_orchestrator import proc
from loop_orchestrator.errors import GitError

#: basenames that look like secrets (DESIGN.md section 9, issue 3); matched case-insensitively
SECRET_PATTERNS = (".env*", "*.pem", "*credential*", "id_rsa*", "*.key")
#: ``git merge-tree --write-tree`` appeared in git 2.38
MIN_GIT = (2, 38)
ZERO_SHA = "0" * 40


def git(
    cwd: Path,
    *args: str,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float | None = None,
    hint: str | None = None,
) -> proc.Result:
    """Run ``git *args`` in ``cwd``; with ``check`` a failure raises ``GitError``."""
    full_env = proc.no_git_env()
    # Messages we show or match must not depend on the user's locale.
    full_env["LC_ALL"] = "C"
    if env:
        full_env.update(env)
    result = proc.run(
        ["git", *args], cwd=cwd, env=full_env, input=input, timeout=timeout, check=False
    )
    if check and not result.ok:
        raise git_failure(result, hint=hint)
    return result


def git_failure(result: proc.Result, *, hint: str | None = None) -> GitError:
    """A ``GitError`` naming the command and the tail of its output."""
    shown = " ".join(result.cmd)
    status = "timed out" if result.returncode is None else f"exited {result.returncode}"
    detail = (result.stderr or result.stdout).strip()
    message = f"`{shown}` {status}"
    if detail:
        message += ":\n" + "\n".join(detail.splitlines()[-15:])
    return GitError(message, hint=hint)


@functools.cache
def git_version() -> tuple[int, int]:
    """The installed git's (major, minor)."""
    out = proc.run(["git", "--version"], env=proc.no_git_env()).stdout
    match = re.search(r"(\d+)\.(\d+)", out)
    if match is None:
        msg = f"cannot read the git version from {out.strip()!r}"
        raise GitError(msg)
    return int(match.group(1)), int(match.group(2))


def require_git() -> None:
    """Refuse to work with a git too old for ``merge-tree --write-tree``."""
    version = git_version()
    if version < MIN_GIT:
        msg = (
            f"git {version[0]}.{version[1]} is too old: lo-orch needs git "
            f"{MIN_GIT[0]}.{MIN_GIT[1]} or newer (for `git merge-tree --write-tree`)"
        )
        raise GitError(
            msg,
            hint="Upgrade git (e.g. from your distribution's backports or git-scm.com).",
        )


def is_secret_name(name: str) -> bool:
    """Whether one file or folder name matches a secret pattern."""
    lowered = name.lower()
    return any(fnmatch.fnmatchcase(lowered, pat) for pat in SECRET_PATTERNS)


def is_secret_path(path: str) -> bool:
    """Whether a repo-relative path, or a folder on it, matches a secret pattern."""
    return any(is_secret_name(part) for part in PurePosixPath(path).parts)


def split_z(text: str) -> list[str]:
    """NUL-separated output into fields, without the empty tail."""
    return [f for f in text.split("\0") if f]


@dataclass(frozen=True)
class RawChange:
    status: str
    path: str
    old_mode: str
    new_mode: str


def parse_raw_diff(text: str) -> list[RawChange]:
    """``git diff --raw -z --no-renames`` output into changes.

    Each record is ``:<old mode> <new mode> <old sha> <new sha> <status>\\0<path>\\0``.
    """
    fields = text.split("\0")
    changes: list[RawChange] = []
    i = 0
    while i < len(fields) - 1:
        meta = fields[i]
        if not meta.startswith(":"):
            i += 1
            continue
        old_mode, new_mode, _old, _new, status = meta[1:].split(" ")
        changes.append(RawChange(status[:1], fields[i + 1], old_mode, new_mode))
        i += 2
    return changes


@dataclass(frozen=True)
class StatusEntry:
    xy: str
    path: str


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


def scan_tree(root: Path) -> tuple[list[str], list[str]]:
    """Secret-like files (and folders) and nested repositories under ``root``.

    Paths are relative and sorted; symlinks are not followed; ``root``'s own ``.git`` is
    skipped.
    """
    secrets: list[str] = []
    nested: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here != root and (".git" in dirnames or ".git" in filenames):
            nested.append(here.relative_to(root).as_posix())
            dirnames.clear()
            continue
        secrets += [(here / n).relative_to(root).as_posix() for n in filenames if is_secret_name(n)]
        keep = []
        for name in dirnames:
            if name == ".git":
                continue
            if is_secret_name(name):
                secrets.append((here / name).relative_to(root).as_posix() + "/")
            else:
                keep.append(name)
        dirnames[:] = keep
    return sorted(secrets), sorted(nested)


def quote_list(items: Sequence[str], limit: int = 10) -> str:
    """``a, b, c and 4 more`` for messages."""
    shown = ", ".join(items[:limit])
    if len(items) > limit:
        shown += f" and {len(items) - limit} more"
    return shown
