"""Interactive Mistral Vibe (PyPI ``mistral-vibe``) as a task's agent
(``[agent] kind = "vibe"``).

Vibe has no hook that says a prompt arrived (its hooks are ``post_agent``, ``pre_tool`` and
``post_tool``), so lo-orch confirms each prompt from Vibe's own session store: a user
message with the prompt's text that was not there before the prompt was sent
(``prompt_check``). The session is the one Vibe recorded for the task's worktree
(``find_session``: its ``meta.json`` names the folder); a relaunch resumes it.

Facts (Vibe 3.0.2, in tmux with a throwaway ``HOME``, offline against
``simulator.chat_endpoint.ChatEndpoint`` as a ``[[providers]]`` entry of its config.toml;
docs/agents.md):

- ``vibe`` execs a bundled Rust TUI (``vibe/_bin/vibe-rs``) that starts a Python app
  server; the package needs Python 3.12+;
- unattended: ``--auto-approve`` (every tool call runs without asking); ``--trust`` (with
  ``[agent] pretrust``, the default): no "Trust this folder?" dialog, which it shows for a
  folder holding ``.vibe/`` or ``AGENTS.md``; ``VIBE_ENABLE_UPDATE_CHECKS=false``: no
  update check or prompt (any config field can be set as ``VIBE_<FIELD>``);
- no API key for its provider (``api_key_env_var`` unset): its onboarding ("Welcome to
  Mistral Vibe - Let's get you started!" ... "Enter continue") -- lo-orch stops;
- ready: the composer's rule ends in "auto-approve ─" once "Initializing…" is gone (keys
  typed while it starts are lost); a turn shows "Esc/Ctrl+C to interrupt"; a prompt sent
  while one runs is queued and merged into the next turn, so lo-orch waits for the end;
- the store: ``$VIBE_HOME/logs/session/unified/<session id>/`` (``VIBE_HOME`` defaults to
  ``~/.vibe``): ``meta.json``, a journal (``journal/*.jsonl``, rotated at each snapshot)
  and content-addressed ``chunks/*.json`` (the conversation's messages); the latest
  ``projection-state.json`` and journal deltas carry the session's ``tokenUsage``
  (``session_usage``); a turn that failed after its retries (a 429 past
  ``api_retry_max_elapsed_time``, 300 s by default) is a ``completion_failed`` result with
  its HTTP status (``session_errors``). Its shell tool is ``bash``.
"""

from __future__ import annotations

import json
import os
import re
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from loop_orchestrator.agents.contract import AgentContext, UnattendedAdapter, launch_spec_for
from loop_orchestrator.agents.dialogs import Woken, wait_screen_idle, wait_until_ready
from loop_orchestrator.errors import AgentStartError
from loop_orchestrator.sessions.backend import LaunchSpec, SessionBackend

UNATTENDED = ["--auto-approve"]
TRUST = ["--trust"]
#: no update check or prompt in lo-orch's sessions
QUIET_ENV = {"VIBE_ENABLE_UPDATE_CHECKS": "false"}
#: the composer's top rule names the modes; with --auto-approve it ends so
READY_RE = re.compile(r"auto-approve ─")
STARTING_RE = re.compile(r"Initializing…|Starting the app server…")
#: how long the ready screen must hold before a prompt is sent
READY_SECONDS = 1.0
#: the spinner line of a running turn (also while it retries an API error)
BUSY_RE = re.compile(r"Esc/Ctrl\+C to interrupt")
VIBE_SCREENS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (
        re.compile(r"Let's get you started!(?s:.*)Enter continue"),
        "Mistral Vibe is not set up: no API key for its provider",
        "Set the variable its provider's api_key_env_var names (in [agent] env, or "
        "$VIBE_HOME/.env), or run `vibe --setup` yourself; then `lo-orch run` again.",
    ),
    (
        re.compile(r"Trust\s+this\s+folder\?"),
        "Mistral Vibe asks whether to trust the task's worktree",
        "Set [agent] pretrust = true (lo-orch then starts Vibe with --trust), "
        "then `lo-orch run` again.",
    ),
)
_ID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


def vibe_home(env: Mapping[str, str] | None = None) -> Path:
    """``$VIBE_HOME`` or ``~/.vibe`` (config, keys, sessions)."""
    env = os.environ if env is None else env
    if env.get("VIBE_HOME"):
        return Path(env["VIBE_HOME"]).expanduser()
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / ".vibe"


def store_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where Vibe keeps its sessions (one folder per session id)."""
    return vibe_home(env) / "logs" / "session" / "unified"


#: Vibe's built-in provider, used where its config names no other
DEFAULT_PROVIDER = ("mistral", "MISTRAL_API_KEY", "https://api.mistral.ai/v1")


def provider_key(home: Path, env: Mapping[str, str]) -> tuple[str, str, str]:
    """(provider, the variable its API key is read from, its API base) of the active
    model of ``home/config.toml`` (``VIBE_ACTIVE_MODEL`` wins); Vibe's built-in Mistral
    provider where the file names none. ValueError: the file cannot be read as TOML."""
    try:
        config = tomllib.loads((home / "config.toml").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return DEFAULT_PROVIDER
    except (OSError, tomllib.TOMLDecodeError) as exc:
        msg = f"{home / 'config.toml'} cannot be read ({exc})"
        raise ValueError(msg) from exc
    active = env.get("VIBE_ACTIVE_MODEL") or str(config.get("active_model") or "")
    models = [m for m in config.get("models") or [] if isinstance(m, dict)]
    model = next((m for m in models if active in (m.get("alias"), m.get("name"))), None)
    name = str(model.get("provider") or "") if model else DEFAULT_PROVIDER[0]
    providers = [p for p in config.get("providers") or [] if isinstance(p, dict)]
    provider = next((p for p in providers if p.get("name") == name), None)
    if provider is None:
        return DEFAULT_PROVIDER if name == DEFAULT_PROVIDER[0] else (name, "", "unknown")
    return name, str(provider.get("api_key_env_var") or ""), str(provider.get("api_base") or "")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def sessions_for(store: Path, worktree: Path) -> list[Path]:
    """The session folders Vibe recorded for ``worktree``, oldest first."""
    wanted = {str(worktree.absolute()), str(worktree.resolve())}
    found: list[tuple[str, str, Path]] = []
    try:
        folders = list(store.iterdir())
    except OSError:
        return []
    for folder in folders:
        meta = _read_json(folder / "meta.json")
        if not _ID_RE.match(folder.name) or not isinstance(meta, dict):
            continue
        where = (meta.get("environment") or {}).get("working_directory")
        if where in wanted and meta.get("session_id") == folder.name:
            found.append((str(meta.get("start_time") or ""), folder.name, folder))
    return [folder for _, _, folder in sorted(found)]


def find_session(store: Path, worktree: Path) -> str | None:
    """The id of the newest session Vibe recorded for ``worktree`` (what a relaunch
    resumes), or None."""
    found = sessions_for(store, worktree)
    return found[-1].name if found else None


def _journal(session: Path, since: float = 0.0) -> Iterator[dict[str, Any]]:
    """The journal's records (of the segments changed at or after ``since``), in order."""
    for segment in sorted(session.glob("journal/*.jsonl")):
        try:
            if segment.stat().st_mtime < since:
                continue
            lines = segment.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line being written
            if isinstance(record, dict):
                yield record


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    return "".join(
        str(part.get("text") or "")
        for part in content
        if isinstance(part, dict) and part.get("type") == "text"
    )


def _user_entries(record: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(message id, text) of each user message a journal record holds."""
    payload = record.get("payload")
    if not isinstance(payload, dict):
        return
    params = payload.get("params")
    if record.get("type") == "command_reserved" and isinstance(params, dict):
        for entry in params.get("entries") or []:
            if isinstance(entry, dict) and entry.get("role") == "user" and entry.get("entryId"):
                yield str(entry["entryId"]), _text(entry.get("content"))
    for delta in payload.get("delta") or [] if isinstance(payload.get("delta"), list) else []:
        entry = delta.get("entry") if isinstance(delta, dict) else None
        if isinstance(entry, dict) and entry.get("role") == "user" and entry.get("id"):
            yield str(entry["id"]), _text(entry.get("content"))


def _chunk_users(chunk: Any) -> Iterator[tuple[str, str]]:
    """(message id, text) of each user message of a chunk (a list of history items)."""
    if not isinstance(chunk, list):
        return
    for item in chunk:
        message = item.get("message") if isinstance(item, dict) else None
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        parts = content if isinstance(content, list) else []
        metas = [_mapping(p.get("_meta")) for p in parts if isinstance(p, dict)]
        mid = next(
            (m["vibe_client_message_id"] for m in metas if m.get("vibe_client_message_id")), None
        )
        if mid:
            yield str(mid), _text(content)


def user_messages(session: Path, since: float = 0.0) -> dict[str, str]:
    """id -> text of the user messages a session's store holds (of its files changed at or
    after ``since``: a message sent later can only be in those)."""
    found: dict[str, str] = {}
    for record in _journal(session, since):
        found.update(_user_entries(record))
    for chunk in session.glob("chunks/*.json"):
        try:
            if chunk.stat().st_mtime < since:
                continue
        except OSError:
            continue
        found.update(_chunk_users(_read_json(chunk)))
    return found


def _same_text(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def arrived(before: Mapping[str, str], now: Mapping[str, str], text: str) -> bool:
    """Whether a user message with ``text`` is in ``now`` that was not in ``before``."""
    return any(mid not in before and _same_text(body, text) for mid, body in now.items())


def session_usage(session: Path) -> dict[str, int] | None:
    """The session's token counts (the newest ``tokenUsage`` its store holds), or None."""
    newest: tuple[float, dict[str, Any]] | None = None

    def consider(state: Any) -> None:
        nonlocal newest
        info = state.get("session") if isinstance(state, dict) else None
        if not isinstance(info, dict) or not isinstance(info.get("tokenUsage"), dict):
            return
        at = float(info.get("updatedAt") or 0)
        if newest is None or at >= newest[0]:
            newest = (at, info["tokenUsage"])

    current = _read_json(session / "CURRENT")
    generation = current.get("generation") if isinstance(current, dict) else None
    if isinstance(generation, str) and re.fullmatch(r"\d+", generation):
        projection = _read_json(session / "generations" / generation / "projection-state.json")
        if isinstance(projection, dict):
            consider(projection.get("snapshot"))
    for record in _journal(session):
        payload = record.get("payload")
        deltas = payload.get("delta") if isinstance(payload, dict) else None
        for delta in deltas if isinstance(deltas, list) else []:
            if isinstance(delta, dict) and delta.get("op") == "set_envelope":
                consider(delta.get("state"))
    if newest is None:
        return None
    usage = newest[1]
    return {
        "input_tokens": int(usage.get("inputTokens") or 0),
        "output_tokens": int(usage.get("outputTokens") or 0),
        "cached_tokens": int(usage.get("cachedInputTokens") or 0),
    }


def session_errors(session: Path) -> list[dict[str, Any]]:
    """The model calls of the journal that failed after Vibe's retries: action id, HTTP
    status (None when there was no answer), code and message, in order."""
    errors: list[dict[str, Any]] = []
    for record in _journal(session):
        payload = record.get("payload")
        if record.get("type") != "action_result" or not isinstance(payload, dict):
            continue
        result = payload.get("result")
        if not isinstance(result, dict) or result.get("type") != "completion_failed":
            continue
        error = _mapping(result.get("error"))
        details = _mapping(error.get("details"))
        status = details.get("httpStatus")
        errors.append(
            {
                "id": str(payload.get("action_id") or ""),
                "status": status if isinstance(status, int) else None,
                "code": str(error.get("code") or ""),
                "error": str(error.get("message") or "")[:300],
            }
        )
    return errors


class VibeAdapter(UnattendedAdapter):
    """Mistral Vibe's interactive TUI in a tmux pane, unattended; prompts confirmed from
    its session store."""

    name = "vibe"
    label = "Mistral Vibe"
    program = "vibe"
    install = "uv tool install mistral-vibe"
    bypass = "Mistral Vibe then runs with --auto-approve"
    fatal_screens = VIBE_SCREENS
    uses_hooks = False
    bracketed_paste = True

    def prepare(self, ctx: AgentContext) -> None:
        """Refuse early when the program does not exist."""
        self._command({**os.environ, **ctx.env})

    def launch_spec(self, ctx: AgentContext, *, resume: bool) -> LaunchSpec:
        """``vibe --auto-approve [--trust] [--resume <its session id>]``.

        A resume goes back to the newest session Vibe recorded for the worktree; without
        one the session starts afresh and the supervisor sends the phase's prompt again.
        ``[agent] model`` is Vibe's model alias (``VIBE_ACTIVE_MODEL``).
        """
        env = {**os.environ, **ctx.env}
        argv = [*self._command(env), *UNATTENDED, *self.settings.args]
        if self.settings.pretrust:
            argv += TRUST
        found = find_session(store_dir(env), ctx.worktree) if resume else None
        if found is not None:
            argv += ["--resume", found]
        launch_env = {**QUIET_ENV, **ctx.env}
        if self.settings.model:
            launch_env["VIBE_ACTIVE_MODEL"] = self.settings.model
        return launch_spec_for(ctx, argv, launch_env)

    def is_ready(self, screen: str) -> bool:
        return bool(READY_RE.search(screen)) and not STARTING_RE.search(screen)

    def wait_ready(
        self, backend: SessionBackend, pane_id: str, *, timeout: float, woken: Woken | None = None
    ) -> None:
        """Wait until ``is_ready`` has held for ``READY_SECONDS`` (keys sent just as it
        turns ready were seen lost); a ``fatal_screens`` screen raises. Held, not an
        unchanged screen: a resumed Vibe finishes its interrupted turn at once, its spinner
        running, and that turn may outlast ``timeout``."""
        since: list[float] = []

        def ready(screen: str) -> bool:
            for pattern, what, hint in self.fatal_screens:
                if pattern.search(screen):
                    raise AgentStartError(what, screen, hint=hint)
            if not self.is_ready(screen):
                since.clear()
                return False
            since[:] = since or [time.monotonic()]
            return time.monotonic() - since[0] >= READY_SECONDS

        wait_until_ready(
            backend,
            pane_id,
            is_ready=ready,
            timeout=timeout,
            what=self.label,
            dialogs=(),
            woken=woken,
        )

    def wait_idle(self, backend: SessionBackend, pane_id: str, *, timeout: float) -> None:
        """Wait until no turn runs: a prompt sent during one is queued until it ends, and
        its arrival could not be confirmed in time."""
        wait_screen_idle(backend, pane_id, ready=READY_RE, busy=BUSY_RE, timeout=timeout)

    def prompt_check(self, worktree: Path, text: str) -> Callable[[], bool]:
        """For ``Deliverer.deliver(confirmed=...)``: true once Vibe's store for
        ``worktree`` holds a user message with ``text`` that it did not hold now."""
        env = {**os.environ, **self.settings.env}
        store = store_dir(env)

        def messages(since: float) -> dict[str, str]:
            found: dict[str, str] = {}
            for session in sessions_for(store, worktree):
                found.update(user_messages(session, since))
            return found

        before = messages(0.0)
        started = time.time() - 2.0  # mtimes are coarse on some file systems

        def confirmed() -> bool:
            return arrived(before, messages(started), text)

        return confirmed


def new_failures(
    errors: list[dict[str, Any]], seen: set[str] | None
) -> tuple[list[dict[str, Any]], str | None]:
    """What lo-orch does about a session's failed turns: (the failures not ``seen``
    before, the message of a rate limit among them that parks the task, or None).

    ``seen`` None: the store is looked at for the first time (a new session, or a
    supervisor started again): what is there is old news, noticed by nobody.
    """
    if seen is None:
        return [], None
    new = [e for e in errors if e["id"] not in seen]
    limited = [e for e in new if e["status"] == 429]
    return new, (limited[-1]["error"] or "429 from the model API") if limited else None
