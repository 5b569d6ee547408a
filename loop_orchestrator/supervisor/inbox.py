"""What sessions report, heard by the supervisor: messages on its inbox socket (and what
was left in the inbox folder while nobody listened), tied to a task by the sender's
process, judged by ``Reports``; a signal that arrived unattested is asked for again.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Container
from pathlib import Path

from loop_orchestrator.permissions.desk import Desk
from loop_orchestrator.runstate.state import TaskStatus
from loop_orchestrator.sessions import listener, procinfo
from loop_orchestrator.sessions.backend import SessionBackend
from loop_orchestrator.supervisor.accounting import Accounting
from loop_orchestrator.supervisor.journal import Journal
from loop_orchestrator.supervisor.lifecycle import SIGNAL_FROM
from loop_orchestrator.supervisor.reports import Reports
from loop_orchestrator.supervisor.sessions import Sessions

log = logging.getLogger(__name__)

Submit = Callable[[str, Callable[[str], None]], None]


class PaneTasks:
    """Which task's session a process descends from: each pane's process (``listed``: its
    id, as tmux reports it, and its task) and the parent chain the kernel keeps.

    A pane's process is known by its id *and its start time*: a pane that ended leaves its
    id to the kernel, which hands it out again once ids wrap around (32,768 of them by
    default: minutes on a busy machine), and the list is asked again only when a process
    finds no pane above it. A process that got the id of an ended pane (any process of
    another session, one that started thousands of others to reach it among them) was
    taken for that pane's task: its messages judged as that task's.
    """

    def __init__(self, listed: Callable[[], dict[int, str]]) -> None:
        self._listed = listed
        #: pane process id -> (task, its start time); replaced whole, never changed
        self._known: dict[int, tuple[str, str | None]] = {}

    def task_of(self, pid: int) -> str | None:
        for attempt in range(2):
            known = self._known
            # nearest first, read no further than the first live pane (its tmux server and
            # init above it cost a /proc read each); a pane whose id another process has
            # since is passed over
            for ancestor in procinfo.lineage(pid):
                found = known.get(ancestor)
                if (
                    found is not None
                    and found[1] is not None
                    and found[1] == procinfo.start_time(ancestor)
                ):
                    return found[0]
            if attempt == 0:
                listed = self._listed()
                self._known = {p: (task, procinfo.start_time(p)) for p, task in listed.items()}
        return None


class Inbox:
    """The sessions' messages to the supervisor, and the signals to ask for again."""

    def __init__(
        self,
        journal: Journal,
        sessions: Sessions,
        accounting: Accounting,
        desk: Desk,
        *,
        root: Path,
        backend: SessionBackend,
        wake: threading.Event,
        submit: Submit,
    ) -> None:
        self.journal = journal
        self.sessions = sessions
        self.root = root
        self.backend = backend
        self.wake = wake
        self.submit = submit
        #: judges each message
        self.reports = Reports(
            journal.record,
            journal.store,
            journal.task_ids,
            journal.event,
            self.ask_again,
            turn_ended=accounting.turn_ended,
            block=journal.block,
            limit_hit=accounting.limit_hit,
            desk=desk,
            observe=accounting.refresh_usage,
            settle=accounting.await_transcript,
            on_screen=not sessions.adapter.uses_hooks,
        )
        #: task -> the signal to ask its session for again (it arrived unattested); the
        #: loop asks (``ask_pending``), and once per signal and round (``asked``)
        self.asks: dict[str, str] = {}
        self.asks_lock = threading.Lock()
        self.asked: dict[str, str] = {}
        #: which session a message comes from
        self.panes = PaneTasks(backend.task_pids)

    def drain(self) -> None:
        """What sessions left while no supervisor listened: hints, never decisions."""
        for request in listener.drain(self.root, self.journal.task_ids):
            self.reports.handle(request)

    def identify(self, pid: int) -> str | None:
        """The task whose session ``pid`` descends from (the kernel's parent chain), or None.

        Called by the inbox's threads for every message: only the pane's process, which
        tmux reports and no agent can choose, ties a message to a task (``PaneTasks``).
        """
        return self.panes.task_of(pid)

    def receive(self, request: listener.Request) -> None:
        """Judge a session's message on the listener's thread and answer at once (the
        record serialises it with the jobs' changes); the loop wakes to act on it."""
        try:
            request.answer(self.reports.handle(request))
        except Exception:
            # a thread boundary: the sender must get an answer (None: it falls back to the
            # inbox folder), and the bug must be seen, not kill the listener
            log.exception("a session's message could not be handled")
            request.answer(None)
        finally:
            self.wake.set()
            if request.attested and request.task is not None:
                self.sessions.heard_from(request.task)  # (it runs: a wait for it looks)

    def ask_again(self, tid: str, signal: str) -> None:
        """A signal arrived unattested (no supervisor listened): the loop asks the session
        for it once more (``ask_pending``). Called on the inbox's and the relays' threads,
        as the hint comes: a step of the task running then does not make it lost."""
        with self.asks_lock:
            self.asks[tid] = signal
        self.wake.set()

    def ask_pending(self, statuses: dict[str, TaskStatus], busy: Container[str]) -> None:
        """Ask sessions for the signals that arrived unattested: after the task's running
        step, while the task still waits for that signal, once per signal and round."""
        with self.asks_lock:
            waiting = dict(self.asks)
        for tid, signal in waiting.items():
            if tid in busy:
                continue  # after this step (a redelivery, a person's message...)
            with self.asks_lock:
                if self.asks.get(tid) == signal:  # (not one that came meanwhile)
                    del self.asks[tid]
            st = statuses.get(tid)
            if st is None or st.phase.value != SIGNAL_FROM.get(signal):
                continue  # it moved on (the signal counted after all), or it was not due
            key = f"{signal}:{st.rework_count}"
            if self.asked.get(tid) == key:
                continue  # asked already: one more copy of the same report
            self.asked[tid] = key
            self.journal.event("signal_asked_again", tid, phase=signal)
            self.submit(tid, functools.partial(self.sessions.signal_again, signal=signal))
