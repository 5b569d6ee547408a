"""Interactive Gemini CLI (npm ``@google/gemini-cli``) as a task's agent
(``[agent] kind = "gemini"``).

The supervisor calls ``wait_idle`` before it sends a prompt (a no-op for the other agents).
Gemini CLI keeps its state in ``$GEMINI_CLI_HOME/.gemini`` or ``~/.gemini``
(``gemini_dir``); ``find_session`` finds the newest chat it recorded for a task's worktree.

Facts (Gemini CLI 0.61.0, in tmux with a throwaway home, offline against
the tests' ``helpers/gemini_endpoint.GeminiEndpoint``; docs/agents.md has the details):

- unattended: ``--approval-mode=yolo``; ``--skip-trust`` trusts the folder for this
  session (otherwise "Do you trust the files in this folder?" comes first);
- a model must be named (``[agent] model``, default ``gemini-2.5-pro`` here): with the
  default "Auto" Gemini CLI first asks a router model for a complexity score;
- ready: the composer "Type your message or @path/to/file" once "Initializing..." is gone;
  it stays visible while a turn runs ("(esc to cancel" on the spinner line), and a prompt
  pasted then was seen lost: prompts wait for the turn's end (``wait_idle``);
- not logged in: its auth dialog ("Use Gemini API Key", "Vertex AI") -- lo-orch stops;
- resume: ``--resume <session id>``; the id is Gemini's own, found in
  ``<gemini>/tmp/<project>/chats/session-*.jsonl`` (``projects.json`` maps the folder to
  ``<project>``); each message there records its ``tokens``: lo-orch has no prices for
  them, so cost is unknown. No hooks are used: status comes from ``lo-orch signal``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from loop_orchestrator.agents.contract import AgentContext, UnattendedAdapter, launch_spec_for
from loop_orchestrator.agents.dialogs import wait_screen_idle
from loop_orchestrator.sessions.backend import LaunchSpec, SessionBackend

UNATTENDED = ["--approval-mode=yolo", "--skip-trust"]
#: what makes Gemini CLI headless whatever its terminal, removed from its environment
NOT_CI = ["env", "-u", "CI", "-u", "GITHUB_ACTIONS"]
DEFAULT_MODEL = "gemini-2.5-pro"
READY_RE = re.compile(r"Type your message or @path/to/file")
STARTING_RE = re.compile(r"Initializing\.\.\.|Resuming session")
#: the ready screen must stay so this long: a resumed session draws its composer, then
#: "Resuming session..." about a second later, then the history (0.61.0)
READY_STABLE_SECONDS = 2.0
#: the spinner line of a running turn ("Thinking... (esc to cancel, 3s)"), shown above
#: the composer, which stays visible
BUSY_RE = re.compile(r"\(esc to cancel")
#: how long the idle screen must stay so before a prompt is sent
IDLE_SECONDS = 0.5
#: (pattern, what, hint) of screens that stop a start
GEMINI_SCREENS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (
        re.compile(r"Use Gemini API Key|Login with Google|Enter Gemini API Key"),
        "Gemini CLI is not logged in",
        "Run `gemini` yourself and choose how to authenticate (or set GEMINI_API_KEY and "
        "security.auth.selectedType in ~/.gemini/settings.json), then `lo-orch run` again.",
    ),
)


def gemini_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$GEMINI_CLI_HOME/.gemini`` or ``~/.gemini``."""
    env = os.environ if env is None else env
    home = env.get("GEMINI_CLI_HOME") or env.get("HOME")
    return (Path(home) if home else Path.home()) / ".gemini"


def find_session(gemini: Path, worktree: Path) -> tuple[str, Path] | None:
    """The newest chat Gemini CLI recorded for ``worktree``: (session id, file)."""
    try:
        projects = json.loads((gemini / "projects.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    table = projects.get("projects") if isinstance(projects, dict) else None
    if not isinstance(table, dict):
        return None
    found: list[tuple[float, str, Path]] = []
    for key in {str(worktree.absolute()), str(worktree.resolve())}:
        name = table.get(key)
        if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
            continue
        for chat in (gemini / "tmp" / name / "chats").glob("session-*.json*"):
            try:
                with chat.open(encoding="utf-8") as fh:
                    first = json.loads(fh.readline())
            except (OSError, ValueError):
                continue
            sid = first.get("sessionId") if isinstance(first, dict) else None
            if isinstance(sid, str) and re.fullmatch(r"[0-9a-f-]{36}", sid):
                found.append((chat.stat().st_mtime, sid, chat))
    if not found:
        return None
    _, sid, chat = max(found)
    return sid, chat


class GeminiAdapter(UnattendedAdapter):
    """Gemini CLI's interactive TUI in a tmux pane, unattended."""

    name = "gemini"
    label = "Gemini CLI"
    program = "gemini"
    install = "npm install -g @google/gemini-cli"
    bypass = "Gemini CLI then runs with --approval-mode=yolo"
    fatal_screens = GEMINI_SCREENS
    ready_stable = READY_STABLE_SECONDS
    uses_hooks = False
    bracketed_paste = True

    def prepare(self, ctx: AgentContext) -> None:
        self._command({**os.environ, **ctx.env})

    def launch_spec(self, ctx: AgentContext, *, resume: bool) -> LaunchSpec:
        """``gemini --approval-mode=yolo --skip-trust --model M [--resume <id>]``.

        Started without ``CI`` and ``GITHUB_ACTIONS``: Gemini CLI 0.61.0 runs headless
        (reads a prompt from stdin, exits 42) when either is "true", as in a CI job or a
        shell that exports them (``isHeadlessMode`` in its bundle).
        """
        env = {**os.environ, **ctx.env}
        argv = [*NOT_CI, *self._command(env), *UNATTENDED, *self.settings.args]
        argv += ["--model", self.settings.model or DEFAULT_MODEL]
        if resume:
            found = find_session(gemini_dir(env), ctx.worktree)
            if found is not None:
                argv += ["--resume", found[0]]
        return launch_spec_for(ctx, argv, dict(ctx.env))

    def is_ready(self, screen: str) -> bool:
        return bool(READY_RE.search(screen)) and not STARTING_RE.search(screen)

    def wait_idle(self, backend: SessionBackend, pane_id: str, *, timeout: float) -> None:
        """Wait until no turn runs (a prompt sent while one does was seen lost, 0.61.0).

        Gives up quietly after ``timeout``: the prompt is sent then, and a stall nudges it.
        The composer is the sign, not ``is_ready``: the "Initializing..." line of a prompt
        queued at the start stays on screen.
        """
        wait_screen_idle(
            backend, pane_id, ready=READY_RE, busy=BUSY_RE, timeout=timeout, idle_for=IDLE_SECONDS
        )
