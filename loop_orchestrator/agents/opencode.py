"""Interactive opencode (npm ``opencode-ai``) as a task's agent (``[agent] kind = "opencode"``).

opencode reports to lo-orch through a plugin lo-orch writes into the run folder
(``opencode_plugin.js``, the hook launcher's path filled in), given in
``OPENCODE_CONFIG_CONTENT`` (the config opencode reads last; the user's own value is merged
in): it turns opencode's events into the hook events Claude Code sends, so a prompt is
confirmed by its UserPromptSubmit as with Claude Code (``uses_hooks``). Each task's sessions
live in a database of their own (``OPENCODE_DB``, named by the session id lo-orch chose):
a relaunch resumes the session recorded there (``--session``) and its tokens are read from
it (``db_usage``).

Facts (opencode 1.18.33, in tmux with throwaway XDG folders, offline against
``simulator.chat_endpoint.ChatEndpoint`` as an ``@ai-sdk/openai-compatible`` provider;
docs/agents.md):

- unattended: ``--auto`` approves every permission the user's config does not deny (the
  footer says "Build auto"); no start-up dialog (no folder trust, no login screen);
- plugin hooks used: ``chat.message`` (a prompt arrived: UserPromptSubmit with its text),
  ``tool.execute.before`` (PreToolUse), events ``session.idle`` (Stop),
  ``session.status`` of type ``retry`` (a short wait: Notification ``api_retry``; a long
  one, as a usage limit's: StopFailure ``rate_limit`` with the time it retries at),
  ``session.error`` (StopFailure), ``permission.asked`` (Notification); sessions of its own
  subagents are ignored. It cannot be sent back at a stop: Stop says ``stop_hook_active``;
- on a 429 it retries by itself, honouring ``retry-after`` (status "retrying in 55m");
- busy: the footer says "esc interrupt" while a turn runs; ready: the footer's
  "ctrl+p commands" without it; a bracketed paste shows as "[Pasted ~N lines]" and is sent
  whole (a space added at its end);
- session ids are its own (``ses_...``); ``--session <id>`` resumes one;
- each assistant message records ``tokens`` (input, output, reasoning, cache read/write)
  and the ``session`` table their sums; its ``cost`` is priced from its model list (0 for
  a model it does not know): lo-orch reports the cost as unknown.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loop_orchestrator import resources
from loop_orchestrator.agents.contract import AgentContext, UnattendedAdapter, launch_spec_for
from loop_orchestrator.agents.dialogs import wait_screen_idle
from loop_orchestrator.errors import AgentError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.sessions.backend import LaunchSpec, SessionBackend

UNATTENDED = ["--auto"]
CONFIG_ENV = "OPENCODE_CONFIG_CONTENT"
DB_ENV = "OPENCODE_DB"
#: lo-orch's plugin for the run's opencode sessions, under the run folder
PLUGIN_NAME = "opencode-plugin.js"
_PLUGIN_SOURCE = Path(__file__).with_name("opencode_plugin.js")
READY_RE = re.compile(r"ctrl\+p commands")
BUSY_RE = re.compile(r"esc interrupt")
_SESSION_RE = re.compile(r"ses_[0-9A-Za-z]{10,40}\Z")
_DB_NAME_RE = re.compile(r"[0-9A-Za-z-]{1,80}\Z")


def data_dir(env: Mapping[str, str] | None = None) -> Path:
    """opencode's data folder: ``$XDG_DATA_HOME/opencode`` or ``~/.local/share/opencode``."""
    env = os.environ if env is None else env
    if env.get("XDG_DATA_HOME"):
        return Path(env["XDG_DATA_HOME"]).expanduser() / "opencode"
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / ".local" / "share" / "opencode"


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """opencode's global config folder: ``$XDG_CONFIG_HOME/opencode`` or ``~/.config/opencode``."""
    env = os.environ if env is None else env
    if env.get("XDG_CONFIG_HOME"):
        return Path(env["XDG_CONFIG_HOME"]).expanduser() / "opencode"
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / ".config" / "opencode"


def task_db(env: Mapping[str, str], session_id: str) -> Path:
    """The database of the task whose lo-orch session id is ``session_id``."""
    if not _DB_NAME_RE.match(session_id):
        msg = f"{session_id!r} cannot name an opencode database"
        raise AgentError(msg, hint="Clear the task's session_id (it is set again).")
    return data_dir(env) / "lo-orch" / f"{session_id}.db"


def _query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` in ``db``, read-only ([] when there is no such database yet)."""
    if not db.is_file():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return list(conn.execute(sql))
    except sqlite3.Error:
        return []  # being created, or not opencode's


def find_session(db: Path) -> str | None:
    """The session a relaunch resumes: the newest top-level one recorded in ``db``."""
    rows = _query(
        db, "SELECT id FROM session WHERE parent_id IS NULL ORDER BY time_updated DESC LIMIT 1"
    )
    found = str(rows[0][0]) if rows else None
    return found if found and _SESSION_RE.match(found) else None


def db_usage(db: Path) -> dict[str, int]:
    """The tokens ``db``'s assistant messages record (its subagents' included)."""
    totals = {"input_tokens": 0, "output_tokens": 0, "cache_read": 0, "cache_write": 0}
    totals["messages"] = 0
    for (raw,) in _query(db, "SELECT data FROM message"):
        try:
            data = json.loads(raw)
        except (TypeError, ValueError):
            continue
        message = _dict(data)
        tokens = _dict(message.get("tokens"))
        if message.get("role") != "assistant" or not tokens:
            continue
        cache = _dict(tokens.get("cache"))
        totals["messages"] += 1
        totals["input_tokens"] += _int(tokens.get("input"))
        totals["output_tokens"] += _int(tokens.get("output")) + _int(tokens.get("reasoning"))
        totals["cache_read"] += _int(cache.get("read"))
        totals["cache_write"] += _int(cache.get("write"))
    return totals


def db_errors(db: Path) -> list[dict[str, Any]]:
    """The errors ``db``'s assistant messages end with: name, status code, message."""
    errors: list[dict[str, Any]] = []
    for (raw,) in _query(db, "SELECT data FROM message ORDER BY time_created"):
        try:
            error = _dict(_dict(json.loads(raw)).get("error"))
        except (TypeError, ValueError):
            continue
        if not error:
            continue
        data = _dict(error.get("data"))
        errors.append(
            {
                "name": str(error.get("name") or ""),
                "status": data.get("statusCode"),
                "error": str(data.get("message") or "")[:300],
            }
        )
    return errors


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def plugin_text(launcher: Path) -> str:
    """lo-orch's plugin, the hook ``launcher`` filled in."""
    source = _PLUGIN_SOURCE.read_text(encoding="utf-8")
    return source.replace("__LAUNCHER__", json.dumps(str(launcher)), 1)


def config_content(plugin: Path, own: str | None) -> str:
    """``OPENCODE_CONFIG_CONTENT`` for a session: the user's own (``own``) with lo-orch's
    plugin added and opencode's self-update and sharing off."""
    config: dict[str, Any] = {}
    if own and own.strip():
        try:
            loaded = json.loads(own)
        except ValueError as exc:
            msg = f"{CONFIG_ENV} is not JSON ({exc})"
            raise AgentError(msg, hint=f"Fix or unset {CONFIG_ENV} in [agent] env.") from exc
        config = loaded if isinstance(loaded, dict) else {}
    spec = plugin.absolute().as_uri()
    plugins = [p for p in config.get("plugin") or [] if isinstance(p, str) and p != spec]
    config["plugin"] = [*plugins, spec]
    config["autoupdate"] = False
    config["share"] = "disabled"
    return json.dumps(config, separators=(",", ":"))


class OpencodeAdapter(UnattendedAdapter):
    """opencode's TUI in a tmux pane, unattended, reporting through lo-orch's plugin."""

    name = "opencode"
    label = "opencode"
    program = "opencode"
    install = "npm install -g opencode-ai"
    bypass = "opencode then runs with --auto"
    #: its footer is drawn with the first frame; give the input a moment
    ready_stable = 1.5
    uses_hooks = True
    reports_start = True  # (the plugin's SessionStart as it loads)
    bracketed_paste = True

    def plugin_path(self, ctx: AgentContext) -> Path:
        return ctx.run_dir / "agents" / PLUGIN_NAME

    def prepare(self, ctx: AgentContext) -> None:
        """Refuse early when the program does not exist; write the plugin."""
        env = {**os.environ, **ctx.env}
        self._command(env)
        target = self.plugin_path(ctx)
        target.parent.mkdir(parents=True, exist_ok=True)
        launcher = resources.plugin_dir() / "hooks" / "lo-hook"
        atomic_write_text(target, plugin_text(launcher))

    def launch_spec(self, ctx: AgentContext, *, resume: bool) -> LaunchSpec:
        """``opencode --auto [--model M] [--session <id>]``, its database the task's own.

        A resume goes back to the session recorded in the task's database (opencode writes
        it at the first prompt); without one it starts afresh, and the supervisor sends the
        phase's prompt again either way.
        """
        env = {**os.environ, **ctx.env}
        argv = [*self._command(env), *UNATTENDED, *self.settings.args]
        if self.settings.model:
            argv += ["--model", self.settings.model]
        if not ctx.session_id:
            ctx.session_id = str(uuid.uuid4())
        db = task_db(env, ctx.session_id)
        db.parent.mkdir(parents=True, exist_ok=True)
        found = find_session(db) if resume else None
        if found is not None:
            argv += ["--session", found]
        launch_env = {
            **ctx.env,
            DB_ENV: str(db),
            CONFIG_ENV: config_content(self.plugin_path(ctx), env.get(CONFIG_ENV)),
        }
        return launch_spec_for(ctx, argv, launch_env)

    def is_ready(self, screen: str) -> bool:
        return bool(READY_RE.search(screen)) and not BUSY_RE.search(screen)

    def wait_idle(self, backend: SessionBackend, pane_id: str, *, timeout: float) -> None:
        """Wait until no turn runs (its footer's "esc interrupt" is gone)."""
        wait_screen_idle(backend, pane_id, ready=READY_RE, busy=BUSY_RE, timeout=timeout)
