"""The supervisor's verification and integration: verifying a task's commit, sending it back
for rework with the findings, merging accepted work onto staging, and routing a failed
integration back to the tasks it names.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from loop_orchestrator import templating
from loop_orchestrator.errors import (
    GitError,
    LoOrchError,
    MergeConflictError,
)
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.git import gateway as gitutil
from loop_orchestrator.runstate.state import (
    Phase,
    RunPhase,
)
from loop_orchestrator.supervisor import lifecycle
from loop_orchestrator.supervisor.launch import Delivery
from loop_orchestrator.supervisor.lifecycle import (
    Event,
)

log = logging.getLogger(__name__)


class Verification(Delivery):
    """Verification, rework, integration and its routing."""

    def _verify(self, tid: str) -> None:
        from loop_orchestrator import verify
        from loop_orchestrator.verify.disputes import judged

        task = self.plan.task(tid)
        self._move(tid, Event.VERIFY)
        self._heal_worktree(tid)
        lock = self._clear_index_lock(tid)
        try:
            with self.git_lock:
                commit = self.ws.commit_task(tid, f"{tid}: {task.label}\n\n{task.objective}\n")
        except GitError as exc:
            if lock.held_by or "index.lock" in exc.render():
                # not the session's fault: a rework round would only fail the same way
                who = (
                    f"git process(es) {', '.join(map(str, lock.held_by))} hold it"
                    if lock.held_by
                    else "it could not be cleared"
                )
                self._block(
                    tid,
                    f"the worktree's git index is locked ({who}): "
                    f"{exc.message}; when no git runs there, `lo-orch retry {tid}`",
                )
                return
            self._rework(tid, None, f"the work could not be committed: {exc.render()}")
            return
        self._set(tid, commit=commit)
        # A verdict is bound to its commit and recorded by the supervisor: after a restart
        # the recorded one is reused; anything else (a verdict file nobody recorded, or one
        # edited since) is not evidence, and the commit is verified again.
        claims = [(d.get("check", ""), d.get("note", "")) for d in self.record.task(tid).disputes]
        verdict = self._recorded_verdict(tid, commit)
        if verdict is not None and not judged(verdict.disputes, claims):
            verdict = None  # the same commit, disputed now (or differently): judge it again
        reused = verdict is not None
        if verdict is None:
            # the brief as the supervisor wrote it, never the file (the agent can edit that
            # to talk the auditor round); after a restart it is rendered again
            brief = self.briefs.get(tid) or self.render_brief(task)
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
                site_baseline=self.site_baseline,
                claims=claims,
            )
            self.record.record_verdict(tid, commit, verdict.passed, verdict.model_dump_json())
        for d in verdict.disputes:
            # every dispute and how it was settled (issue 14); the same dispute of the same
            # commit again is settled as before (reused: not judged again)
            self._event(
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
        self._event(
            "verdict",
            tid,
            commit=commit,
            passed=verdict.passed,
            message=summary.splitlines()[0] if summary else "",
        )
        if verdict.passed:
            self._move(tid, Event.PASS, commit=commit, error=None, note=None)
            self._integrate(tid)
        else:
            self._rework(tid, verdict, summary)

    def _rework(self, tid: str, verdict: Any, summary: str) -> None:
        """Send the task back with a review, or block it after ``max_rework`` rounds."""
        from loop_orchestrator import verify

        st = self.record.task(tid)
        round_no = st.rework_count + 1
        max_rounds = lifecycle.rework_limit(st, self.settings.run.max_rework)
        first_line = summary.splitlines()[0] if summary else "see the reviews"
        if round_no > max_rounds:
            self._block(
                tid, f"verification failed after {st.rework_count} rework round(s): {first_line}"
            )
            return
        task = self.plan.task(tid)
        if verdict is not None:
            review = verify.write_review(
                self.rundir, task, round_no, verdict, max_rounds=max_rounds
            )
        else:
            review = self.rundir.review_path(tid, round_no)
            atomic_write_text(
                review,
                f"# Review of {tid}, round {round_no}\n\n{summary}\n\n"
                "Never weaken, skip or delete tests to pass a check.\n",
            )
        self._move(tid, Event.REWORK, rework_count=round_no, note=first_line)
        self._event("rework", tid, round=round_no, review=str(review))
        self._deliver(tid, "prompt_rework.md.j2")

    def _integrate(self, tid: str) -> None:
        st = self.record.task(tid)
        assert st.commit is not None
        task = self.plan.task(tid)
        with self.git_lock:
            try:
                merged = self.ws.merge_into_staging(tid, st.commit, task.label)
            except MergeConflictError as exc:
                self._block(tid, f"conflicts with staging on {', '.join(exc.paths)}")
                return
        # The ledger line comes first: the status change releases dependents at once, and
        # the ledger must show the cause before its effects (a crash in between only logs
        # the idempotent merge again on resume).
        self._event("task_integrated", tid, commit=st.commit, staging=merged)
        self._move(tid, Event.INTEGRATED, error=None)
        if st.pane_id:
            with contextlib.suppress(LoOrchError):
                self.backend.kill_pane(st.pane_id)

    def _route_integration(self) -> bool:
        """Send an integration failure back to the tasks owning the files it blames.

        True when at least one task was reopened (the run goes on); False when nothing
        could be routed, and the run waits for a human with the output.
        """
        from loop_orchestrator import verify

        result = self.integration
        if result is None or not result.output:
            return False
        files = gitutil.list_files(self.repo, result.commit)
        blamed = verify.failing_files(result.output, files)
        routed = verify.route_integration_failure(blamed, self.plan.tasks, depends=self.deps)
        reopened = False
        for tid, paths in routed.items():
            if tid is None:
                continue
            st = self.record.task(tid)
            if st.phase != Phase.INTEGRATED:
                continue
            round_no = st.rework_count + 1
            if round_no > lifecycle.rework_limit(st, self.settings.run.max_rework):
                self._block(
                    tid,
                    f"the integration tests still fail on {', '.join(paths)} "
                    f"after {st.rework_count} rework round(s)",
                )
                continue
            review = self.rundir.review_path(tid, round_no)
            tail = "\n".join(result.output.strip().splitlines()[-80:])
            atomic_write_text(
                review,
                templating.render(
                    "review_integration.md.j2",
                    task=tid,
                    round_no=round_no,
                    max_rounds=lifecycle.rework_limit(st, self.settings.run.max_rework),
                    command=result.command,
                    commit=result.commit,
                    paths=paths,
                    output=tail,
                    evidence=str(result.evidence) if result.evidence else "",
                ),
            )
            self._move(
                tid,
                Event.REOPEN,
                rework_count=round_no,
                delivered=None,
                delivering=None,
                note=f"integration tests fail on {', '.join(paths)}",
                error=None,
            )
            self._event("integration_routed", tid, round=round_no, files=paths, review=str(review))
            self._submit(tid, self._reopen)
            reopened = True
        if reopened:
            self.record.update_run(phase=RunPhase.RUNNING)
        return reopened
