"""What the kernel says about a process: its parent chain and its start environment.

Used where lo-orch must know *who* is asking, in a way the asker cannot talk its way past:
an agent can unset ``LO_ORCH_TASK`` in its own shell, but it cannot change the parent chain
the kernel keeps, nor the environment its ancestors were started with
(``/proc/<pid>/environ`` is the environment a process was exec'd with). Linux only; on a
system without ``/proc`` every answer is "unknown" (empty), and callers decide what that
means.

Standard library only: ``lo-orch hook`` and ``lo-orch signal`` import it on their fast path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

PROC = Path("/proc")
#: how far up the parent chain to look (a chain is a handful of processes in practice)
MAX_DEPTH = 64


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid``, or None when it is gone (or there is no /proc)."""
    try:  # (os calls, not pathlib and a text file: the supervisor asks for every message)
        fd = os.open(f"{PROC}/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        stat = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after
    # the last ")".
    try:
        return int(stat[stat.rindex(b")") + 2 :].split()[1])
    except (ValueError, IndexError):
        return None


def lineage(pid: int | None = None) -> Iterator[int]:
    """``pid`` (default: this process) and its parents, nearest first, ending before 0;
    each parent is read when it is asked for (a caller looking for the first it knows
    stops there)."""
    seen: set[int] = set()
    current: int | None = os.getpid() if pid is None else pid
    while current and current > 0 and len(seen) < MAX_DEPTH and current not in seen:
        seen.add(current)
        yield current
        current = parent_pid(current)


def ancestors(pid: int | None = None) -> list[int]:
    """``pid`` (default: this process) and its parents, nearest first, ending before 0."""
    return list(lineage(pid))


def start_environ(pid: int) -> dict[str, str]:
    """The environment ``pid`` was started with ({} when unreadable)."""
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def managed_ancestor(pid: int | None = None) -> tuple[int, str] | None:
    """The nearest process in ``pid``'s chain that lo-orch started as an agent session.

    lo-orch starts every agent pane with ``LO_ORCH_TASK`` in its environment (docs/design.md
    section 6); ``(pid, task)`` of the first ancestor (``pid`` included) whose start
    environment has it, else None.
    """
    for ancestor in ancestors(pid):
        task = start_environ(ancestor).get("LO_ORCH_TASK")
        if task:
            return ancestor, task
    return None


def _stat_fields(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` after the program's name (which may hold spaces and bytes that
    are not UTF-8): field 3 on."""
    stat = (PROC / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
    return stat.rsplit(")", 1)[1].split()


def start_time(pid: int) -> str | None:
    """When ``pid`` started, in clock ticks since boot (field 22), or None when there is no
    such process: with the pid, it names one process (a pid is reused, a start time not)."""
    try:
        return _stat_fields(pid)[19]
    except (OSError, IndexError):
        return None


def exited(pid: int) -> bool:
    """Whether ``pid`` has exited: no such process, or a zombie (its files are closed).
    False when it runs or /proc cannot tell."""
    try:
        return _stat_fields(pid)[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True
    except (OSError, IndexError):
        return False


def cpu_and_peak_rss(pid: int) -> tuple[float, int] | None:
    """(CPU seconds, user and system, peak RSS in KiB) of a running process, from /proc;
    None when it is gone (a zombie's sample has no peak RSS: 0) or there is no /proc."""
    try:
        stat = _stat_fields(pid)
        cpu = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
        hwm = 0
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
        return cpu, hwm
    except (OSError, IndexError, ValueError):
        return None


def waited_cpu(pid: int) -> float | None:
    """The CPU seconds of the processes ``pid`` started and waited for (``cutime`` and
    ``cstime``, user and system); None when it is gone or there is no /proc."""
    try:
        stat = _stat_fields(pid)
        return (int(stat[13]) + int(stat[14])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None
