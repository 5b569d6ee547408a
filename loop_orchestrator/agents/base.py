"""What every agent adapter shares: the context, the environment contract, start-up dialogs.

Module API
----------
``AgentContext(task, run_name, repo, worktree, run_dir, brief_path, session_id, env,
sandbox)``
    Everything an adapter needs to launch one task's session; ``AgentContext.create(...)``
    fills ``env`` with ``agent_env`` and, given the full ``Settings`` with the sandbox on
    (``[sandbox] mode``), ``sandbox`` with the task's ``sandbox.Policy``.
``launch_spec_for(ctx, argv, env) -> LaunchSpec``
    How every adapter ends ``launch_spec``: the one place where an agent's argv is put
    inside the sandbox.
``agent_env(*, task, run_dir, brief, settings) -> dict[str, str]``
    The pane environment: ``settings.agent.env`` plus the contract variables
    ``LO_ORCH_TASK``, ``LO_ORCH_RUN_DIR``, ``LO_ORCH_BRIEF``, ``LO_ORCH_BIN`` (which win), and
    ``LO_ORCH_TMUX_SOCKET`` / ``PATH`` of the supervisor unless configured.
``lo_orch_bin() -> str``
    An absolute command line (for ``sh -c``) running this lo-orch.
``python_module_argv(module) -> list[str]``
    ``[sys.executable, "-m", module]``, or a bootstrap that finds this source checkout when
    the package is not installed in that interpreter.
``AgentAdapter``
    Protocol: ``name``, ``uses_hooks``, ``prepare(ctx)``, ``launch_spec(ctx, *, resume)``,
    ``wait_ready(backend, pane_id, *, timeout)``, ``is_ready(screen)``.
``bracketed_paste(adapter) -> bool``
    Whether prompts go as bracketed pastes (an adapter may set ``bracketed_paste = False``).
``Dialog``, ``STARTUP_DIALOGS``, ``find_dialog(screen)``, ``answer_dialog(...)``,
``wait_until_ready(backend, pane_id, *, is_ready, timeout, what, dialogs)``
    The one table of start-up dialogs (wording changes between versions: keep every
    pattern here) and the loop that answers them until the agent is ready.
``make_adapter(settings, repo) -> AgentAdapter``
    ``claude`` | ``codex`` | ``gemini`` | ``command`` | ``scripted``.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from loop_orchestrator import sandbox
from loop_orchestrator.delivery import error_screen, tidy_screen
from loop_orchestrator.errors import AgentStartError, ConfigError, TmuxError
from loop_orchestrator.sessions import LaunchSpec, SessionBackend, wait_until

if TYPE_CHECKING:
    from loop_orchestrator.config import AgentConfig, Settings

log = logging.getLogger(__name__)

_SOURCE_ROOT = Path(__file__).resolve().parent.parent.parent


@functools.cache
def _installed_for_interpreter() -> bool:
    """Does a fresh ``sys.executable`` started elsewhere import *this* copy of the package?

    An agent pane runs in a worktree, where a source checkout that is only importable from
    its own folder is not on the path; an installed (or editable) package is. Asked once.
    """
    from loop_orchestrator import proc

    result = proc.run(
        [sys.executable, "-c", "import loop_orchestrator; print(loop_orchestrator.__file__)"],
        cwd="/",
        timeout=30,
        check=False,
    )
    if not result.ok or not result.stdout.strip():
        return False
    found = Path(result.stdout.strip().splitlines()[-1]).resolve().parent
    return found == _SOURCE_ROOT / "loop_orchestrator"


def python_module_argv(module: str) -> list[str]:
    """An argv running ``python -m module`` with this interpreter, from any folder."""
    python = str(Path(sys.executable).absolute())  # not resolved: that would leave the venv
    if _installed_for_interpreter():
        return [python, "-m", module]
    bootstrap = (
        "import runpy, sys; "
        f"sys.path.insert(0, {str(_SOURCE_ROOT)!r}); "
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )
    return [python, "-c", bootstrap]


def lo_orch_bin() -> str:
    """The command line that runs this lo-orch (``LO_ORCH_BIN``), usable with ``sh -c``."""
    return shlex.join(python_module_argv("loop_orchestrator"))


def _agent_config(settings: Settings | AgentConfig) -> AgentConfig:
    from loop_orchestrator.config import Settings

    return settings.agent if isinstance(settings, Settings) else settings


def agent_env(
    *, task: str, run_dir: Path, brief: Path, settings: Settings | AgentConfig
) -> dict[str, str]:
    """The environment added to an agent pane (contract, DESIGN.md section 6)."""
    agent = _agent_config(settings)
    env = dict(agent.env)
    contract = {
        "LO_ORCH_TASK": task,
        "LO_ORCH_RUN_DIR": str(Path(run_dir).absolute()),
        "LO_ORCH_BRIEF": str(Path(brief).absolute()),
        "LO_ORCH_BIN": lo_orch_bin(),
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
        from loop_orchestrator.config import Settings

        env = agent_env(task=task, run_dir=run_dir, brief=brief_path, settings=settings)
        policy = None
        if isinstance(settings, Settings) and sandbox.require(settings):
            policy = sandbox.Policy.for_task(
                repo=repo, run_dir=run_dir, worktree=worktree, task=task
            )
        return cls(task, run_name, repo, worktree, run_dir, brief_path, session_id, env, policy)


def launch_spec_for(ctx: AgentContext, argv: list[str], env: dict[str, str]) -> LaunchSpec:
    """The launch of ``argv`` in ``ctx``'s worktree, inside its sandbox when it has one."""
    spec = LaunchSpec(task=ctx.task, cwd=ctx.worktree, argv=argv, env=env)
    return sandbox.confine(spec, ctx.sandbox) if ctx.sandbox is not None else spec


class AgentAdapter(Protocol):
    name: str
    uses_hooks: bool

    def prepare(self, ctx: AgentContext) -> None: ...

    def launch_spec(self, ctx: AgentContext, *, resume: bool) -> LaunchSpec: ...

    def wait_ready(self, backend: SessionBackend, pane_id: str, *, timeout: float) -> None: ...

    def is_ready(self, screen: str) -> bool: ...


def bracketed_paste(adapter: AgentAdapter) -> bool:
    """Deliver prompts as bracketed pastes unless the adapter says otherwise."""
    return bool(getattr(adapter, "bracketed_paste", True))


# start-up dialogs ------------------------------------------------------------------


@dataclass(frozen=True)
class Dialog:
    """A start-up dialog: how to see it and which option to choose (None: needs a human)."""

    name: str
    detect: re.Pattern[str]
    options: tuple[str, ...] = ()
    choose: str | None = None
    cursor: str = "\u276f"  # the selection cursor of Claude Code's menus


def _phrase(text: str) -> re.Pattern[str]:
    """A pattern for ``text`` that also matches when the agent wrapped it over lines."""
    return re.compile(r"\s+".join(re.escape(word) for word in text.split()))


#: Every start-up dialog known, newest wording first. Sources: Claude Code 2.1.332 seen in
#: tmux (trust: "No, exit" preselected, so Enter alone quits); older versions put
#: "Yes, proceed" first. The bypass warning is normally skipped by a setting.
STARTUP_DIALOGS: tuple[Dialog, ...] = (
    Dialog(
        "trust folder (Claude Code 2.1.332)",
        _phrase("Is this a project you created or one you trust"),
        options=("No, exit", "Yes, I trust this folder"),
        choose="Yes, I trust this folder",
    ),
    Dialog(
        "trust folder (older Claude Code)",
        _phrase("Do you trust the files in this folder?"),
        options=("Yes, proceed", "No, exit"),
        choose="Yes, proceed",
    ),
    Dialog(
        "bypass permissions warning",
        _phrase("running in Bypass Permissions mode"),
        options=("No, exit", "Yes, I accept"),
        choose="Yes, I accept",
    ),
    Dialog(
        "MCP server approval",
        re.compile(r"New\s+MCP\s+servers?\s+found\s+in\s+\.mcp\.json"),
    ),
)


def find_dialog(screen: str, dialogs: Sequence[Dialog] = STARTUP_DIALOGS) -> Dialog | None:
    for dialog in dialogs:
        if dialog.detect.search(screen):
            return dialog
    return None


def _selected(screen: str, dialog: Dialog) -> int | None:
    """Index (in ``dialog.options``) of the option next to the cursor, if visible."""
    for line in screen.split("\n"):
        if dialog.cursor not in line:
            continue
        after = line.split(dialog.cursor, 1)[1]
        for index, option in enumerate(dialog.options):
            if option in after:
                return index
    return None


def answer_dialog(
    backend: SessionBackend,
    pane_id: str,
    dialog: Dialog,
    *,
    timeout: float = 5.0,
    settle: float = 0.5,
    hold: float = 0.3,
) -> None:
    """Move the cursor to ``dialog.choose`` (checking the screen) and press Enter.

    Choosing explicitly, never "Enter on whatever is preselected": in Claude Code 2.1.332
    Enter alone on the trust dialog means "No, exit". The dialog is also drawn twice: about
    0.1 s after it first appears it is mounted again with the default selected, throwing
    away a key pressed in between (seen under load). So keys wait until the dialog has been
    up for ``settle`` seconds, and Enter only goes once the cursor has stayed on the choice
    for ``hold`` seconds.
    """
    if dialog.choose is None:
        msg = f"the agent is waiting on a dialog lo-orch does not answer: {dialog.name}"
        raise AgentStartError(
            msg,
            error_screen(backend, pane_id),
            hint="Answer it yourself (`lo-orch attach TASK`) or remove its cause.",
        )
    target = dialog.options.index(dialog.choose)
    time.sleep(settle)
    deadline = time.monotonic() + timeout + settle
    on_target_since: float | None = None
    while True:
        state = backend.state(pane_id)
        if not state.alive:
            msg = f"the agent exited while lo-orch was answering the {dialog.name} dialog"
            raise AgentStartError(
                msg,
                error_screen(backend, pane_id, dead=state.exists),
                hint="The last screen above usually says why.",
            )
        screen = backend.capture(pane_id, 0)
        if not dialog.detect.search(screen):
            return  # answered meanwhile
        current = _selected(screen, dialog)
        now = time.monotonic()
        if current == target:
            if on_target_since is None:
                on_target_since = now
            if now - on_target_since >= hold:
                backend.send_keys(pane_id, "Enter")
                return
            time.sleep(0.05)
            continue
        on_target_since = None
        if now >= deadline:
            msg = f"could not select {dialog.choose!r} in the {dialog.name} dialog"
            raise AgentStartError(
                msg,
                tidy_screen(screen),
                hint="The dialog's wording may have changed; see STARTUP_DIALOGS.",
            )
        key = "Up" if current is not None and current > target else "Down"
        backend.send_keys(pane_id, key)
        _wait_screen_change(backend, pane_id, screen, 1.0)


def _wait_screen_change(backend: SessionBackend, pane_id: str, screen: str, timeout: float) -> None:
    wait_until(lambda: backend.capture(pane_id, 0) != screen, timeout)


def wait_until_ready(
    backend: SessionBackend,
    pane_id: str,
    *,
    is_ready: Callable[[str], bool],
    timeout: float,
    what: str = "the agent",
    dialogs: Sequence[Dialog] = STARTUP_DIALOGS,
    stable_for: float = 0.0,
) -> None:
    """Answer start-up dialogs until ``is_ready(screen)``; fail loudly, never hang.

    Raises ``AgentStartError`` with the screen when the process exits, a dialog needs a
    human or keeps coming back, or ``timeout`` passes. With ``stable_for`` the ready screen
    must also stay unchanged that long (for agents without a ready pattern).
    """
    deadline = time.monotonic() + timeout
    answered: dict[str, int] = {}
    ready_since: tuple[float, str] | None = None
    while True:
        state = backend.state(pane_id)
        if not state.exists:
            msg = f"{what}'s pane {pane_id} disappeared before it was ready"
            raise AgentStartError(msg)
        if not state.alive:
            msg = f"{what} exited with status {state.dead_status} before it was ready"
            raise AgentStartError(
                msg,
                error_screen(backend, pane_id, dead=True),
                hint="The last screen above usually says why.",
            )
        try:
            screen = backend.capture(pane_id, 0)
        except TmuxError:
            screen = ""
        dialog = find_dialog(screen, dialogs)
        if dialog is not None:
            ready_since = None
            count = answered.get(dialog.name, 0)
            if count >= 3:
                msg = f"the {dialog.name} dialog came back after being answered {count} times"
                raise AgentStartError(msg, tidy_screen(screen))
            answered[dialog.name] = count + 1
            log.info("start-up dialog answered", extra={"pane": pane_id, "dialog": dialog.name})
            answer_dialog(backend, pane_id, dialog)
            _wait_screen_change(backend, pane_id, screen, 2.0)
            continue
        now = time.monotonic()
        if is_ready(screen):
            if stable_for <= 0:
                return
            if ready_since is None or ready_since[1] != screen:
                ready_since = (now, screen)
            elif now - ready_since[0] >= stable_for:
                return
        else:
            ready_since = None
        if now >= deadline:
            msg = f"{what} was not ready after {timeout:g}s"
            raise AgentStartError(
                msg,
                tidy_screen(screen),
                hint="Attach to the session to see what it is waiting for.",
            )
        time.sleep(0.1)


# factory ---------------------------------------------------------------------------


def make_adapter(settings: Settings, repo: Path) -> AgentAdapter:
    """The adapter for ``[agent] kind``; each kind's module is imported only when used.

    Fails here, before any session starts, when ``[sandbox] mode = "bwrap"`` cannot be met.
    """
    sandbox.require(settings)
    kind = settings.agent.kind
    if kind == "claude":
        from loop_orchestrator.agents.claude import ClaudeAdapter

        adapter: AgentAdapter = ClaudeAdapter(settings.agent, repo)
        return adapter
    if kind == "codex":
        from loop_orchestrator.agents.codex import CodexAdapter

        return CodexAdapter(settings.agent, repo)
    if kind == "gemini":
        from loop_orchestrator.agents.gemini import GeminiAdapter

        return GeminiAdapter(settings.agent, repo)
    if kind == "command":
        from loop_orchestrator.agents.command import CommandAdapter

        return CommandAdapter(settings.agent, repo)
    if kind == "scripted":
        from loop_orchestrator.agents.scripted import ScriptedAdapter

        return ScriptedAdapter(settings.agent, repo)
    msg = f"unknown agent kind {kind!r}"
    raise ConfigError(msg, hint="Set [agent] kind to claude, codex, gemini, command or scripted.")
