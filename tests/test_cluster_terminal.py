"""The terminal relay of `lo-orch attach` for a remote task (cluster/terminal.py).

TerminalHost with real programs on real ptys (no Ray); ``relay`` driven through real pipes
and ptys; and the whole path for real: a Ray actor on a worker node of a 2-node local
cluster composing TerminalHost, attached to a real tmux session on a private socket, relayed
into a local tmux pane (another private socket) that runs ``tests/relay_entry.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO_ROOT
from helpers.fds import past_fd_1024
from helpers.wait import wait_for

from loop_orchestrator.cluster import terminal
from loop_orchestrator.cluster.connect import ray_module
from loop_orchestrator.cluster.terminal import TerminalHost, relay
from loop_orchestrator.errors import LoOrchError


def read_until(host: TerminalHost, term: str, needle: bytes, timeout: float = 10.0) -> bytes:
    """Everything the program wrote until ``needle`` appeared (fails on timeout or exit)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        if time.monotonic() > deadline:
            raise AssertionError(f"no {needle!r} within {timeout}s; got {seen!r}")
        data = host.read(term, 0.2)
        if data is None:
            raise AssertionError(f"program exited before {needle!r}; got {seen!r}")
        seen += data
    return seen


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.fixture
def host() -> Iterator[TerminalHost]:
    made = TerminalHost()
    yield made
    for term in list(made._terms):  # whatever a failed test left running
        made.close(term)


def test_host_runs_a_program_on_a_pty_of_the_asked_size(host: TerminalHost) -> None:
    term = host.open(
        ["sh", "-c", 'stty size; printf "ready\\n"; read line; echo "got:$line"; exit 3'], 33, 101
    )
    seen = read_until(host, term, b"ready")
    assert b"33 101" in seen  # the program's own terminal has the size asked for
    host.write(term, b"hello\n")
    assert b"got:hello" in read_until(host, term, b"got:")
    wait_for(lambda: host.read(term, 0.1) is None, 10, "the program's exit to read as None")
    assert host.read(term, 0.1) is None  # and stays None
    host.write(term, b"ignored")  # writing to an ended program is not an error
    host.close(term)


def test_resize_reaches_the_program_as_sigwinch(host: TerminalHost) -> None:
    # the pty must be the program's controlling terminal, or the kernel sends no SIGWINCH
    term = host.open(
        ["sh", "-c", 'trap "stty size" WINCH; echo ready; while :; do sleep 0.05; done'], 24, 80
    )
    read_until(host, term, b"ready")
    host.resize(term, 41, 123)
    assert b"41 123" in read_until(host, term, b"41 123")


def test_close_ends_only_what_it_started(host: TerminalHost) -> None:
    # a program with a child of its own (same process group), a second terminal, and a
    # process this host never started: close(first) ends the first and its child only
    first = host.open(["sh", "-c", "sleep 300 & echo child=$!; wait"], 24, 80)
    child = int(read_until(host, first, b"\n").split(b"child=")[1].split()[0])
    second = host.open(["sleep", "300"], 24, 80)
    stranger = subprocess.Popen(["sleep", "300"])  # the test's own, not the host's
    try:
        first_pid, second_pid = host.pid(first), host.pid(second)
        assert first_pid is not None and second_pid is not None
        host.close(first)
        assert not alive(first_pid)
        wait_for(lambda: not alive(child), 5, "the program's child to end with its group")
        assert alive(second_pid) and stranger.poll() is None
        host.close(first)  # idempotent
        assert host.read(first, 0.0) is None and host.pid(first) is None
        assert host.read(second, 0.1) == b""  # the other terminal still works
    finally:
        stranger.kill()
        stranger.wait()


def test_a_read_in_flight_never_sees_the_next_terminal(host: TerminalHost) -> None:
    """Closing a terminal while another thread waits in read (the relay's reader) must not
    free its fd under that read: the next terminal could get the same fd number, and the
    stale read its output (another user's screen, on a shared node actor)."""
    # a program that leaves a process of another session holding the pty: after close
    # ended the program's group, nothing wakes the read (no EOF while the pty is held)
    first = host.open(["sh", "-c", "setsid sleep 30 & echo held=$!; exec sleep 300"], 24, 80)
    holder = int(read_until(host, first, b"\n").split(b"held=")[1].split()[0])
    got: list[bytes | None] = []
    try:
        reader = threading.Thread(target=lambda: got.append(host.read(first, 2.0)))
        reader.start()
        time.sleep(0.2)  # the reader waits in select
        host.close(first)
        second = host.open(["sh", "-c", "echo SECRET-OUTPUT; sleep 5"], 24, 80)
        reader.join(10)
        # the read ended empty-handed: None (the close reaped the program first) or b""
        # (its wait ran out first, on a loaded machine); never the next terminal's output
        assert len(got) == 1 and not got[0]
        assert b"SECRET-OUTPUT" in read_until(host, second, b"SECRET-OUTPUT")
    finally:
        os.kill(holder, signal.SIGKILL)  # the test's own leftover, by its pid


def test_typing_into_a_program_that_reads_nothing_never_wedges_the_host(
    host: TerminalHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(terminal, "WRITE_TIMEOUT", 0.5)
    term = host.open(["sh", "-c", "stty -icanon; echo ready; exec sleep 300"], 24, 80)
    read_until(host, term, b"ready")
    started = time.monotonic()
    host.write(term, b"x" * (1 << 20))  # far more than the pty buffers
    assert time.monotonic() - started < 5
    host.close(term)  # and closing it does not wait on the write
    assert host.pid(term) is None


def test_close_kills_a_program_that_ignores_hangup(
    host: TerminalHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(terminal, "CLOSE_GRACE", 0.3)
    term = host.open(["sh", "-c", 'trap "" HUP; echo ready; while :; do sleep 0.05; done'], 24, 80)
    read_until(host, term, b"ready")
    pid = host.pid(term)
    assert pid is not None
    host.close(term)
    assert not alive(pid)


def test_the_program_gets_a_terminal_type_and_no_outer_tmux(
    host: TerminalHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a node started from inside tmux, by a service manager (no TERM)
    monkeypatch.setenv("TMUX", "/tmp/tmux-0/default,1,0")
    monkeypatch.setenv("TMUX_PANE", "%3")
    monkeypatch.delenv("TERM", raising=False)
    term = host.open(
        ["sh", "-c", 'echo "term=$TERM tmux=${TMUX-unset}/${TMUX_PANE-unset}"'], 24, 80
    )
    assert b"term=xterm-256color tmux=unset/unset" in read_until(host, term, b"unset/unset")
    monkeypatch.setenv("TERM", "screen")
    term = host.open(["sh", "-c", 'echo "term=$TERM."'], 24, 80)
    assert b"term=screen." in read_until(host, term, b"term=screen.")


def test_a_host_holding_a_thousand_files_still_reads_and_writes(host: TerminalHost) -> None:
    """A node's actor process holds many files: the pty can be past fd 1024, which
    select() refuses (ValueError)."""
    with past_fd_1024():
        term = host.open(["sh", "-c", 'printf "ready\\n"; read line; echo "got:$line"'], 24, 80)
        read_until(host, term, b"ready")
        host.write(term, b"far\n")
        assert b"got:far" in read_until(host, term, b"got:")
        host.close(term)


def test_open_of_a_missing_program_says_so(host: TerminalHost) -> None:
    with pytest.raises(LoOrchError, match="no-such-program-r2 not found") as caught:
        host.open(["no-such-program-r2"], 24, 80)
    assert caught.value.hint and "PATH" in caught.value.hint
    assert host._terms == {}


def test_relay_forwards_both_ways_and_closes_the_remote_when_stdin_ends(
    host: TerminalHost,
) -> None:
    """Without a terminal (pipes), off the main thread: keys in, output out, stdin EOF ends it."""
    keys_r, keys_w = os.pipe()
    out_r, out_w = os.pipe()
    opened: list[str] = []

    class Recording:
        def open(self, argv: list[str], rows: int, cols: int) -> str:
            opened.append(host.open(argv, rows, cols))
            return opened[-1]

        def read(self, term_id: str, timeout: float) -> bytes | None:
            return host.read(term_id, timeout)

        def write(self, term_id: str, data: bytes) -> None:
            host.write(term_id, data)

        def resize(self, term_id: str, rows: int, cols: int) -> None:
            host.resize(term_id, rows, cols)

        def close(self, term_id: str) -> None:
            host.close(term_id)

    result: list[int] = []
    runner = threading.Thread(
        target=lambda: result.append(
            relay(Recording(), stdin_fd=keys_r, stdout_fd=out_w, argv=["cat"])
        )
    )
    runner.start()
    os.write(keys_w, b"through-the-relay\n")
    seen = bytearray()

    def echoed() -> bool:
        # never a blocking read: with nothing to read the wait's own deadline must fire
        if select.select([out_r], [], [], 0.1)[0]:
            seen.extend(os.read(out_r, 4096))
        return b"through-the-relay" in seen

    wait_for(echoed, 10, "the relayed text echoed back", interval=0)
    pid = host.pid(opened[0])
    assert pid is not None
    os.close(keys_w)  # stdin EOF
    runner.join(15)
    assert result == [0]
    assert not alive(pid)  # the relay closed the remote program on its way out
    for fd in (keys_r, out_r, out_w):
        os.close(fd)


def test_relay_restores_the_terminal_when_the_endpoint_fails(host: TerminalHost) -> None:
    """A node lost mid-attach (the endpoint raises): the error reaches the caller and the
    terminal is back in the mode it was in, not left raw."""
    master, slave = os.openpty()
    before = termios.tcgetattr(slave)

    class Failing:
        def open(self, argv: list[str], rows: int, cols: int) -> str:
            return host.open(["cat"], rows, cols)

        def read(self, term_id: str, timeout: float) -> bytes | None:
            return host.read(term_id, timeout)

        def write(self, term_id: str, data: bytes) -> None:
            raise ConnectionError("the node's actor died")

        def resize(self, term_id: str, rows: int, cols: int) -> None:
            host.resize(term_id, rows, cols)

        def close(self, term_id: str) -> None:
            host.close(term_id)

    os.write(master, b"x")
    with pytest.raises(ConnectionError, match="actor died"):
        relay(Failing(), stdin_fd=slave, stdout_fd=slave)
    assert termios.tcgetattr(slave) == before
    assert host._terms == {}  # and the remote program was closed
    os.close(master)
    os.close(slave)


# -- the whole path through Ray, on a real terminal -------------------------------------


def tmux(socket: str, *args: str) -> str:
    """tmux without the user's config on a private socket: a path (the node's, ``-S``) or
    a name (the test's own server, the user's terminal, ``-L``)."""
    out = subprocess.run(
        ["tmux", "-f", "/dev/null", "-S" if "/" in socket else "-L", socket, *args],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    if out.returncode != 0:
        raise AssertionError(f"tmux {' '.join(args)} failed: {out.stderr}")
    return out.stdout


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A 2-node local Ray cluster: a head without session slots and one worker node with
    ``lo_session`` slots; a private short temp dir (Ray's socket paths must stay short)."""
    from ray.cluster_utils import Cluster

    ray = ray_module()

    temp = tempfile.mkdtemp(prefix="lo-r2t-")
    # the nodes import this module to build TermActor (the package is on PYTHONPATH already)
    paths = [str(REPO_ROOT), str(REPO_ROOT / "tests"), os.environ.get("PYTHONPATH", "")]
    env = {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    cluster: Any = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "temp_dir": temp,
            "env_vars": env,
            "include_dashboard": False,
        },
    )
    try:
        cluster.add_node(num_cpus=1, resources={"lo_session": 2}, env_vars=env)
        yield cluster
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


class TermActor:
    """The test's own node actor: TerminalHost's calls, and the pid of a terminal."""

    def __init__(self) -> None:
        self.host = TerminalHost()

    def open(self, argv: list[str], rows: int, cols: int) -> str:
        return self.host.open(argv, rows, cols)

    def read(self, term_id: str, timeout: float) -> bytes | None:
        return self.host.read(term_id, timeout)

    def write(self, term_id: str, data: bytes) -> None:
        self.host.write(term_id, data)

    def resize(self, term_id: str, rows: int, cols: int) -> None:
        self.host.resize(term_id, rows, cols)

    def close(self, term_id: str) -> None:
        self.host.close(term_id)

    def pid(self, term_id: str) -> int | None:
        return self.host.pid(term_id)

    def node(self) -> str:
        return str(ray_module().get_runtime_context().get_node_id())


def start_relay(socket: str, window: str, entry: list[str]) -> None:
    """The relay's entry in a new local window of 90x28 (a real terminal)."""
    if window == "me":
        tmux(socket, "new-session", "-d", "-s", "me", "-x", "90", "-y", "28", *entry)
        tmux(socket, "set-option", "-t", "me", "remain-on-exit", "on")
    else:
        tmux(socket, "new-window", "-d", "-t", "me", "-n", window, *entry)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_attach_relay_through_a_ray_actor_on_a_real_terminal(
    ray_cluster: Any, tmux_socket: str, tmp_path: Path
) -> None:
    ray = ray_module()
    ray.init(address=ray_cluster.address, namespace="lo-r2-test", log_to_driver=False)
    try:
        actor_cls = ray.remote(num_cpus=0, resources={"lo_session": 1}, max_concurrency=8)(
            TermActor
        )
        actor = actor_cls.options(name="r2-term").remote()
        head_id = ray.get_runtime_context().get_node_id()
        assert ray.get(actor.node.remote()) != head_id  # placed on the node with slots

        # the "remote" side: a tmux session on a private socket, a shell in its pane
        remote = str(tmp_path / "rt.sock")
        tmux(remote, "new-session", "-d", "-s", "task", "-x", "100", "-y", "30", "sh")
        argv = ["tmux", "-f", "/dev/null", "-S", remote, "attach", "-t", "task"]
        # a second client of the remote session (someone else attached): never ended by
        # what the relay does
        bystander = TerminalHost()
        other = bystander.open(argv, 24, 80)
        other_pid = bystander.pid(other)
        assert other_pid is not None

        def entry(result: Path) -> list[str]:
            return [
                sys.executable,
                str(REPO_ROOT / "tests" / "relay_entry.py"),
                ray_cluster.address,
                "lo-r2-test",
                "r2-term",
                json.dumps(argv),
                str(result),
            ]

        def remote_clients() -> list[str]:
            listed = tmux(
                remote, "list-clients", "-F", "#{client_pid} #{client_width}x#{client_height}"
            )
            return [c for c in listed.split("\n") if c]

        def remote_screen() -> str:
            return tmux(remote, "capture-pane", "-p", "-t", "task")

        # the user's terminal: a local tmux pane running the relay's entry
        first = tmp_path / "first.json"
        start_relay(tmux_socket, "me", entry(first))
        wait_for(lambda: len(remote_clients()) == 2, 60, "the relay's tmux client")
        # text on the remote pane appears on the local terminal
        tmux(remote, "send-keys", "-t", "task", "echo REMOTE-$((40+2))", "Enter")
        wait_for(
            lambda: "REMOTE-42" in tmux(tmux_socket, "capture-pane", "-p", "-t", "me"),
            20,
            "remote output on the local terminal",
        )
        # keys typed on the local terminal reach the remote pane one by one (raw mode: a
        # line-buffered terminal would hold them back until Enter)
        tmux(tmux_socket, "send-keys", "-t", "me", "echo TYPED-$((1+2))")
        wait_for(
            lambda: "echo TYPED-$((1+2))" in remote_screen(),
            20,
            "keys typed without Enter in the remote pane",
        )
        tmux(tmux_socket, "send-keys", "-t", "me", "Enter")
        wait_for(lambda: "TYPED-3" in remote_screen(), 20, "local keys run in the remote pane")
        # the local window's size follows to the remote client (SIGWINCH through the relay)
        tmux(tmux_socket, "resize-window", "-t", "me", "-x", "77", "-y", "21")
        wait_for(
            lambda: any(c.endswith(" 77x21") for c in remote_clients()),
            20,
            "the remote client's size to follow the local window",
        )
        relay_pid = next(
            int(c.split()[0]) for c in remote_clients() if not c.startswith(f"{other_pid} ")
        )
        # tmux's own detach key, typed locally, detaches the remote client: the relay
        # returns, the local terminal is as it was, the session and the other client live on
        tmux(tmux_socket, "send-keys", "-t", "me", "C-b", "d")
        wait_for(first.exists, 30, "the relay to return after the detach key")
        assert json.loads(first.read_text()) == {"code": 0, "restored": True}
        assert not alive(relay_pid)
        assert alive(other_pid)
        assert [c.split()[0] for c in remote_clients()] == [str(other_pid)]

        # attached again; the remote program exits (the shell ends its session): the relay
        # returns with the terminal restored
        second = tmp_path / "second.json"
        start_relay(tmux_socket, "again", entry(second))
        wait_for(lambda: len(remote_clients()) == 2, 60, "the second relay's client")
        tmux(tmux_socket, "send-keys", "-t", "again", "exit", "Enter")
        wait_for(second.exists, 30, "the relay to return after the remote exit")
        assert json.loads(second.read_text()) == {"code": 0, "restored": True}
        bystander.close(other)
    finally:
        ray.shutdown()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_actor_close_ends_only_its_own_client(
    ray_cluster: Any, tmp_path: Path, tmux_socket: str
) -> None:
    """Two relays' clients on one remote session: closing one (as a relay does when the
    user detaches or the local side dies) leaves the other client and the session alive."""
    ray = ray_module()
    ray.init(address=ray_cluster.address, namespace="lo-r2-test", log_to_driver=False)
    try:
        actor = (
            ray.remote(num_cpus=0, resources={"lo_session": 1}, max_concurrency=8)(TermActor)
            .options(name="r2-term-2")
            .remote()
        )
        remote = str(tmp_path / "rt2.sock")
        tmux(remote, "new-session", "-d", "-s", "task", "sh")
        argv = ["tmux", "-f", "/dev/null", "-S", remote, "attach", "-t", "task"]
        first = ray.get(actor.open.remote(argv, 24, 80))
        second = ray.get(actor.open.remote(argv, 30, 100))
        pids = [ray.get(actor.pid.remote(t)) for t in (first, second)]
        wait_for(lambda: len(tmux(remote, "list-clients").splitlines()) == 2, 30, "two clients")
        ray.get(actor.close.remote(first))
        ray.get(actor.close.remote(first))  # idempotent
        assert not alive(pids[0]) and alive(pids[1])
        clients = tmux(remote, "list-clients", "-F", "#{client_pid}").split()
        assert clients == [str(pids[1])]
        tmux(remote, "has-session", "-t", "task")  # the session (the agent's) lives on
        assert ray.get(actor.read.remote(first, 0.1)) is None
        ray.get(actor.close.remote(second))
        assert not alive(pids[1])
    finally:
        with contextlib.suppress(Exception):
            subprocess.run(
                ["tmux", "-S", str(tmp_path / "rt2.sock"), "kill-server"], timeout=20, check=False
            )
        ray.shutdown()


def test_sigterm_restores_the_terminal(tmux_socket: str, tmp_path: Path) -> None:
    """SIGTERM to the relay on a real terminal: it returns 143 with the terminal restored
    (no Ray: the entry relays to a TerminalHost in its own process)."""
    result = tmp_path / "result.json"
    entry = [
        sys.executable,
        str(REPO_ROOT / "tests" / "relay_entry.py"),
        "local",
        "",
        "",
        json.dumps(["sh", "-c", "echo remote-ready; exec sleep 300"]),
        str(result),
    ]
    subprocess.run(
        ["tmux", "-L", tmux_socket, "-f", "/dev/null", "new-session", "-d", "-s", "me", *entry],
        check=True,
        timeout=20,
    )
    pid = int(
        subprocess.run(
            ["tmux", "-L", tmux_socket, "display-message", "-p", "-t", "me", "#{pane_pid}"],
            capture_output=True,
            text=True,
            check=True,
            timeout=20,
        ).stdout
    )
    wait_for(
        lambda: (
            "remote-ready"
            in subprocess.run(
                ["tmux", "-L", tmux_socket, "capture-pane", "-p", "-t", "me"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            ).stdout
        ),
        30,
        "the relayed program's output",
    )
    os.kill(pid, signal.SIGTERM)  # the entry this test started, by its pid
    wait_for(result.exists, 30, "the relay to return")
    outcome = json.loads(result.read_text())
    assert outcome["code"] == 128 + signal.SIGTERM and outcome["restored"] is True, outcome
    assert outcome["remote_alive"] is False  # and the relayed program was closed
