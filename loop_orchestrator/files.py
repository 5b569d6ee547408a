"""On-disk names and the two ways lo-orch writes a file: replaced whole, or appended to.

Standard library only: ``lo-orch hook`` (on the path of every Claude Code hook event) and
``workspace`` import it without pulling in pydantic.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from loop_orchestrator.errors import StateError

#: a repository's run state (contract, docs/design.md section 3)
ORCH_DIR = ".orchestration"
#: the task worktrees, ``.worktrees/<run>/<task>``
WORKTREES_DIR = ".worktrees"


#: ``os.open`` flags of a folder opened as itself: a symlink in its place fails the open
NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_regular(path: str | Path, *, dir_fd: int | None = None) -> int | None:
    """A descriptor of ``path`` (a name in the folder ``dir_fd``) if it is a regular file,
    opened without following a symlink or waiting on a FIFO; None for anything else (gone,
    a symlink, a FIFO, a folder, a device), whatever an agent put there."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def stat_key(st: os.stat_result) -> tuple[int, int, int, int]:
    """What changes with any write or rename of a file: its inode, size, modification and
    change times."""
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def atomic_write_text(path: Path, text: str, *, durable: bool = True) -> os.stat_result:
    """Write ``text`` to ``path`` so that readers see the old or the new file, never half;
    the new file's stat as it was once in place (its inode's, read through the descriptor
    that wrote it: whatever another process did to the path since is not in it).

    ``durable=False`` skips the fsyncs: for files that are rebuilt from elsewhere after a
    crash (the published view of the supervisor's record, rewritten at every start). A
    process killed at any moment leaves the old file or the new one; a power cut may also
    leave the last one written unreadable (its blocks are allocated before its data is
    written out) until it is rebuilt.
    """
    return _atomic_write(path, text, durable=durable)


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> os.stat_result:
    """``atomic_write_text`` for bytes."""
    return _atomic_write(path, data, durable=durable)


def _atomic_write(path: Path, data: str | bytes, *, durable: bool) -> os.stat_result:
    if not isinstance(data, str | bytes):  # (checked before a temp file exists)
        msg = f"can only write str or bytes, not {type(data).__name__}"
        raise TypeError(msg)
    raw = data if isinstance(data, bytes) else data.encode("utf-8")
    fd, tmp = _temp_beside(path)
    try:
        try:
            if not durable and raw:
                # blocks allocated before the write: renaming a file whose blocks are not
                # allocated yet over another makes ext4 write its data out there and then
                # (auto_da_alloc), which was half of what a view file cost the supervisor;
                # the journal, not the view, is what survives a power cut
                with contextlib.suppress(OSError):
                    os.posix_fallocate(fd, 0, len(raw))
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
            Path(tmp).replace(path)
            done = os.fstat(fd)  # (after the rename, which set its change time)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            Path(tmp).unlink()
        raise
    if durable:
        fsync_path(path.parent)
    return done


#: the temp files of this process get its pid, its thread and a count in their names
_tmp_count = itertools.count()


def _temp_beside(path: Path) -> tuple[int, str]:
    """A new file next to ``path`` (its folder made when missing), open for writing: a name
    of this process and thread (``mkstemp``'s random names cost a fifth of a write), made
    with ``O_EXCL`` so that a name left by a crash is never written through; then random."""
    own = f"{os.getpid()}-{threading.get_ident()}-{next(_tmp_count)}"
    name = f"{path.parent}/.{path.name}.{own}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        return os.open(name, flags, 0o600), name
    except FileNotFoundError:  # (the folder is made only when missing: a mkdir per write
        path.parent.mkdir(parents=True, exist_ok=True)  # was a syscall walk for nothing)
    except FileExistsError:
        pass
    return tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")


def append_line(path: Path, data: bytes, *, mode: int = 0o644, durable: bool = False) -> None:
    """Append ``data`` (whole lines) in one write; the caller holds any lock.

    ``O_APPEND`` makes the one write land after everything others appended before it.
    ``durable=True`` fsyncs it before returning; else a power cut may lose it (a process
    killed any way does not: the write is in the kernel when this returns).
    """
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    try:
        os.write(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_path(path: Path) -> None:
    """Make what was written to the file ``path`` (by anyone, through any descriptor), or
    a rename or a new file in the folder ``path``, survive a power cut."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: how long ``locked`` waits for a lock another process holds
LOCK_TIMEOUT = 30.0


@contextlib.contextmanager
def locked(path: Path, *, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
    """Hold an exclusive ``flock`` of the file ``path`` (made, with its folder, when
    missing; never written): the same lock as ``filelock.FileLock`` on that path, at a
    tenth of its cost, for the locks taken at every journal entry and ledger line. Not
    reentrant: a thread that holds it and asks again waits for itself until ``timeout``.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    msg = f"the lock {path} was held for more than {timeout:g} s"
                    raise StateError(
                        msg,
                        hint="Another lo-orch command holds it; let it finish, or end it, "
                        "and try again.",
                    ) from None
                time.sleep(0.002)
        yield  # (closing the descriptor lets the lock go)
    finally:
        os.close(fd)
