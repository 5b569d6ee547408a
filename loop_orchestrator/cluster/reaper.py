"""A session's tmux server never outlives the actor that started it.

A node's ``SessionHost`` starts a private tmux server, and tmux daemonizes: when the actor's
process dies without closing it (the raylet or the worker killed, the node removed from the
cluster while the machine lives on), the server and the agent in it would go on working,
unseen and unverified, with nobody to stop them. So the host starts this watcher beside its
server: ``python -m loop_orchestrator.cluster.reaper --pid PID --socket NAME``. It waits for
the host's process to end (by pid *and* start time, so a reused pid does not fool it) and then
kills the tmux server (its panes get SIGHUP; a sandboxed agent dies with its
``bwrap --die-with-parent``). It exits on its own when the server is gone first (the host
closed the session normally). It sleeps on both processes' pidfds (Linux 5.3+: woken by the
kernel when one ends); where there are none it polls every ``--interval`` seconds.

The watcher is nobody's child: ``start`` runs it through a short-lived intermediate
(``--detach``) that exits at once, so it is an orphan in a session of its own. A child of
the host would share its fate: a Ray worker ends its child processes when it exits (Ray's
``kill_child_processes_on_worker_exit``), and its raylet's process group may be SIGKILLed
whole (a machine going down, ``kill -9 -- -PGID`` of ``ray start``).
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import time

from loop_orchestrator import proc
from loop_orchestrator.sessions import procinfo

INTERVAL = 1.0


def server_alive(socket: str) -> bool:
    return proc.run(["tmux", "-L", socket, "list-sessions"], check=False, timeout=10).ok


def server_pid(socket: str) -> int | None:
    got = proc.run(
        ["tmux", "-L", socket, "display-message", "-p", "#{pid}"], check=False, timeout=10
    )
    text = got.stdout.strip()
    return int(text) if got.ok and text.isdigit() else None


def _pidfd(pid: int) -> int | None:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:
        return None


def _wait_on_pidfds(pid: int, born: str, socket: str) -> str | None:
    """The outcome of ``watch`` from the kernel's word (no polling), or None where the
    processes cannot be held by pidfds."""
    server = server_pid(socket)
    if server is None:
        return None
    fds = {"host": _pidfd(pid), "server": _pidfd(server)}
    try:
        host_fd, server_fd = fds["host"], fds["server"]
        if host_fd is None or server_fd is None:
            return None
        # the fds are taken: now check they hold the host and the server, not processes
        # that got a pid of theirs since
        if procinfo.start_time(pid) != born:
            return "host gone"
        if server_pid(socket) != server:
            return None
        ready, _, _ = select.select([host_fd, server_fd], [], [])
        return "host gone" if host_fd in ready else "server gone"
    finally:
        for fd in fds.values():
            if fd is not None:
                os.close(fd)


def watch(pid: int, socket: str, *, interval: float = INTERVAL) -> str:
    """Wait until the host process ``pid`` or the tmux server ``socket`` is gone; kill the
    server in the first case. Returns what happened ("server gone" or "host gone")."""
    born = procinfo.start_time(pid)
    outcome = _wait_on_pidfds(pid, born, socket) if born is not None else "host gone"
    if outcome == "host gone":
        proc.run(["tmux", "-L", socket, "kill-server"], check=False, timeout=10)
    if outcome is not None:
        return outcome
    while True:
        if born is None or procinfo.start_time(pid) != born:
            proc.run(["tmux", "-L", socket, "kill-server"], check=False, timeout=10)
            return "host gone"
        if not server_alive(socket):
            return "server gone"
        time.sleep(interval)


def _argv(pid: int, socket: str, interval: float) -> list[str]:
    return [
        sys.executable,
        "-m",
        "loop_orchestrator.cluster.reaper",
        "--pid",
        str(pid),
        "--socket",
        socket,
        "--interval",
        str(interval),
    ]


def start(pid: int, socket: str, *, interval: float = INTERVAL) -> int:
    """Start the watcher of host ``pid`` and server ``socket``, detached from the caller
    (not its child, not in its process group or session); its pid."""
    got = proc.run([*_argv(pid, socket, interval), "--detach"], timeout=30)
    return int(got.stdout.strip())


def running(pid: int, born: str | None) -> bool:
    """Whether the process ``pid`` started at ``born`` (``procinfo.start_time``) still runs
    (an orphan that ended is a zombie until init reaps it: not running)."""
    return born is not None and not procinfo.exited(pid) and procinfo.start_time(pid) == born


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loop_orchestrator.cluster.reaper")
    parser.add_argument("--pid", required=True, type=int)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--interval", type=float, default=INTERVAL)
    parser.add_argument("--detach", action="store_true", help="start the watcher and exit")
    args = parser.parse_args(argv)
    if args.detach:
        # this process exits now: the watcher it starts is left to init (or a subreaper)
        watcher = proc.spawn_detached(_argv(args.pid, args.socket, args.interval))
        print(watcher.pid, flush=True)
        return 0
    watch(args.pid, args.socket, interval=args.interval)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
