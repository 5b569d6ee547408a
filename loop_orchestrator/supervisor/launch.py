"""The supervisor's sessions and prompts: launching a task's session with its brief,
delivering each phase's prompt (once, even across a restart), nudging a stalled session,
and what happens when a pane dies (relaunch, resume, or block).
"""

from __future__ import annotations

import logging
import time
import uuid

from loop_orchestrator import templating
from loop_orchestrator.cost import usage
from loop_orchestrator.errors import (
    AgentError,
    GitError,
    LoOrchError,
    TmuxError,
)
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.git import gateway as gitutil
from loop_orchestrator.plan.model import Task
from loop_orchestrator.runstate.state import (
    Phase,
    TaskStatus,
    now_iso,
)
from loop_orchestrator.sessions.delivery import prompt_confirmation
from loop_orchestrator.supervisor import lifecycle
from loop_orchestrator.supervisor.accounting import UsageAndLimits
from loop_orchestrator.supervisor.base import DELIVERY_GRACE_SECONDS, WORKING_PHASES, epoch
from loop_orchestrator.supervisor.lifecycle import (
    Event,
    delivery_key,
)

log = logging.getLogger(__name__)


class Delivery(UsageAndLimits):
    """Launching sessions, delivering prompts, nudges, dead panes, briefs."""

    def _start_task(self, tid: str) -> None:
        task = self.plan.task(tid)
        st = self.record.task(tid)
        with self.git_lock:
            worktree = self.ws.ensure_worktree(tid)
        if not st.worktree:
            self.ws.run_setup(worktree)
        brief = self.render_brief(task)
        self.briefs[tid] = brief
        atomic_write_text(self.rundir.brief_path(tid), brief)
        if self.adapter.name != "claude" and st.usage is None:
            # no transcript to read: its cost is unknown, never $0
            kind = self.settings.agent.kind
            note = (
                f"the agent (kind {kind}) records no token usage"
                if kind not in ("codex", "gemini")
                else f"the agent (kind {kind}) records tokens lo-orch does not read or price"
            )
            self._set(tid, usage=usage.unknown(note).as_json())
        session_id = st.session_id or str(uuid.uuid4())
        st = self._set(
            tid, worktree=str(worktree), branch=self.ws.task_branch(tid), session_id=session_id
        )
        ctx = self._context(task, st)
        self.adapter.prepare(ctx)
        pane = st.pane_id if st.pane_id and self.backend.state(st.pane_id).alive else None
        if pane is None:
            pane = self.backend.launch(self.adapter.launch_spec(ctx, resume=False))
            self._set(tid, pane_id=pane)
            self._event("session_launched", tid, pane_id=pane, session_id=session_id)
        self.adapter.wait_ready(self.backend, pane, timeout=self.settings.agent.ready_timeout)
        self._move(tid, Event.READY)
        self._deliver(tid, "prompt_plan.md.j2")

    def _to_implement(self, tid: str) -> None:
        self._move(tid, Event.IMPLEMENT)
        self._deliver(tid, "prompt_implement.md.j2")

    def _redeliver(self, tid: str) -> None:
        st = self.record.task(tid)
        if st.pane_id is None or not self.backend.state(st.pane_id).alive:
            if st.commit and self.ws.is_merged(st.commit):
                # merged already and sent back (`lo-orch retry` after a failed integration)
                self._reopen(tid)
            else:
                self._pane_died(tid, None)
            return
        if self._arrived_before_restart(tid):
            self._event(
                "prompt_delivered",
                tid,
                phase=st.phase.value,
                rework=st.rework_count,
                message="confirmed by the session's hook after a restart; not resent",
            )
            self._set(tid, delivered=delivery_key(st.phase, st.rework_count), delivering=None)
            return
        self._deliver(tid, self._prompt_for(st))

    def _prompt_for(self, st: TaskStatus) -> str:
        if st.phase == Phase.PLANNING:
            return "prompt_plan.md.j2"
        if st.rework_count > 0:
            return "prompt_rework.md.j2"
        return "prompt_implement.md.j2"

    def _deliver(self, tid: str, template: str) -> None:
        over = self._over_budget(tid)  # a new prompt is a turn boundary too
        if over:
            self._block(tid, over)
            return
        self._heal_worktree(tid)
        st = self.record.task(tid)
        assert st.pane_id is not None
        key = delivery_key(st.phase, st.rework_count)
        text = self._render_prompt(tid, template, st).strip()
        confirmed = None
        if self.adapter.uses_hooks:
            confirmed = prompt_confirmation(self.record.task, tid)
            self._set(tid, delivering=key, delivery_started_at=now_iso())
        # a no-op but for an agent that drops a prompt sent while it works
        self.adapter.wait_idle(self.backend, st.pane_id, timeout=self.settings.agent.ready_timeout)
        self.deliverer.deliver(
            self.backend,
            st.pane_id,
            text,
            confirmed=confirmed,
            bracketed=self.adapter.bracketed_paste,
        )
        self._event(
            "prompt_delivered", tid, phase=st.phase.value, rework=st.rework_count, chars=len(text)
        )
        self._set(tid, delivered=key, delivering=None)

    def _arrived_before_restart(self, tid: str) -> bool:
        """Whether an interrupted delivery's prompt reached the session after all.

        A supervisor killed after pasting but before recording the delivery would otherwise
        send the same prompt twice. The UserPromptSubmit hook (recorded by `lo-orch hook`,
        not by the supervisor) tells: a submit later than the start of that delivery. A
        restart within ``DELIVERY_GRACE_SECONDS`` of the start waits that long for the hook.
        Agents without hooks cannot tell, and get the prompt again.
        """
        st = self.record.task(tid)
        if not self.adapter.uses_hooks or st.delivering != delivery_key(st.phase, st.rework_count):
            return False
        started = epoch(st.delivery_started_at)
        deadline = started + DELIVERY_GRACE_SECONDS
        while True:
            if epoch(st.prompt_submitted_at) >= started > 0:
                return True
            if time.time() >= deadline:
                return False
            time.sleep(0.1)
            st = self.record.task(tid)

    def _render_prompt(self, tid: str, template: str, st: TaskStatus) -> str:
        if template == "prompt_rework.md.j2":
            from loop_orchestrator import verify

            verdict = self._recorded_verdict(tid, st.commit) if st.commit else None
            return verify.rework_prompt(
                self.rundir.review_path(tid, st.rework_count),
                task_id=tid,
                round_no=st.rework_count,
                max_rounds=lifecycle.rework_limit(st, self.settings.run.max_rework),
                verdict=verdict,
            )
        return templating.render(
            template,
            task=tid,
            run=self.state.name,
            brief=str(self.rundir.brief_path(tid)),
            plan_path=str(self.rundir.agent_plan_path(tid)),
            phase=st.phase.value,
        )

    def _nudge(self, tid: str) -> None:
        st = self._set(tid, nudged=True)
        expected = "plan_ready" if st.phase == Phase.PLANNING else "impl_done"
        self._event("nudged", tid, phase=st.phase.value)
        self._deliver_raw(
            tid,
            templating.render(
                "prompt_nudge.md.j2",
                task=tid,
                phase=st.phase.value,
                expected=expected,
                minutes=f"{self.settings.run.stall_minutes:g}",
            ),
        )

    def _died_under(self, task: str, exc: LoOrchError) -> bool:
        """A step failed because its session is gone (a Ray node lost while a prompt was
        being delivered; a pane killed mid-step): the task goes the way of any dead session
        (relaunched and resumed), not blocked for a person. A backend call that failed
        (``TmuxError``) on a dead session counts; so does an agent error (a prompt not
        confirmed, a ready prompt not reached) when the session no longer exists at all:
        which of the two a lost session raises depends only on the moment it went. An agent
        that exited with its pane kept, or any other error, is the caller's to report."""
        if not isinstance(exc, (TmuxError, AgentError)):
            return False
        st = self.record.task(task)
        if st.phase not in WORKING_PHASES or not st.pane_id:
            return False
        try:
            pane = self.backend.state(st.pane_id)
        except LoOrchError:  # cannot tell (tmux itself not answering): the step's error stands
            return False
        if pane.exists and (pane.alive or isinstance(exc, AgentError)):
            return False
        self._event("session_lost_mid_step", task, message=exc.message)
        try:
            self._pane_died(task, dead_status=pane.dead_status)
        except LoOrchError as again:
            self._block(task, again.render())
        return True

    def _pane_died(self, tid: str, dead_status: int | None = None) -> None:
        """Relaunch a dead session once (resuming it), then fail the task. A session that
        went with its cluster node (``PaneState.lost``) is not its agent's doing: such
        losses are counted apart and relaunched up to ``[cluster] max_node_losses`` times."""
        st = self.record.task(tid)
        pane = self.backend.state(st.pane_id) if st.pane_id else None
        screen = self.backend.capture(st.pane_id) if pane and pane.exists and st.pane_id else ""
        evidence = self.rundir.task_evidence_dir(tid)
        evidence.mkdir(parents=True, exist_ok=True)
        lost = bool(pane is not None and pane.lost)
        screen_file = evidence / (
            f"last-screen-lost-{st.node_losses}.txt" if lost else f"last-screen-{st.relaunches}.txt"
        )
        atomic_write_text(screen_file, screen)
        cause = "node_lost" if lost else "exited"
        cap = self.settings.cluster.max_node_losses
        if lost and st.node_losses >= cap:
            error = (
                f"the session was lost with its cluster node {st.node_losses + 1} times, "
                f"more than [cluster] max_node_losses = {cap} allows; check the nodes with "
                f"`ray status` and `lo-orch doctor`, then `lo-orch retry {tid}` (or raise "
                "max_node_losses in .loop-orchestrator/config.toml first)"
            )
            self._event("task_failed", tid, cause=cause, node_losses=st.node_losses, message=error)
            self._move(tid, Event.FAIL, error=error)
            return
        if not lost and st.relaunches >= 1:
            error = (
                f"the session exited (status {dead_status}) again after a relaunch; "
                f"last screen in {screen_file}"
            )
            self._event("task_failed", tid, cause=cause, exit_status=dead_status, message=error)
            self._move(tid, Event.FAIL, error=error)
            return
        parked = bool(st.limit_until) and time.time() < epoch(st.limit_until)
        self._event(
            "session_died",
            tid,
            cause=cause,
            exit_status=dead_status,
            **({"node_losses": st.node_losses + 1} if lost else {}),
            message=(
                f"its cluster node was lost ({st.node_losses + 1} of at most {cap}): "
                "relaunching on another node"
                if lost
                else "relaunching once"
            )
            + (" (parked by a limit: no prompt until its wait ends)" if parked else ""),
        )
        # a parked session keeps its prompt as delivered (--resume brings the conversation
        # back): a new prompt would only meet the limit again
        counted = {"node_losses": st.node_losses + 1} if lost else {"relaunches": st.relaunches + 1}
        st = (
            self._set(tid, **counted, delivering=None)
            if parked
            else self._set(tid, **counted, delivered=None, delivering=None)
        )
        spec = self.adapter.launch_spec(self._context(self.plan.task(tid), st), resume=True)
        if pane is not None and pane.exists and st.pane_id:
            pane_id = st.pane_id
            self.backend.respawn(pane_id, spec)
        else:
            pane_id = self.backend.launch(spec)
            st = self._set(tid, pane_id=pane_id)
        self.adapter.wait_ready(self.backend, pane_id, timeout=self.settings.agent.ready_timeout)
        if st.phase == Phase.LAUNCHING:
            st = self._move(tid, Event.READY)
        if parked:
            # the short prompt after the wait (_resume_after_limit) carries on
            self._event(
                "relaunched_while_parked",
                tid,
                until=st.limit_until,
                message="relaunched; it resumes after the limit's wait",
            )
            return
        self._deliver(tid, self._prompt_for(st))

    def _reopen(self, tid: str) -> None:
        """Relaunch an integrated task's session on its worktree, with staging merged in."""
        with self.git_lock:
            self.ws.refresh_task(tid)
        st = self.record.task(tid)
        spec = self.adapter.launch_spec(
            self._context(self.plan.task(tid), st), resume=bool(st.session_id)
        )
        pane = self.backend.launch(spec)
        self._set(tid, pane_id=pane)
        self._event("session_launched", tid, pane_id=pane, session_id=st.session_id, reopened=True)
        self.adapter.wait_ready(self.backend, pane, timeout=self.settings.agent.ready_timeout)
        self._deliver(tid, "prompt_rework.md.j2")

    def render_brief(self, task: Task) -> str:
        try:
            staging = gitutil.rev_parse(self.repo, self.ws.staging_branch)
        except GitError:  # before the first `run` there is no staging: the base it will be
            staging = self.state.base_sha
        return templating.task_brief(
            self.plan,
            task,
            run=self.state.name,
            repo=self.repo,
            rundir=self.rundir,
            base_sha=self.state.base_sha,
            staging_sha=staging,
            branch=self.ws.task_branch(task.id),
            waves=self.waves,
            deps=self.deps,
            tools=self.tools,
        )
