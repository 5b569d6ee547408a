"""The values of named refs, read from their loose files in process, with git as the
fallback; and a branch's compare-and-swap move, read back so (``update_ref``).

The supervisor compares the run's refs with its book at every watch event, before and
after every verification and at each merge: a dozen ``git for-each-ref`` a task, each a
process start (about 40 ms of the machine's CPU a task in ``benchmarks/supervisor.py``; the
supervisor's own CPU is about the same either way: reading files in Python costs it what
starting git did). What it compares is a few
refs it names (staging, the refs the book records, the running tasks' branches), and
git keeps a ref it wrote as a loose file: ``refs/heads/lo/<run>/staging`` holding the
object name and a newline. A loose file overrides the ref's line in ``packed-refs``, and git
writes one by renaming a finished file over it, so reading it is reading git's value.

So each named ref is read from its loose file here; when any of them is not a plain loose
file holding exactly an object name and a newline, all of them are asked of git (``git
for-each-ref``): a ref with no loose file (absent, or packed: ``git gc`` packs refs), a
symbolic ref, a file with anything after the name (git would take the name and ignore the
rest), a symlink, a folder, a name of characters other than letters, digits, ``_+-`` and
single dots inside a component, a repository whose refs are kept in a reftable. What is
read here is thus a strict part of what git reads, with the same meaning, and a ref file
written by hand is never seen at another value than git sees it at. Like git, an object
name is given whether or not the object exists.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from loop_orchestrator.errors import RefMovedError
from loop_orchestrator.files import open_regular
from loop_orchestrator.git.gateway import common_dir, git

_OBJECT_NAME = re.compile(rb"[0-9a-f]{40}(?:[0-9a-f]{24})?\n")
#: a full ref name this module reads itself: components of words joined by single dots
_REF_NAME = re.compile(r"refs(?:/[A-Za-z0-9_+-]+(?:\.[A-Za-z0-9_+-]+)*)+")


class NotPlain(Exception):
    """A ref is not a plain loose file as this module reads it: ask git."""


def parse_loose(data: bytes) -> str | None:
    """The object name a loose ref file holds; None for anything else (a symbolic ref,
    text after the name, no newline)."""
    if _OBJECT_NAME.fullmatch(data) is None:
        return None
    return data[:-1].decode("ascii")


def read_loose(common: Path, ref: str) -> str:
    """The object name in the loose file of ``ref`` (a full name) in the git folder
    ``common``; ``NotPlain`` when there is no such plain file or it holds anything else."""
    if _REF_NAME.fullmatch(ref) is None or ref.endswith(".lock"):
        raise NotPlain(ref)
    fd = open_regular(common / ref)
    if fd is None:  # none (absent or packed), a symlink, a folder, a FIFO
        raise NotPlain(ref)
    try:
        data = os.read(fd, 80)  # (a loose ref is 41 or 65 bytes: more is not one)
    except OSError as exc:
        raise NotPlain(ref) from exc
    finally:
        os.close(fd)
    sha = parse_loose(data)
    if sha is None:
        raise NotPlain(ref)
    return sha


def values(repo: Path, refs: Sequence[str]) -> dict[str, str]:
    """ref -> object name of each of ``refs`` (full names) that ``repo`` has, as ``git
    for-each-ref`` gives them (an absent ref left out): read from their loose files when
    every one is plain, else all asked of git."""
    common = common_dir(repo)
    if not (common / "reftable").exists():
        try:
            return {ref: read_loose(common, ref) for ref in refs}
        except NotPlain:
            pass
    if not refs:
        return {}
    wanted = set(refs)
    return {r: sha for r, sha in for_each_ref(repo, sorted(wanted)).items() if r in wanted}


def value(repo: Path, ref: str) -> str | None:
    """The object name of the full ref ``ref`` of ``repo``; None when it has none."""
    return values(repo, [ref]).get(ref)


def for_each_ref(repo: Path, patterns: Iterable[str]) -> dict[str, str]:
    """ref -> object name of the refs ``patterns`` match (a full name, or a folder of
    refs), by ``git for-each-ref`` itself."""
    out = git(repo, "for-each-ref", "--format=%(refname)%00%(objectname)", *patterns)
    pairs = (line.partition("\0") for line in out.stdout.splitlines() if line)
    return {name: sha for name, _, sha in pairs}


def update_ref(repo: Path, branch: str, new: str | None, old: str | None, reason: str) -> None:
    """Move ``branch`` from ``old`` to ``new`` only if it still points at ``old`` (None: only
    if it does not exist; ``new`` None: delete it), then read it back."""
    ref = f"refs/heads/{branch}"
    zero = "0" * 40
    args = ("-d", ref, old or zero) if not new else (ref, new, old or zero)
    res = git(repo, "update-ref", "-m", reason, *args, check=False)
    # read back from the ref's file git just wrote (git asked when it is not a plain one)
    found = value(repo, ref) or ""
    if not res.ok or found != (new or ""):
        was = old[:12] if old else "absent"
        msg = (
            f"{branch} moved while lo-orch was updating it (expected {was}, found "
            f"{found[:12] or 'absent'}); nothing changed"
        )
        raise RefMovedError(msg, hint="Something else changed the branch; run again to retry.")
