"""Interactive Codex CLI (npm ``@openai/codex``) as a task's agent (``[agent] kind = "codex"``).

``pretrust`` adds ``[projects."<root>"] trust_level = "trusted"`` to Codex's config.toml
(unless ``[agent] pretrust = false``), so no trust dialog races the first prompt;
``find_session`` finds the newest recorded session whose folder is a task's worktree (what
a relaunch resumes; its rollout file holds the token counts).

Facts (Codex CLI 0.171.0, in tmux with a throwaway ``CODEX_HOME``, offline against
the tests' ``helpers/codex_endpoint.ResponsesEndpoint``; docs/agents.md has the details):

- unattended: ``--dangerously-bypass-approvals-and-sandbox`` (no approvals, no Codex
  sandbox: lo-orch's own bwrap sandbox, ``[sandbox] mode``, is the confinement; Codex's
  ``workspace-write`` sandbox would refuse ``lo-orch signal``, which writes to the run
  folder outside the worktree);
- ``--disable daemon_auto_start``: otherwise Codex starts a shared ``codex app-server``
  daemon that outlives the session; ``--disable in_app_updates`` and
  ``check_for_update_on_startup=false``: no update prompt or download;
- the one start-up dialog is "Trust this folder?" with "1. Trust and continue"
  preselected (cursor U+203A); it comes about a second *after* the composer first shows,
  so lo-orch pre-trusts the repository in config.toml, and answers it when it shows;
- ready: the composer's footer "? for shortcuts" with the header's "permissions:" line
  (the footer alone shows while Codex still starts);
- resume: ``codex resume <thread id>``; the id is Codex's own (a UUID v7 it chooses), so
  lo-orch finds it in ``$CODEX_HOME/sessions/**/rollout-*.jsonl`` by the session's folder;
- no hooks are used: status comes from ``lo-orch signal`` and the pane. Token counts are
  in the rollout (``token_count`` events); lo-orch has no prices for them: cost unknown.
"""

from __future__ import annotations

import json
import os
import re
import threading
import tomllib
from collections.abc import Mapping
from pathlib import Path

from loop_orchestrator.agents.contract import AgentContext, UnattendedAdapter, launch_spec_for
from loop_orchestrator.agents.dialogs import Dialog
from loop_orchestrator.errors import AgentError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.sessions.backend import LaunchSpec

#: the flags that make an interactive Codex CLI run without asking anyone
UNATTENDED = ["--dangerously-bypass-approvals-and-sandbox"]
#: no background daemon, no update check or prompt
QUIET = [
    "--disable",
    "daemon_auto_start",
    "--disable",
    "in_app_updates",
    "-c",
    "check_for_update_on_startup=false",
]

CODEX_DIALOGS: tuple[Dialog, ...] = (
    # 0.171.0: "Trust this folder? Codex can read, edit, and run files here, ..."
    Dialog(
        "trust folder (Codex CLI 0.171)",
        re.compile(r"Trust\s+this\s+folder\?"),
        options=("Trust and continue", "Back to Agent Command Center"),
        choose="Trust and continue",
        cursor="\u203a",
    ),
)
#: the composer's footer, shown when Codex waits for input (0.171.0) -- also while it
#: still starts ("loading" in the header, then "Waiting for startup"), before the trust
#: dialog: the session is ready only once its header shows the permissions line
READY_RE = re.compile(r"\? for shortcuts")
STARTED_RE = re.compile(r"^\s*permissions: ", re.MULTILINE)
STARTING_RE = re.compile(r"Waiting for startup")
#: screens that mean Codex cannot work here: (pattern, what, hint)
CODEX_SCREENS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (
        re.compile(r"Sign in with ChatGPT|Provide your own API key"),
        "Codex CLI is not logged in",
        "Run `codex login` yourself (or configure a model provider in ~/.codex/config.toml), "
        "then `lo-orch run` again.",
    ),
)


def codex_home(env: Mapping[str, str] | None = None) -> Path:
    """``$CODEX_HOME`` or ``~/.codex``."""
    env = os.environ if env is None else env
    configured = env.get("CODEX_HOME")
    if configured:
        return Path(configured).expanduser()
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / ".codex"


def _session_meta(rollout: Path) -> dict[str, object] | None:
    try:
        with rollout.open(encoding="utf-8") as fh:
            first = fh.readline()
        record = json.loads(first)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("type") != "session_meta":
        return None
    payload = record.get("payload")
    return payload if isinstance(payload, dict) else None


def find_session(home: Path, worktree: Path) -> tuple[str, Path] | None:
    """The newest Codex session recorded for ``worktree``: (thread id, rollout file)."""
    sessions = home / "sessions"
    if not sessions.is_dir():
        return None
    wanted = {str(worktree.absolute()), str(worktree.resolve())}
    found: list[tuple[float, str, Path]] = []
    for rollout in sessions.rglob("rollout-*.jsonl"):
        meta = _session_meta(rollout)
        if meta is None or meta.get("cwd") not in wanted:
            continue
        thread = meta.get("id") or meta.get("session_id")
        if isinstance(thread, str) and re.fullmatch(r"[0-9a-f-]{36}", thread):
            found.append((rollout.stat().st_mtime, thread, rollout))
    if not found:
        return None
    _, thread, rollout = max(found)
    return thread, rollout


_TRUST_LOCK = threading.Lock()


def _toml_key(text: str) -> str:
    return json.dumps(text)  # a TOML basic string is a JSON string for these paths


def pretrust(config: Path, roots: list[Path]) -> bool:
    """Mark ``roots`` trusted in Codex's ``config.toml``; True when the file was written.

    Codex keys trust by the repository root (a worktree's trust "applies to the repository
    root", 0.171.0). Adds ``[projects."<root>"] trust_level = "trusted"`` for a root that
    has no entry; never changes an entry the user has (an untrusted one stays, and its
    dialog is then answered on screen). Appends, keeping every byte of the file, and writes
    atomically.
    """
    with _TRUST_LOCK:
        real = config.resolve() if config.is_symlink() else config
        text = real.read_text(encoding="utf-8") if real.exists() else ""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            msg = f"{real} is not valid TOML ({exc}); cannot pre-trust the repository"
            raise AgentError(
                msg,
                hint="Fix the file, or set [agent] pretrust = false to answer Codex's "
                "trust dialog on screen.",
            ) from exc
        projects = data.get("projects", {})
        if not isinstance(projects, dict):
            msg = f"{real}: `projects` is not a table"
            raise AgentError(msg, hint="Fix the file, or set [agent] pretrust = false.")
        missing = [str(r) for r in roots if str(r) not in projects]
        if not missing:
            return False
        tables = "".join(
            f'\n[projects.{_toml_key(root)}]\ntrust_level = "trusted"\n'
            for root in dict.fromkeys(missing)
        )
        if text and not text.endswith("\n"):
            text += "\n"
        mode = real.stat().st_mode & 0o777 if real.exists() else 0o600
        real.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(real, text + tables)
        real.chmod(mode)
        return True


def _trust_roots(repo: Path) -> list[Path]:
    roots = [repo.absolute()]
    if repo.resolve() != roots[0]:
        roots.append(repo.resolve())
    return roots


class CodexAdapter(UnattendedAdapter):
    """Codex CLI's interactive TUI in a tmux pane, unattended."""

    name = "codex"
    label = "Codex CLI"
    program = "codex"
    install = "npm install -g @openai/codex"
    bypass = "Codex then runs without its own sandbox; lo-orch's [sandbox] confines it"
    fatal_screens = CODEX_SCREENS
    dialogs = CODEX_DIALOGS
    uses_hooks = False
    bracketed_paste = True

    def prepare(self, ctx: AgentContext) -> None:
        """Refuse early when the program does not exist; pre-trust the repository."""
        env = {**os.environ, **ctx.env}
        self._command(env)
        if self.settings.pretrust:
            pretrust(codex_home(env) / "config.toml", _trust_roots(ctx.repo))

    def launch_spec(self, ctx: AgentContext, *, resume: bool) -> LaunchSpec:
        """``codex [resume <thread>] --dangerously-bypass-approvals-and-sandbox ...``.

        A resume goes back to the newest session Codex recorded in the task's worktree;
        without one (Codex records a session at its first prompt) it starts afresh, and the
        supervisor sends the phase's prompt again either way.
        """
        env = {**os.environ, **ctx.env}
        argv = self._command(env)
        if resume:
            found = find_session(codex_home(env), ctx.worktree)
            if found is not None:
                argv += ["resume", found[0]]
        argv += [*UNATTENDED, *QUIET, *self.settings.args]
        if self.settings.model:
            argv += ["--model", self.settings.model]
        return launch_spec_for(ctx, argv, dict(ctx.env))

    def is_ready(self, screen: str) -> bool:
        if any(d.detect.search(screen) for d in CODEX_DIALOGS) or STARTING_RE.search(screen):
            return False
        return bool(READY_RE.search(screen) and STARTED_RE.search(screen))
