"""The reaper: a node session's tmux server ends when the process that started it is gone
(a lost actor's agent must not go on working unseen), and the reaper ends on its own when
the server is closed normally."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers.wait import wait_for

from loop_orchestrator import proc
from loop_orchestrator.cluster import reaper


def _server(socket: str) -> None:
    subprocess.run(
        ["tmux", "-L", socket, "-f", "/dev/null", "new-session", "-d", "-s", "s", "sleep 600"],
        check=True,
    )


def _alive(socket: str) -> bool:
    return reaper.server_alive(socket)


def test_start_time_names_a_live_process_and_none_for_a_gone_one() -> None:
    mine = reaper.start_time(os.getpid())
    assert mine is not None and mine.isdigit()
    assert reaper.start_time(os.getpid()) == mine
    child = subprocess.Popen(["true"])
    child.wait()
    assert reaper.start_time(child.pid) is None


def test_the_server_ends_when_its_host_process_dies(tmux_socket: str) -> None:
    host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    _server(tmux_socket)
    watcher = proc.spawn_detached(
        [
            sys.executable,
            "-m",
            "loop_orchestrator.cluster.reaper",
            "--pid",
            str(host.pid),
            "--socket",
            tmux_socket,
            "--interval",
            "0.1",
        ]
    )
    try:
        # alive host: the server stays
        wait_for(lambda: _alive(tmux_socket), 5, "the session's server")
        assert watcher.poll() is None
        host.kill()  # the process this test started, by its id
        host.wait()
        wait_for(lambda: not _alive(tmux_socket), 10, "the server ended by the reaper")
        assert watcher.wait(timeout=10) == 0
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()


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
    born = reaper.start_time(os.getpid())
    assert born is not None
    seen = iter([born])  # first read: the host; every later read: a newer process
    monkeypatch.setattr(reaper, "start_time", lambda pid: next(seen, str(int(born) + 1)))
    assert reaper.watch(os.getpid(), tmux_socket, interval=0.05) == "host gone"
    assert not _alive(tmux_socket)
