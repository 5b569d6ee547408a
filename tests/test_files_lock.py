"""``files.locked``: the flock the journal, the ledger and the refs book take at every
entry, shared with ``filelock.FileLock`` on the same file (another lo-orch command, or an
older lo-orch, may hold either)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from filelock import FileLock

from loop_orchestrator.errors import StateError
from loop_orchestrator.files import locked

HOLD = """
import sys, time
from filelock import FileLock
with FileLock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_a_lock_another_process_holds_with_filelock_is_waited_for(tmp_path: Path) -> None:
    path = tmp_path / "journal.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), "0.6"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        began = time.monotonic()
        with locked(path):
            waited = time.monotonic() - began
        assert waited > 0.4  # (it holds the lock 0.6 s after it says so)
    finally:
        holder.wait(10)


def test_filelock_waits_for_it_too(tmp_path: Path) -> None:
    path = tmp_path / "ledger.lock"
    with locked(path):
        other = FileLock(str(path), timeout=0.2, thread_local=False)
        with pytest.raises(TimeoutError):
            other.acquire()
    with FileLock(str(path), timeout=1):
        pass


def test_threads_take_it_one_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "refs.json.lock"
    inside: list[int] = []
    most = [0]

    def work() -> None:
        for _ in range(50):
            with locked(path):
                inside.append(1)
                most[0] = max(most[0], len(inside))
                time.sleep(0.0005)
                inside.pop()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1


def test_a_lock_held_too_long_is_a_clear_error_and_leaks_no_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "ledger.lock"  # (the folder is made)
    fds = len(list(Path("/proc/self/fd").iterdir()))
    with (
        locked(path),
        pytest.raises(StateError, match=r"ledger\.lock was held for more than 0\.1 s"),
        locked(path, timeout=0.1),
    ):
        pass
    assert len(list(Path("/proc/self/fd").iterdir())) == fds
    assert path.read_bytes() == b""  # never written
