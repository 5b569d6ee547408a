"""Interactive Qwen Code (npm ``@qwen-code/qwen-code``) as a task's agent
(``[agent] kind = "qwen"``).

Qwen Code runs lo-orch's hooks as Claude Code does (``uses_hooks``): ``prepare`` writes a
settings file that adds the plugin's hook launcher for every event lo-orch reads and turns
its self-update off, and the session is started with ``QWEN_CODE_SYSTEM_SETTINGS_PATH``
naming it (a system settings file wins over the user's and the project's; the user's own
system file, when one is set, is merged in). lo-orch chooses the session id
(``--session-id``), so a relaunch resumes it (``--resume <id>``) and its chat file is found
by that id (``find_chat``).

Facts (Qwen Code 0.15.10, in tmux with a throwaway ``HOME``, offline against
``simulator.chat_endpoint.ChatEndpoint`` as an OpenAI-compatible provider; docs/agents.md):

- unattended: ``--approval-mode=yolo`` (every tool runs without asking); no folder-trust
  dialog unless the user turned ``security.folderTrust`` on;
- it updates itself on start (``npm install -g``) unless ``general.enableAutoUpdate`` is
  false: lo-orch's settings file says false;
- hooks: SessionStart, UserPromptSubmit (confirms a prompt's arrival; it fires again with
  an empty prompt when a tool's result is sent on, which lo-orch ignores), PreToolUse,
  Stop, Notification, SessionEnd with Claude Code's payloads (``session_id``, ``prompt``);
- busy: a prompt pasted while a turn runs is lost; ``wait_idle`` holds each prompt until
  the spinner line ("esc to cancel)") is gone;
  its Stop says ``stop_hook_active: true`` from the first stop, so lo-orch's Stop gate does
  not send it back (the stall nudge does); no StopFailure hook;
- ready: the composer "Type your message or @path/to/file" without "Initializing..."
  for a while (an Enter pressed while it initializes is lost); not logged in: its
  "Select Authentication Method" dialog -- lo-orch stops;
- the chat is ``<runtime>/projects/<folder>/chats/<session id>.jsonl``; each model message
  records ``usageMetadata`` (tokens, read by ``chat_usage``), each failed API call an
  ``api_error`` telemetry record with its status (``chat_errors``). On a 429 it retries
  quietly with a growing backoff (seen: still retrying after 90 s, the spinner running,
  no hook, no message): lo-orch does not act on that yet (the stall check does).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loop_orchestrator import resources
from loop_orchestrator.agents.contract import AgentContext, UnattendedAdapter, launch_spec_for
from loop_orchestrator.agents.dialogs import wait_screen_idle
from loop_orchestrator.errors import AgentError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.sessions.backend import LaunchSpec, SessionBackend

UNATTENDED = ["--approval-mode=yolo"]
#: the hook events lo-orch's launcher is registered for (Qwen Code has no StopFailure)
HOOK_EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "Stop",
    "Notification",
    "SessionEnd",
    "PermissionRequest",
)
SETTINGS_ENV = "QWEN_CODE_SYSTEM_SETTINGS_PATH"
#: lo-orch's settings file for the run's Qwen Code sessions, under the run folder
SETTINGS_NAME = "qwen-settings.json"
READY_RE = re.compile(r"Type your message or @path/to/file")
#: the spinner line of a running turn ("... (1s · ↓ 5 tokens · esc to cancel)"), shown
#: above the composer, which stays visible
BUSY_RE = re.compile(r"esc to cancel\)")
STARTING_RE = re.compile(r"Initializing\.\.\.|Resuming session")
QWEN_SCREENS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (
        re.compile(r"Select Authentication Method"),
        "Qwen Code is not logged in",
        "Run `qwen auth` yourself (or set OPENAI_API_KEY, OPENAI_BASE_URL and OPENAI_MODEL "
        'with security.auth.selectedType = "openai" in ~/.qwen/settings.json), then '
        "`lo-orch run` again.",
    ),
)
_UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


def qwen_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$QWEN_HOME`` or ``~/.qwen`` (settings, credentials)."""
    env = os.environ if env is None else env
    if env.get("QWEN_HOME"):
        return Path(env["QWEN_HOME"]).expanduser()
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / ".qwen"


def runtime_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where Qwen Code keeps its chats: ``$QWEN_RUNTIME_DIR``, else ``qwen_dir``."""
    env = os.environ if env is None else env
    configured = env.get("QWEN_RUNTIME_DIR")
    return Path(configured).expanduser() if configured else qwen_dir(env)


def find_chat(runtime: Path, session_id: str) -> Path | None:
    """The chat file Qwen Code recorded for ``session_id`` (None before its first prompt)."""
    if not _UUID_RE.match(session_id):
        return None
    found = sorted((runtime / "projects").glob(f"*/chats/{session_id}.jsonl"))
    return found[0] if found else None


def _records(chat: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    try:
        lines = chat.read_text(encoding="utf-8").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line being written
        if isinstance(record, dict):
            out.append(record)
    return out


def chat_usage(chat: Path) -> dict[str, int]:
    """The tokens a chat file records over its model messages (``usageMetadata``)."""
    totals = {"input_tokens": 0, "output_tokens": 0, "cached_tokens": 0, "messages": 0}
    for record in _records(chat):
        meta = record.get("usageMetadata")
        if record.get("type") != "assistant" or not isinstance(meta, dict):
            continue
        totals["messages"] += 1
        totals["input_tokens"] += int(meta.get("promptTokenCount") or 0)
        totals["output_tokens"] += int(meta.get("candidatesTokenCount") or 0)
        totals["cached_tokens"] += int(meta.get("cachedContentTokenCount") or 0)
    return totals


def chat_errors(chat: Path) -> list[dict[str, Any]]:
    """The failed API calls a chat file records: status code and message, in order."""
    errors: list[dict[str, Any]] = []
    for record in _records(chat):
        payload = record.get("systemPayload")
        event = payload.get("uiEvent") if isinstance(payload, dict) else None
        if not isinstance(event, dict) or event.get("event.name") != "qwen-code.api_error":
            continue
        errors.append(
            {
                "status": event.get("status_code"),
                "type": str(event.get("error_type") or ""),
                "error": str(event.get("error_message") or "")[:300],
                "at": record.get("timestamp"),
            }
        )
    return errors


def hook_settings(launcher: Path, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The system settings lo-orch gives Qwen Code: ``base`` (the user's own system
    settings) with the hook ``launcher`` added for each of ``HOOK_EVENTS`` and the
    self-update and usage statistics off."""
    settings: dict[str, Any] = json.loads(json.dumps(dict(base or {})))
    general = settings.setdefault("general", {})
    general["enableAutoUpdate"] = False
    settings.setdefault("privacy", {})["usageStatisticsEnabled"] = False
    settings.pop("disableAllHooks", None)
    hooks = settings.setdefault("hooks", {})
    for event in HOOK_EVENTS:
        command = f"{json.dumps(str(launcher))} {event}"
        entries = hooks.setdefault(event, [])
        known = [
            h.get("command")
            for e in entries
            if isinstance(e, dict)
            for h in e.get("hooks") or []
            if isinstance(h, dict)
        ]
        if command not in known:
            entries.append({"hooks": [{"type": "command", "command": command, "timeout": 10000}]})
    return settings


def write_settings(target: Path, env: Mapping[str, str]) -> Path:
    """Write lo-orch's settings file to ``target`` (merging the user's system settings,
    ``$QWEN_CODE_SYSTEM_SETTINGS_PATH``, when set); the path written."""
    base: dict[str, Any] = {}
    own = env.get(SETTINGS_ENV)
    if own and Path(own).resolve() != target.resolve():
        try:
            loaded = json.loads(Path(own).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            msg = f"{SETTINGS_ENV}={own} cannot be read as JSON ({exc})"
            raise AgentError(msg, hint="Fix the file or unset the variable.") from exc
        base = loaded if isinstance(loaded, dict) else {}
    launcher = resources.plugin_dir() / "hooks" / "lo-hook"
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, json.dumps(hook_settings(launcher, base), indent=2) + "\n")
    return target


class QwenAdapter(UnattendedAdapter):
    """Qwen Code's interactive TUI in a tmux pane, unattended, with lo-orch's hooks."""

    name = "qwen"
    label = "Qwen Code"
    program = "qwen"
    install = "npm install -g @qwen-code/qwen-code"
    bypass = "Qwen Code then runs with --approval-mode=yolo"
    fatal_screens = QWEN_SCREENS
    #: its composer shows before "Initializing..." does, and Enter is lost until that ends
    ready_stable = 1.5
    uses_hooks = True
    reports_start = True  # (SessionStart)
    bracketed_paste = True

    def settings_path(self, ctx: AgentContext) -> Path:
        return ctx.run_dir / "agents" / SETTINGS_NAME

    def prepare(self, ctx: AgentContext) -> None:
        """Refuse early when the program does not exist; write the hook settings."""
        env = {**os.environ, **ctx.env}
        self._command(env)
        write_settings(self.settings_path(ctx), env)

    def launch_spec(self, ctx: AgentContext, *, resume: bool) -> LaunchSpec:
        """``qwen --approval-mode=yolo [--model M] --session-id|--resume <uuid>``.

        A resume goes back to the session lo-orch chose when Qwen Code recorded it (at its
        first prompt); otherwise it starts that session afresh and the supervisor sends the
        phase's prompt again.
        """
        env = {**os.environ, **ctx.env}
        argv = [*self._command(env), *UNATTENDED, *self.settings.args]
        if self.settings.model:
            argv += ["--model", self.settings.model]
        if not ctx.session_id:
            import uuid

            ctx.session_id = str(uuid.uuid4())
        if not _UUID_RE.match(ctx.session_id):
            msg = f"{ctx.session_id!r} is not a session id Qwen Code accepts (a UUID)"
            raise AgentError(msg, hint="Clear the task's session_id (it is set again).")
        chat = find_chat(runtime_dir(env), ctx.session_id) if resume else None
        argv += ["--resume" if chat is not None else "--session-id", ctx.session_id]
        launch_env = {**ctx.env, SETTINGS_ENV: str(self.settings_path(ctx))}
        return launch_spec_for(ctx, argv, launch_env)

    def is_ready(self, screen: str) -> bool:
        return bool(READY_RE.search(screen)) and not STARTING_RE.search(screen)

    def wait_idle(self, backend: SessionBackend, pane_id: str, *, timeout: float) -> None:
        """Wait until no turn runs: a prompt pasted while one did was seen confirmed by
        no real submit and never read (0.15.10)."""
        wait_screen_idle(backend, pane_id, ready=READY_RE, busy=BUSY_RE, timeout=timeout)
