"""The generic command adapter: templates, readiness and both delivery modes, in real tmux."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import pytest
from helpers.wait import wait_for

from loop_orchestrator.agents.command import STABLE_SECONDS, CommandAdapter, render_command
from loop_orchestrator.agents.contract import (
    AgentContext,
)
from loop_orchestrator.agents.registry import make_adapter
from loop_orchestrator.config import AgentConfig, Settings
from loop_orchestrator.errors import AgentError, AgentStartError, ConfigError
from loop_orchestrator.resources import python_module_argv
from loop_orchestrator.sessions.delivery import Deliverer
from loop_orchestrator.sessions.tmux import TmuxBackend

LINE_AGENT = """\
import sys
out = sys.argv[1]
print("line agent for", sys.argv[2])
while True:
    sys.stdout.write("ready> ")
    sys.stdout.flush()
    line = sys.stdin.readline()
    if not line:
        break
    with open(out, "a", encoding="utf-8") as fh:
        fh.write(line)
    print(f"got {len(line)} chars")
"""


def context(tmp: Path, settings: AgentConfig, task: str = "api") -> AgentContext:
    worktree = tmp / "work tree" / task  # a space: placeholders must stay one argument
    worktree.mkdir(parents=True, exist_ok=True)
    return AgentContext.create(
        task=task,
        run_name="c",
        repo=tmp,
        worktree=worktree,
        run_dir=tmp / ".orchestration",
        brief_path=tmp / ".orchestration" / "briefs" / f"{task}.md",
        settings=settings,
    )


def launched(tmp: Path, settings: AgentConfig) -> tuple[CommandAdapter, TmuxBackend, str]:
    """The adapter and backend for ``settings`` and the pane it launched for task ``api``."""
    adapter = CommandAdapter(settings, tmp)
    backend = TmuxBackend("c")
    pane = backend.launch(adapter.launch_spec(context(tmp, settings), resume=False))
    return adapter, backend, pane


def test_template_is_split_then_filled_per_word(tmp_path: Path) -> None:
    argv = render_command(
        "codex --cd {worktree} 'read {brief} first' --name=task-{task}",
        ["--extra={task}"],
        task="api",
        brief=Path("/r/b f.md"),
        worktree=Path("/w t/api"),
    )
    assert argv == [
        "codex",
        "--cd",
        "/w t/api",
        "read /r/b f.md first",
        "--name=task-api",
        "--extra=api",
    ]
    with pytest.raises(ConfigError, match="cannot be split"):
        render_command("codex 'unclosed", [], task="t", brief=Path("b"), worktree=Path("w"))
    with pytest.raises(ConfigError, match="empty"):
        CommandAdapter(AgentConfig(kind="command", command="  "), tmp_path)


def test_bad_ready_pattern_and_missing_program_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="ready_pattern is not a valid regular expression"):
        CommandAdapter(
            AgentConfig(kind="command", command="x", ready_pattern="(unclosed"), tmp_path
        )
    settings = AgentConfig(kind="command", command="no-such-agent-cli --yes")
    with pytest.raises(AgentError, match="'no-such-agent-cli' was not found"):
        CommandAdapter(settings, tmp_path).prepare(context(tmp_path, settings))
    settings = AgentConfig(kind="command", command=str(tmp_path / "missing" / "agent"))
    with pytest.raises(AgentError, match="was not found"):
        CommandAdapter(settings, tmp_path).prepare(context(tmp_path, settings))


def test_factory_and_delivery_mode(tmp_path: Path) -> None:
    settings = Settings.model_validate(
        {"agent": {"kind": "command", "command": "aider", "delivery": "type"}}
    )
    adapter = make_adapter(settings, tmp_path)
    assert isinstance(adapter, CommandAdapter)
    assert adapter.uses_hooks is False
    assert adapter.bracketed_paste is False
    settings.agent.delivery = "paste"
    assert make_adapter(settings, tmp_path).bracketed_paste is True


def test_line_oriented_agent_gets_a_typed_prompt_as_one_line(
    tmux_socket: str, tmp_path: Path
) -> None:
    script = tmp_path / "line_agent.py"
    script.write_text(LINE_AGENT, encoding="utf-8")
    settings = AgentConfig(
        kind="command",
        command=f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} "
        "{worktree}/received.txt {task}",
        ready_pattern=r"^ready> ",
        delivery="type",
    )
    adapter = CommandAdapter(settings, tmp_path)
    ctx = context(tmp_path, settings)
    adapter.prepare(ctx)
    backend = TmuxBackend("c")
    pane = backend.launch(adapter.launch_spec(ctx, resume=False))
    adapter.wait_ready(backend, pane, timeout=20)
    assert "line agent for api" in backend.capture(pane, 0)

    received = ctx.worktree / "received.txt"
    prompt = "Implement the task.\nIt's in $(brief) and `here`.\nThanks, café."
    Deliverer().deliver(backend, pane, prompt, bracketed=adapter.bracketed_paste, timeout=15)
    wait_for(received.exists, 10, "the first prompt to arrive")
    assert received.read_text(encoding="utf-8") == prompt.replace("\n", " ") + "\n"
    second = "A second prompt\nin two lines"
    Deliverer().deliver(backend, pane, second, bracketed=False, timeout=15)
    wait_for(lambda: received.read_text().count("\n") == 2, 10, "the second prompt to arrive")
    assert received.read_text().splitlines()[1] == "A second prompt in two lines"


def test_bracketed_paste_agent_through_a_command_template(tmux_socket: str, tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text("default: {}\n", encoding="utf-8")
    record = tmp_path / "rec"
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    settings = AgentConfig(
        kind="command",
        command=shlex.join(
            [
                *python_module_argv("loop_orchestrator.simulator.agent"),
                "--script",
                str(script),
                "--plugin-dir",
                str(plugin),
                "--record-dir",
                str(record),
            ]
        )
        + " --task {task}",
        ready_pattern="^│ \u276f",
        delivery="paste",
    )
    adapter = CommandAdapter(settings, tmp_path)
    ctx = context(tmp_path, settings, task="web")
    backend = TmuxBackend("c")
    pane = backend.launch(adapter.launch_spec(ctx, resume=False))
    adapter.wait_ready(backend, pane, timeout=30)
    prompt = ('Build the page: "quotes", $(cmd), `ticks`, ünïcode 日本.\n' * 200)[:10_000]
    Deliverer().deliver(backend, pane, prompt, bracketed=adapter.bracketed_paste)  # screen
    wait_for(lambda: (record / "web-1.txt").exists(), 10, "web-1 to be recorded")
    assert (record / "web-1.txt").read_bytes() == prompt.encode("utf-8")
    assert not (record / "web-2.txt").exists()


def test_without_ready_pattern_a_stable_screen_counts_as_ready(
    tmux_socket: str, tmp_path: Path
) -> None:
    settings = AgentConfig(kind="command", command="sh -c 'echo hello from {task}; exec cat'")
    adapter, backend, pane = launched(tmp_path, settings)
    started = time.monotonic()
    adapter.wait_ready(backend, pane, timeout=20)
    # ready only after the screen held still for STABLE_SECONDS, not at its first text
    assert time.monotonic() - started >= STABLE_SECONDS
    assert "hello from api" in backend.capture(pane, 0)


def test_an_agent_that_exits_at_start_fails_loudly(tmux_socket: str, tmp_path: Path) -> None:
    settings = AgentConfig(
        kind="command",
        command="sh -c 'echo cannot start: no API key >&2; exit 42'",
        ready_pattern="never",
    )
    adapter, backend, pane = launched(tmp_path, settings)
    with pytest.raises(AgentStartError) as info:
        adapter.wait_ready(backend, pane, timeout=20)
    assert "exited with status 42" in info.value.message
    assert "cannot start: no API key" in info.value.screen


def test_an_agent_that_never_gets_ready_times_out_with_its_screen(
    tmux_socket: str, tmp_path: Path
) -> None:
    settings = AgentConfig(
        kind="command", command="sh -c 'echo Choose a model:; exec cat'", ready_pattern="^> $"
    )
    adapter, backend, pane = launched(tmp_path, settings)
    with pytest.raises(AgentStartError) as info:
        adapter.wait_ready(backend, pane, timeout=2)
    assert "not ready after 2s" in info.value.message
    assert "Choose a model:" in info.value.screen
