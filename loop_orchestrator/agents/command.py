"""``[agent] kind = "command"``: any interactive CLI (codex, aider, gemini, a custom one).

``[agent] command`` is a command line template, split like a shell would (``shlex``) and
then filled per word, so a value with spaces stays one argument and nothing is ever run
through a shell: ``{task}``, ``{brief}`` (absolute brief path), ``{worktree}``.
``[agent] args`` are appended (filled the same way). ``ready_pattern`` is a regular
expression searched in the pane's screen; without one the agent counts as ready once its
screen shows text that stays unchanged for a second. ``delivery`` is ``paste`` (bracketed
paste, for programs that enable it) or ``type`` (an ordinary paste with line breaks turned
into spaces, for line-oriented programs; a terminal line holds at most 4095 characters).
Such agents fire no hooks: their status comes from ``lo-orch signal`` and the pane.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from loop_orchestrator.agents.contract import AgentContext, launch_spec_for
from loop_orchestrator.agents.dialogs import Woken, wait_until_ready
from loop_orchestrator.config import AgentConfig
from loop_orchestrator.errors import AgentError, ConfigError
from loop_orchestrator.sessions.backend import LaunchSpec, SessionBackend

#: without a ready pattern, the screen must stay unchanged this long
STABLE_SECONDS = 1.0


def render_command(
    template: str, args: list[str], *, task: str, brief: Path, worktree: Path
) -> list[str]:
    """The argv for one task: ``template`` split with shlex, placeholders filled per word."""
    try:
        words = shlex.split(template)
    except ValueError as exc:
        msg = f"[agent] command cannot be split into words: {exc}"
        raise ConfigError(
            msg,
            hint="Check the quotes in the command line.",
        ) from exc
    if not words:
        msg = "[agent] command is empty"
        raise ConfigError(msg, hint="Set it to the agent's command line, e.g. 'codex'.")
    values = {"{task}": task, "{brief}": str(brief), "{worktree}": str(worktree)}

    def fill(word: str) -> str:
        for key, value in values.items():
            word = word.replace(key, value)
        return word

    return [fill(w) for w in [*words, *args]]


class CommandAdapter:
    name = "command"
    uses_hooks = False
    reports_session_id = False
    reports_start = False

    def __init__(self, settings: AgentConfig, repo: Path) -> None:
        self.settings = settings
        self.repo = repo
        self.bracketed_paste: bool = settings.delivery == "paste"
        self.ready_re: re.Pattern[str] | None = None
        if settings.ready_pattern:
            try:
                self.ready_re = re.compile(settings.ready_pattern, re.MULTILINE)
            except re.error as exc:
                msg = f"[agent] ready_pattern is not a valid regular expression: {exc}"
                raise ConfigError(
                    msg,
                    hint="It is searched in the pane's text (Python re syntax).",
                ) from exc
        # Fail on a broken template when the adapter is made, not at the first launch.
        render_command(settings.command, [], task="t", brief=Path("b"), worktree=Path("w"))

    def prepare(self, ctx: AgentContext) -> None:
        """Refuse early when the program does not exist (a silent start failure otherwise)."""
        argv = self._argv(ctx)
        program = argv[0]
        found = (
            Path(program).is_file()
            if "/" in program
            else shutil.which(program, path=ctx.env.get("PATH")) is not None
        )
        if not found:
            msg = f"the agent command {program!r} was not found"
            raise AgentError(
                msg,
                hint="Install it or set [agent] command to its full path.",
            )

    def _argv(self, ctx: AgentContext) -> list[str]:
        return render_command(
            self.settings.command,
            list(self.settings.args),
            task=ctx.task,
            brief=ctx.brief_path,
            worktree=ctx.worktree,
        )

    def launch_spec(self, ctx: AgentContext, *, resume: bool) -> LaunchSpec:
        # A generic CLI has no resume flag we know of: a relaunch starts it afresh and the
        # supervisor sends the phase's prompt again.
        return launch_spec_for(ctx, self._argv(ctx), dict(ctx.env))

    def wait_idle(self, backend: SessionBackend, pane_id: str, *, timeout: float) -> None:
        """A no-op: a generic program's turns are not known."""

    def is_ready(self, screen: str) -> bool:
        if self.ready_re is not None:
            return bool(self.ready_re.search(screen))
        return bool(screen.strip())

    def wait_ready(
        self, backend: SessionBackend, pane_id: str, *, timeout: float, woken: Woken | None = None
    ) -> None:
        wait_until_ready(
            backend,
            pane_id,
            is_ready=self.is_ready,
            timeout=timeout,
            what=f"the agent command {self.settings.command.split()[0]!r}",
            stable_for=0.0 if self.ready_re is not None else STABLE_SECONDS,
            woken=woken,
        )
