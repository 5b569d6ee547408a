"""Notifications: each event once, in order, as JSON, never holding anyone up."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from helpers.runs import edit_script, only, received, recorder
from helpers.wait import wait_for

from loop_orchestrator.commands.plan import plan_from_file
from loop_orchestrator.config import NotifyConfig, Settings
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate import private
from loop_orchestrator.sessions.tmuxcontrol import Control
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.supervisor import notify
from loop_orchestrator.supervisor.main import Supervisor

FIELDS = {"id", "event", "run", "repo", "task", "message", "at"}
SECRET = "sk-ant-not-a-real-token-0123456789"


def settings_with(files: demo.DemoFiles, command: str) -> Settings:
    settings = demo.demo_settings(files.script)
    settings.notify = NotifyConfig(command=command, timeout=5)
    return settings


def test_each_event_reaches_the_command_once_in_order_as_json(
    demo_files: demo.DemoFiles,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)  # must never travel in an event
    repo = demo_files.repo
    only(demo_files, "slug")
    edit_script(
        demo_files,
        lambda d: d["slug"].update(
            plan=[{"signal": {"phase": "blocked", "note": "which slug rules?"}}]
        ),
    )
    command, out = recorder(tmp_path)
    settings = settings_with(demo_files, command)
    plan_from_file(repo, demo_files.plan, settings)
    assert [e["event"] for e in received(out)] == ["gate1_waiting"]
    runs.approve_plan(repo)

    first = Supervisor(repo, settings).run()
    assert first.state == "blocked"
    # a restarted supervisor (the task still blocked, the same outcome) sends nothing again
    again = Supervisor(repo, settings).run()
    assert again.state == "blocked"

    events = received(out)
    assert [(e["event"], e["task"]) for e in events] == [
        ("gate1_waiting", None),
        ("task_blocked", "slug"),
        ("run_finished", None),
    ]
    for e in events:
        assert set(e) == FIELDS
        assert e["run"] == "demo" and e["repo"] == str(repo)
    assert "which slug rules?" in events[1]["message"]
    assert "lo-orch retry slug" in events[1]["message"]
    assert events[2]["message"].startswith("the supervisor stopped (blocked)")
    assert len({e["id"] for e in events}) == 3
    raw = out.read_text(encoding="utf-8")
    assert SECRET not in raw and "ANTHROPIC_API_KEY" not in raw and os.environ["HOME"] not in raw
    # what was sent is recorded in the run's private folder, out of the agents' reach
    sent = private.run_dir(repo, "demo") / notify.FOLDER / notify.SENT_FILE
    assert [json.loads(line)["id"] for line in sent.read_text().splitlines()] == [
        e["id"] for e in events
    ]


def test_gate2_waiting_is_sent_when_the_run_is_ready(
    demo_files: demo.DemoFiles,
    tmp_path: Path,
) -> None:
    repo = demo_files.repo
    only(demo_files, "tokenize")
    command, out = recorder(tmp_path)
    settings = settings_with(demo_files, command)
    plan_from_file(repo, demo_files.plan, settings)
    runs.approve_plan(repo)
    assert Supervisor(repo, settings).run().state == "review"
    assert Supervisor(repo, settings).run().state == "review"  # already waiting: silent
    events = received(out)
    assert [e["event"] for e in events] == ["gate1_waiting", "gate2_waiting", "run_finished"]
    assert "lo-orch merge" in events[1]["message"]


def test_a_hanging_or_failing_command_holds_nobody_up(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    pidfile = tmp_path / "pid"
    command, out = recorder(tmp_path)
    hang = NotifyConfig(
        command=shlex.join(["sh", "-c", f"echo $$ > {pidfile}; sleep 60"]),
        timeout=1,
        desktop=False,
        tmux=False,
    )
    notifier = notify.Notifier(repo, "hung", hang)
    started = time.monotonic()
    assert notifier.notify("task_blocked", "a", "first", "t")
    assert notifier.notify("task_blocked", "b", "second", "t")
    assert not notifier.notify("task_blocked", "a", "first again", "t")  # once
    assert time.monotonic() - started < 0.5  # the caller never waits for the command
    notifier.close(timeout=10)
    elapsed = time.monotonic() - started
    assert 2 <= elapsed < 6, elapsed  # two events, each killed after its 1 s timeout
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the hung command's whole group was killed
    # a command that fails, or does not exist, does not stop the next event
    for bad in ("sh -c 'exit 3'", "/nonexistent/notify-me"):
        notifier = notify.Notifier(
            repo, "failing", NotifyConfig(command=bad, timeout=2, desktop=False, tmux=False)
        )
        notifier.notify("run_finished", bad, "x")
        notifier.close(timeout=5)
    good = notify.Notifier(
        repo, "failing", NotifyConfig(command=command, desktop=False, tmux=False)
    )
    good.notify("run_finished", "after", "still sent")
    good.close(timeout=10)
    assert [e["message"] for e in received(out)] == ["still sent"]


def test_desktop_and_tmux_channels_use_only_what_is_on_path(tmp_path: Path) -> None:
    """notify-send where present, else osascript; the text travels as arguments."""
    repo = tmp_path / "repo"
    repo.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    for name in ("notify-send", "osascript"):
        tool = bin_dir / name
        tool.write_text(f"#!/bin/sh\nprintf '%s\\n' {name} \"$@\" >> {log}\n", encoding="utf-8")
        tool.chmod(0o755)
    config = NotifyConfig(tmux=False)
    for present in (("notify-send", "osascript"), ("osascript",), ()):
        log.unlink(missing_ok=True)

        def which(name: str, present: tuple[str, ...] = present) -> str | None:
            return str(bin_dir / name) if name in present else None

        notifier = notify.Notifier(repo, f"r{len(present)}", config, which=which)
        notifier.notify("permission_request", "x", "asks to use Bash: rm -rf '$(x)'", "t")
        notifier.close(timeout=10)
        calls = log.read_text().splitlines() if log.exists() else []
        if not present:
            assert calls == []
        else:
            assert calls[0] == present[0]
            assert "t: asks to use Bash: rm -rf '$(x)'" in calls


def test_a_tmux_notice_reaches_the_persons_terminal_not_the_supervisors_client(
    tmp_path: Path, tmux_socket: str
) -> None:
    """Left to tmux, ``display-message`` goes to one client of the session: the
    supervisor's control-mode client, attached all run long, as likely as the person's
    terminal (here a client in a pane of an outer tmux server, whose screen is read)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    tmux = shutil.which("tmux")
    assert tmux is not None
    subprocess.run(
        [tmux, "-L", tmux_socket, "new-session", "-d", "-s", "lo-r", "sleep 600"], check=True
    )
    outer = f"{tmux_socket}-outer"
    attach = f"env -u TMUX {tmux} -L {tmux_socket} attach-session -t =lo-r"
    subprocess.run(
        [tmux, "-L", outer, "new-session", "-d", "-s", "o", "-x", "120", "-y", "10", attach],
        check=True,
    )
    control = None
    try:
        wait_for(
            lambda: (
                "/dev/"
                in subprocess.run(
                    [tmux, "-L", tmux_socket, "list-clients", "-F", "#{client_name}"],
                    capture_output=True,
                    text=True,
                    check=False,
                ).stdout
            ),
            10,
            "the person's terminal attached",
        )
        control = Control.open([tmux, "-L", tmux_socket], "lo-r", dict(os.environ), 10)
        assert control is not None  # (attached last: the client tmux would pick)
        notifier = notify.Notifier(
            repo,
            "r",
            NotifyConfig(desktop=False, tmux=True),
            tmux_socket=tmux_socket,
            tmux_session="lo-r",
        )
        notifier.notify("permission_request", "k", "asks to use Bash", "t1")
        notifier.close(timeout=10)

        def shown() -> str:
            return subprocess.run(
                [tmux, "-L", outer, "capture-pane", "-p", "-t", "o"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout

        wait_for(lambda: "lo-orch: t1: asks to use Bash" in shown(), 5, "the notice")
    finally:
        if control is not None:
            control.close()
        subprocess.run([tmux, "-L", outer, "kill-server"], capture_output=True, check=False)
