"""Prompt delivery into agent panes, the part of talking to sessions that breaks most.

Text goes through a tmux buffer and a bracketed paste (``load-buffer`` +
``paste-buffer -p -d``), never ``send-keys`` of a multi-line string; Enter follows as a
separate key after the paste has settled; delivery is confirmed (by the UserPromptSubmit
hook for Claude Code, on screen otherwise) and Enter retried a bounded number of times.
Deliveries are serialized per pane and staggered across panes. A prompt that cannot be
delivered raises ``DeliveryError`` with the pane's last screen; nothing hangs.

``prompt_confirmation`` is the ``confirmed`` check of ``Deliverer.deliver`` for agents with
hooks.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from loop_orchestrator.errors import DeliveryError, PaneGoneError, TmuxError
from loop_orchestrator.sessions.backend import PaneState, SessionBackend

if TYPE_CHECKING:
    from loop_orchestrator.runstate.state import TaskStatus

log = logging.getLogger(__name__)


def prompt_confirmation(read: Callable[[str], TaskStatus], task: str) -> Callable[[], bool]:
    """For ``Deliverer.deliver(confirmed=...)``: true once the UserPromptSubmit hook fired
    again for ``task`` (recorded as ``prompt_submitted_at``; the supervisor passes its
    record's ``task``, never the status file an agent can write). Take it before pasting,
    so the snapshot precedes the submit."""
    before = read(task).prompt_submitted_at

    def confirmed() -> bool:
        return read(task).prompt_submitted_at != before

    return confirmed


_C0_DROP = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: Claude Code's (and the scripted agent's) stand-in for a long paste on the input line
_PLACEHOLDER_RE = re.compile(r"\[Pasted text #\d+(?: \+\d+ lines?)?\]")


def tidy_screen(text: str) -> str:
    """A screen for an error message: runs of blank lines collapsed, ends trimmed."""
    lines = [line.rstrip() for line in text.split("\n")]
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip("\n")


def error_screen(backend: SessionBackend, pane_id: str, *, dead: bool = False) -> str:
    """The pane's screen for an error, never raising; with history when the pane is dead.

    tmux prints "Pane is dead" on the last row of a dead pane, which can scroll the
    program's last words into the history.
    """
    try:
        return tidy_screen(backend.capture(pane_id, 200 if dead else 0))
    except TmuxError:
        return ""


def sanitize_prompt(text: str) -> str:
    """Line breaks to ``\\n``; control characters other than newline and tab removed.

    An ESC inside a prompt could end the bracketed paste early (``ESC[201~``) and turn the
    rest into keystrokes, so no escape sequence reaches the pane.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _C0_DROP.sub("", text)


def _input_row(screen: str, text: str) -> int | None:
    """The row of the pasted prompt on the input line: its placeholder or its last line."""
    lines = screen.split("\n")
    for index in range(len(lines) - 1, -1, -1):
        if _PLACEHOLDER_RE.search(lines[index]):
            return index
    tail_lines = [line.strip() for line in text.split("\n") if line.strip()]
    if not tail_lines:
        return None
    tail = tail_lines[-1][-20:]
    for index in range(len(lines) - 1, -1, -1):
        if tail in lines[index]:
            return index
    return None


def _screen_submitted(pasted: str, text: str) -> Callable[[str], bool]:
    """A test of a later screen: did the pasted prompt leave the input line?

    From the input row down, the screen must differ from the screen right after the
    paste: the input line was cleared, output appeared below it, or the screen scrolled.
    A swallowed Enter leaves all of that unchanged.
    """
    row = _input_row(pasted, text)
    before = pasted.split("\n")

    def check(screen: str) -> bool:
        now = screen.split("\n")
        if row is None:
            return now != before
        return now[row:] != before[row:]

    return check


class Deliverer:
    """Delivers prompts: serialized per pane, staggered across panes, confirmed or failed.

    One instance is shared by every delivery of a supervisor (it holds the locks).
    """

    def __init__(
        self,
        stagger: float = 0.3,
        *,
        settle: float = 0.25,
        poll: float = 0.05,
        paste_wait: float = 3.0,
        timeout: float = 15.0,
    ) -> None:
        """``timeout``: how long a delivery waits for its confirmation unless
        ``deliver(timeout=...)`` says otherwise."""
        self.stagger = stagger
        self.timeout = timeout
        self.settle = settle
        self.poll = poll
        self.paste_wait = paste_wait
        self._guard = threading.Lock()
        self._pane_locks: dict[str, threading.Lock] = {}
        self._gap_lock = threading.Lock()
        self._last_send = 0.0

    def _lock_for(self, pane_id: str) -> threading.Lock:
        with self._guard:
            return self._pane_locks.setdefault(pane_id, threading.Lock())

    def _wait_gap(self) -> None:
        with self._gap_lock:
            pause = self._last_send + self.stagger - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            self._last_send = time.monotonic()

    def deliver(
        self,
        backend: SessionBackend,
        pane_id: str,
        text: str,
        *,
        confirmed: Callable[[], bool] | None = None,
        timeout: float | None = None,
        enter_retries: int = 3,
        bracketed: bool = True,
        on_enter: Callable[[], None] | None = None,
    ) -> None:
        """Paste ``text`` into the pane, press Enter, and make sure it was submitted.

        ``confirmed`` (for Claude Code: a UserPromptSubmit hook recorded after the send)
        decides; without it the screen must show that the prompt left the input line.
        ``on_enter`` is called once, just before the first Enter is pressed.
        Enter is pressed again up to ``enter_retries`` times. Raises ``DeliveryError``
        with the last screen when the pane is gone or died, or nothing confirms in time.
        """
        text = sanitize_prompt(text)
        if not text.strip():
            msg = f"refused to deliver an empty prompt to pane {pane_id}"
            raise DeliveryError(msg)
        if timeout is None:
            timeout = self.timeout
        with self._lock_for(pane_id):
            deadline = time.monotonic() + timeout
            state, before = backend.look(pane_id)  # (alive, and the screen, in one look)
            self._require_alive(backend, pane_id, state)
            self._wait_gap()
            try:
                backend.paste(pane_id, text, bracketed=bracketed)  # (only into a live pane)
            except PaneGoneError:  # it went or exited since the look: say which
                self._require_alive(backend, pane_id, backend.state(pane_id))
                raise
            pasted = self._settled(backend, pane_id, before, deadline)
            if confirmed is not None:
                check: Callable[[], bool] = confirmed
            else:
                on_screen = _screen_submitted(pasted, text)

                def check() -> bool:
                    return on_screen(backend.capture(pane_id, 0))

            if confirmed is not None and confirmed():
                # the program submitted on its own (it took the paste as typed lines)
                log.info("prompt delivered", extra={"pane": pane_id, "chars": len(text)})
                return
            per_attempt = max(timeout / (enter_retries + 1), 0.5)
            for attempt in range(enter_retries + 1):
                if time.monotonic() >= deadline:
                    break
                if attempt == 0 and on_enter is not None:
                    on_enter()
                backend.send_keys(pane_id, "Enter")
                until = min(deadline, time.monotonic() + per_attempt)
                if self._wait_confirmed(backend, pane_id, check, until):
                    log.info(
                        "prompt delivered",
                        extra={"pane": pane_id, "chars": len(text), "enters": attempt + 1},
                    )
                    return
                log.info("prompt not confirmed, pressing Enter again", extra={"pane": pane_id})
            screen = error_screen(backend, pane_id)
            msg = (
                f"prompt to pane {pane_id} was not confirmed after {timeout:g}s "
                f"and {enter_retries + 1} Enter presses"
            )
            raise DeliveryError(
                msg,
                screen,
                hint="Look at the pane (`lo-orch attach TASK`): a dialog or a busy agent "
                "may be holding the input.",
            )

    def _require_alive(self, backend: SessionBackend, pane_id: str, state: PaneState) -> None:
        if not state.exists:
            msg = f"pane {pane_id} does not exist; the prompt was not sent"
            raise DeliveryError(msg)
        if not state.alive:
            raise self._exited(backend, pane_id, state.dead_status, "before the prompt was sent")

    def _settled(self, backend: SessionBackend, pane_id: str, before: str, deadline: float) -> str:
        """Wait for the paste to show (bounded), then for the screen to stop changing.

        The first look comes a poll after the paste: a screen read at once had mostly not
        drawn it yet (the program reads the paste, then redraws): 6 looks a task, now 5."""
        limit = min(deadline, time.monotonic() + self.paste_wait)
        time.sleep(self.poll)
        screen = backend.capture(pane_id, 0)
        while screen == before and time.monotonic() < limit:
            time.sleep(self.poll)
            screen = backend.capture(pane_id, 0)
        while time.monotonic() < limit:
            time.sleep(self.settle)
            again = backend.capture(pane_id, 0)
            if again == screen:
                break
            screen = again
        return screen

    def _wait_confirmed(
        self, backend: SessionBackend, pane_id: str, check: Callable[[], bool], until: float
    ) -> bool:
        next_liveness = time.monotonic() + 0.5
        while True:
            if check():
                return True
            now = time.monotonic()
            if now >= until:
                return False
            if now >= next_liveness:
                next_liveness = now + 0.5
                state = backend.state(pane_id)
                if not state.alive:
                    raise self._exited(
                        backend, pane_id, state.dead_status, "while a prompt was being delivered"
                    )
            time.sleep(self.poll)

    @staticmethod
    def _exited(
        backend: SessionBackend, pane_id: str, status: int | None, when: str
    ) -> DeliveryError:
        msg = f"the agent in pane {pane_id} exited (status {status}) {when}"
        return DeliveryError(msg, error_screen(backend, pane_id, dead=True))
