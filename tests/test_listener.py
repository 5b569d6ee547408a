"""The inbox's listener: every connection served at once, by workers that are reused."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.wait import wait_for

from loop_orchestrator.sessions import listener
from loop_orchestrator.sessions.inbox import INBOX_DIR, MAX_MESSAGE, address, leave


def ask(run_dir: Path, message: dict[str, Any]) -> Any:
    """One message as a session's Python client sends it; the answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(address(run_dir))
        conn.sendall(json.dumps(message).encode() + b"\n")
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    return json.loads(data)


def workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "lo-inbox-worker" and t.is_alive()]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    folder = tmp_path / ".orchestration"
    folder.mkdir()
    return folder


def test_messages_one_after_another_are_served_by_one_worker(run_dir: Path) -> None:
    before = set(workers())
    server = listener.Server(run_dir, lambda _pid: "alpha", lambda r: r.answer([r.task, r.message]))
    server.start()
    try:
        for i in range(20):
            assert ask(run_dir, {"n": i}) == ["alpha", {"n": i}]
        assert len(set(workers()) - before) == 1
    finally:
        server.close()


def test_a_held_connection_does_not_hold_up_the_next_and_idle_workers_end(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PermissionRequest waits minutes for a person with its connection open: the next
    message gets a worker of its own at once. A worker with nothing to do ends."""
    monkeypatch.setattr(listener, "WORKER_IDLE", 0.3)
    release = threading.Event()

    def deliver(request: listener.Request) -> None:
        if request.message.get("hold"):
            assert release.wait(10)
        request.answer(request.message)

    before = set(workers())
    server = listener.Server(run_dir, lambda _pid: "alpha", deliver)
    server.start()
    try:
        held: list[Any] = []
        waiting = threading.Thread(target=lambda: held.append(ask(run_dir, {"hold": 1})))
        waiting.start()
        time.sleep(0.2)
        started = time.monotonic()
        assert ask(run_dir, {"n": 1}) == {"n": 1}
        assert time.monotonic() - started < 2 and held == []
        release.set()
        waiting.join(10)
        assert held == [{"hold": 1}]
        # both ended after WORKER_IDLE
        wait_for(lambda: not set(workers()) - before, 5, "the idle workers to end")
        for i in range(3):  # and a new one serves what comes later
            assert ask(run_dir, {"n": i}) == {"n": i}
    finally:
        release.set()
        server.close()


def test_many_at_once_are_all_answered(run_dir: Path) -> None:
    def deliver(request: listener.Request) -> None:
        time.sleep(0.01)
        request.answer(request.message)

    server = listener.Server(run_dir, lambda _pid: "alpha", deliver)
    server.start()
    answers: list[Any] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        for i in range(10):
            got = ask(run_dir, {"k": k, "i": i})
            with lock:
                answers.append(got)

    try:
        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted((a["k"], a["i"]) for a in answers) == [
            (k, i) for k in range(8) for i in range(10)
        ]
    finally:
        server.close()


def test_a_flood_of_connections_leaves_no_more_than_max_idle_workers_waiting(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session that opens connections by the dozen at once (held until all are open)
    gets each answered; afterwards at most ``MAX_IDLE`` workers stay waiting."""
    monkeypatch.setattr(listener, "MAX_IDLE", 2)
    flood = 12
    arrived = threading.Barrier(flood + 1, timeout=10)

    serving: set[int] = set()

    def deliver(request: listener.Request) -> None:
        if request.message["k"] != "after":
            serving.add(threading.get_ident())
            arrived.wait()  # every connection has its own worker before any is answered
        request.answer(request.message)

    before = set(workers())
    server = listener.Server(run_dir, lambda _pid: "alpha", deliver)
    server.start()
    answers: list[Any] = []
    try:
        clients = [
            threading.Thread(target=lambda k=k: answers.append(ask(run_dir, {"k": k})))
            for k in range(flood)
        ]
        for t in clients:
            t.start()
        arrived.wait()
        assert len(serving) == flood
        for t in clients:
            t.join(10)
        assert sorted(a["k"] for a in answers) == list(range(flood))
        wait_for(lambda: len(set(workers()) - before) <= 2, 5, "the extra workers to end")
        assert ask(run_dir, {"k": "after"}) == {"k": "after"}  # a waiting one serves it
        assert len(set(workers()) - before) <= 2
    finally:
        server.close()


def test_what_was_left_is_drained_in_order_and_nothing_outside_the_inbox_is_read_or_removed(
    tmp_path: Path,
) -> None:
    """Messages left while no supervisor listened are read oldest first and removed. A
    session (outside a sandbox) that swaps its inbox folder for a symlink to a folder of
    the user's, or leaves in it a symlink to a user's file, a FIFO or a folder named like a
    message, gets nothing of the user's read or removed, and the drain never hangs."""
    run_dir = tmp_path / "run"
    first = leave(run_dir, "alpha", {"type": "hook", "event": "Stop"})
    second = leave(run_dir, "beta", {"type": "signal", "phase": "impl_done"})
    third = leave(run_dir, "alpha", {"type": "hook", "event": "SessionEnd"})
    users = tmp_path / "users"
    users.mkdir()
    keep = users / "1-keep.json"
    keep.write_text('{"type": "signal", "phase": "blocked"}', encoding="utf-8")
    inbox = run_dir / INBOX_DIR
    (inbox / "alpha" / "0-link.json").symlink_to(keep)
    os.mkfifo(inbox / "alpha" / "0-fifo.json")
    (inbox / "alpha" / "0-folder.json").mkdir()
    (inbox / "gamma").symlink_to(users, target_is_directory=True)

    drained = listener.drain(run_dir, ["alpha", "beta", "gamma"])
    assert [(r.task, r.message.get("event") or r.message.get("phase")) for r in drained] == [
        ("alpha", "Stop"),
        ("beta", "impl_done"),
        ("alpha", "SessionEnd"),
    ]
    assert not any(r.attested for r in drained)
    assert not any(Path(p).exists() for p in (first, second, third))
    assert not (inbox / "alpha" / "0-link.json").is_symlink()  # the link went, not its target
    assert not (inbox / "alpha" / "0-fifo.json").exists()
    assert keep.read_text(encoding="utf-8") == '{"type": "signal", "phase": "blocked"}'
    assert sorted(p.name for p in users.iterdir()) == ["1-keep.json"]
    assert listener.drain(run_dir, ["alpha", "beta", "gamma"]) == []


def test_a_left_file_longer_than_a_message_is_removed_unread(tmp_path: Path) -> None:
    """A session that leaves a sparse file of a gigabyte in its inbox folder (it costs the
    session no disk) gets it removed, not read into the supervisor's memory; a message
    over the bound a live message has is dropped as the socket drops it."""
    run_dir = tmp_path / "run"
    kept = leave(run_dir, "alpha", {"type": "signal", "phase": "impl_done"})
    folder = run_dir / INBOX_DIR / "alpha"
    with open(folder / "0-sparse.json", "wb") as fh:
        fh.truncate(1 << 30)
    note = "x" * MAX_MESSAGE
    (folder / "1-long.json").write_text(json.dumps({"type": "signal", "note": note}))
    probe = (
        "import pathlib, sys\n"
        "from loop_orchestrator.sessions import listener\n"
        "got = listener.drain(pathlib.Path(sys.argv[1]), ['alpha'])\n"
        "print([r.message.get('phase') for r in got])\n"
        # (the peak of this program's own memory: ru_maxrss keeps the forking worker's)
        "status = pathlib.Path('/proc/self/status').read_text()\n"
        "print(next(int(ln.split()[1]) // 1024 for ln in status.splitlines()"
        " if ln.startswith('VmHWM:')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(run_dir)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert int(out[1]) < 256, f"the drain's peak memory was {out[1]} MiB"
    assert out[0] == "['impl_done']"
    assert not Path(kept).exists()
    assert sorted(folder.iterdir()) == []
