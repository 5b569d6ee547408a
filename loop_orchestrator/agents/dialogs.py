"""Start-up dialogs: Claude Code's table (``STARTUP_DIALOGS``, wording changes between
versions: keep every pattern here), finding one on a screen, answering it by moving the
cursor to the chosen option, and ``wait_until_ready``, the loop every adapter waits in
until its agent is ready (answering the dialogs it is given on the way).

Claude Code's dialogs are the default: the scripted agent imitates its trust dialog, and
``[agent] kind = "command"`` may run Claude Code. Codex CLI passes its own
(``codex.CODEX_DIALOGS``).
"""

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loop_orchestrator.errors import AgentStartError, TmuxError
from loop_orchestrator.sessions.backend import SessionBackend, wait_until
from loop_orchestrator.sessions.delivery import error_screen, tidy_screen

if TYPE_CHECKING:
    pass


log = logging.getLogger(__name__)


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


#: readiness polls: the first 0.1 s after the last, each next one half as long again, at
#: most 0.3 s apart (an agent's start takes seconds: a tmux call every 0.1 s was most of
#: the supervisor's calls while a session started; a ready screen is seen 0.3 s late at most)
READY_POLL_FIRST = 0.1
READY_POLL_MOST = 0.3
#: with ``woken`` (a session that reports through hooks): at most this long between polls
#: until the session's first report wakes the wait; its start is seen then, not by polls
#: (a dialog shown before the agent reports anything is still seen within this time)
READY_POLL_UNTIL_WOKEN = 1.0

#: ``wait_until_ready``'s ``woken``: a wait of at most the given seconds that returns True
#: at once when the session reported (it runs), else False when the time is up
Woken = Callable[[float], bool]


def next_poll(interval: float) -> float:
    """The pause before the readiness poll after one ``interval`` after the last."""
    return min(interval * 1.5, READY_POLL_MOST)


def wait_until_ready(
    backend: SessionBackend,
    pane_id: str,
    *,
    is_ready: Callable[[str], bool],
    timeout: float,
    what: str = "the agent",
    dialogs: Sequence[Dialog] = STARTUP_DIALOGS,
    stable_for: float = 0.0,
    woken: Woken | None = None,
) -> None:
    """Answer start-up dialogs until ``is_ready(screen)``; fail loudly, never hang.

    Raises ``AgentStartError`` with the screen when the process exits, a dialog needs a
    human or keeps coming back, or ``timeout`` passes. With ``stable_for`` the ready screen
    must also stay unchanged that long (for agents without a ready pattern).

    ``woken``: until it returns True the polls are up to ``READY_POLL_UNTIL_WOKEN`` apart,
    and the screen is looked at as soon as it does; then at the usual pace. A hint only:
    the screen alone says when the agent is ready (a wake too early costs one more look).
    """
    deadline = time.monotonic() + timeout
    answered: dict[str, int] = {}
    ready_since: tuple[float, str] | None = None
    pause = READY_POLL_FIRST
    while True:
        state, screen = backend.look(pane_id)  # (one tmux call a poll)
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
            pause = READY_POLL_FIRST  # (what follows a dialog comes soon)
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
        if ready_since is not None:  # (a steady screen is timed at the first pace)
            pause = READY_POLL_FIRST
        if woken is not None and ready_since is None:
            if woken(min(READY_POLL_UNTIL_WOKEN, max(deadline - now, 0.0))):
                woken = None  # (it runs: the usual pace from now on)
                pause = READY_POLL_FIRST
            continue
        time.sleep(min(pause, max(deadline - now, 0.0)))
        pause = next_poll(pause)


def wait_screen_idle(
    backend: SessionBackend,
    pane_id: str,
    *,
    ready: re.Pattern[str],
    busy: re.Pattern[str],
    timeout: float,
    idle_for: float = 0.5,
) -> None:
    """Wait until the screen shows ``ready`` and not ``busy`` for ``idle_for`` seconds (a
    CLI that drops a prompt sent while a turn runs); gives up quietly after ``timeout``
    (the prompt is sent then, and a stall nudges it) or when the pane is gone."""
    deadline = time.monotonic() + timeout
    idle_since: float | None = None
    while time.monotonic() < deadline:
        try:
            screen = backend.capture(pane_id, 0)
        except TmuxError:
            return
        now = time.monotonic()
        if ready.search(screen) and not busy.search(screen):
            idle_since = idle_since or now
            if now - idle_since >= idle_for:
                return
        else:
            idle_since = None
        time.sleep(0.1)
