"""The supervisor's integration: merging accepted work onto staging, the run's integration
command, and routing a failure of it back to the tasks owning the files it blames
(``decide.reopen``: another round, or a block at the limit).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from loop_orchestrator import templating, verify
from loop_orchestrator.config import Settings
from loop_orchestrator.errors import (
    LoOrchError,
    MergeConflictError,
    RefMovedError,
    RefTamperedError,
)
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.git import gateway as gitutil
from loop_orchestrator.plan.model import Plan
from loop_orchestrator.runstate.state import Phase, RunDir, RunPhase
from loop_orchestrator.sessions.backend import SessionBackend
from loop_orchestrator.supervisor import decide, lifecycle
from loop_orchestrator.supervisor.journal import Journal
from loop_orchestrator.supervisor.lifecycle import Event
from loop_orchestrator.supervisor.sessions import Sessions
from loop_orchestrator.workspace import integration
from loop_orchestrator.workspace.integration import IntegrationResult
from loop_orchestrator.workspace.workspace import Workspace

log = logging.getLogger(__name__)

Submit = Callable[[str, Callable[[str], None]], None]
#: how often a task's merge into staging is made when staging keeps moving under it
MERGE_TRIES = 3


class Integration:
    """Staging merges, the integration command, and routing its failures."""

    def __init__(
        self,
        journal: Journal,
        sessions: Sessions,
        *,
        settings: Settings,
        plan: Plan,
        repo: Path,
        rundir: RunDir,
        ws: Workspace,
        backend: SessionBackend,
        git_lock: threading.Lock,
        deps: dict[str, list[str]],
        submit: Submit,
        compare_refs: Callable[[], None] | None = None,
    ) -> None:
        self.journal = journal
        self.sessions = sessions
        self.settings = settings
        self.plan = plan
        self.repo = repo
        self.rundir = rundir
        self.ws = ws
        self.backend = backend
        self.git_lock = git_lock
        self.deps = deps
        #: start a task's step as a job (a reopened task's relaunch)
        self.submit = submit
        #: the last integration of the run (None before one)
        self.last: IntegrationResult | None = None
        #: the run's refs compared with the book now (``RefGuard.compare_now``): staging
        #: moved under a task's merge is put back, its mover owes the round, and the merge
        #: is made again (the task whose merge it was did nothing wrong)
        self.compare_refs = compare_refs

    def integrate(self, tid: str) -> None:
        st = self.journal.record.task(tid)
        assert st.commit is not None
        task = self.plan.task(tid)
        for attempt in range(MERGE_TRIES):
            with self.git_lock:
                try:
                    merged = self.ws.merge_into_staging(tid, st.commit, task.label)
                    break
                except MergeConflictError as exc:
                    self.journal.block(tid, f"conflicts with staging on {', '.join(exc.paths)}")
                    return
                except (RefTamperedError, RefMovedError):
                    # a ref was not where the book has it (staging moved by a session's
                    # `git update-ref` since the last comparison, or under the swap):
                    # nothing changed
                    if self.compare_refs is None or attempt == MERGE_TRIES - 1:
                        raise
            # what only lo-orch moves is put back and its mover owes the round; a person's
            # branch that moved raises here, as before (outside the git lock: it takes it)
            self.compare_refs()
        # The ledger line comes first: the status change releases dependents at once, and
        # the ledger must show the cause before its effects (a crash in between only logs
        # the idempotent merge again on resume).
        self.journal.event("task_integrated", tid, commit=st.commit, staging=merged)
        self.journal.move(tid, Event.INTEGRATED, error=None)
        if st.pane_id:
            with contextlib.suppress(LoOrchError):
                self.backend.kill_pane(st.pane_id)

    def integrate_run(self, skipped: Sequence[str]) -> IntegrationResult:
        """Staging with every integrated task, checked by the run's integration command."""
        result = integration.integrate(
            self.repo, self.settings, self.plan, skipped=list(skipped), record=self.journal.record
        )
        self.last = result
        return result

    def route(self, result: IntegrationResult) -> bool:
        """Send an integration failure back to the tasks owning the files it blames.

        True when at least one task was reopened (the run goes on); False when nothing
        could be routed, and the run waits for a human with the output.
        """

        if not result.output:
            return False
        files = gitutil.list_files(self.repo, result.commit)
        blamed = verify.failing_files(result.output, files)
        routed = verify.route_integration_failure(blamed, self.plan.tasks, depends=self.deps)
        reopened = False
        for tid, paths in routed.items():
            if tid is None:
                continue
            st = self.journal.record.task(tid)
            if st.phase != Phase.INTEGRATED:
                continue
            max_rounds = lifecycle.rework_limit(st, self.settings.run.max_rework)
            step = decide.reopen(rework_count=st.rework_count, limit=max_rounds, paths=paths)
            if isinstance(step, decide.Block):
                self.journal.block(tid, step.reason)
                continue
            round_no = step.round
            review = self.rundir.review_path(tid, round_no)
            tail = "\n".join(result.output.strip().splitlines()[-80:])
            atomic_write_text(
                review,
                templating.render(
                    "review_integration.md.j2",
                    task=tid,
                    round_no=round_no,
                    max_rounds=max_rounds,
                    command=result.command,
                    commit=result.commit,
                    paths=paths,
                    output=tail,
                    evidence=str(result.evidence) if result.evidence else "",
                ),
            )
            self.journal.move(
                tid,
                Event.REOPEN,
                rework_count=round_no,
                delivered=None,
                delivering=None,
                note=step.summary,
                error=None,
            )
            self.journal.event(
                "integration_routed", tid, round=round_no, files=paths, review=str(review)
            )
            self.submit(tid, self.sessions.reopen)
            reopened = True
        if reopened:
            self.journal.record.update_run(phase=RunPhase.RUNNING)
        return reopened
