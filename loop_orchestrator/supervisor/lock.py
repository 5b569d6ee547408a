"""The supervisor lock: one supervisor per repository, and who holds it."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from loop_orchestrator.errors import LockHeldError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.runstate.state import RunDir, now_iso
from loop_orchestrator.sessions import procinfo


def lock_holder(rundir: RunDir) -> int | None:
    """The pid of the process holding the supervisor lock now, or None when nobody does.

    Asked of the kernel (``/proc/locks``: the ``flock`` on ``supervisor.lock``), never of
    what a supervisor last wrote: one killed with SIGKILL leaves its ``supervisor.json``
    behind, and `lo-orch status` must not call that run alive. Without
    ``/proc/locks`` the pid in ``supervisor.json`` counts if that process still runs.
    """
    try:
        st = rundir.supervisor_lock.stat()
    except OSError:
        return None
    try:
        table = Path("/proc/locks").read_text(encoding="utf-8")
    except OSError:
        table = None
    if table is not None:
        for line in table.splitlines():
            parts = line.split()
            if len(parts) < 6 or parts[1] == "->" or parts[1] != "FLOCK":
                continue
            try:
                major, minor, inode = parts[5].split(":")
                if (
                    int(inode) == st.st_ino
                    and int(major, 16) == os.major(st.st_dev)
                    and int(minor, 16) == os.minor(st.st_dev)
                ):
                    return int(parts[4])
            except ValueError:
                continue
        return None
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        data = json.loads((rundir.root / "supervisor.json").read_text(encoding="utf-8"))
        pid = int(data["pid"])
        os.kill(pid, 0)
        return pid
    return None


#: how long a start waits for a lock whose taker is gone: a child it was starting when it
#: was killed (between fork and exec) holds the lock's file until it execs or dies
RELEASE_GRACE = 2.0


@contextlib.contextmanager
def supervisor_lock(rundir: RunDir) -> Iterator[None]:
    """Hold the repository's supervisor lock; name the holder when it is taken. A lock whose
    taker has exited (a supervisor SIGKILLed a moment ago) is waited for, ``RELEASE_GRACE``
    at most; one a live process holds is refused at once."""
    rundir.root.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(rundir.supervisor_lock), timeout=0)
    info = rundir.root / "supervisor.json"
    try:
        lock.acquire()
    except Timeout:
        pid = lock_holder(rundir)
        if pid is None or not procinfo.exited(pid) or not _acquired(lock, RELEASE_GRACE):
            raise _held(info, pid) from None
    try:
        atomic_write_text(info, json.dumps({"pid": os.getpid(), "started_at": now_iso()}) + "\n")
        yield
    finally:
        with contextlib.suppress(OSError):
            info.unlink()
        lock.release()


def _acquired(lock: FileLock, timeout: float) -> bool:
    try:
        lock.acquire(timeout=timeout)
    except Timeout:
        return False
    return True


def _held(info: Path, pid: int | None) -> LockHeldError:
    """The refusal, naming the holder (with its start from ``info`` when that is its)."""
    holder = f"pid {pid}" if pid else "another process"
    with contextlib.suppress(OSError, ValueError, KeyError):
        data = json.loads(info.read_text(encoding="utf-8"))
        if pid is None or data["pid"] == pid:
            holder = f"pid {data['pid']} (started {data['started_at']})"
    msg = f"another supervisor is running for this repository: {holder}"
    return LockHeldError(
        msg,
        hint="Watch it with `lo-orch status --watch`, or stop it (Ctrl-C in its window) "
        "before starting another.",
    )
