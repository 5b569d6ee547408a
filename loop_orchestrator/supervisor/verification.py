"""The supervisor's verification: committing a task's work, verifying that commit (a
verdict bound to it, reused after a restart only as recorded), and sending it back for
rework with the findings, or blocking it at the rework limit (``decide.rework``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loop_orchestrator import verify
from loop_orchestrator.config import Settings
from loop_orchestrator.errors import GitError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.plan.model import Plan
from loop_orchestrator.runstate.state import Phase, RunDir
from loop_orchestrator.supervisor import decide, lifecycle
from loop_orchestrator.supervisor.journal import Journal
from loop_orchestrator.supervisor.lifecycle import Event
from loop_orchestrator.supervisor.sessions import Sessions
from loop_orchestrator.verify.disputes import judged
from loop_orchestrator.workspace.workspace import Workspace

log = logging.getLogger(__name__)


class Verification:
    """Verify a task's work; rework or pass it on to integration."""

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
        git_lock: threading.Lock,
        site_baseline: Callable[[], Any],
        integrate: Callable[[str], None],
        compare_refs: Callable[[], None] = lambda: None,
    ) -> None:
        self.journal = journal
        self.sessions = sessions
        self.settings = settings
        self.plan = plan
        self.repo = repo
        self.rundir = rundir
        self.ws = ws
        self.git_lock = git_lock
        #: the checks' Python environments as they were before any agent ran (taken when
        #: the run starts)
        self.site_baseline = site_baseline
        #: an accepted task goes on to integration at once (``Integration.integrate``)
        self.integrate = integrate
        #: the run's refs compared with the book now (``RefGuard.compare_now``): before the
        #: work is committed and before its verdict is accepted, a ref moved until then is
        #: put back and its round owed (``tampered``), whatever the watch's delay
        self.compare_refs = compare_refs

    def verify(self, tid: str) -> None:
        task = self.plan.task(tid)
        if self.journal.task(tid).phase != Phase.VERIFYING:  # (the loop moved it already)
            self.journal.move(tid, Event.VERIFY)
        # a session that moved a ref of the run and signalled at once owes its round
        # before its work is looked at: the comparison comes first, not the watch's news
        self.compare_refs()
        self.sessions.heal_worktree(tid)
        lock = self.sessions.clear_index_lock(tid)
        try:
            with self.git_lock:
                commit = self.ws.commit_task(tid, f"{tid}: {task.label}\n\n{task.objective}\n")
        except GitError as exc:
            failed = decide.commit_failed(
                tid,
                error=exc.render(),
                message=exc.message,
                held_by=lock.held_by,
                index_locked="index.lock" in exc.render(),
            )
            if isinstance(failed, decide.Block):
                self.journal.block(tid, failed.reason)
            else:
                self.rework(tid, None, failed.summary)
            return
        self.journal.set(tid, commit=commit)
        # A verdict is bound to its commit and recorded by the supervisor: after a restart
        # the recorded one is reused; anything else (a verdict file nobody recorded, or one
        # edited since) is not evidence, and the commit is verified again.
        claims = [
            (d.get("check", ""), d.get("note", "")) for d in self.journal.record.task(tid).disputes
        ]
        verdict = self.journal.recorded_verdict(tid, commit)
        if verdict is not None and not judged(verdict.disputes, claims):
            verdict = None  # the same commit, disputed now (or differently): judge it again
        reused = verdict is not None
        if verdict is None:
            # the brief as the supervisor wrote it, never the file (the agent can edit that
            # to talk the auditor round); after a restart it is rendered again
            brief = self.sessions.briefs.get(tid) or self.sessions.render_brief(task)
            with self.git_lock:
                # the task's own change: from the staging commit it began at
                start = self.ws.task_start(tid)
            verdict = verify.verify_task(
                self.repo,
                self.rundir,
                task,
                start,
                commit,
                brief=brief,
                settings=self.settings,
                all_tasks=self.plan.tasks,
                site_baseline=self.site_baseline(),
                claims=claims,
            )
            self.journal.record.record_verdict(
                tid, commit, verdict.passed, verdict.model_dump_json()
            )
        for d in verdict.disputes:
            # every dispute and how it was settled; the same dispute of the same
            # commit again is settled as before (reused: not judged again)
            self.journal.event(
                "dispute",
                tid,
                commit=commit,
                check=d.check,
                outcome=d.outcome,
                note=d.note,
                message=d.reason,
                reused=reused,
            )
        summary = verdict.summary()
        self.journal.event(
            "verdict",
            tid,
            commit=commit,
            passed=verdict.passed,
            message=summary.splitlines()[0] if summary else "",
        )
        # a round owed for moving refs of the run (``RefGuard``) is this one: a passing
        # verdict does not land it (compared again: a move while it was verified counts)
        self.compare_refs()
        what = self.journal.task(tid).tampered
        if verdict.passed and what is None:
            self.journal.move(tid, Event.PASS, commit=commit, error=None, note=None)
            self.integrate(tid)
        elif what is not None:
            self.rework(tid, verdict, f"{what}\n\n{summary}", tampered=True)
        else:
            self.rework(tid, verdict, summary)

    def tamper_round(self, tid: str) -> None:
        """The task's session moved refs of the run (its ``tampered``, as ``RefGuard``
        found it): a rework round whose review says so, or a block after the round limit."""
        st = self.journal.record.task(tid)
        what = st.tampered
        if not what:
            return  # its verification sent the round meanwhile
        max_rounds = lifecycle.rework_limit(st, self.settings.run.max_rework)
        step = decide.after_tamper(tid, rework_count=st.rework_count, limit=max_rounds, what=what)
        if isinstance(step, decide.Block):
            self.journal.set(tid, tampered=None)
            self.journal.block(tid, step.reason)
            return
        review = self.rundir.review_path(tid, step.round)
        atomic_write_text(review, tamper_review(tid, step.round, max_rounds, what))
        self.journal.move(
            tid, Event.TAMPERED, rework_count=step.round, note=what[:200], tampered=None
        )
        self.journal.event(
            "rework", tid, round=step.round, review=str(review), cause="refs_tampered"
        )
        self.sessions.deliver(tid, "prompt_rework.md.j2")

    def rework(self, tid: str, verdict: Any, summary: str, *, tampered: bool = False) -> None:
        """Send the task back with a review, or block it after ``max_rework`` rounds
        (``tampered``: its session moved refs of the run, which ``summary`` begins with)."""
        st = self.journal.record.task(tid)
        max_rounds = lifecycle.rework_limit(st, self.settings.run.max_rework)
        step = decide.rework(rework_count=st.rework_count, limit=max_rounds, summary=summary)
        if isinstance(step, decide.Block):
            if tampered:
                self.journal.set(tid, tampered=None)
            self.journal.block(tid, step.reason)
            return
        round_no, first_line = step.round, step.summary
        task = self.plan.task(tid)
        if verdict is not None:
            review = verify.write_review(
                self.rundir, task, round_no, verdict, max_rounds=max_rounds
            )
            if tampered:
                text = review.read_text(encoding="utf-8")
                title, _, rest = text.partition("\n")
                what = summary.split("\n\n", 1)[0]
                atomic_write_text(review, f"{title}\n\n## Refs moved\n\n{what}\n{rest}")
        else:
            review = self.rundir.review_path(tid, round_no)
            atomic_write_text(
                review,
                f"# Review of {tid}, round {round_no}\n\n{summary}\n\n"
                "Never weaken, skip or delete tests to pass a check.\n",
            )
        if tampered:  # the round owed for it is this one (cleared with the move)
            self.journal.move(
                tid, Event.REWORK, rework_count=round_no, note=first_line, tampered=None
            )
            self.journal.event(
                "rework", tid, round=round_no, review=str(review), cause="refs_tampered"
            )
        else:
            self.journal.move(tid, Event.REWORK, rework_count=round_no, note=first_line)
            self.journal.event("rework", tid, round=round_no, review=str(review))
        self.sessions.deliver(tid, "prompt_rework.md.j2")


def tamper_review(task: str, round_no: int, max_rounds: int, what: str) -> str:
    """The review of a round sent because the task's session moved refs of the run."""
    return (
        f"# Review of {task}, round {round_no} of {max_rounds}\n\n"
        "## Refs moved\n\n"
        f"{what}.\n\n"
        "Nothing of that attempt was verified or kept on a branch. Do the task's work in "
        "your worktree, commit nothing onto other branches, and signal `impl_done`: lo-orch "
        "verifies the work and merges it itself.\n"
    )
