"""What every agent adapter shares: the context, the environment contract, the adapter
protocol. The factory is ``registry.make_adapter``.

``AgentContext.create`` fills a session's environment (``agent_env``: ``[agent] env`` plus
the contract variables ``LO_ORCH_TASK``, ``LO_ORCH_RUN_DIR``, ``LO_ORCH_BRIEF``,
``LO_ORCH_BIN`` and ``LO_ORCH_HOOK``, which win, and the supervisor's
``LO_ORCH_TMUX_SOCKET`` and ``PATH`` unless configured) and, with the sandbox on, its
``sandbox.Policy``. ``launch_spec_for`` is how every adapter ends ``launch_spec``: the one
place an agent's argv is put inside the sandbox. ``UnattendedAdapter`` is the common start
of the adapters of CLIs lo-orch can only run unattended (Codex CLI, Gemini CLI). Start-up
dialogs live in ``dialogs.py``.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from loop_orchestrator.agents.dialogs import Dialog, Woken, wait_until_ready
from loop_orchestrator.config import AgentConfig, Settings
from loop_orchestrator.errors import AgentError, AgentStartError, ConfigError
from loop_orchestrator.resources import lo_orch_hook, session_bin
from loop_orchestrator.sessions import sandbox
from loop_orchestrator.sessions.backend import LaunchSpec, SessionBackend

log = logging.getLogger(__name__)


def _agent_config(settings: Settings | AgentConfig) -> AgentConfig:
    return settings.agent if isinstance(settings, Settings) else settings


def agent_env(
    *, task: str, run_dir: Path, brief: Path, settings: Settings | AgentConfig
) -> dict[str, str]:
    """The environment added to an agent pane (contract, docs/design.md section 6)."""
    agent = _agent_config(settings)
    env = dict(agent.env)
    contract = {
        "LO_ORCH_TASK": task,
        "LO_ORCH_RUN_DIR": str(Path(run_dir).absolute()),
        "LO_ORCH_BRIEF": str(Path(brief).absolute()),
        "LO_ORCH_BIN": session_bin(),
        "LO_ORCH_HOOK": lo_orch_hook(),
    }
    overridden = sorted(k for k in contract if k in env and env[k] != contract[k])
    if overridden:
        log.warning("agent.env cannot override contract variables: %s", ", ".join(overridden))
    env.update(contract)
    socket = os.environ.get("LO_ORCH_TMUX_SOCKET")
    if socket:
        env.setdefault("LO_ORCH_TMUX_SOCKET", socket)
    # A pane starts from the tmux server's environment, which may be older than ours:
    # the agent should find the same programs the supervisor found.
    if "PATH" in os.environ:
        env.setdefault("PATH", os.environ["PATH"])
    return env


@dataclass
class AgentContext:
    task: str
    run_name: str
    repo: Path
    worktree: Path
    run_dir: Path
    brief_path: Path
    session_id: str | None
    env: dict[str, str] = field(default_factory=dict)
    #: what the session may write (None: not sandboxed)
    sandbox: sandbox.Policy | None = None

    @classmethod
    def create(
        cls,
        *,
        task: str,
        run_name: str,
        repo: Path,
        worktree: Path,
        run_dir: Path,
        brief_path: Path,
        settings: Settings | AgentConfig,
        session_id: str | None = None,
    ) -> AgentContext:
        env = agent_env(task=task, run_dir=run_dir, brief=brief_path, settings=settings)
        policy = None
        if isinstance(settings, Settings) and sandbox.require(settings):
            policy = sandbox.Policy.for_task(
                repo=repo, run_dir=run_dir, worktree=worktree, task=task, run=run_name
            )
        return cls(task, run_name, repo, worktree, run_dir, brief_path, session_id, env, policy)


def launch_spec_for(ctx: AgentContext, argv: list[str], env: dict[str, str]) -> LaunchSpec:
    """The launch of ``argv`` in ``ctx``'s worktree, inside its sandbox when it has one."""
    spec = LaunchSpec(task=ctx.task, cwd=ctx.worktree, argv=argv, env=env)
    return sandbox.confine(spec, ctx.sandbox) if ctx.sandbox is not None else spec


class AgentAdapter(Protocol):
    """Everything the supervisor and the sessions' code use of an agent kind."""

    name: str
    #: it runs the plugin's hooks (a prompt's arrival is confirmed by UserPromptSubmit)
    uses_hooks: bool
    #: prompts go as bracketed pastes (False: typed, for a program that mishandles pastes)
    bracketed_paste: bool
    #: the CLI names its own sessions (Cline): the task's id is the one its first attested
    #: hook reports, never one the supervisor chooses
    reports_session_id: bool
    #: a hook reports the session's start (SessionStart) before it can take a prompt: the
    #: wait for its ready screen is woken by it (``Sessions._starting``)
    reports_start: bool

    def prepare(self, ctx: AgentContext) -> None: ...

    def launch_spec(self, ctx: AgentContext, *, resume: bool) -> LaunchSpec: ...

    def wait_ready(
        self, backend: SessionBackend, pane_id: str, *, timeout: float, woken: Woken | None = None
    ) -> None: ...

    def is_ready(self, screen: str) -> bool: ...

    def wait_idle(self, backend: SessionBackend, pane_id: str, *, timeout: float) -> None:
        """Return once the agent can take a prompt (called before each one is sent): a
        no-op for an agent that queues a prompt sent while it works; gives up quietly
        after ``timeout``."""


@runtime_checkable
class ConfirmsFromStore(Protocol):
    """An adapter without hooks whose CLI records each prompt it takes in files of its own:
    a prompt's arrival is confirmed from them, never only from the screen."""

    def prompt_check(self, worktree: Path, text: str) -> Callable[[], bool]:
        """Called before ``text`` is sent to the session working in ``worktree``: a check
        that is true once the CLI recorded that prompt (not one it had before)."""
        ...


class UnattendedAdapter:
    """The common start of an adapter for an agent CLI that lo-orch runs only unattended
    (Codex CLI, Gemini CLI): it refuses every other ``[agent] permission_mode`` and finds
    the program (``[agent] command``, or ``program`` while that is left at its default)."""

    #: ``[agent] kind``
    name: str
    #: the CLI's name in messages, the program run by default, the command installing it
    label: str
    program: str
    install: str
    #: what ``bypassPermissions`` means for this CLI (said in the hint that asks for it)
    bypass: str
    #: screens that end the start (pattern, what, hint), the dialogs answered on the way,
    #: and how long the ready screen must stay unchanged
    fatal_screens: tuple[tuple[re.Pattern[str], str, str], ...] = ()
    dialogs: tuple[Dialog, ...] = ()
    ready_stable: float = 0.0
    reports_session_id: bool = False
    reports_start: bool = False

    def __init__(self, settings: AgentConfig, repo: Path) -> None:
        self.settings = settings
        self.repo = repo
        if settings.permission_mode != "bypassPermissions":
            msg = (
                f"[agent] permission_mode {settings.permission_mode!r} has no {self.label} "
                "equivalent lo-orch can run unattended"
            )
            raise ConfigError(
                msg,
                hint=f'Use permission_mode = "bypassPermissions" with kind = "{self.name}" '
                f"({self.bypass}).",
            )

    def is_ready(self, screen: str) -> bool:
        raise NotImplementedError

    def wait_idle(self, backend: SessionBackend, pane_id: str, *, timeout: float) -> None:
        """A no-op unless the CLI drops a prompt sent while it works (Gemini CLI's does)."""

    def wait_ready(
        self, backend: SessionBackend, pane_id: str, *, timeout: float, woken: Woken | None = None
    ) -> None:
        """Wait until ``is_ready``, answering ``dialogs``; a ``fatal_screens`` screen raises."""

        def ready(screen: str) -> bool:
            for pattern, what, hint in self.fatal_screens:
                if pattern.search(screen):
                    raise AgentStartError(what, screen, hint=hint)
            return self.is_ready(screen)

        wait_until_ready(
            backend,
            pane_id,
            is_ready=ready,
            timeout=timeout,
            what=self.label,
            dialogs=self.dialogs,
            stable_for=self.ready_stable,
            woken=woken,
        )

    def _command(self, env: Mapping[str, str]) -> list[str]:
        command = self.settings.command.strip()
        if not command or command == "claude":  # the default of [agent] command
            command = self.program
        argv = [command] if Path(command).is_file() else shlex.split(command)
        exe = argv[0]
        found = exe if "/" in exe else shutil.which(exe, path=env.get("PATH"))
        if not found or not Path(found).exists():
            msg = f"{exe} not found"
            raise AgentError(
                msg,
                hint=f"Install {self.label} (`{self.install}`) or set [agent] command to its path.",
            )
        return argv
