"""What the supervisor sees of its sessions' panes, looked at on a thread of its own: which
panes are alive (one tmux call for every pane) and when each working session's screen last
changed (sampled every ``decide.SCREEN_SAMPLE_SECONDS``), every ``cadence.SESSIONS_SECONDS``.

The loop decides on the latest look (``decide.watch``: relaunch, resume, nudge, block)
without a tmux call of its own, so a session's signal never waits behind one; a pane the
look does not show alive is asked about again by the loop before anything is decided.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Container, Mapping

from loop_orchestrator.errors import PaneGoneError
from loop_orchestrator.runstate.state import TaskStatus
from loop_orchestrator.sessions.backend import SessionBackend
from loop_orchestrator.supervisor import cadence, decide
from loop_orchestrator.supervisor.decide import WORKING_PHASES

log = logging.getLogger(__name__)


class PaneWatch:
    """The panes' liveness and screens, refreshed on the ``lo-panes`` thread."""

    def __init__(
        self,
        backend: SessionBackend,
        statuses: Callable[[], Mapping[str, TaskStatus]],
        busy: Container[str],
    ) -> None:
        self.backend = backend
        self.statuses = statuses
        self.busy = busy
        #: pane id -> alive, as the last look found them (None: not looked yet)
        self.alive: dict[str, bool] | None = None
        #: task -> what the stall rule knows of its screen
        self.screens: dict[str, decide.Screen] = {}
        self._quit = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._quit.clear()
        self._thread = threading.Thread(target=self._run, name="lo-panes", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._quit.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=30)

    def _run(self) -> None:
        while not self._quit.is_set():
            try:
                self.look()
            except Exception:  # a thread boundary: seen; the next look tries again
                log.exception("the panes could not be looked at")
            self._quit.wait(cadence.SESSIONS_SECONDS)

    def look(self) -> None:
        """Which panes are alive, and the screens due a sample (of the working sessions no
        step is working on: those the stall rule can apply to)."""
        alive = self.backend.alive_panes()
        now = time.time()
        for tid, st in self.statuses().items():
            if st.phase not in WORKING_PHASES or not st.pane_id or not alive.get(st.pane_id):
                continue
            if tid in self.busy or st.limit_until:
                continue
            seen = self.screens.get(tid)
            if not decide.screen_due(seen, now):
                continue
            try:
                digest = hash(self.backend.capture(st.pane_id, lines=50))
            except PaneGoneError:  # killed since the liveness look: the next look's news
                continue
            self.screens[tid] = decide.screen_seen(seen, digest, now)
        self.alive = alive

    def screen_changed(self, task: str, now: float) -> float:
        """When ``task``'s screen last changed as sampled (``now`` before its first
        sample: a screen nobody looked at yet is no sign of a stall)."""
        seen = self.screens.get(task)
        return seen.changed if seen is not None else now
