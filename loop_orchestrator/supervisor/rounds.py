"""The supervisor's review rounds: a person's comments at Gate 2 sent back to the sessions
that wrote the lines (docs/design.md section 11; the decisions are ``decide.review_round``).

A request (`lo-orch request-changes`, in the record) is taken at the supervisor's next turn:
each addressed integrated task is reopened (``integrated -> implementing``, a round number
of its own, counted apart from rework), its branch gets staging merged in and its session
is resumed with the comments (``prompt``). Once a reviewed task is integrated again, the
done-checks of the integrated tasks that depend on it run again on the new staging
(``recheck_dependents``); a dependent that fails there is reopened for a rework round.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from loop_orchestrator import templating
from loop_orchestrator.config import Settings
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.plan.model import Plan
from loop_orchestrator.runstate import comments as store
from loop_orchestrator.runstate.comments import Comment
from loop_orchestrator.runstate.journal import Record
from loop_orchestrator.runstate.state import Phase, RunDir, RunPhase, TaskStatus
from loop_orchestrator.supervisor import decide, lifecycle
from loop_orchestrator.supervisor.journal import Journal
from loop_orchestrator.supervisor.lifecycle import Event
from loop_orchestrator.verify import donechecks
from loop_orchestrator.verify.checkout import check_env, clean_checkout
from loop_orchestrator.workspace.workspace import Workspace

log = logging.getLogger(__name__)

#: the review round's prompt
TEMPLATE = "prompt_review_round.md.j2"
#: at most this many comments in one prompt (the rest: `lo-orch comments`)
PROMPT_COMMENTS = 12

Submit = Callable[[str, Callable[[str], None]], None]

_SOURCE_WORDS = {
    "person": "from the person reviewing at Gate 2",
    "github-review": "from a pull request review",
    "github-check": "from a failing check of the pull request",
}


def is_review_round(st: TaskStatus) -> bool:
    """Whether the task works on a review round's prompt now (not a rework after it)."""
    return (
        st.phase in (Phase.IMPLEMENTING, Phase.IMPL_DONE, Phase.VERIFYING)
        and st.review_request is not None
        and st.review_round_at == st.rework_count
    )


def prompt(record: Record, st: TaskStatus, max_review_rounds: int) -> str:
    """The review round's prompt for ``st``: its request's comments, quoted, bounded."""
    assert st.review_request is not None
    found = store.of(record).of_request(st.review_request, st.task)
    shown = found[:PROMPT_COMMENTS]
    return templating.render(
        TEMPLATE,
        task=st.task,
        round_no=st.rework_count,
        review_round=st.review_rounds,
        max_review_rounds=max_review_rounds,
        comments=[_view(c) for c in shown],
        more=len(found) - len(shown),
    )


def _view(c: Comment) -> dict[str, object]:
    start = c.excerpt_start or 1
    return {
        "path": c.path,
        "line": c.line,
        "commit": c.commit,
        "source_words": _SOURCE_WORDS[c.source],
        "excerpt": [(start + i, text) for i, text in enumerate(c.excerpt)],
        # quoted line by line: the words are a value of the template, never its source
        "quoted": c.text.splitlines() or [""],
    }


class ReviewRounds:
    """Opens the review rounds a person asked for, and re-checks dependents after them."""

    def __init__(
        self,
        journal: Journal,
        *,
        settings: Settings,
        plan: Plan,
        repo: Path,
        rundir: RunDir,
        ws: Workspace,
        git_lock: threading.Lock,
        deps: Mapping[str, Sequence[str]],
        submit: Submit,
        reopen: Callable[[str], None],
    ) -> None:
        self.journal = journal
        self.settings = settings
        self.plan = plan
        self.repo = repo
        self.rundir = rundir
        self.ws = ws
        self.git_lock = git_lock
        self.deps = deps
        self.submit = submit
        #: relaunch a reopened task's session on its worktree with staging merged in
        self.reopen = reopen

    @property
    def record(self) -> Record:
        return self.journal.record

    def pending(self) -> bool:
        """A request waits for a supervisor to take it."""
        return bool(store.of(self.record).pending())

    def take(self, busy: Callable[[str], bool]) -> None:
        """Open the review rounds of every request not taken yet (a task reopened for it
        before a restart is not reopened again)."""
        for req in store.of(self.record).pending():
            opened = False
            for tid in req.tasks:
                st = self.record.task(tid)
                if st.review_request == req.id or busy(tid):
                    opened = opened or st.review_request == req.id
                    continue
                opened = self._open(tid, st, req.id) or opened
            if any(busy(t) for t in req.tasks if self.record.task(t).review_request != req.id):
                continue  # taken on a later turn, once their step is over
            store.mark_taken(self.record, req.id)
            if opened and self.record.run.phase != RunPhase.RUNNING:
                self.record.update_run(phase=RunPhase.RUNNING)

    def _open(self, tid: str, st: TaskStatus, request: str) -> bool:
        limit = self.settings.run.max_review_rounds
        step = decide.review_round(
            tid,
            phase=st.phase,
            rework_count=st.rework_count,
            review_rounds=st.review_rounds,
            limit=limit,
        )
        comments = store.of(self.record).of_request(request, tid)
        if isinstance(step, decide.Unrouted):
            self.journal.event("review_round_refused", tid, request=request, message=step.message)
            return False
        st = self.journal.move(
            tid,
            Event.REVIEW_ROUND,
            rework_count=step.round,
            review_rounds=step.review_round,
            review_round_at=step.round,
            review_request=request,
            delivered=None,
            delivering=None,
            relaunches=0,
            nudged=False,
            stop_blocks=0,
            note=f"review round {step.review_round}: {len(comments)} comment(s) from Gate 2",
            error=None,
        )
        text = prompt(self.record, st, limit)
        atomic_write_text(self.rundir.review_path(tid, step.round), text + "\n")
        self.journal.event(
            "review_round",
            tid,
            round=step.round,
            review_round=step.review_round,
            comments=[c.id for c in comments],
            request=request,
        )
        for c in comments:
            self.journal.event("comment_sent", tid, id=c.id, round=step.round)
        self.submit(tid, self.reopen)
        return True

    def recheck_dependents(self) -> bool:
        """After review rounds: run the done-checks of each integrated task that depends on
        a reviewed one again on staging; reopen those that fail. True when one was reopened
        (the run goes on)."""
        statuses = self.record.tasks()
        reviewed = [
            t
            for t, st in statuses.items()
            if st.phase == Phase.INTEGRATED
            and st.review_round_at is not None
            and st.dependents_checked != st.commit
        ]
        if not reviewed:
            return False
        staging = self.ws.branches.staging_tip()
        assert staging is not None
        dependents = sorted(
            d
            for d, on in self.deps.items()
            if any(t in on for t in reviewed) and statuses[d].phase == Phase.INTEGRATED
        )
        reopened = False
        for dep in dependents:
            reopened = self._recheck(dep, staging, reviewed) or reopened
        for t in reviewed:
            self.journal.set(t, dependents_checked=statuses[t].commit)
        return reopened

    def _recheck(self, dep: str, staging: str, reviewed: Sequence[str]) -> bool:
        task = self.plan.task(dep)
        specs = [donechecks.DoneSpec(d.criterion, d.argv() if d.check else None) for d in task.done]
        if not any(s.argv for s in specs):
            return False
        evidence = self.rundir.task_evidence_dir(dep) / f"recheck-{staging[:12]}"
        timeout = self.settings.verify.check_timeout
        with clean_checkout(self.repo, staging) as tree:
            runs = donechecks.run_done_checks(
                specs, tree, evidence, env=check_env(tree), timeout=timeout
            )
        failed = donechecks.check_findings(runs, timeout) + donechecks.report_findings(runs)
        self.journal.event(
            "dependent_rechecked",
            dep,
            staging=staging,
            after=list(reviewed),
            passed=not failed,
            evidence=str(evidence),
        )
        if not failed:
            return False
        st = self.record.task(dep)
        limit = lifecycle.rework_limit(st, self.settings.run.max_rework)
        step = decide.reopen(rework_count=st.rework_count, limit=limit, paths=list(task.owns))
        if isinstance(step, decide.Block):
            self.journal.block(dep, step.reason)
            return False
        lines = "\n".join(f"- {f.message}" for f in failed[:5])
        atomic_write_text(
            self.rundir.review_path(dep, step.round),
            f"# Review of task `{dep}`, round {step.round}: after a review round of "
            f"{', '.join(reviewed)}\n\nYour done-checks fail on staging {staging[:12]}, which "
            f"now holds the reviewed change of {', '.join(reviewed)}:\n\n{lines}\n\nStaging "
            "has been merged into your branch. Make your done-checks pass again in your own "
            "files (never weaken, skip or delete a test), then signal `impl_done`.\n",
        )
        self.journal.move(
            dep,
            Event.REOPEN,
            rework_count=step.round,
            delivered=None,
            delivering=None,
            note=f"done-checks fail after the review round of {', '.join(reviewed)}",
            error=None,
        )
        self.submit(dep, self.reopen)
        self.record.update_run(phase=RunPhase.RUNNING)
        return True
