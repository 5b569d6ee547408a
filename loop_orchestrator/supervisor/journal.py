"""The supervisor's journal: the ledger, the task records and the published view.

Every decision the supervisor carries out is written here: a ledger line (and a progress
line for the person watching), a change of a task's record (a phase only through the
lifecycle's table), a block with its notification. It also answers what the record holds
(the tasks' statuses, a verdict the supervisor recorded itself).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from loop_orchestrator import verify
from loop_orchestrator.runstate.state import RunDir, RunState, Store, TaskStatus
from loop_orchestrator.supervisor import lifecycle
from loop_orchestrator.supervisor.lifecycle import Event

if TYPE_CHECKING:
    from loop_orchestrator.runstate.journal import Record
    from loop_orchestrator.supervisor.notify import Notifier
    from loop_orchestrator.verify.models import Verdict

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


def epoch(iso: str | None) -> float:
    """Seconds since the epoch of an ISO time (0.0 for none or an unreadable one)."""
    if not iso:
        return 0.0
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return 0.0


class Journal:
    """The ledger, the records of one run's tasks, and blocks with their notifications."""

    def __init__(
        self,
        record: Record,
        store: Store,
        rundir: RunDir,
        task_ids: list[str],
        notifier: Notifier,
        progress: Progress | None = None,
    ) -> None:
        self.record = record
        self.store = store
        self.rundir = rundir
        self.task_ids = task_ids
        self.notifier = notifier
        self.progress = progress or (lambda _msg: None)
        #: tasks whose block was reported (ledger, notification) already
        self.reported_blocked: set[str] = set()

    @property
    def run(self) -> RunState:
        """The run as the record has it (never read back from run.json)."""
        return self.record.run

    def event(self, event: str, task: str | None = None, **fields: Any) -> None:
        """A ledger line, and the same as a progress line."""
        self.store.append_ledger(event, **({"task": task} if task else {}), **fields)
        self._progress(event, task, fields)

    def event_unsynced(self, event: str, task: str | None = None, **fields: Any) -> None:
        """``event`` on the path a session waits on: the ledger line is not fsynced
        (``Store.append_ledger_unsynced``)."""
        self.store.append_ledger_unsynced(event, **({"task": task} if task else {}), **fields)
        self._progress(event, task, fields)

    def _progress(self, event: str, task: str | None, fields: dict[str, Any]) -> None:
        text = fields.get("message") or ", ".join(f"{k}={v}" for k, v in fields.items())
        self.progress(f"{task + ': ' if task else ''}{event}{' — ' + str(text) if text else ''}")

    def set(self, task: str, **changes: Any) -> TaskStatus:
        """Record a change of a task (not its phase: that is ``move``) and publish it."""
        assert "phase" not in changes, "phase changes go through the lifecycle (move)"
        return self.record.update_task(task, **changes)

    def move(self, task: str, event: Event, *, durable: bool = True, **changes: Any) -> TaskStatus:
        """Move a task by the lifecycle's table (an illegal move is a bug: it raises).
        ``durable=False``: fsynced with the next append that is (a move nothing outside
        the record depends on until then)."""
        with self.record.step(durable=durable):
            phase = lifecycle.next_phase(self.record.task(task).phase, event)
            return self.record.update_task(task, durable=durable, phase=phase, **changes)

    def task(self, task: str) -> TaskStatus:
        return self.record.task(task)

    def statuses(self) -> dict[str, TaskStatus]:
        """Every task's status, from the record (in memory; the files are only the view)."""
        tasks = self.record.tasks()
        return {t: tasks[t] for t in self.task_ids if t in tasks}

    def block(self, tid: str, reason: str) -> None:
        """A person is needed: ledger, record and notification."""
        self.reported_blocked.add(tid)
        self.event("task_blocked", tid, message=reason)
        self.move(tid, Event.BLOCK, error=reason)
        self.notify_blocked(tid)

    def report_blocked(self, tid: str, reason: str) -> None:
        """A block the session set itself (`lo-orch signal blocked`): reported once."""
        self.reported_blocked.add(tid)
        self.event("task_blocked", tid, message=reason)
        self.notify_blocked(tid)

    def unblocked(self, tid: str) -> None:
        """The task is not blocked (any more: a person's `lo-orch retry`)."""
        self.reported_blocked.discard(tid)

    def retries(self, tid: str | None = None) -> int:
        """How often a person retried ``tid`` (any task): part of a notification's key."""
        return sum(
            1
            for e in self.store.read_ledger()
            if e.get("event") == "task_retried" and (tid is None or e.get("task") == tid)
        )

    def notify_blocked(self, tid: str) -> None:
        st = self.record.task(tid)
        reason = st.error or st.note or ""
        # the same blocking seen again by a restarted supervisor has the same key; a block
        # after a person's `lo-orch retry` a new one (the key only decides what is resent)
        retries = self.retries(tid)
        digest = hashlib.sha256(reason.encode()).hexdigest()[:12]
        key = f"{tid}:{retries}:{st.rework_count}:{digest}"
        self.notifier.notify(
            "task_blocked",
            key,
            f"blocked: {st.error or st.note or 'needs a person'}; help it, "
            f"then `lo-orch retry {tid}`",
            tid,
        )

    def recorded_verdict(self, tid: str, commit: str) -> Verdict | None:
        """The verdict of ``commit`` if the supervisor recorded exactly it, else None."""
        if self.record.verdict(tid, commit) is None:
            return None
        verdict = verify.load_verdict(self.rundir, tid, commit)
        if verdict is None or not self.record.verdict_matches(
            tid, commit, verdict.model_dump_json()
        ):
            self.event(
                "verdict_untrusted",
                tid,
                commit=commit,
                message="the verdict file differs from the recorded one; verifying again",
            )
            return None
        return verdict

    def view_edited(self, edited: list[str]) -> None:
        """Record that the published view (status files) was edited outside lo-orch and
        rewritten from the record (``Record.publish_all`` / ``check_view`` name them)."""
        if edited:
            self.event(
                "view_edited",
                files=edited,
                message=f"{', '.join(edited)} changed outside lo-orch: ignored, "
                "rewritten from the supervisor's record",
            )
