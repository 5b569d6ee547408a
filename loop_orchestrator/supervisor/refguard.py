"""The supervisor's guard over the run's refs: a watch on the ref files, the comparison
with the refs book whenever one changes (or a step met a moved ref), the repair, and the
rework round of the task whose session did it (docs/design.md section 10, "Refs it owns").

What is decided lives in ``decide`` (which refs are put back, whose round it is, when it is
sent, the block after the limit); this service only observes and carries it out. The
comparison runs under the workspace's git lock, the one lo-orch's own moves and their
records are made under, so a move of lo-orch's is never seen half-recorded: a watch event
for it finds git and the book agreeing, and nothing happens.

The comparisons the watch asks for run on the guard's own thread (``start``), never on the
supervisor's loop: a loop turn that reacts to a session's signal waits for no git command
and no job's git lock. What consumes a task's work compares first itself (``compare_now``,
at the start of a verification and before its verdict is accepted), so the order is
tamper-safe whatever the watch's delay: a session that moves a ref and signals at once
owes its round before its work is judged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from loop_orchestrator.errors import GitError, RefTamperedError
from loop_orchestrator.git.refwatch import RefWatch
from loop_orchestrator.runstate.state import Phase, TaskStatus
from loop_orchestrator.supervisor import decide
from loop_orchestrator.supervisor.journal import Journal
from loop_orchestrator.workspace.branches import QUARANTINE, Moved, Repaired
from loop_orchestrator.workspace.workspace import Workspace

log = logging.getLogger(__name__)

Submit = Callable[[str, Callable[[str], None]], None]

#: where the ref files cannot be watched, the guard's thread compares this often
POLL_SECONDS = 0.5
#: how often ``compare_now`` tries when a ref moves again while it is put back
COMPARE_TRIES = 3


class RefGuard:
    """Watches the run's refs, puts back what moved, and owes the tampering task a round."""

    def __init__(
        self,
        journal: Journal,
        ws: Workspace,
        *,
        git_lock: threading.Lock,
        wake: threading.Event,
        submit: Submit,
        tamper_round: Callable[[str], None],
        stopped: Callable[[RefTamperedError], None] | None = None,
    ) -> None:
        self.journal = journal
        self.ws = ws
        self.git_lock = git_lock
        self.wake = wake
        self.submit = submit
        self.tamper_round = tamper_round
        #: set by the watch and by a step that met a moved ref: compare at the next turn
        self.due = threading.Event()
        #: compare every ``POLL_SECONDS`` (the watch could not start)
        self.every_turn = False
        #: a branch a person may move moved (found on the guard's thread): the run stops
        self.stopped = stopped or (lambda _exc: None)
        #: one comparison at a time (the guard's thread, a verification, the loop's own)
        self._checking = threading.Lock()
        self._quit = threading.Event()
        self._thread: threading.Thread | None = None
        #: ``(task, start)`` of task branches found without their start (reported once)
        self.lost_reported: set[tuple[str, str]] = set()
        branches = ws.branches
        self.watch = RefWatch(
            ws.repo,
            [
                f"refs/heads/lo/{ws.run}/",  # staging, and the task branches (their starts)
                f"refs/heads/{branches.feature_branch}",
                QUARANTINE,
            ],
            self.request,
        )

    # the watch ----------------------------------------------------------------------------

    def start(self) -> None:
        try:
            self.watch.start()
        except OSError as exc:  # inotify's limits (max_user_watches) reached
            self.every_turn = True
            self.journal.event(
                "ref_watch_unavailable",
                message=f"the ref files cannot be watched ({exc}); the refs are compared "
                f"with the record every {POLL_SECONDS:g} s instead",
            )
        self._quit.clear()
        self._thread = threading.Thread(target=self._run, name="lo-refguard", daemon=True)
        self._thread.start()
        self.request()  # whatever moved while no supervisor watched

    def stop(self) -> None:
        self.watch.stop()
        self._quit.set()
        self.due.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=30)

    def _run(self) -> None:
        """The guard's thread: a comparison whenever one is due (the loop is woken after
        it, to send the rounds it owed); a person's branch that moved stops the run."""
        while not self._quit.is_set():
            self.due.wait(POLL_SECONDS if self.every_turn else None)
            if self._quit.is_set():
                return
            try:
                self.check()
            except RefTamperedError as exc:
                self.stopped(exc)
                self.wake.set()
            except GitError as exc:  # moved again while it was put back: soon again
                log.warning("refs not repaired", extra={"error": exc.message})
                self._quit.wait(0.05)
                self.due.set()
            except Exception:  # a thread boundary: seen, and the watch keeps asking
                log.exception("the refs could not be compared")
                self._quit.wait(1.0)
            if self.journal.record.has_changed():  # a round owed: the loop sends it
                self.wake.set()

    def request(self) -> None:
        """Compare the refs with the book now, on the guard's thread (any thread)."""
        self.due.set()

    # the comparison and the repair ----------------------------------------------------------

    def compare_now(self) -> None:
        """Compare now, whatever the watch said (any thread; before a task's work is
        consumed): when this returns, every ref moved before the call is put back and its
        round is owed (``TaskStatus.tampered``). A person's branch that moved raises
        ``RefTamperedError``; a ref that keeps moving while it is put back ``GitError``."""
        for attempt in range(COMPARE_TRIES):
            try:
                self.check(force=True)
                return
            except GitError:
                if attempt == COMPARE_TRIES - 1:
                    raise

    def check(
        self, statuses: Mapping[str, TaskStatus] | None = None, *, force: bool = False
    ) -> list[Repaired]:
        """When due (or ``force``): compare every recorded ref with git; put back lo-orch's
        own and owe the tampering tasks a round. A moved branch a person may move (the
        feature branch) raises ``RefTamperedError``: the run stops, as before, and nothing
        is moved. One comparison at a time, the rounds it owes recorded before the next
        begins (a caller that compares after another has found a move sees its round).
        ``statuses``: the tasks as the caller just read them (else read here)."""
        with self._checking:
            if not force and not self.due.is_set() and not self.every_turn:
                return []
            self.due.clear()
            return self._check(self.journal.statuses() if statuses is None else statuses)

    def _check(self, statuses: Mapping[str, TaskStatus]) -> list[Repaired]:
        branches = self.ws.branches
        repaired: list[Repaired] = []
        holders: set[str] = set()
        with self.git_lock:
            suspects = [t for t, st in statuses.items() if may_have_done_it(st.phase)]
            # one read of the book and one look at the refs for both comparisons
            book = branches.refs.items()
            refs = branches.watched(suspects, book)
            lost = branches.lost_starts(suspects, refs, book)
            moved = branches.moved(refs, book)
            theirs = [m for m in moved if not decide.puts_back(self.kind(m.ref))]
            mine = [m for m in moved if m not in theirs]
            if mine:
                repaired = branches.repair(mine, time.time())
                holders = {
                    t for r in repaired if r.found for t in branches.holders(r.found, suspects)
                }
        self._lost(lost)
        if repaired:
            self._repaired(repaired, holders, suspects)
        if theirs:  # put back what is lo-orch's own first; a person's branch stops the run
            raise theirs[0].error()
        return repaired

    def _repaired(self, repaired: list[Repaired], holders: set[str], suspects: list[str]) -> None:
        """Name each repair in the ledger and owe the tampering tasks their round."""
        tasks = decide.tampering_tasks(sorted(holders), sorted(suspects))
        for r in repaired:
            self.journal.event(
                "refs_repaired",
                ref=r.ref,
                expected=r.expected,
                found=r.found,
                kept=r.kept,
                tasks=list(tasks),
                by_ancestry=bool(holders),
                message=describe(r) + (f"; reworking {', '.join(tasks)}" if tasks else ""),
            )
        what = "; ".join(describe(r) for r in repaired)
        if not holders and len(tasks) > 1:
            what += (
                " (lo-orch cannot tell which session did it: every running task gets this round)"
            )
        for t in tasks:
            self._owe(t, what)

    def _lost(self, lost: list[Moved]) -> None:
        """Task branches that dropped their start: the task owes a round (once a start)."""
        prefix = f"refs/heads/lo/{self.ws.run}/"
        for m in lost:
            task = m.ref.removeprefix(prefix)
            if (task, m.expected) in self.lost_reported:
                continue
            self.lost_reported.add((task, m.expected))
            what = (
                f"{m.ref.removeprefix('refs/heads/')} no longer contains the commit it "
                f"started from ({m.expected[:12]}), which its work is measured from; merge it "
                f"back (`git merge {m.expected[:12]}`) instead of rewriting the branch"
            )
            self.journal.event(
                "task_start_lost", task, start=m.expected, found=m.found, message=what
            )
            self._owe(task, what)

    def _owe(self, task: str, what: str) -> None:
        """Record the round ``task`` owes for ``what`` (added to one owed already)."""
        with self.journal.record.step():
            before = self.journal.task(task).tampered
            if before and what in before:
                return
            self.journal.set(task, tampered=f"{before}; {what}" if before else what)

    def kind(self, ref: str) -> decide.RefKind:
        branches = self.ws.branches
        if ref == branches.staging_ref:
            return decide.RefKind.STAGING
        if branches.is_quarantine(ref):
            return decide.RefKind.QUARANTINE
        return decide.RefKind.BRANCH

    # the rounds owed ------------------------------------------------------------------------

    def send_rounds(self, statuses: Mapping[str, TaskStatus], busy: Callable[[str], bool]) -> None:
        """Send every round owed (``TaskStatus.tampered``) that is due (``decide.tamper_due``):
        the round's job clears it with the move, so a restart in between sends it still."""
        for task, st in statuses.items():
            if not st.tampered:
                continue
            due = decide.tamper_due(st.phase, busy=busy(task))
            if due is decide.TamperDue.NOW:
                self.submit(task, self.tamper_round)
            elif due is decide.TamperDue.DROP:
                self.journal.set(task, tampered=None)
                self.journal.event(
                    "tamper_round_dropped",
                    task,
                    message=f"nothing left to rework ({st.phase.value}): {st.tampered}",
                )


def may_have_done_it(phase: Phase) -> bool:
    """Whether a task in ``phase`` has a session whose work is not verified yet."""
    return phase is Phase.LAUNCHING or decide.tamper_due(phase, busy=False) is decide.TamperDue.NOW


def describe(r: Repaired) -> str:
    """One repair in a person's words."""
    name = r.ref.removeprefix("refs/heads/")
    if r.found is None:
        return f"{name} was deleted outside lo-orch; lo-orch put it back on {r.expected[:12]}"
    return (
        f"{name} was moved outside lo-orch (to {r.found[:12]}); lo-orch put it back on "
        f"{r.expected[:12]} and keeps what it found at {r.kept} (`git log {r.kept}`)"
    )
