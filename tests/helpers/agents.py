"""The real agent CLIs the tests drive (installed by scripts/bootstrap) and the scripted
endpoint that plays their model."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest

from helpers import REPO_ROOT
from helpers.git import git
from loop_orchestrator.agents.contract import AgentContext
from loop_orchestrator.config import AgentConfig, AuditorConfig, RunConfig, Settings
from loop_orchestrator.runstate.journal import Record
from loop_orchestrator.runstate.state import TaskStatus
from loop_orchestrator.sessions import procinfo
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.simulator.endpoint import ModelEndpoint
from loop_orchestrator.simulator.script import load_script
from loop_orchestrator.supervisor.main import Outcome, Supervisor
from loop_orchestrator.workspace import integration
from loop_orchestrator.workspace.integration import Review

Kind = Literal["claude", "codex", "gemini", "qwen", "cline", "vibe", "aider", "opencode"]
#: kind -> (its LO_ORCH_TEST_ variable, its folder under .cache, its npm binary,
#: the scripts/bootstrap option that installs it)
_CLIS: dict[Kind, tuple[str, str, str, str]] = {
    "claude": ("LO_ORCH_TEST_CLAUDE", "claude-code", "claude", "--claude"),
    "codex": ("LO_ORCH_TEST_CODEX", "codex", "codex", "--agents"),
    "gemini": ("LO_ORCH_TEST_GEMINI", "gemini-cli", "gemini", "--agents"),
    "qwen": ("LO_ORCH_TEST_QWEN", "qwen-code", "qwen", "--agents"),
    "cline": ("LO_ORCH_TEST_CLINE", "cline", "cline", "--agents"),
    "vibe": ("LO_ORCH_TEST_VIBE", "vibe", "vibe", "--agents"),
    "aider": ("LO_ORCH_TEST_AIDER", "aider", "aider", "--agents"),
    "opencode": ("LO_ORCH_TEST_OPENCODE", "opencode", "opencode", "--agents"),
}
#: the CLIs scripts/bootstrap installs from PyPI, in a venv of their own: kind -> its path
#: under .cache
_VENV_CLIS: dict[Kind, str] = {"vibe": "vibe/venv/bin/vibe", "aider": "aider/bin/aider"}

E = TypeVar("E", bound=ModelEndpoint)


def agent_cli(kind: Kind) -> Path:
    """The real ``kind`` CLI: $LO_ORCH_TEST_<KIND>, else the one scripts/bootstrap put in
    .cache, else the one on PATH; fails the test (saying how to install it) when none is."""
    variable, folder, name, option = _CLIS[kind]
    explicit = os.environ.get(variable)
    found = (
        Path(explicit)
        if explicit
        else REPO_ROOT / ".cache" / _VENV_CLIS[kind]
        if kind in _VENV_CLIS
        else REPO_ROOT / ".cache" / folder / "node_modules" / ".bin" / name
    )
    if not found.exists():
        which = None if explicit else shutil.which(name)
        if which is None:
            pytest.fail(
                f"the {name} CLI is missing: `scripts/bootstrap {option}` installs it "
                f"(or set {variable} to its path)"
            )
        found = Path(which)
    return found


@contextlib.contextmanager
def endpoint_for(kind: type[E], files: demo.DemoFiles) -> Iterator[E]:
    """The scripted model of the demo's script, served in ``kind``'s API format, logging
    every request to requests.jsonl beside the demo project."""
    with kind(
        load_script(files.script, model=True),
        log_path=files.root / "requests.jsonl",
        poll_interval=0.05,
    ) as ep:
        yield ep


def claude_settings(
    endpoint: ModelEndpoint, *, token: str | None = None, stall_minutes: float = 5, **agent: Any
) -> Settings:
    """Settings for whole runs with the real Claude Code CLI, its model ``endpoint``."""
    env = {**endpoint.env(), "IS_SANDBOX": "1"}
    if token is not None:
        env["ANTHROPIC_AUTH_TOKEN"] = token
    return Settings(
        agent=AgentConfig(
            kind="claude", command=str(agent_cli("claude")), env=env, ready_timeout=90, **agent
        ),
        auditor=AuditorConfig(llm="off"),
        run=RunConfig(concurrency=4, stall_minutes=stall_minutes, stagger_seconds=0.1),
    )


def pane_pid(socket: str, pane_id: str) -> int:
    """The pid of the process tmux runs in ``pane_id`` (on the private ``socket``)."""
    out = subprocess.run(
        ["tmux", "-L", socket, "display-message", "-p", "-t", pane_id, "#{pane_pid}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    )
    return int(out.stdout.strip())


def kill_in_pane(
    socket: str, pane_id: str, matches: Callable[[list[bytes]], bool], *, first: bool = False
) -> list[int]:
    """SIGKILL the processes of a pane this test's run started (the pane's own, then those
    below it) whose argv ``matches`` (only the first such with ``first``); their pids."""
    top = pane_pid(socket, pane_id)
    below = [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and top in procinfo.ancestors(int(p.name))
    ]
    killed = []
    for pid in [top, *below]:
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if matches(argv):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                if first:
                    break
    return killed


def run_and_merge(files: demo.DemoFiles, settings: Settings) -> Review:
    """The demo's run to Gate 2 (the run must end in review), then merged; its review."""
    outcome = Supervisor(files.repo, settings).run()
    assert outcome.state == "review", outcome.message
    review = integration.review(files.repo)
    integration.merge(files.repo, review)
    return review


def sessions_by_task(replies: list[dict[str, Any]]) -> dict[str, set[str]]:
    """task -> the sessions the model endpoint replied to for it."""
    by_task: dict[str, set[str]] = {}
    for r in replies:
        by_task.setdefault(r["task"], set()).add(r["session"])
    return by_task


def run_killing_mid_task(
    endpoint: ModelEndpoint,
    files: demo.DemoFiles,
    settings: Settings,
    socket: str,
    matches: Callable[[list[bytes], TaskStatus], bool],
    *,
    first: bool = False,
) -> tuple[Outcome, list[float]]:
    """The demo's run; once tokenize's session has written a file (a Write reached the
    endpoint), the processes of its pane whose argv ``matches`` (given tokenize's status)
    are killed. (The run's outcome, when each kill was.) The script's pause after that
    Write, there for the kill to land in, is skipped after it: the relaunched session
    asks for the step after the Write again."""
    killed_at: list[float] = []

    def kill_mid_task() -> None:
        endpoint.wait_for(lambda rs: any(r.get("tool") == "Write" for r in rs), 120)
        st = Record.open(files.repo, "demo").task("tokenize")
        pids = kill_in_pane(socket, str(st.pane_id), lambda argv: matches(argv, st), first=first)
        killed_at.extend(time.time() for _ in pids)
        endpoint.skip_delays()

    killer = threading.Thread(target=kill_mid_task)
    killer.start()
    outcome = Supervisor(files.repo, settings).run()
    killer.join(timeout=5)
    return outcome, killed_at


def bare_context(root: Path, settings: Settings) -> AgentContext:
    """Task api's context in run r under ``root`` (worktree wt, run folder .orchestration,
    brief b.md), for what an adapter would launch; ``root`` is made a git repository, as a
    run's is, when it is not one."""
    if not (root / ".git").exists():
        git(root, "init", "-q")
    return AgentContext.create(
        task="api",
        run_name="r",
        repo=root,
        worktree=root / "wt",
        run_dir=root / ".orchestration",
        brief_path=root / "b.md",
        settings=settings,
        session_id="sid",
    )
