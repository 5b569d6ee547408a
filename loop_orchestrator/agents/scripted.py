"""``[agent] kind = "scripted"``: the adapter of the scripted agent, the stand-in for a model
that tests and the demo run (``simulator/agent.py``, the program in the pane).

The program is its own module and imports nothing of the supervisor's (no config models,
no session backend): it starts in every pane of every scripted run, and what it imports
is what each of those starts costs.
"""

from __future__ import annotations

import threading
from pathlib import Path

from loop_orchestrator import resources
from loop_orchestrator.agents.contract import AgentContext, launch_spec_for
from loop_orchestrator.agents.dialogs import Woken, find_dialog, wait_until_ready
from loop_orchestrator.config import AgentConfig
from loop_orchestrator.errors import ConfigError
from loop_orchestrator.files import stat_key
from loop_orchestrator.sessions.backend import LaunchSpec, SessionBackend
from loop_orchestrator.simulator.agent import READY_RE
from loop_orchestrator.simulator.script import load_script

#: the module run in the pane
PROGRAM = "loop_orchestrator.simulator.agent"


class ScriptedAdapter:
    """``[agent] kind = "scripted"``: runs ``PROGRAM`` in the pane with the YAML script."""

    name = "scripted"
    uses_hooks = True  # it fires the same plugin hooks as Claude Code
    bracketed_paste = True
    reports_session_id = False
    reports_start = True  # (SessionStart, as Claude Code)

    def __init__(self, settings: AgentConfig, repo: Path) -> None:
        if not settings.script:
            msg = "[agent] kind = 'scripted' needs [agent] script"
            raise ConfigError(
                msg,
                hint="Set script to a YAML file (relative to the repository); "
                "see loop_orchestrator/simulator/script.py.",
            )
        path = Path(settings.script).expanduser()
        self.script_path = (path if path.is_absolute() else repo / path).absolute()
        self.settings = settings
        self.repo = repo
        #: the script file (size, mtime, ctime, inode) last validated
        self._valid: tuple[int, int, int, int] | None = None
        self._validating = threading.Lock()  # (the first launches at once: one reads it)

    def prepare(self, ctx: AgentContext) -> None:
        """Validate the script now, so a typo fails the launch with the field named (once
        per version of the file: every launch of a run asks)."""
        with self._validating:
            try:
                version = stat_key(self.script_path.stat())
            except OSError:
                version = None
            if version is None or version != self._valid:
                load_script(self.script_path)
                self._valid = version

    def launch_spec(self, ctx: AgentContext, *, resume: bool) -> LaunchSpec:
        argv = [
            *resources.python_module_argv(PROGRAM),
            "--script",
            str(self.script_path),
        ]
        if ctx.session_id:
            argv += ["--resume" if resume else "--session-id", ctx.session_id]
        argv += list(self.settings.args)
        return launch_spec_for(ctx, argv, dict(ctx.env))

    def is_ready(self, screen: str) -> bool:
        return bool(READY_RE.search(screen)) and find_dialog(screen) is None

    def wait_idle(self, backend: SessionBackend, pane_id: str, *, timeout: float) -> None:
        """A no-op: the scripted agent reads a prompt sent while it works after its turn."""

    def wait_ready(
        self, backend: SessionBackend, pane_id: str, *, timeout: float, woken: Woken | None = None
    ) -> None:
        wait_until_ready(
            backend,
            pane_id,
            is_ready=self.is_ready,
            timeout=timeout,
            what="the scripted agent",
            woken=woken,
        )
