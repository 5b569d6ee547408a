"""The reaper: a node session's tmux server ends when the process that started it is gone
(a lost actor's agent must not go on working unseen), and the reaper ends on its own when
the server is closed normally."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.wait import wait_for

from loop_orchestrator.cluster import reaper
from loop_orchestrator.sessions import procinfo


def _server(socket: str) -> None:
    subprocess.run(
        ["tmux", "-L", socket, "-f", "/dev/null", "new-session", "-d", "-s", "s", "sleep 600"],
        check=True,
    )


def _alive(socket: str) -> bool:
    return reaper.server_alive(socket)


def test_start_time_names_a_live_process_and_none_for_a_gone_one() -> None:
    mine = procinfo.start_time(os.getpid())
    assert mine is not None and mine.isdigit()
    assert procinfo.start_time(os.getpid()) == mine
    child = subprocess.Popen(["true"])
    child.wait()
    assert procinfo.start_time(child.pid) is None


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[1])


#: a host as a Ray worker is one: it starts the reaper, and when it exits it ends every
#: child process of its own (Ray's kill_child_processes_on_worker_exit)
HOST = """
import os, signal, sys, time
from loop_orchestrator.cluster import reaper
from loop_orchestrator.sessions import procinfo
print(reaper.start(os.getpid(), sys.argv[1], interval=0.1), flush=True)
def leave(*_):
    for line in os.popen(f"ps -o pid= --ppid {os.getpid()}"):
        os.kill(int(line), signal.SIGKILL)
    os._exit(0)
signal.signal(signal.SIGTERM, leave)
time.sleep(600)
"""


def test_the_server_ends_when_its_host_process_dies_and_takes_its_children(
    tmux_socket: str,
) -> None:
    """The host starts the reaper and, exiting, kills its own children (as a Ray worker
    does): the reaper is none of them (not its child, not in its group or session), so it
    lives on and ends the session's server."""
    _server(tmux_socket)
    host = subprocess.Popen(
        [sys.executable, "-c", HOST, tmux_socket], stdout=subprocess.PIPE, text=True
    )
    watcher = 0
    try:
        assert host.stdout is not None
        watcher = int(host.stdout.readline())
        born = procinfo.start_time(watcher)
        assert reaper.running(watcher, born)
        assert _parent(watcher) != host.pid
        assert os.getpgid(watcher) not in (os.getpgid(host.pid), os.getpgid(0))
        assert os.getsid(watcher) != os.getsid(host.pid)
        # alive host: the server stays
        wait_for(lambda: _alive(tmux_socket), 5, "the session's server")
        assert reaper.running(watcher, born)
        host.terminate()  # the process this test started, by its id: it ends its children
        host.wait()
        wait_for(lambda: not _alive(tmux_socket), 10, "the server ended by the reaper")
        wait_for(lambda: not reaper.running(watcher, born), 10, "the reaper's exit")
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        if watcher and reaper.running(watcher, procinfo.start_time(watcher)):
            os.kill(watcher, 9)  # the reaper this test started (through its host)


def test_the_reaper_leaves_when_the_server_is_closed_first(tmux_socket: str) -> None:
    _server(tmux_socket)
    outcome: list[str] = []
    import threading

    watching = threading.Thread(
        target=lambda: outcome.append(reaper.watch(os.getpid(), tmux_socket, interval=0.1))
    )
    watching.start()
    subprocess.run(["tmux", "-L", tmux_socket, "kill-server"], check=True)
    watching.join(timeout=10)
    assert outcome == ["server gone"]


def test_the_reaper_sleeps_until_the_kernel_wakes_it(tmux_socket: str) -> None:
    """No polling: with an hour between polls, the host's end still ends the server at
    once (the reaper waits on the processes' pidfds)."""
    import threading

    host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    _server(tmux_socket)
    outcome: list[str] = []
    watching = threading.Thread(
        target=lambda: outcome.append(reaper.watch(host.pid, tmux_socket, interval=3600))
    )
    try:
        watching.start()
        watching.join(timeout=1.0)
        assert watching.is_alive() and _alive(tmux_socket)
        host.kill()  # the process this test started, by its id
        host.wait()
        watching.join(timeout=10)
        assert outcome == ["host gone"]
        assert not _alive(tmux_socket)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()


def test_a_reused_pid_does_not_keep_the_server(
    tmux_socket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host is recognised by pid and start time: another process that got its pid
    later (another start time) is not it, and the server is ended."""
    _server(tmux_socket)
    born = procinfo.start_time(os.getpid())
    assert born is not None
    seen = iter([born])  # first read: the host; every later read: a newer process
    monkeypatch.setattr(procinfo, "start_time", lambda pid: next(seen, str(int(born) + 1)))
    assert reaper.watch(os.getpid(), tmux_socket, interval=0.05) == "host gone"
    assert not _alive(tmux_socket)
