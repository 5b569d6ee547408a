"""The tmux control-mode client the supervisor sends its tmux calls through: what a line can
carry, the reader that takes the stream only as tmux writes it (a pane can print protocol
lines), answers equal to a tmux process's, and a client that changes nothing of the session
and ends with its owner. Real tmux on a private server; the reader's rules in milliseconds.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import pytest
from helpers.fds import past_fd_1024
from helpers.wait import wait_for

from loop_orchestrator import proc
from loop_orchestrator.errors import TmuxError
from loop_orchestrator.sessions import tmux as tmux_module
from loop_orchestrator.sessions.backend import LaunchSpec
from loop_orchestrator.sessions.tmux import TmuxBackend
from loop_orchestrator.sessions.tmuxargs import PANE_FIELDS, THEN, Sep
from loop_orchestrator.sessions.tmuxcontrol import (
    Block,
    Channel,
    Control,
    Lost,
    ProtocolError,
    Reader,
    answer,
    quote,
    reads_only,
    request_line,
    retry_after,
    supported,
)

#: the real tmux (a test may put a counting one first on PATH)
TMUX = shutil.which("tmux") or "tmux"


def tmux(socket: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = [TMUX, "-L", socket, *args]
    return subprocess.run(argv, capture_output=True, text=True, check=check)


def feed(lines: list[str]) -> list[Block]:
    reader = Reader()
    blocks = []
    for line in lines:
        block = reader.feed(line.encode())
        if block is not None:
            blocks.append(block)
    return blocks


# what a line carries ---------------------------------------------------------------------


def test_a_call_becomes_a_line_only_when_the_client_may_run_all_of_it() -> None:
    assert request_line(["list-panes", "-t", "%1", THEN, "capture-pane", "-p"]) == (
        "'list-panes' '-t' '%1' ; 'capture-pane' '-p'"
    )
    # kill-session ends the client's own session; -V is no command; new-session could
    # be on no session yet: a tmux process runs them
    for args in (["kill-session", "-t", "=x"], ["-V"], ["new-session", "-d"]):
        assert request_line(args) is None, args
    assert request_line(["display-message", "-p", "two\nlines"]) is None
    assert request_line(["display-message", "-p", "a\rb"]) is None
    assert request_line(["display-message", THEN, "kill-server"]) is None
    assert request_line([]) is None
    assert reads_only(["display-message", "-p", "x", THEN, "capture-pane", "-p"])
    assert not reads_only(["display-message", "-p", "x", THEN, "send-keys", "Enter"])


def test_quoting_keeps_tab_and_refuses_other_control_characters() -> None:
    assert quote("a\tb") == "'a\tb'"
    assert quote("it's") == '"it\'s"'
    assert quote("x'\"$\\") == '"x\'\\"\\$\\\\"'
    for bad in ("\x00", "\x1b[201~", "\x7f", "\n", os.fsdecode(b"caf\xe9")):
        assert quote(bad) is None


def test_a_client_is_attached_only_where_tmux_takes_its_flags_and_retried_ever_later() -> None:
    assert not supported(None) and not supported((3, 1)) and not supported((2, 9))
    assert supported((3, 2)) and supported((3, 5)) and supported((4, 0))
    waits = [retry_after(n) for n in range(1, 10)]
    assert waits[:3] == [1.0, 2.0, 4.0] and waits[-1] == 60.0 and waits == sorted(waits)


# the reader --------------------------------------------------------------------------------


def test_the_reader_takes_the_stream_tmux_writes() -> None:
    blocks = feed(
        [
            "%begin 100 7 0",
            "%end 100 7 0",
            "%session-changed $0 lo-t",  # a notification: passed over
            "%begin 100 9 1",
            "%begin 100 9 1",  # a begin inside a block: the pane's text
            "%end 1 2 3",  # an end of other numbers: text too
            "%end 100 9 1",
            "%begin 101 10 1",
            "no such pane",
            "%error 101 10 1",
        ]
    )
    assert [(b.number, b.ok, b.lines) for b in blocks] == [
        (7, True, []),
        (9, True, [b"%begin 100 9 1", b"%end 1 2 3"]),
        (10, False, [b"no such pane"]),
    ]
    assert answer(blocks[1:]) == (False, "%begin 100 9 1\n%end 1 2 3\n", "no such pane\n")


@pytest.mark.parametrize(
    ("name", "stream"),
    [
        # a pane printed the exact end of its capture's block: the real end is stray
        ("early end", ["%begin 5 40 1", "screen", "%end 5 40 1", "forged", "%end 5 40 1"]),
        # ... and a begin to reopen it for the real end: the number comes again
        (
            "reopened",
            ["%begin 5 40 1", "%end 5 40 1", "%begin 5 40 1", "made up", "%end 5 40 1"],
        ),
        # ... or a begin of a number to come: the real end lands inside it
        (
            "next number",
            ["%begin 5 40 1", "%end 5 40 1", "%begin 5 41 1", "x", "%end 5 40 1"],
        ),
        ("error then", ["%begin 5 40 1", "%error 5 40 1", "%end 5 40 1"]),
        ("text outside", ["%begin 5 40 1", "%end 5 40 1", "hello"]),
        ("numbers falling", ["%begin 5 40 1", "%end 5 40 1", "%begin 5 39 1"]),
    ],
)
def test_the_reader_refuses_a_stream_a_pane_could_forge(name: str, stream: list[str]) -> None:
    with pytest.raises(ProtocolError):
        feed(stream)


# real tmux -----------------------------------------------------------------------------------

PAINT = textwrap.dedent(
    r"""
    printf 'plain\n'
    printf 'tab\there  \n'
    printf 'back\\slash naïve 日本 \n'
    printf '%%end 1 2 3\n'
    printf 'ctl:\001:\033[31mred\033[0m\n'
    exec sleep 600
    """
)


def session(socket: str, tmp_path: Path, script: str = PAINT) -> str:
    """A session ``lo-t`` whose first pane runs ``script``; its pane id."""
    (tmp_path / "paint.sh").write_text(script, encoding="utf-8")
    out = tmux(
        socket,
        *("new-session", "-d", "-s", "lo-t", "-x", "200", "-y", "50", "-P", "-F"),
        *("#{pane_id}", "sh", str(tmp_path / "paint.sh")),
    )
    return out.stdout.strip()


def open_control(socket: str, session: str = "lo-t") -> Control:
    control = Control.open(["tmux", "-L", socket], session, dict(os.environ), 10)
    assert control is not None
    return control


def test_answers_are_those_of_a_tmux_process(tmux_socket: str, tmp_path: Path) -> None:
    pane = session(tmux_socket, tmp_path)
    wait_for(
        lambda: "red" in tmux(tmux_socket, "capture-pane", "-p", "-t", pane).stdout, 10, "paint"
    )
    control = open_control(tmux_socket)
    try:
        calls: list[list[str | Sep]] = [
            ["list-panes", "-s", "-t", "=lo-t", "-F", PANE_FIELDS],
            ["capture-pane", "-p", "-N", "-t", pane, "-S", "-5"],
            ["display-message", "-p", "-t", pane, PANE_FIELDS, THEN, "capture-pane", "-p"],
            ["display-message", "-p", "a", THEN, "capture-pane", "-p", "-t", "%999"],
            ["show-options", "-v", "-t", "=lo-t:", "@missing"],
        ]
        for args in calls:
            line = request_line(args)
            assert line is not None
            ok, out, err = control.run(line, 10)
            words = [a.value if not isinstance(a, str) else a for a in args]
            real = proc.run(["tmux", "-L", tmux_socket, *words], check=False, timeout=10)
            assert (ok, out) == (real.ok, real.stdout), args
            assert bool(err) == bool(real.stderr), (args, err, real.stderr)
    finally:
        control.close()


NASTY = [
    "a;",
    ";",
    "it's",
    'say "hi"',
    "back\\slash\\",
    "$HOME ${X} $(id)",
    "~/x",
    "~",
    "#{pane_id} #(id)",
    "%if",
    "{ }",
    "a b\tc",
    "naïve 日本 ✓",
    "-t",
    "'\"$\\'",
]


def test_every_word_reaches_tmux_as_written(tmux_socket: str, tmp_path: Path) -> None:
    session(tmux_socket, tmp_path)
    control = open_control(tmux_socket)
    try:
        for word in NASTY:
            line = request_line(["set-option", "-s", "@w", word])
            assert line is not None
            assert control.run(line, 10)[0], word
            shown = tmux(tmux_socket, "display-message", "-p", "#{@w}").stdout
            assert shown == word + "\n", word
    finally:
        control.close()


def test_the_client_resizes_nothing_sets_nothing_and_ends_with_close(
    tmux_socket: str, tmp_path: Path
) -> None:
    session(tmux_socket, tmp_path)
    environment = tmux(tmux_socket, "show-environment", "-t", "=lo-t").stdout
    env = dict(os.environ, LO_TEST_MARK="from-the-client", DISPLAY=":77")
    control = Control.open(["tmux", "-L", tmux_socket], "lo-t", env, 10)
    assert control is not None
    clients = tmux(tmux_socket, "list-clients", "-F", "#{client_flags}").stdout
    assert "control-mode" in clients and "ignore-size" in clients and "no-output" in clients
    size = tmux(
        tmux_socket, "list-windows", "-t", "=lo-t", "-F", "#{window_width}x#{window_height}"
    )
    assert size.stdout.strip() == "200x50"
    assert tmux(tmux_socket, "show-environment", "-t", "=lo-t").stdout == environment
    control.close()
    assert tmux(tmux_socket, "list-clients").stdout == ""
    with pytest.raises(ProcessLookupError):
        os.kill(control.pid, 0)  # reaped: no zombie either
    with pytest.raises(Lost) as lost:
        control.run("'display-message' '-p' 'x'", 5)
    assert not lost.value.sent


def test_a_client_for_no_session_is_none_and_leaves_nothing(
    tmux_socket: str, tmp_path: Path
) -> None:
    session(tmux_socket, tmp_path)
    started = time.monotonic()
    assert Control.open(["tmux", "-L", tmux_socket], "lo-none", dict(os.environ), 10) is None
    assert time.monotonic() - started < 5
    assert tmux(tmux_socket, "list-clients").stdout == ""


KILLED_OWNER = textwrap.dedent(
    """
    import os, sys, time
    from loop_orchestrator.sessions.tmuxcontrol import Control
    control = Control.open(["tmux", "-L", sys.argv[1]], "lo-t", dict(os.environ), 10)
    print(control.pid, flush=True)
    time.sleep(600)
    """
)


def test_a_killed_owner_leaves_no_client(tmux_socket: str, tmp_path: Path) -> None:
    session(tmux_socket, tmp_path)
    owner = subprocess.Popen(
        [sys.executable, "-c", KILLED_OWNER, tmux_socket], stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        client = int(owner.stdout.readline())
        assert "control-mode" in tmux(tmux_socket, "list-clients", "-F", "#{client_flags}").stdout
        owner.send_signal(signal.SIGKILL)
        owner.wait()

        def client_gone() -> bool:
            try:
                os.kill(client, 0)
            except ProcessLookupError:
                return True
            return False

        # (an orphan: init reaps it once it exits)
        wait_for(client_gone, 10, "the control client to exit with its owner")
        wait_for(lambda: tmux(tmux_socket, "list-clients").stdout == "", 5, "no client left")
    finally:
        owner.kill()
        owner.wait()


# the backend ---------------------------------------------------------------------------------


def spec(tmp_path: Path, task: str, script: str) -> LaunchSpec:
    (tmp_path / f"{task}.sh").write_text(script, encoding="utf-8")
    return LaunchSpec(task=task, argv=["sh", str(tmp_path / f"{task}.sh")], cwd=tmp_path, env={})


def serving(backend: TmuxBackend) -> TmuxBackend:
    backend.serve(lambda request: None, lambda *a, **k: None)
    return backend


def test_a_serving_backend_starts_one_tmux_process_for_many_calls(
    tmux_socket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = TmuxBackend("t")
    pane = backend.launch(spec(tmp_path, "a", "echo hello; exec sleep 600"))
    log = tmp_path / "tmux.log"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "tmux"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {TMUX} "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    serving(backend)
    try:
        for _ in range(20):
            assert backend.alive_panes() == {pane: True}
            state, text = backend.look(pane)
            assert state.alive and "hello" in text
        backend.send_keys(pane, "Enter")
        assert log.read_text().splitlines() == [
            f"-L {tmux_socket} -C attach-session -E -f no-output,ignore-size -t =lo-t"
        ]
    finally:
        backend.stop()
    assert tmux(tmux_socket, "list-clients").stdout == ""
    backend.alive_panes()  # (after stop: a tmux process again)
    assert len(log.read_text().splitlines()) == 2


FORGER = textwrap.dedent(
    """
    printf 'the real screen\\n'
    while [ ! -s {trigger} ]; do sleep 0.05; done
    cat {trigger}
    touch {trigger}.done
    exec sleep 600
    """
)


def screen_shows(backend: TmuxBackend, pane: str, text: str) -> bool:
    return text in backend.capture(pane)


def forged(kind: str, t: int, n: int) -> str:
    """What a pane prints to forge the end of its capture's block (number ``n``, the
    second ``t``) and what follows it."""
    end, begin = f"%end {t} {n} 1", f"%begin {t} {n} 1"
    return {
        "early end": f"{end}\nforged text\n",
        "reopened": f"{end}\n{begin}\nMADE UP\n",
        "next number": f"{end}\n%begin {t} {n + 1} 1\nMADE UP\n",
    }[kind]


def test_a_pane_that_prints_protocol_lines_is_read_truly_then_by_processes(
    tmux_socket: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The strongest forger: it knows its capture's command number and second (read here
    from the client's reader, as no pane can). Each forgery is caught, the look answered
    by a tmux process as the pane truly is; after ``Channel.LOSSES`` no client is tried."""
    backend = TmuxBackend("t")
    panes = {}
    for kind in ("early end", "reopened", "next number"):
        trigger = tmp_path / f"{kind[0]}.trigger"
        script = FORGER.format(trigger=trigger)
        panes[kind] = (backend.launch(spec(tmp_path, kind[0], script)), trigger)
    serving(backend)
    caplog.set_level(logging.WARNING, logger=Channel.__module__)
    try:
        for lost, (kind, (pane, trigger)) in enumerate(panes.items(), start=1):
            wait_for(partial(screen_shows, backend, pane, "the real screen"), 10, "the screen")
            control = backend.channel.control
            assert control is not None and not control.closed
            # the next look: display-message, then capture-pane (this number), then the
            # nonce; no tmux command runs between (the pane's news comes by a file)
            number = control._reader._last + 2
            stamp = int(time.time())
            trigger.write_text(
                "".join(forged(kind, t, number) for t in (stamp + 1, stamp)), encoding="utf-8"
            )
            done = Path(f"{trigger}.done")
            wait_for(done.exists, 10, "the forgery printed")
            started = time.monotonic()
            state, text = backend.look(pane)
            assert control.closed, kind  # caught (the numbers were right: else mere text)
            # at once: not after the call's timeout (20 s) for an answer the forgery hid
            assert time.monotonic() - started < 5, kind
            truth = tmux(tmux_socket, "capture-pane", "-p", "-N", "-t", pane, "-S", "0").stdout
            assert state.alive
            assert text == truth, kind  # the pane's screen as it is, forged lines and all
            assert backend.channel.losses == lost
            if lost < Channel.LOSSES:
                backend.alive_panes()  # (a new client for the next forger)
        assert [r for r in caplog.records if r.getMessage() == "tmux control client lost"]
        assert backend.channel.control is None or backend.channel.control.closed
        backend.alive_panes()
        assert backend.channel.control is None or backend.channel.control.closed  # no new client
        assert tmux(tmux_socket, "list-clients").stdout == ""
    finally:
        backend.stop()


def test_a_call_that_changes_things_is_not_run_twice_when_the_client_is_lost(
    tmux_socket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call that opens a window is not answered in time (tmux would run it after a
    shell command that takes 1.5 s): it may have run, so it fails as a timed-out tmux
    process does, and is not asked of a tmux process (which would have waited and
    succeeded); the next call that only reads has a client again."""
    backend = serving(TmuxBackend("t"))
    try:
        backend.launch(spec(tmp_path, "a", "exec sleep 600"))
        assert backend.channel.control is not None
        panes = len(backend.alive_panes())
        monkeypatch.setattr(tmux_module, "TMUX_TIMEOUT", 0.5)
        with pytest.raises(TmuxError, match="control client was lost"):
            backend._tmux("if-shell", "sleep 1.5", "new-window -d -t =lo-t: 'sleep 600'")
        monkeypatch.setattr(tmux_module, "TMUX_TIMEOUT", 20.0)
        time.sleep(1.5)
        assert len(backend.alive_panes()) in (panes, panes + 1)  # (at most once)
        assert backend.channel.control is not None and not backend.channel.control.closed
        assert backend.channel.losses == 1
    finally:
        backend.stop()


def test_a_client_lost_while_other_calls_wait_for_it_counts_once(
    tmux_socket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sessions' calls come from many threads at once: those waiting for the client when
    it is lost find it ended, and go to tmux processes; one client lost is one loss, not
    one per waiting call (``Channel.LOSSES`` of those would end the client for the run)."""
    backend = serving(TmuxBackend("t"))
    try:
        backend.launch(spec(tmp_path, "a", "exec sleep 600"))
        first = backend.channel.control
        assert first is not None
        panes = backend.alive_panes()
        monkeypatch.setattr(tmux_module, "TMUX_TIMEOUT", 0.5)
        failed: list[BaseException] = []

        def slow() -> None:  # (tmux answers it after 1.5 s: lost at 0.5 s)
            try:
                backend._tmux("if-shell", "sleep 1.5", "display-message -p late")
            except TmuxError as exc:
                failed.append(exc)

        slow_call = threading.Thread(target=slow)
        slow_call.start()
        time.sleep(0.2)
        waiting = [None] * (Channel.LOSSES + 1)
        with ThreadPoolExecutor(len(waiting)) as pool:  # (each waits for the same client)
            answers = list(pool.map(lambda _: backend.alive_panes(), waiting))
        slow_call.join()
        assert len(failed) == 1 and "control client was lost" in str(failed[0])
        assert answers == [panes] * len(waiting)  # answered by tmux processes
        assert first.closed and backend.channel.losses == 1
        monkeypatch.setattr(tmux_module, "TMUX_TIMEOUT", 20.0)
        backend.alive_panes()
        again = backend.channel.control
        assert again is not None and again is not first and not again.closed  # a new one
    finally:
        backend.stop()


def test_the_session_outlives_the_client_whatever_the_users_tmux_config(
    tmux_socket: str, tmp_path: Path
) -> None:
    """A user's ``set -g destroy-unattached on`` (in ~/.tmux.conf, which the run's server
    reads) would end the run's session, every agent with it, as soon as it is made, and
    when the supervisor's client detaches at its end."""
    (Path.home() / ".tmux.conf").write_text("set -g destroy-unattached on\n", encoding="utf-8")
    backend = TmuxBackend("t")
    pane = backend.launch(spec(tmp_path, "a", "exec sleep 600"))
    assert tmux(tmux_socket, "show-options", "-gv", "destroy-unattached").stdout == "on\n"
    serving(backend)
    assert backend.alive_panes() == {pane: True}
    assert "control-mode" in tmux(tmux_socket, "list-clients", "-F", "#{client_flags}").stdout
    backend.stop()
    wait_for(lambda: tmux(tmux_socket, "list-clients").stdout == "", 5, "the client gone")
    time.sleep(0.2)
    assert backend.session_exists() and backend.alive_panes() == {pane: True}


def test_a_process_holding_a_thousand_files_still_talks_to_its_client(
    tmux_socket: str, tmp_path: Path
) -> None:
    """A long-lived supervisor may hold many files: the client's pipe can then be past
    fd 1024, which select() refuses (ValueError)."""
    session(tmux_socket, tmp_path)
    with past_fd_1024():
        control = open_control(tmux_socket)
        try:
            assert control.run("'display-message' '-p' 'far'", 10) == (True, "far\n", "")
        finally:
            control.close()


def test_a_folder_whose_name_is_not_utf8_is_launched_in_all_the_same(
    tmux_socket: str, tmp_path: Path
) -> None:
    """A worktree path's bytes that are not UTF-8 cannot be written on a line: that call
    is a tmux process, which gets them as they are."""
    folder = tmp_path / os.fsdecode(b"caf\xe9")
    folder.mkdir()
    backend = serving(TmuxBackend("t"))
    try:
        backend.alive_panes()  # (no session yet)
        backend.ensure_session()
        pane = backend.launch(
            LaunchSpec(
                task="a", argv=["sh", "-c", "pwd > where; exec sleep 600"], cwd=folder, env={}
            )
        )
        wait_for((folder / "where").exists, 10, "the pane's pwd")
        assert os.fsencode((folder / "where").read_text(errors="surrogateescape").strip()) == (
            os.fsencode(folder)
        )
        assert backend.alive_panes() == {pane: True}
        assert backend.channel.control is not None and backend.channel.losses == 0
    finally:
        backend.stop()


def test_a_session_an_older_lo_orch_made_outlives_the_client_too(
    tmux_socket: str, tmp_path: Path
) -> None:
    """A run resumed on a session made before sessions were set to outlive their
    clients: it is set before the supervisor's client can detach."""
    tmux(tmux_socket, "new-session", "-d", "-s", "lo-t", "-x", "240", "-y", "60", "sleep 600")
    backend = serving(TmuxBackend("t"))
    pane = backend.launch(spec(tmp_path, "a", "exec sleep 600"))
    assert backend.channel.control is not None
    # (set while a client is attached: tmux ends an unattached session at once)
    tmux(tmux_socket, "set-option", "-g", "destroy-unattached", "on")
    backend.stop()
    wait_for(lambda: tmux(tmux_socket, "list-clients").stdout == "", 5, "the client gone")
    time.sleep(0.2)
    assert backend.session_exists() and backend.alive_panes()[pane]
