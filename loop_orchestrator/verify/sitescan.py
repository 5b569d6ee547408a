"""A scan of the checks' site folders: every entry's stat, and one digest of them all.

Standard library only, and a script too: ``python -I -S sitescan.py ROOT...`` prints the
digest of ``fingerprint(ROOT...)``. The supervisor runs it so, in a process of its own,
after each verification's checks: a full scan is ~0.25 s of CPU (tens of thousands of
``lstat`` calls, most of it in the kernel) that would otherwise hold the supervisor's
interpreter lock while sessions wait on its answers. Only when the digest is not one
already judged does ``pyenv`` scan again in process, to say what changed.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
from collections.abc import Iterable, Mapping

#: (size, mtime_ns, ctime_ns, mode, inode)
FileStat = tuple[int, int, int, int, int]
#: what a ``__pycache__`` folder is recorded as: being there (what is in it never counts)
PYCACHE: FileStat = (0, 0, 0, 0, 0)


def fingerprint(roots: Iterable[str], *, shallow: bool = False) -> dict[str, FileStat]:
    """Every file, symlink and folder under ``roots`` (a root that is a file or a symlink
    stands for itself); a ``__pycache__`` folder only as being there (``PYCACHE``), never
    its content. ``shallow``: the roots and what is directly in them only."""
    files: dict[str, FileStat] = {}
    stack = []
    for root in roots:
        try:
            st = os.lstat(root)
        except OSError:
            continue
        files[root] = _stat(st)
        if stat.S_ISDIR(st.st_mode):
            stack.append(root)
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False) and entry.name == "__pycache__":
                    files[entry.path] = PYCACHE
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            files[entry.path] = _stat(st)
            if not shallow and stat.S_ISDIR(st.st_mode):
                stack.append(entry.path)
    return files


def digest(files: Mapping[str, FileStat]) -> str:
    """One SHA-256 of every entry and its stat, in path order."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(f"{path}\0{files[path]}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def _stat(st: os.stat_result) -> FileStat:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode, st.st_ino)


if __name__ == "__main__":
    print(digest(fingerprint(sys.argv[1:])))
