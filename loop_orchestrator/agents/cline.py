"""Interactive Cline CLI (npm ``cline``) as a task's agent (``[agent] kind = "cline"``).

Cline runs hook files: executables named by its events in ``<config>/hooks`` (and in
``~/Documents/Cline/Hooks`` and the workspace's ``.clinerules/hooks``; a file's shebang
says what runs it). ``prepare`` lays out lo-orch's own config folder ``<run
folder>/agents/cline`` for ``--config``: a hook file per event lo-orch reads, each running
the plugin's hook launcher under Claude Code's name for it (``HOOKS``;
``sessions.hooks.from_cline`` reads the payload), and a link to every other entry of the
user's own ``~/.cline`` (rules, workflows, skills, their own hooks). ``--data-dir`` names
the user's data folder, so the provider they configured (``cline auth``) and the sessions
stay theirs; it also keeps Cline off its shared background hub. Cline chooses its session
ids: the task's is the one its first hook reported (``reports_session_id``; the hook is
attested by the pane it comes from), and a relaunch resumes it (``--id``) while Cline's
record of it names the task's worktree (``session_record``); its tokens are that record's.

Facts (Cline CLI 3.0.65, a Bun-compiled binary in ``@cline/cli-linux-x64``, in tmux with a
throwaway ``HOME`` or ``CLINE_DIR``, offline against ``simulator.chat_endpoint.ChatEndpoint`` as its
``openai-compatible`` provider; docs/agents.md):

- unattended: ``--auto-approve true`` ("Auto-approve all enabled"); ``--yolo`` is not
  used: it runs no hooks and offers fewer tools;
- ``--hooks-dir`` is read but not used by 3.0.65 (no hook from it ran): hence ``--config``;
- without ``--data-dir`` (or ``--yolo``) the TUI starts ``cline --cline-hub-daemon`` on
  port 25463, detached, which outlives the session and is shared by every Cline of that
  home; ``CLINE_NO_AUTO_UPDATE=1`` stops its background self-update;
- hooks fired: TaskStart at the start of each prompt's run (TaskResume for the first run
  after ``--id``), PreToolUse, PostToolUse, TaskComplete at its end, TaskError when it
  gave up (after 5 retries of a 429, a second apart); SessionShutdown is registered, not
  seen (the sessions seen were killed). UserPromptSubmit never fired in the TUI, so
  TaskStart/TaskResume confirm a prompt (without its text);
- start-up: a notice ("Try ClinePass", "Get Cline Desktop": "Press Enter to open, any
  other key to close") on the first starts of a home, closed with Escape; without a
  provider its onboarding ("Bring your own provider", "Sign in with ClinePass") -- lo-orch
  stops;
- ready: the composer ("Ask anything...", "What can I do for you?") with its footer
  "Auto-approve"; busy: "(esc to cancel)"; a prompt typed into a just-resumed session
  was seen lost, so the ready screen must stay unchanged a while (``ready_stable``);
- the session is ``<data>/sessions/<id>/<id>.json`` (``cwd``, ``started_at``,
  ``metadata.usage`` with ``inputTokens``, ``outputTokens``, ``cacheReadTokens``,
  ``cacheWriteTokens``, ``totalCost``), its messages beside it (``<id>.messages.json``).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loop_orchestrator import resources
from loop_orchestrator.agents.contract import AgentContext, UnattendedAdapter, launch_spec_for
from loop_orchestrator.agents.dialogs import Woken, wait_screen_idle, wait_until_ready
from loop_orchestrator.errors import AgentStartError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.sessions.backend import LaunchSpec, SessionBackend

UNATTENDED = ["--auto-approve", "true"]
#: Cline's hook file -> the Claude Code event lo-orch's hook is told
HOOKS: dict[str, str] = {
    "TaskStart": "UserPromptSubmit",
    "TaskResume": "UserPromptSubmit",
    "PreToolUse": "PreToolUse",
    "PostToolUse": "PostToolUse",
    "TaskComplete": "Stop",
    "TaskError": "StopFailure",
    "SessionShutdown": "SessionEnd",
}
#: the entries of the user's Cline folder lo-orch's config folder does not link
OWN_ENTRIES = ("hooks", "data")
CONFIG_NAME = "cline"
READY_RE = re.compile(r"Ask anything\.\.\.|What can I do for you\?")
FOOTER_RE = re.compile(r"Auto-approve")
BUSY_RE = re.compile(r"esc to cancel\)")
#: a start-up notice ("Try ClinePass", "Get Cline Desktop"), closed by any key but Enter
NOTICE_RE = re.compile(r"Press Enter to open, any other key to close")
#: how many notices lo-orch closes before it takes one as stuck (two were seen)
NOTICE_CLOSES = 6
CLINE_SCREENS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (
        re.compile(r"Bring your own provider|Sign in with ClinePass"),
        "Cline has no model provider configured",
        "Run `cline auth` yourself (for an OpenAI-compatible server: `cline auth -p "
        "openai-compatible -k KEY -m MODEL -b BASE_URL`), then `lo-orch run` again.",
    ),
)
#: a Cline session id ("1796156065352_1wg8v"): also a folder name, so no path characters
_SESSION_ID_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{0,79}\Z")


def user_dir(env: Mapping[str, str] | None = None) -> Path:
    """The user's Cline folder: ``$CLINE_DIR`` or ``~/.cline`` (rules, hooks, data)."""
    env = os.environ if env is None else env
    if env.get("CLINE_DIR"):
        return Path(env["CLINE_DIR"]).expanduser()
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / ".cline"


def data_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where Cline keeps providers and sessions: ``$CLINE_DATA_DIR`` or ``<user dir>/data``."""
    env = os.environ if env is None else env
    configured = env.get("CLINE_DATA_DIR")
    return Path(configured).expanduser() if configured else user_dir(env) / "data"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def session_record(data: Path, session_id: str, worktree: Path) -> dict[str, Any] | None:
    """Cline's record of session ``session_id`` when it is a session of ``worktree`` (None
    for an id that is not one, a missing record, or one of another folder)."""
    if not _SESSION_ID_RE.match(session_id):
        return None
    record = _read(data / "sessions" / session_id / f"{session_id}.json")
    cwd = record.get("cwd") if record is not None else None
    if not isinstance(cwd, str) or os.path.realpath(cwd) != os.path.realpath(worktree):
        return None
    return record


def session_usage(record: Mapping[str, Any]) -> dict[str, int]:
    """The tokens a Cline session record counts (``metadata.usage``)."""
    totals = {"input_tokens": 0, "output_tokens": 0, "cache_read": 0, "cache_write": 0}
    keys = {
        "inputTokens": "input_tokens",
        "outputTokens": "output_tokens",
        "cacheReadTokens": "cache_read",
        "cacheWriteTokens": "cache_write",
    }
    meta = record.get("metadata")
    counted = meta.get("usage") if isinstance(meta, dict) else None
    if isinstance(counted, dict):
        for theirs, ours in keys.items():
            value = counted.get(theirs)
            if isinstance(value, int) and value > 0:
                totals[ours] = value
    return totals


def hook_name(event: str) -> str:
    """The name of lo-orch's hook file for Cline's ``event`` (Cline runs every file named
    by an event, with or without an extension: a user's own ``TaskStart`` runs too)."""
    return f"{event}.sh"


def hook_file(launcher: Path, claude_event: str) -> str:
    """The text of a hook file that hands Cline's payload to lo-orch's ``launcher``."""
    quoted = "'" + str(launcher).replace("'", "'\\''") + "'"
    note = f"# lo-orch: Cline's payload to lo-orch's hook as {claude_event}"
    return f"#!/bin/sh\n{note}\nexec {quoted} {claude_event}\n"


def write_config(target: Path, user: Path, launcher: Path) -> Path:
    """Lay out lo-orch's Cline config folder at ``target``: its hook files
    (``<event>.sh``), a link to each of the user's own hook files (all of them run; one
    named as lo-orch's is left out), and to every other entry of ``user`` (but its data,
    which ``--data-dir`` names). Idempotent; the folder."""
    hooks = target / "hooks"
    hooks.mkdir(parents=True, exist_ok=True)
    wanted: dict[Path, Path] = {}
    try:
        entries = sorted(user.iterdir())
    except OSError:
        entries = []
    for entry in entries:
        if entry.name not in OWN_ENTRIES:
            wanted[target / entry.name] = entry
    try:
        theirs = sorted((user / "hooks").iterdir())
    except OSError:
        theirs = []
    ours = {hook_name(event) for event in HOOKS}
    for entry in theirs:
        if entry.name not in ours:
            wanted[hooks / entry.name] = entry
    for link, source in wanted.items():
        if link.is_symlink() and link.readlink() == source:
            continue
        if link.is_symlink():
            link.unlink()
        if not link.exists():
            link.symlink_to(source)
    for name, event in HOOKS.items():
        path = hooks / hook_name(name)
        text = hook_file(launcher, event)
        if path.is_symlink() or not path.is_file() or path.read_text(encoding="utf-8") != text:
            if path.is_symlink():
                path.unlink()
            atomic_write_text(path, text)
        path.chmod(0o755)
    return target


class ClineAdapter(UnattendedAdapter):
    """Cline's interactive TUI in a tmux pane, auto-approving, with lo-orch's hooks."""

    name = "cline"
    label = "Cline"
    program = "cline"
    install = "npm install -g cline"
    bypass = "Cline then runs with --auto-approve true"
    fatal_screens = CLINE_SCREENS
    #: a prompt typed into a just-resumed session was lost while it still loaded
    ready_stable = 2.0
    uses_hooks = True
    bracketed_paste = True
    #: the supervisor chooses no session id: the first hook's (Cline's own) is recorded
    reports_session_id = True

    def config_path(self, ctx: AgentContext) -> Path:
        return ctx.run_dir / "agents" / CONFIG_NAME

    def prepare(self, ctx: AgentContext) -> None:
        """Refuse early when the program does not exist; lay out the config folder."""
        env = {**os.environ, **ctx.env}
        self._command(env)
        launcher = resources.plugin_dir() / "hooks" / "lo-hook"
        write_config(self.config_path(ctx), user_dir(env), launcher)

    def launch_spec(self, ctx: AgentContext, *, resume: bool) -> LaunchSpec:
        """``cline --config <ours> --data-dir <theirs> --auto-approve true [-m M] [--id S]``.

        A resume goes back to the task's session (the id its hooks reported) while Cline's
        record of it is there and names the worktree; otherwise it starts afresh and the
        supervisor sends the phase's prompt again.
        """
        env = {**os.environ, **ctx.env}
        data = data_dir(env)
        argv = [
            *self._command(env),
            "--config",
            str(self.config_path(ctx)),
            "--data-dir",
            str(data),
            *UNATTENDED,
            *self.settings.args,
        ]
        if self.settings.model:
            argv += ["--model", self.settings.model]
        sid = ctx.session_id
        if resume and sid and session_record(data, sid, ctx.worktree) is not None:
            argv += ["--id", sid]
        return launch_spec_for(ctx, argv, {**ctx.env, "CLINE_NO_AUTO_UPDATE": "1"})

    def is_ready(self, screen: str) -> bool:
        return (
            bool(READY_RE.search(screen))
            and bool(FOOTER_RE.search(screen))
            and not NOTICE_RE.search(screen)
        )

    def wait_ready(
        self, backend: SessionBackend, pane_id: str, *, timeout: float, woken: Woken | None = None
    ) -> None:
        """Wait for the ready composer, closing its start-up notices with Escape (at most
        one a second); its onboarding screen raises."""
        closed: list[float] = []

        def ready(screen: str) -> bool:
            for pattern, what, hint in self.fatal_screens:
                if pattern.search(screen):
                    raise AgentStartError(what, screen, hint=hint)
            if NOTICE_RE.search(screen):
                now = time.monotonic()
                if len(closed) >= NOTICE_CLOSES:
                    msg = f"Cline's start-up notice stayed after {NOTICE_CLOSES} Escapes"
                    raise AgentStartError(msg, screen)
                if not closed or now - closed[-1] >= 1.0:
                    closed.append(now)
                    backend.send_keys(pane_id, "Escape")
                return False
            return self.is_ready(screen)

        wait_until_ready(
            backend,
            pane_id,
            is_ready=ready,
            timeout=timeout,
            what=self.label,
            dialogs=(),
            stable_for=self.ready_stable,
            woken=woken,
        )

    def wait_idle(self, backend: SessionBackend, pane_id: str, *, timeout: float) -> None:
        """Wait until no turn runs (the spinner's "(esc to cancel)" is gone)."""
        wait_screen_idle(backend, pane_id, ready=READY_RE, busy=BUSY_RE, timeout=timeout)
