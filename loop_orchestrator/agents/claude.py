"""Interactive Claude Code as a task's agent (``[agent] kind = "claude"``).

``prepare`` refuses bypass mode as root without ``IS_SANDBOX=1`` and pre-trusts the main
checkout in Claude Code's global config (``~/.claude.json``); ``check_session`` raises
``NotLoggedInError``. ``SCREENS`` is the one table of Claude Code screens lo-orch
recognises (ready prompt, the start-up dialogs of agents/dialogs.py, not logged in,
unknown dialogs, fatal start errors).

Facts are from Claude Code 2.1.332 run in tmux with a throwaway HOME, offline (see the
shared reference): with ``hasCompletedOnboarding`` missing it tries to reach the API and
exits ("Unable to connect to Anthropic services"), so ``pretrust`` sets it when absent —
an onboarding lo-orch cannot answer would otherwise stall every session. It never
overrides a value the user has.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shlex
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from loop_orchestrator import resources
from loop_orchestrator.agents.contract import AgentContext, launch_spec_for
from loop_orchestrator.agents.dialogs import STARTUP_DIALOGS, Dialog, Woken, wait_until_ready
from loop_orchestrator.config import PERMISSION_MODES, AgentConfig
from loop_orchestrator.cost import usage
from loop_orchestrator.errors import AgentError, AgentStartError, ConfigError, NotLoggedInError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.sessions.backend import LaunchSpec, SessionBackend
from loop_orchestrator.supervisor.lifecycle import NOT_LOGGED_IN_ERROR, NOT_LOGGED_IN_HINT

if TYPE_CHECKING:
    from loop_orchestrator.runstate.state import TaskStatus

log = logging.getLogger(__name__)

BYPASS = "bypassPermissions"
#: skips the "running in Bypass Permissions mode" warning (a user setting, per session here)
BYPASS_SETTINGS = json.dumps({"skipDangerousModePermissionPrompt": True})
ROOT_HINT = (
    "Claude Code refuses --permission-mode bypassPermissions as root unless the machine is "
    "a sandbox. In a container or VM set it in the agent environment:\n"
    '  [agent]\n  env = { IS_SANDBOX = "1" }\n'
    "in .loop-orchestrator/config.toml (or export IS_SANDBOX=1 before `lo-orch run`), "
    "or run lo-orch as a normal user, or choose another [agent] permission_mode."
)


# the one table of screens ----------------------------------------------------------------

ScreenKind = Literal["ready", "dialog", "not_logged_in", "unknown_dialog", "fatal"]


@dataclass(frozen=True)
class Screen:
    """A Claude Code screen: how to recognise it and what it means for lo-orch."""

    name: str
    kind: ScreenKind
    pattern: re.Pattern[str]
    hint: str = ""
    dialog: Dialog | None = None  # for kind "dialog": what to answer (agents/dialogs.py)


#: Every screen of Claude Code that lo-orch reacts to. Wording changes between versions:
#: add the new wording here, next to the old one, with the version it was seen in.
SCREENS: tuple[Screen, ...] = (
    # 2.1.332: the input box is "❯ " at column 0 between two rules of "─".  # noqa: RUF003
    Screen("prompt box", "ready", re.compile(r"^─{10,}\s*\n❯", re.M)),  # noqa: RUF001
    # Start-up dialogs and how to answer them live in agents/dialogs.py (shared with the
    # scripted agent that imitates them): trust (2.1.332 and older wording), bypass
    # warning, MCP server approval.
    *(Screen(d.name, "dialog", d.detect, dialog=d) for d in STARTUP_DIALOGS),
    # 2.1.332, after a submit without credentials: "⎿  Not logged in · Please run /login".
    Screen(
        "not logged in",
        "not_logged_in",
        re.compile(r"Not logged in · Please run /login"),
        hint=NOT_LOGGED_IN_HINT,
    ),
    # Any other selection dialog: a human must decide. 2.1.332 puts "Enter to confirm ·
    # Esc to cancel|reject|exit" under every menu (the MCP server approval of a project's
    # .mcp.json, "New MCP server found in this project: NAME", ends in "Esc to reject").
    Screen(
        "unknown dialog",
        "unknown_dialog",
        re.compile(r"Enter to confirm · Esc to \w+"),
        hint="Attach with `lo-orch attach TASK`, answer it, and `lo-orch run` again; "
        "tell us its text so lo-orch can learn it.",
    ),
    Screen(
        "cannot reach the API",
        "fatal",
        re.compile(r"Unable to connect to Anthropic services"),
        hint="Claude Code has not finished its first-run setup and cannot reach the API "
        "to do it: run `claude` once yourself (and /login), then `lo-orch run` again.",
    ),
    Screen(
        "bypass refused as root",
        "fatal",
        re.compile(r"cannot be used with root/sudo privileges"),
        hint=ROOT_HINT,
    ),
)


def match_screen(screen: str, kinds: Sequence[ScreenKind] | None = None) -> Screen | None:
    """The first entry of ``SCREENS`` (of ``kinds``) visible on ``screen``."""
    for entry in SCREENS:
        if (kinds is None or entry.kind in kinds) and entry.pattern.search(screen):
            return entry
    return None


# ~/.claude.json -----------------------------------------------------------------------------


def claude_config_path(env: Mapping[str, str] | None = None) -> Path:
    """Claude Code's global config: ``$CLAUDE_CONFIG_DIR/.claude.json`` or ``~/.claude.json``."""
    env = os.environ if env is None else env
    config_dir = env.get("CLAUDE_CONFIG_DIR")
    if config_dir:
        return Path(config_dir).expanduser() / ".claude.json"
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / ".claude.json"


#: Claude Code locks its config with proper-lockfile: a *directory* ``<file>.lock`` whose
#: mtime is refreshed while held and which counts as stale after 10 s. Taking the same
#: lock keeps lo-orch from writing between Claude's read and write (and lo-orch's own
#: concurrent launches from each other).
_LOCK_STALE = 10.0


@contextlib.contextmanager
def _config_lock(path: Path, timeout: float) -> Iterator[None]:
    lock = path.with_name(path.name + ".lock")
    deadline = time.monotonic() + timeout
    while True:
        try:
            lock.mkdir()
            break
        except FileExistsError:
            with contextlib.suppress(FileNotFoundError):
                if time.time() - lock.stat().st_mtime > _LOCK_STALE:
                    log.info("stale claude config lock removed", extra={"lock": str(lock)})
                    lock.rmdir()
                    continue
            if time.monotonic() >= deadline:
                msg = f"{path} is locked by another process ({lock} exists)"
                raise AgentError(
                    msg,
                    hint=f"Wait for the other Claude Code to start, remove {lock} if no "
                    "Claude Code is running, or set [agent] pretrust = false.",
                ) from None
            time.sleep(0.05)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            lock.rmdir()


def pretrust(config: Path, roots: Sequence[Path], *, timeout: float = 15.0) -> bool:
    """Mark ``roots`` as trusted in Claude Code's config; True when the file was written.

    Sets ``projects[<root>].hasTrustDialogAccepted = true`` (and ``hasCompletedOnboarding``
    when the key is absent), keeps every other key, writes atomically under Claude Code's
    own lock, and follows a symlinked config to its target. Writes nothing when all is set.
    """
    real = config.resolve() if config.is_symlink() else config
    real.parent.mkdir(parents=True, exist_ok=True)
    with _config_lock(real, timeout):
        data: object = {}
        mode = 0o600
        if real.exists():
            mode = real.stat().st_mode & 0o777
            text = real.read_text(encoding="utf-8")
            try:
                data = json.loads(text) if text.strip() else {}
            except ValueError as exc:
                msg = f"{real} is not valid JSON ({exc}); cannot pre-trust the repository"
                raise AgentError(
                    msg,
                    hint="Fix the file (Claude Code keeps backups in ~/.claude/backups/), "
                    "or set [agent] pretrust = false to answer the trust dialog on screen.",
                ) from exc
        projects = data.get("projects", {}) if isinstance(data, dict) else None
        if not isinstance(data, dict) or not isinstance(projects, dict):
            msg = f"{real} does not hold a JSON object with a `projects` object"
            raise AgentError(
                msg,
                hint="Fix the file, or set [agent] pretrust = false.",
            )
        changed = False
        for root in roots:
            entry = projects.setdefault(str(root), {})
            if not isinstance(entry, dict):
                msg = f"{real}: projects[{str(root)!r}] is not an object"
                raise AgentError(msg, hint="Fix the file, or set [agent] pretrust = false.")
            if entry.get("hasTrustDialogAccepted") is not True:
                entry["hasTrustDialogAccepted"] = True
                changed = True
        data["projects"] = projects
        if "hasCompletedOnboarding" not in data:
            data["hasCompletedOnboarding"] = True
            changed = True
        if changed:
            atomic_write_text(real, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
            real.chmod(mode)
            log.info("repository pre-trusted for claude", extra={"config": str(real)})
        return changed


# the adapter --------------------------------------------------------------------------------


class ClaudeAdapter:
    """Claude Code in a tmux pane, with this repo's plugin loaded for hooks and skills."""

    name = "claude"
    uses_hooks = True
    bracketed_paste = True
    reports_session_id = False
    reports_start = True  # (SessionStart)

    def __init__(self, settings: AgentConfig, repo: Path) -> None:
        self.settings = settings
        self.repo = repo

    def wait_idle(self, backend: SessionBackend, pane_id: str, *, timeout: float) -> None:
        """A no-op: Claude Code queues a prompt sent while it works."""

    # environment and launch ------------------------------------------------------------------
    def _sandboxed(self, ctx: AgentContext | None) -> bool:
        configured = self.settings.env.get("IS_SANDBOX") or (
            ctx.env.get("IS_SANDBOX") if ctx else None
        )
        return (configured or os.environ.get("IS_SANDBOX")) == "1"

    def check_root(self, ctx: AgentContext | None = None) -> None:
        """Refuse bypass mode as root unless the environment says it is a sandbox."""
        if (
            self.settings.permission_mode == BYPASS
            and os.geteuid() == 0
            and not self._sandboxed(ctx)
        ):
            msg = "Claude Code cannot run in bypassPermissions mode as root"
            raise AgentError(msg, hint=ROOT_HINT)

    def prepare(self, ctx: AgentContext) -> None:
        """Before a launch: the root check and the trust pre-acceptance (unless opted out)."""
        self.check_root(ctx)
        if self.settings.pretrust:
            env = {**os.environ, **ctx.env}
            pretrust(claude_config_path(env), _trust_roots(ctx.repo))

    def _command(self) -> list[str]:
        command = self.settings.command.strip()
        if not command:
            msg = "[agent] command is empty"
            raise ConfigError(msg, hint='Set it to "claude".')
        argv = [command] if Path(command).is_file() else shlex.split(command)
        exe = argv[0]
        found = exe if "/" in exe else shutil.which(exe)
        if not found or not Path(found).exists():
            msg = f"{exe} not found"
            raise AgentError(
                msg,
                hint="Install Claude Code (`npm install -g @anthropic-ai/claude-code`) or "
                "set [agent] command to its path.",
            )
        return argv

    def launch_spec(self, ctx: AgentContext, *, resume: bool) -> LaunchSpec:
        """``claude --plugin-dir ... --permission-mode ... --session-id|--resume <uuid>``.

        A first launch without ``ctx.session_id`` gets a new one, stored back on ``ctx`` so
        the caller can record it for a later ``--resume``.
        """
        self.check_root(ctx)
        mode = self.settings.permission_mode
        if mode not in PERMISSION_MODES:
            msg = f"unknown [agent] permission_mode {mode!r}"
            raise ConfigError(
                msg,
                hint=f"Use one of: {', '.join(PERMISSION_MODES)}.",
            )
        argv = [*self._command(), *self.settings.args]
        argv += ["--plugin-dir", str(resources.plugin_dir())]
        argv += ["--permission-mode", mode]
        if mode == BYPASS:
            argv += ["--settings", BYPASS_SETTINGS]
        if self.settings.model:
            argv += ["--model", self.settings.model]
        if resume:
            if not ctx.session_id:
                msg = f"task {ctx.task} has no session id to resume"
                raise AgentError(
                    msg,
                    hint="Start it again with a fresh session (`lo-orch run`).",
                )
            argv += ["--resume", _check_uuid(ctx.session_id)]
        else:
            if not ctx.session_id:
                ctx.session_id = str(uuid.uuid4())
            argv += ["--session-id", _check_uuid(ctx.session_id)]
        env = dict(ctx.env)
        if mode == BYPASS and os.geteuid() == 0:
            # the check passed through the supervisor's own environment: the pane's comes
            # from a tmux server that may be older, so pass it on explicitly
            env.setdefault("IS_SANDBOX", "1")
        spec = launch_spec_for(ctx, argv, env)
        # where the supervisor reads its spend (supervisor_limits) and --resume looks
        spec.transcript = usage.session_transcript(
            Path(ctx.worktree), ctx.session_id, {**os.environ, **self.settings.env}
        )
        return spec

    # screens -------------------------------------------------------------------------------
    def is_ready(self, screen: str) -> bool:
        """The input box is on screen and no dialog covers it."""
        if match_screen(screen, ("dialog", "unknown_dialog")) is not None:
            return False
        return match_screen(screen, ("ready",)) is not None

    def wait_ready(
        self, backend: SessionBackend, pane_id: str, *, timeout: float, woken: Woken | None = None
    ) -> None:
        """Answer the known start-up dialogs until the input box shows.

        Raises ``AgentStartError`` (with the screen) for an unknown dialog, a fatal start
        screen, an exit, or the timeout.
        """

        def ready(screen: str) -> bool:
            bad = match_screen(screen, ("unknown_dialog", "fatal"))
            if bad is not None and match_screen(screen, ("dialog",)) is None:
                what = (
                    "Claude Code shows a dialog lo-orch does not know"
                    if bad.kind == "unknown_dialog"
                    else f"Claude Code could not start: {bad.name}"
                )
                raise AgentStartError(what, screen, hint=bad.hint or None)
            return self.is_ready(screen)

        try:
            wait_until_ready(
                backend,
                pane_id,
                is_ready=ready,
                timeout=timeout,
                what="Claude Code",
                dialogs=STARTUP_DIALOGS,
                woken=woken,
            )
        except AgentStartError as exc:
            fatal = match_screen(exc.screen, ("fatal",))
            if fatal is not None and exc.hint != fatal.hint:
                msg = f"Claude Code could not start: {fatal.name}"
                raise AgentStartError(msg, exc.screen, hint=fatal.hint) from exc
            raise

    def check_session(self, screen: str = "", status: TaskStatus | None = None) -> None:
        """Raise ``NotLoggedInError`` if the session says it is not logged in.

        Sources: the StopFailure hook (``error: authentication_failed``, recorded in the
        task's status by `lo-orch hook`) and the screen after a submit.
        """
        if status is not None and status.error == NOT_LOGGED_IN_ERROR:
            msg = "Claude Code is not logged in"
            raise NotLoggedInError(msg, hint=NOT_LOGGED_IN_HINT)
        if screen and match_screen(screen, ("not_logged_in",)) is not None:
            msg = "Claude Code is not logged in"
            raise NotLoggedInError(msg, hint=NOT_LOGGED_IN_HINT)


def _trust_roots(repo: Path) -> list[Path]:
    """The main checkout as given and resolved (Claude Code keys trust by its root path)."""
    roots = [repo.absolute()]
    resolved = repo.resolve()
    if resolved != roots[0]:
        roots.append(resolved)
    return roots


_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


def _check_uuid(value: str) -> str:
    if not _UUID_RE.match(value.lower()):
        msg = f"{value!r} is not a session id Claude Code accepts (a UUID)"
        raise AgentError(
            msg,
            hint="Clear the task's session_id (it is set again at the next launch).",
        )
    return value
