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


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie has: its files are closed)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :].startswith(b"Z")


@contextlib.contextmanager
def supervisor_lock(rundir: RunDir) -> Iterator[None]:
    """Hold the repository's supervisor lock; name the holder when it is taken."""
    rundir.root.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(rundir.supervisor_lock), timeout=0)
    info = rundir.root / "supervisor.json"
    try:
        lock.acquire()
    except Timeout:
        pid = lock_holder(rundir)
        try:
            if pid is None or not _gone(pid):
                raise
            # a supervisor SIGKILLed a moment ago (`lo-orch run` right after): released
            # as soon as what it was starting has exec'd or died
            lock.acquire(timeout=RELEASE_GRACE)
        except Timeout:
            holder = f"pid {pid}" if pid else "another process"
            with contextlib.suppress(OSError, ValueError, KeyError):
                data = json.loads(info.read_text(encoding="utf-8"))
                if pid is None or data["pid"] == pid:
                    holder = f"pid {data['pid']} (started {data['started_at']})"
            msg = f"another supervisor is running for this repository: {holder}"
            raise LockHeldError(
                msg,
                hint="Watch it with `lo-orch status --watch`, or stop it (Ctrl-C in its "
                "window) before starting another.",
            ) from None
    try:
        atomic_write_text(info, json.dumps({"pid": os.getpid(), "started_at": now_iso()}) + "\n")
        yield
    finally:
        with contextlib.suppress(OSError):
            info.unlink()
        lock.release()
