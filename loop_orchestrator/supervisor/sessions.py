"""The supervisor's sessions: launching a task's session with its brief, delivering each
phase's prompt (once, even across a restart), a person's messages, nudges, resuming after a
limit's wait, healing a deleted worktree, and a session that died (relaunched, resumed, or
the task failed: ``decide.after_death``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loop_orchestrator import templating, verify
from loop_orchestrator.agents.contract import AgentAdapter, AgentContext, ConfirmsFromStore
from loop_orchestrator.agents.dialogs import Woken
from loop_orchestrator.config import Settings
from loop_orchestrator.cost import usage
from loop_orchestrator.errors import (
    AgentError,
    GitError,
    LoOrchError,
    PaneGoneError,
    TmuxError,
)
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.git import gateway as gitutil
from loop_orchestrator.plan.model import Plan, Task
from loop_orchestrator.runstate.state import (
    Phase,
    RunDir,
    TaskStatus,
    now_iso,
)
from loop_orchestrator.sessions.backend import LaunchSpec, PaneState, SessionBackend
from loop_orchestrator.sessions.delivery import Deliverer, prompt_confirmation, sanitize_prompt
from loop_orchestrator.supervisor import decide, lifecycle, recovery, rounds
from loop_orchestrator.supervisor.accounting import Accounting
from loop_orchestrator.supervisor.decide import WORKING_PHASES
from loop_orchestrator.supervisor.journal import Journal, epoch
from loop_orchestrator.supervisor.lifecycle import (
    Event,
    delivery_key,
)
from loop_orchestrator.workspace.workspace import Workspace

log = logging.getLogger(__name__)

#: how long after an interrupted delivery began its UserPromptSubmit hook may still come
DELIVERY_GRACE_SECONDS = 5.0


class Sessions:
    """The sessions of one run's tasks: launch, deliver, relaunch, heal."""

    def __init__(
        self,
        journal: Journal,
        accounting: Accounting,
        *,
        settings: Settings,
        plan: Plan,
        repo: Path,
        rundir: RunDir,
        ws: Workspace,
        backend: SessionBackend,
        adapter: AgentAdapter,
        deliverer: Deliverer,
        git_lock: threading.Lock,
        tools: dict[str, dict[str, Any]],
        waves: dict[str, int],
        deps: dict[str, list[str]],
    ) -> None:
        self.journal = journal
        self.accounting = accounting
        self.settings = settings
        self.plan = plan
        self.repo = repo
        self.rundir = rundir
        self.ws = ws
        self.backend = backend
        self.adapter = adapter
        self.deliverer = deliverer
        #: Workspace is not thread-safe (ref moves and the refs book go together): one
        #: writer at a time, shared with verification and integration
        self.git_lock = git_lock
        self.tools = tools
        self.waves = waves
        self.deps = deps
        #: each task's brief as rendered for its session (the file is agent-writable)
        self.briefs: dict[str, str] = {}
        #: task -> set by the first report of its session being started (``heard_from``)
        self._heard: dict[str, threading.Event] = {}
        self._heard_lock = threading.Lock()

    def heard_from(self, tid: str) -> None:
        """A message of ``tid``'s session arrived (it runs): a wait for its start looks at
        its screen now (``_starting``)."""
        with self._heard_lock:
            heard = self._heard.get(tid)
        if heard is not None:
            heard.set()

    @contextlib.contextmanager
    def _starting(self, tid: str) -> Iterator[Woken | None]:
        """Around a launch of ``tid``'s session and the wait for it to be ready: the
        ``woken`` of that wait (``wait_until_ready``), which the session's first report
        ends (an agent whose hooks report its start); None for any other agent (Cline's
        first hook comes with a prompt: its screen is polled as it was).
        Made before the launch, so that no report comes before it is there."""
        if not self.adapter.reports_start:
            yield None
            return
        heard = threading.Event()
        with self._heard_lock:
            self._heard[tid] = heard
        try:
            yield heard.wait
        finally:
            with self._heard_lock:
                if self._heard.get(tid) is heard:
                    del self._heard[tid]

    def start_task(self, tid: str) -> None:
        task = self.plan.task(tid)
        st = self.journal.record.task(tid)
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
                if kind not in ("codex", "gemini", "qwen", "cline", "vibe", "aider", "opencode")
                else f"the agent (kind {kind}) records tokens lo-orch does not read or price"
            )
            self.journal.set(tid, usage=usage.unknown(note).as_json())
        # an agent that names its own sessions (Cline) gets the id its first hook reports
        # (``lifecycle.hook_changes``), never one chosen here
        fresh = None if self.adapter.reports_session_id else str(uuid.uuid4())
        session_id = st.session_id or fresh
        st = self.journal.set(
            tid, worktree=str(worktree), branch=self.ws.task_branch(tid), session_id=session_id
        )
        ctx = self.context(task, st)
        self.adapter.prepare(ctx)
        pane = st.pane_id if st.pane_id and self.backend.state(st.pane_id).alive else None
        # (a session found running, after a restart, reported its start long ago: polled)
        with self._starting(tid) if pane is None else contextlib.nullcontext() as woken:
            if pane is None:
                pane = self.backend.launch(self.adapter.launch_spec(ctx, resume=False))
                self.journal.set(tid, pane_id=pane)
                self.journal.event("session_launched", tid, pane_id=pane, session_id=session_id)
            timeout = self.settings.agent.ready_timeout
            self.adapter.wait_ready(self.backend, pane, timeout=timeout, woken=woken)
        self.journal.move(tid, Event.READY)
        self.deliver(tid, "prompt_plan.md.j2")

    def deliver_implement(self, tid: str) -> None:
        """The implementation prompt, for a task the loop moved to implementing already
        (nothing, when it is in another phase by now: a person's retry, a block)."""
        if self.journal.record.task(tid).phase == Phase.IMPLEMENTING:
            self.deliver(tid, "prompt_implement.md.j2")

    def redeliver(self, tid: str) -> None:
        st = self.journal.record.task(tid)
        if st.pane_id is None or not self.backend.state(st.pane_id).alive:
            if st.commit and self.ws.is_merged(st.commit):
                # merged already and sent back (`lo-orch retry` after a failed integration)
                self.reopen(tid)
            else:
                self.pane_died(tid, None)
            return
        if self.arrived_before_restart(tid):
            self.journal.event(
                "prompt_delivered",
                tid,
                phase=st.phase.value,
                rework=st.rework_count,
                message="confirmed by the session's hook after a restart; not resent",
            )
            self.journal.set(
                tid, delivered=delivery_key(st.phase, st.rework_count), delivering=None
            )
            return
        self.deliver(tid, self.prompt_for(st))

    @staticmethod
    def prompt_for(st: TaskStatus) -> str:
        """The template of the prompt ``st``'s phase and round are due."""
        if st.phase == Phase.PLANNING:
            return "prompt_plan.md.j2"
        if rounds.is_review_round(st):
            return rounds.TEMPLATE
        if st.rework_count > 0:
            return "prompt_rework.md.j2"
        return "prompt_implement.md.j2"

    def deliver(self, tid: str, template: str) -> None:
        # one step of the record: a session's hook that finds the task over its budget at
        # the same moment sees this block, or this sees its
        with self.journal.record.step():
            if self.journal.record.task(tid).phase == Phase.BLOCKED:
                # blocked since this job was queued (its session's last hook found it over
                # its budget): no prompt, and no second block
                return
            over = self.accounting.over_budget(tid)  # a new prompt is a turn boundary too
            if over:
                self.journal.block(tid, over)
                return
        self.heal_worktree(tid)
        st = self.journal.record.task(tid)
        assert st.pane_id is not None
        key = delivery_key(st.phase, st.rework_count)
        text = self.render_prompt(tid, template, st).strip()

        def started() -> None:
            self.journal.set(tid, delivering=key, delivery_started_at=now_iso())

        confirmed = None
        if self.adapter.uses_hooks:
            confirmed = prompt_confirmation(self.journal.record.task, tid)
            started()
        elif isinstance(self.adapter, ConfirmsFromStore) and st.worktree:
            # before the paste: a record the CLI already had confirms nothing
            confirmed = self.adapter.prompt_check(Path(st.worktree), sanitize_prompt(text))
        # (an agent that drops a prompt sent while it works waits for its turn's end)
        self.adapter.wait_idle(self.backend, st.pane_id, timeout=self.settings.agent.ready_timeout)
        self.deliverer.deliver(
            self.backend,
            st.pane_id,
            text,
            confirmed=confirmed,
            bracketed=self.adapter.bracketed_paste,
            # without hooks: from the first Enter on, the session's own signal for this
            # prompt may come before its screen confirms it (lifecycle.decide_signal)
            on_enter=None if self.adapter.uses_hooks else started,
        )
        self.journal.event(
            "prompt_delivered", tid, phase=st.phase.value, rework=st.rework_count, chars=len(text)
        )
        self.journal.set(tid, delivered=key, delivering=None)

    def arrived_before_restart(self, tid: str) -> bool:
        """Whether an interrupted delivery's prompt reached the session after all.

        A supervisor killed after pasting but before recording the delivery would otherwise
        send the same prompt twice. The UserPromptSubmit hook (recorded by `lo-orch hook`,
        not by the supervisor) tells: a submit later than the start of that delivery. A
        restart within ``DELIVERY_GRACE_SECONDS`` of the start waits that long for the hook.
        Agents without hooks cannot tell, and get the prompt again.
        """
        st = self.journal.record.task(tid)
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
            st = self.journal.record.task(tid)

    def render_prompt(self, tid: str, template: str, st: TaskStatus) -> str:
        if template == rounds.TEMPLATE:
            return rounds.prompt(self.journal.record, st, self.settings.run.max_review_rounds)
        if template == "prompt_rework.md.j2":
            verdict = self.journal.recorded_verdict(tid, st.commit) if st.commit else None
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
            run=self.journal.run.name,
            brief=str(self.rundir.brief_path(tid)),
            plan_path=str(self.rundir.agent_plan_path(tid)),
            phase=st.phase.value,
        )

    def nudge(self, tid: str) -> None:
        st = self.journal.set(tid, nudged=True)
        expected = "plan_ready" if st.phase == Phase.PLANNING else "impl_done"
        self.journal.event("nudged", tid, phase=st.phase.value)
        self.deliver_raw(
            tid,
            templating.render(
                "prompt_nudge.md.j2",
                task=tid,
                phase=st.phase.value,
                expected=expected,
                minutes=f"{self.settings.run.stall_minutes:g}",
            ),
        )

    def gone_under(self, task: str, exc: LoOrchError) -> PaneState | None:
        """The session's pane, when a step failed because that session is gone (a Ray node
        lost while a prompt was being delivered; a pane killed mid-step): the task goes the
        way of any dead session (relaunched and resumed), not blocked for a person. A
        backend call that failed (``TmuxError``) on a dead session counts; so does an agent
        error (a prompt not confirmed, a ready prompt not reached) when the session no
        longer exists at all (``decide.session_gone``). None: the error is the step's own."""
        if not isinstance(exc, (TmuxError, AgentError)):
            return None
        st = self.journal.record.task(task)
        if st.phase not in WORKING_PHASES or not st.pane_id:
            return None
        try:
            pane = self.backend.state(st.pane_id)
        except LoOrchError:  # cannot tell (tmux itself not answering): the step's error stands
            return None
        gone = decide.session_gone(
            agent_error=isinstance(exc, AgentError), exists=pane.exists, alive=pane.alive
        )
        return pane if gone else None

    def lost_mid_step(self, task: str, exc: LoOrchError, dead_status: int | None) -> None:
        """Relaunch a session that died under a step (or block the task if that fails)."""
        self.journal.event("session_lost_mid_step", task, message=exc.message)
        try:
            self.pane_died(task, dead_status=dead_status)
        except LoOrchError as again:
            self.journal.block(task, again.render())

    def pane_died(self, tid: str, dead_status: int | None = None) -> None:
        """Relaunch a dead session once (resuming it), then fail the task. A session that
        went with its cluster node (``PaneState.lost``) is not its agent's doing: such
        losses are counted apart and relaunched up to ``[cluster] max_node_losses`` times."""
        st = self.journal.record.task(tid)
        pane = self.backend.state(st.pane_id) if st.pane_id else None
        screen = self.last_screen(st.pane_id, 200) if pane and pane.exists else ""
        evidence = self.rundir.task_evidence_dir(tid)
        evidence.mkdir(parents=True, exist_ok=True)
        lost = bool(pane is not None and pane.lost)
        screen_file = evidence / (
            f"last-screen-lost-{st.node_losses}.txt" if lost else f"last-screen-{st.relaunches}.txt"
        )
        atomic_write_text(screen_file, screen)
        step = decide.after_death(
            decide.Death(
                task=tid,
                lost=lost,
                dead_status=dead_status,
                relaunches=st.relaunches,
                node_losses=st.node_losses,
                max_node_losses=self.settings.cluster.max_node_losses,
                parked=bool(st.limit_until) and time.time() < epoch(st.limit_until),
                screen_file=str(screen_file),
            )
        )
        if isinstance(step, decide.Fail):
            counts = {"node_losses": st.node_losses} if lost else {"exit_status": dead_status}
            self.journal.event("task_failed", tid, cause=step.cause, **counts, message=step.error)
            self.journal.move(tid, Event.FAIL, error=step.error)
            return
        parked = step.parked
        self.journal.event(
            "session_died",
            tid,
            cause=step.cause,
            exit_status=dead_status,
            **step.fields,
            message=step.message,
        )
        # a parked session keeps its prompt as delivered (--resume brings the conversation
        # back): a new prompt would only meet the limit again
        st = (
            self.journal.set(tid, **step.counted, delivering=None)
            if parked
            else self.journal.set(tid, **step.counted, delivered=None, delivering=None)
        )
        spec = self.adapter.launch_spec(self.context(self.plan.task(tid), st), resume=True)
        with self._starting(tid) as woken:
            pane_id = self._run_again(tid, pane, st.pane_id, spec)
            timeout = self.settings.agent.ready_timeout
            self.adapter.wait_ready(self.backend, pane_id, timeout=timeout, woken=woken)
        if st.phase == Phase.LAUNCHING:
            st = self.journal.move(tid, Event.READY)
        if parked:
            # the short prompt after the wait (_resume_after_limit) carries on
            self.journal.event(
                "relaunched_while_parked",
                tid,
                until=st.limit_until,
                message="relaunched; it resumes after the limit's wait",
            )
            return
        self.deliver(tid, self.prompt_for(st))

    def _run_again(
        self, tid: str, pane: PaneState | None, pane_id: str | None, spec: LaunchSpec
    ) -> str:
        """Start ``spec`` in the task's pane ``pane_id`` again (``respawn``) while that pane
        is there, else in a new pane, recorded as the task's; the pane's id."""
        if pane is not None and pane.exists and pane_id:
            self.backend.respawn(pane_id, spec)
            return pane_id
        new = self.backend.launch(spec)
        self.journal.set(tid, pane_id=new)
        return new

    def reopen(self, tid: str) -> None:
        """Relaunch an integrated task's session on its worktree, with staging merged in."""
        with self.git_lock:
            self.ws.refresh_task(tid)
        st = self.journal.record.task(tid)
        spec = self.adapter.launch_spec(
            self.context(self.plan.task(tid), st), resume=bool(st.session_id)
        )
        with self._starting(tid) as woken:
            pane = self.backend.launch(spec)
            self.journal.set(tid, pane_id=pane)
            self.journal.event(
                "session_launched", tid, pane_id=pane, session_id=st.session_id, reopened=True
            )
            timeout = self.settings.agent.ready_timeout
            self.adapter.wait_ready(self.backend, pane, timeout=timeout, woken=woken)
        self.deliver(tid, self.prompt_for(self.journal.record.task(tid)))

    def render_brief(self, task: Task) -> str:
        # staging as lo-orch set it (a moved one never feeds a brief); before the first
        # `run` there is none: the base it will be
        staging = self.ws.branches.staging_tip() or self.journal.run.base_sha
        return templating.task_brief(
            self.plan,
            task,
            run=self.journal.run.name,
            repo=self.repo,
            rundir=self.rundir,
            base_sha=self.journal.run.base_sha,
            staging_sha=staging,
            branch=self.ws.task_branch(task.id),
            waves=self.waves,
            deps=self.deps,
            tools=self.tools,
        )

    def clear_index_lock(self, tid: str, *, wait: float = 10.0) -> recovery.LockOutcome:
        outcome = recovery.clear_stale_index_lock(self.ws.worktree_path(tid), wait=wait)
        if outcome.cleared:
            self.journal.event(
                "index_lock_cleared",
                tid,
                path=str(outcome.path),
                message=f"stale {outcome.path} removed (no git process held it)",
            )
        return outcome

    def heal_worktree(self, tid: str) -> None:
        """Make a deleted task worktree again from its branch before its session is asked
        for anything more, and start the session again in it (its working folder was the
        deleted one). When it cannot be made again, the task is blocked at once with the
        reason (a ``GitError``: the job's error blocks it), never sent a round it cannot do."""
        st = self.journal.record.task(tid)
        path = self.ws.worktree_path(tid)
        if not st.worktree or path.is_dir():
            return
        branch = self.ws.task_branch(tid)
        with self.git_lock:
            try:
                self.ws.ensure_worktree(tid)
            except GitError as exc:
                msg = (
                    f"the worktree of task {tid} ({path}) was deleted and cannot be made "
                    f"again from {branch}: {exc.message}"
                )
                raise GitError(msg, hint=exc.hint) from exc
            head = gitutil.rev_parse(self.repo, branch)
        self.ws.run_setup(path)
        self.journal.event(
            "worktree_recreated",
            tid,
            path=str(path),
            branch=branch,
            commit=head,
            message=f"{path} was deleted: made again from {branch} at {head[:12]} "
            "(work that was not committed there is lost)",
        )
        task = self.plan.task(tid)
        ctx = self.context(task, st)
        self.adapter.prepare(ctx)
        spec = self.adapter.launch_spec(ctx, resume=bool(st.session_id))
        pane = self.backend.state(st.pane_id) if st.pane_id else None
        with self._starting(tid) as woken:
            pane_id = self._run_again(tid, pane, st.pane_id, spec)
            self.journal.event(
                "session_relaunched",
                tid,
                pane_id=pane_id,
                message="started again in the recreated worktree",
            )
            timeout = self.settings.agent.ready_timeout
            self.adapter.wait_ready(self.backend, pane_id, timeout=timeout, woken=woken)

    def context(self, task: Task, st: TaskStatus) -> AgentContext:
        return AgentContext.create(
            task=task.id,
            run_name=self.journal.run.name,
            repo=self.repo,
            worktree=self.ws.worktree_path(task.id),
            run_dir=self.rundir.root,
            brief_path=self.rundir.brief_path(task.id),
            settings=self.settings,
            session_id=st.session_id,
        )

    def deliver_raw(self, tid: str, text: str) -> None:
        self.heal_worktree(tid)
        st = self.journal.record.task(tid)
        if st.pane_id:
            self.deliverer.deliver(
                self.backend, st.pane_id, text.strip(), bracketed=self.adapter.bracketed_paste
            )

    def last_screen(self, pane_id: str | None, lines: int) -> str:
        """The pane's screen, or "" when there is no pane (any more): it can go at any
        moment, and a screen is only ever evidence."""
        if not pane_id:
            return ""
        try:
            return self.backend.capture(pane_id, lines=lines)
        except PaneGoneError:
            return ""

    def screen_of(self, tid: str) -> str | None:
        pane = self.journal.record.task(tid).pane_id
        return self.backend.capture(pane, lines=0) if pane else None

    def resume_after_limit(self, tid: str) -> None:
        """The limit's time is up and the session did not resume by itself: a short prompt."""
        st = self.journal.record.task(tid)
        if not st.limit_until or st.phase not in WORKING_PHASES:
            return
        reason = st.limit_reason or "a limit"
        self.journal.set(tid, limit_until=None, limit_kind=None, waiting_for=None)
        self.journal.event("limit_resumed", tid, message=reason)
        phase = (
            st.phase.value
            if st.rework_count == 0 or st.phase != Phase.IMPLEMENTING
            else f"{st.phase.value} (rework {st.rework_count})"
        )
        self.deliver_raw(
            tid,
            templating.render("prompt_resume_limit.md.j2", task=tid, reason=reason, phase=phase),
        )

    def signal_again(self, tid: str, *, signal: str) -> None:
        text = templating.render("prompt_signal_again.md.j2", task=tid, signal=signal)
        self.deliver_raw(tid, text)

    def deliver_message(self, tid: str, *, mid: str, text: str) -> None:
        try:
            self.deliver_raw(tid, text)
        except LoOrchError as exc:  # the session is busy in a dialog, or gone: say so
            self.journal.record.append("message_done", id=mid, delivered=False)
            self.journal.event("message_failed", tid, id=mid, message=exc.render())
            return
        self.journal.record.append("message_done", id=mid, delivered=True)
        self.journal.event("message_delivered", tid, id=mid)
