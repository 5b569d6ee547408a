"""The supervisor: drives every task from ``pending`` to ``integrated``; no model keeps books.

One supervisor per repository (``supervisor.lock``). The main loop is event-driven: status
files (written by ``lo-orch signal`` and ``lo-orch hook``) are watched with watchdog, with
a short tick for pane liveness and stalls. Work that blocks — launching a session,
delivering a prompt, verifying, merging — runs in a small thread pool, at most one job per
task. Every decision goes to the ledger. A supervisor killed at any moment is resumed by
running it again: state on disk, git and tmux are reconciled (``_reconcile``), panes are
found again by their task tag, a verdict is bound to its commit and a merge into staging is
idempotent, so nothing is launched, verified or merged twice.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, assert_never

from loop_orchestrator.agents.registry import make_adapter
from loop_orchestrator.config import Settings, load_tool_profile
from loop_orchestrator.errors import (
    GitError,
    LoOrchError,
    NotLoggedInError,
    RefTamperedError,
)
from loop_orchestrator.permissions import desk as permission_desk
from loop_orchestrator.permissions import requests as permissions
from loop_orchestrator.plan import schedule
from loop_orchestrator.plan.model import Task
from loop_orchestrator.resources import lo_orch_bin, session_bin
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.state import (
    ACTIVE_PHASES,
    Phase,
    RunDir,
    RunPhase,
    RunState,
    Store,
    TaskStatus,
)
from loop_orchestrator.sessions import listener
from loop_orchestrator.sessions.backend import LaunchSpec, run_socket
from loop_orchestrator.sessions.delivery import Deliverer
from loop_orchestrator.sessions.factory import run_backend
from loop_orchestrator.supervisor import cadence, decide, lifecycle, notify, recovery
from loop_orchestrator.supervisor.accounting import Accounting
from loop_orchestrator.supervisor.decide import WORKING_PHASES, OutcomeState
from loop_orchestrator.supervisor.inbox import Inbox
from loop_orchestrator.supervisor.integration import Integration
from loop_orchestrator.supervisor.jobs import Jobs
from loop_orchestrator.supervisor.journal import Journal, Progress, epoch
from loop_orchestrator.supervisor.lifecycle import NOT_LOGGED_IN_HINT, Event
from loop_orchestrator.supervisor.lock import supervisor_lock
from loop_orchestrator.supervisor.panewatch import PaneWatch
from loop_orchestrator.supervisor.refguard import RefGuard
from loop_orchestrator.supervisor.rounds import ReviewRounds
from loop_orchestrator.supervisor.sessions import Sessions
from loop_orchestrator.supervisor.verification import Verification
from loop_orchestrator.verify import pyenv
from loop_orchestrator.workspace import workspace

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """How a supervisor run ended."""

    state: OutcomeState
    message: str
    blocked: dict[str, str] = field(default_factory=dict)


def detach(repo: Path, *, continue_blocked: bool = False, allow_dirty: bool = False) -> str:
    """Start ``lo-orch run`` in a window of the run's tmux session; where it runs."""
    import shlex

    rec, _plan = runs.load_approved(repo)  # refuse before starting anything
    state = rec.run
    rundir = RunDir(repo)
    with supervisor_lock(rundir):
        pass  # only a check: the supervisor in the window takes the lock itself
    backend = run_backend(state)
    socket = run_socket(state)
    argv = [*shlex.split(lo_orch_bin()), "run", "--repo", str(repo)]
    if continue_blocked:
        argv.append("--continue-blocked")
    if allow_dirty:
        argv.append("--allow-dirty")
    env = {"LO_ORCH_TMUX_SOCKET": socket}
    if "PATH" in os.environ:
        env["PATH"] = os.environ["PATH"]
    pane = backend.open_window("supervisor", LaunchSpec("supervisor", repo, argv, env))
    Store(rundir).append_ledger("supervisor_detached", pane_id=pane)
    return f"tmux session lo-{state.name}, window 'supervisor' ({pane})"


class Supervisor:
    """Drives every task of one run from ``pending`` to ``integrated``.

    Assembled of services, each with what it needs: the journal (ledger, records, blocks),
    accounting (limits, spend, budgets), sessions (launch, deliver, relaunch, heal),
    verification, integration, the inbox (what sessions report) and the jobs (one running
    step per task). The constructor only assembles (it reads the approved plan); the run's
    start-up work is ``start``'s. The loop observes, asks ``decide``, and carries the steps
    out.
    """

    def __init__(
        self,
        repo: Path,
        settings: Settings,
        *,
        continue_blocked: bool = False,
        progress: Progress | None = None,
    ) -> None:
        self.repo = repo
        self.settings = settings
        self.continue_blocked = continue_blocked
        self.rundir = RunDir(repo)
        self.record, self.plan = runs.load_approved(repo)
        run = self.record.run
        self.cap = runs.effective_concurrency(self.plan, settings)
        self.waves = schedule.wave_of(self.plan, self.cap)
        self.deps = schedule.dependencies(self.plan)
        self.ws = workspace.Workspace.for_run(repo, run, settings.workspace)
        self.backend = run_backend(run, settings.cluster)
        self.adapter = make_adapter(settings, repo)
        self.deliverer = Deliverer(stagger=settings.run.stagger_seconds)
        notifier = notify.Notifier(
            repo,
            run.name,
            settings.notify,
            tmux_socket=self.backend.socket,
            tmux_session=self.backend.session,
        )
        self.journal = Journal(
            self.record,
            Store(self.rundir),
            self.rundir,
            [t.id for t in self.plan.tasks],
            notifier,
            progress,
        )
        self.wake = threading.Event()
        #: an error that stops the whole run, raised by the loop (a job cannot raise it)
        self.fatal: LoOrchError | None = None
        self.jobs = Jobs(self.cap + 2, self.wake, self._step_failed)
        self.pool = self.jobs.pool
        # Workspace is not thread-safe (ref moves and the refs book go together): one writer.
        git_lock = threading.Lock()
        self.accounting = Accounting(
            self.journal,
            settings,
            self.plan,
            agent=self.adapter.name,
            capture=self.backend.capture,
            cap=self.cap,
        )
        self.sessions = Sessions(
            self.journal,
            self.accounting,
            settings=settings,
            plan=self.plan,
            repo=repo,
            rundir=self.rundir,
            ws=self.ws,
            backend=self.backend,
            adapter=self.adapter,
            deliverer=self.deliverer,
            git_lock=git_lock,
            tools=load_tool_profile(repo),
            waves=self.waves,
            deps=self.deps,
        )
        self.integration = Integration(
            self.journal,
            self.sessions,
            settings=settings,
            plan=self.plan,
            repo=repo,
            rundir=self.rundir,
            ws=self.ws,
            backend=self.backend,
            git_lock=git_lock,
            deps=self.deps,
            submit=self.jobs.submit,
            compare_refs=lambda: self.refguard.compare_now(),
        )
        #: a person's comments at Gate 2 sent back as review rounds
        self.rounds = ReviewRounds(
            self.journal,
            settings=settings,
            plan=self.plan,
            repo=repo,
            rundir=self.rundir,
            ws=self.ws,
            git_lock=git_lock,
            deps=self.deps,
            submit=self.jobs.submit,
            reopen=self.sessions.reopen,
        )
        #: the checks' Python environments as they are before any agent runs (``start``)
        self.site_baseline: Any = None
        self.verification = Verification(
            self.journal,
            self.sessions,
            settings=settings,
            plan=self.plan,
            repo=repo,
            rundir=self.rundir,
            ws=self.ws,
            git_lock=git_lock,
            site_baseline=lambda: self.site_baseline,
            integrate=self.integration.integrate,
            compare_refs=lambda: self.refguard.compare_now(),
        )
        #: the run's refs: watched, compared with the book, put back when moved
        self.refguard = RefGuard(
            self.journal,
            self.ws,
            git_lock=git_lock,
            wake=self.wake,
            submit=self.jobs.submit,
            tamper_round=self.verification.tamper_round,
            stopped=self._refs_stopped,
        )
        self.desk = self._make_desk()
        self.inbox = Inbox(
            self.journal,
            self.sessions,
            self.accounting,
            self.desk,
            root=self.rundir.root,
            backend=self.backend,
            wake=self.wake,
            submit=self.jobs.submit,
        )
        #: when the loop's periodic checks are due (``cadence``)
        self.clocks = cadence.Clocks()
        #: task -> its place in the plan: the order tasks are looked at in
        self.order = {tid: i for i, tid in enumerate(self.journal.task_ids)}
        #: each task's phase when the loop last asked what may start
        self.phases_seen: dict[str, Phase] = {}
        #: the panes' liveness and screens, looked at on a thread of its own
        self.panes = PaneWatch(self.backend, self.journal.statuses, self.jobs)

    @property
    def state(self) -> RunState:
        """The run as the supervisor's record has it (never read back from run.json)."""
        return self.record.run

    def render_brief(self, task: Task) -> str:
        """The task's brief as its session gets it."""
        return self.sessions.render_brief(task)

    def start(self) -> None:
        """The run's start-up work, under the supervisor lock: the cluster the run's
        sessions go to is recorded (refs an earlier run of the same name left there are
        dropped), so is the tmux server, and the checks' Python environments are
        fingerprinted before any agent runs."""
        cluster = self.backend.cluster
        if cluster is not None and self.state.cluster is None:  # every later command finds it
            from loop_orchestrator.cluster import refs as cluster_refs
            from loop_orchestrator.cluster.ray_backend import cluster_record

            # a new run on the cluster: refs of an earlier run of the same name are not its
            # own (a stale checkpoint would be applied to its worktrees); kept/ refs stay
            stale = cluster_refs.drop(self.repo, self.state.name)
            if stale:
                self.journal.store.append_ledger(
                    "cluster_refs_dropped",
                    refs=stale,
                    message="left by an earlier run of the same name; not this run's",
                )
            self.record.update_run(cluster=cluster_record(cluster))

        self.site_baseline = pyenv.take_baseline(
            self.repo, [d.argv() for t in self.plan.tasks for d in t.done if d.check]
        )
        if self.backend.socket != self.state.tmux_socket:
            self.record.update_run(tmux_socket=self.backend.socket)

    def run(self) -> Outcome:
        ended = self.state.phase in (RunPhase.AWAITING_MERGE_REVIEW, RunPhase.MERGED)
        try:
            outcome = self._run_locked()
        except BaseException:
            self.journal.notifier.close(timeout=0)
            raise
        if not ended:
            self._notify_finished(outcome)
        return outcome

    def _notify_finished(self, outcome: Outcome) -> None:
        """The run stopped: tell the person (and wait a moment for the channels)."""
        import hashlib

        first = outcome.message.splitlines()[0] if outcome.message else ""
        if outcome.state is OutcomeState.REVIEW:
            self.journal.notifier.notify(
                "gate2_waiting",
                self.integration.last.commit if self.integration.last is not None else "",
                "the run is ready for Gate 2: review it with `lo-orch merge`",
            )
        digest = hashlib.sha256(f"{outcome.state}\n{outcome.message}".encode()).hexdigest()[:16]
        # a restart that ends the same way is not news; after a person's retry it is
        retries = self.journal.retries()
        self.journal.notifier.notify(
            "run_finished",
            f"{outcome.state}:{retries}:{digest}",
            f"the supervisor stopped ({outcome.state}): {first}"[:300],
        )
        self.journal.notifier.close(
            timeout=self.settings.notify.timeout + 2 * notify.CHANNEL_TIMEOUT
        )

    def _run_locked(self) -> Outcome:
        with supervisor_lock(self.rundir):
            self.start()
            self.refguard.start()
            try:
                return self._supervise()
            finally:
                self.refguard.stop()

    def _supervise(self) -> Outcome:
        """The run under the lock, its refs watched."""
        if self.state.phase == RunPhase.AWAITING_MERGE_REVIEW and not self.rounds.pending():
            self._check_refs()  # what moved while it waited is put back for the review
            return Outcome(OutcomeState.REVIEW, "the run is waiting for Gate 2: `lo-orch merge`")
        if self.state.phase == RunPhase.MERGED:
            return Outcome(OutcomeState.MERGED, "the run is already merged")
        server: listener.Server | None = None
        try:  # (a Ctrl-C during the start-up is an interruption too)
            self._start_run()
            # What sessions left while no supervisor listened is read before anyone is
            # heard: a signal waiting to connect is judged after the prompt-arrival hook
            # that was left before it (a kill mid-delivery, then a fast session).
            self._reconcile()
            server = listener.Server(self.rundir.root, self.inbox.identify, self.inbox.receive)
            server.start()
            self.backend.serve(self.inbox.receive, self._note)  # remote sessions' inboxes
            if self.backend.looks_off_loop:  # (else the loop looks: ``_check_sessions``)
                self.panes.start()
            while True:
                self._loop()
                if self.rounds.recheck_dependents():
                    continue  # a dependent failed its done-checks after a review round
                try:
                    outcome = self._finish()
                except RefTamperedError:  # moved while the run was integrated: put back
                    self.refguard.request()
                    continue
                self.refguard.request()  # what moved while the integration command ran
                self._check_refs()
                failed = outcome.state is OutcomeState.INTEGRATION_FAILED
                last = self.integration.last
                if not failed or last is None or not self.integration.route(last):
                    return outcome
        except KeyboardInterrupt:
            self._interrupted()
            raise
        finally:
            if server is not None:
                server.close()
            # the view as the run leaves it (a disk that failed must not hide why it ended;
            # the next start publishes the whole view again)
            with contextlib.suppress(OSError):
                self.record.publish_pending()
            self.panes.stop()
            self.backend.stop()
            self.jobs.shutdown()

    def _note(self, task: str, **changes: Any) -> None:
        """Where a remote session runs, as its backend reports it: into its record."""
        self.journal.set(task, **changes)

    def _loop(self) -> None:
        """Turn by turn: at an event, the tasks whose record changed or whose job ended;
        the periodic checks on their own clocks (``cadence``). The reactions come first in
        a turn (a signal's next phase waits for nothing else); the refs are compared on
        the ref guard's thread, and by what consumes a task's work, never here."""
        while True:
            if self.fatal is not None:
                raise self.fatal
            # a person's `lo-orch retry` (or request-changes) is appended by another process
            foreign = self.record.refresh()
            due, self.clocks = cadence.turn(self.clocks, time.monotonic())
            finished = self._collect_jobs()
            looked = cadence.to_look_at(due, self.order, self.record.take_changed(), finished)
            statuses = self.journal.statuses()
            self._dispatch({t: statuses[t] for t in looked if t in statuses})
            if foreign or finished or due.sweep:  # a person's request-changes (another
                self.rounds.take(lambda tid: tid in self.jobs)  # process; or a step ended)
            statuses = self.journal.statuses()
            # the rounds owed for moved refs: a round owed is a change of the task's record
            # (the guard's thread records it), so a task that owes one is looked at
            self.refguard.send_rounds(
                {t: statuses[t] for t in looked if t in statuses}, lambda tid: tid in self.jobs
            )
            self.inbox.ask_pending(statuses, self.jobs)
            self._pass_messages(statuses)
            # (after the reactions: the view is never read back, only rewritten)
            if due.view:
                self._check_view()
            if due.sessions:
                self._check_sessions(statuses)
            statuses = self.journal.statuses()
            now_seen = {t: statuses[t].phase for t in looked if t in statuses}
            if cadence.release_due(due, self.phases_seen, now_seen, finished):
                self.phases_seen = {t: s.phase for t, s in statuses.items()}
                if self._release(statuses):
                    return  # settled: all integrated, or the rest is stuck
            # what this turn changed itself is looked at next turn, at once
            pause = cadence.wait(self.clocks, time.monotonic())
            self.wake.wait(0 if self.record.has_changed() else pause)
            self.wake.clear()

    def _release(self, statuses: dict[str, TaskStatus]) -> bool:
        """Start the tasks that may start now; True when the run has settled (nothing
        runs and nothing may start)."""
        phases = {t: s.phase for t, s in statuses.items()}
        limited = any(s.limit_until and s.phase in WORKING_PHASES for s in statuses.values())
        for tid in self._ready(phases) if decide.may_release(bool(limited)) else []:
            cap = self.settings.run.max_cost_usd
            own = self.record.task(tid).budget_usd is not None
            step = decide.release(
                tid,
                wave=self.waves[tid],
                busy=tid in self.jobs,
                run_cap=cap,
                # (the run's usage is added up only where it counts)
                run_spent=self.accounting.run_usage().cost_usd
                if cap is not None and not own and tid not in self.jobs
                else None,
                own_budget=own,
            )
            if isinstance(step, decide.Block):
                self.journal.block(tid, step.reason)
                phases[tid] = Phase.BLOCKED
            elif isinstance(step, decide.Release):
                self.journal.event("task_released", tid, wave=step.wave)
                self.journal.move(tid, Event.RELEASE, error=None)
                self.jobs.submit(tid, self.sessions.start_task)
                phases[tid] = Phase.LAUNCHING
        return not decide.running(phases, jobs=bool(self.jobs)) and not self._ready(phases)

    def _check_refs(self) -> None:
        """The run's refs compared with the book now (at the start, after the integration,
        at a run waiting for Gate 2): lo-orch's own are put back and the tampering task
        owes a round, sent here when it is due; a branch a person may move stops the run,
        as before. (While the loop runs, the guard's thread compares.)"""
        try:
            self.refguard.compare_now()
        except RefTamperedError as exc:
            self._refs_event(exc)
            raise
        except GitError as exc:  # moved again while it was put back: the guard's thread
            log.warning("refs not repaired", extra={"error": exc.message})
            self.refguard.request()
        self.refguard.send_rounds(self.journal.statuses(), lambda tid: tid in self.jobs)

    def _refs_stopped(self, exc: RefTamperedError) -> None:
        """A branch a person may move moved (found on the guard's thread): the loop stops
        the run at its next turn."""
        self._refs_event(exc)
        self.fatal = exc

    def _refs_event(self, exc: RefTamperedError) -> None:
        self.journal.event(
            "refs_tampered",
            ref=exc.ref,
            expected=exc.expected,
            found=exc.found,
            message=exc.message,
        )

    def _ready(self, phases: dict[str, Phase]) -> list[str]:
        before = self.accounting.governor.current
        cap = self.accounting.governor.tick(time.time())
        if cap != before:
            self.journal.event(
                "concurrency_raised",
                concurrency=cap,
                message=f"no rate limit for a while: up to {cap} sessions again",
            )
        return schedule.ready_tasks(
            self.plan,
            phases,
            cap,
            strict_waves=self.settings.run.strict_waves,
            wave_numbers=self.waves,
            deps=self.deps,
        )

    def _collect_jobs(self) -> list[str]:
        """The tasks whose step ended since the last turn (a crashed step fails its task)."""
        ended = self.jobs.done()
        for task, exc in ended:
            if exc is not None:
                # a bug, not a user error: keep the run going, mark the task failed
                log.error("task job crashed", exc_info=exc, extra={"task": task})
                self.journal.event("task_failed", task, message=f"internal error: {exc!r}")
                self.journal.move(task, Event.FAIL, error=f"internal error: {exc!r}")
        return [task for task, _exc in ended]

    def _dispatch(self, statuses: dict[str, TaskStatus]) -> None:
        for tid, st in statuses.items():
            if st.phase != Phase.BLOCKED:
                self.journal.unblocked(tid)  # retried by a person (`lo-orch retry`)
            for step in decide.react(self._observe(st)):
                self._carry_out(tid, st, step)

    def _pass_messages(self, statuses: dict[str, TaskStatus]) -> None:
        """A person's `lo-orch send`: delivered like a prompt, one job at a time per task."""
        for mid, (tid, text) in self.record.pending_messages().items():
            st = statuses.get(tid)
            if st is None or tid in self.jobs:
                continue
            if st.phase not in ACTIVE_PHASES | {Phase.BLOCKED} or not st.pane_id:
                self.record.append("message_done", id=mid, delivered=False)
                self.journal.event(
                    "message_dropped",
                    tid,
                    id=mid,
                    message=f"no session to deliver it to ({st.phase.value})",
                )
                continue
            self.jobs.submit(
                tid, functools.partial(self.sessions.deliver_message, mid=mid, text=text)
            )

    def _finish(self) -> Outcome:
        for tid in self.journal.task_ids:  # the last turns' figures, before anyone reviews them
            self.accounting.refresh_usage(tid)
        run_usage = self.accounting.run_usage()
        self.journal.store.append_ledger("run_usage", **run_usage.as_json())
        statuses = self.journal.statuses()
        stuck = {
            t: (s.error or s.note or s.phase.value)
            for t, s in statuses.items()
            if s.phase in (Phase.BLOCKED, Phase.FAILED)
        }
        waiting = schedule.waiting_on(self.plan, {t: s.phase for t, s in statuses.items()})
        step = decide.finish(stuck, waiting, continue_blocked=self.continue_blocked)
        if isinstance(step, decide.Pause):
            self.journal.event("run_paused", message=f"{len(stuck)} task(s) need a human")
            return Outcome(OutcomeState.BLOCKED, "\n".join(step.lines), stuck)
        skipped = list(step.skipped)
        result = self.integration.integrate_run(step.skipped)
        if not result.passed:
            self.journal.event(
                "integration_failed", exit_code=result.exit_code, message=result.summary
            )
            return Outcome(OutcomeState.INTEGRATION_FAILED, result.summary)
        self.journal.event("awaiting_merge_review", staging=result.commit, skipped=skipped)
        return Outcome(OutcomeState.REVIEW, result.summary)

    def _interrupted(self) -> None:
        """Ctrl-C: stop supervising, leave the sessions running; a second Ctrl-C quits at
        once (state on disk is crash-safe: `lo-orch run` resumes either way)."""
        running = self.jobs.unfinished()
        self.journal.store.append_ledger("supervisor_interrupted", running=running)
        if running:
            self.journal.progress(
                f"stopping: letting {', '.join(running)} finish the current step "
                "(Ctrl-C again to quit now); the sessions keep running"
            )
        try:
            self.jobs.shutdown()
        except KeyboardInterrupt:
            os._exit(130)

    def _start_run(self) -> None:
        first = self.state.phase == RunPhase.AWAITING_PLAN_APPROVAL
        if first:
            self.ws.preflight(allow_dirty=self.settings.workspace.allow_dirty)
        self.ws.ensure_excludes()
        self._check_refs()  # what moved while no supervisor watched
        self.ws.create_staging(self.state.base_sha)
        self._remove_leftovers()
        self.backend.ensure_session()
        self.journal.view_edited(self.record.publish_all())
        if self.state.phase != RunPhase.RUNNING:
            self.record.update_run(phase=RunPhase.RUNNING)
        self.journal.event(
            "supervisor_started",
            run=self.state.name,
            pid=os.getpid(),
            resumed=not first,
            message=f"run {self.state.name}, {len(self.plan.tasks)} tasks, cap {self.cap}",
        )

    def _remove_leftovers(self) -> None:
        """What a killed supervisor (or a killed git process) left: its temporary checkouts
        and stale ``index.lock`` files in task worktrees."""
        removed = recovery.remove_orphan_checkouts(self.repo)
        if removed:
            self.journal.event(
                "checkouts_removed",
                paths=[str(p) for p in removed],
                message=f"{len(removed)} temporary checkout(s) of a killed supervisor removed",
            )
        for st in self.record.tasks().values():
            if st.worktree:
                self.sessions.clear_index_lock(st.task, wait=0.0)

    def _reconcile(self) -> None:
        panes = self.backend.list_panes()  # pane id -> task, from the pane's @lo_task tag
        by_task = {task: pane for pane, task in panes.items()}
        for st in self.record.tasks().values():
            pane = by_task.get(st.task)
            if pane and pane != st.pane_id:
                # launched, then killed before the pane id was saved: adopt it
                self.journal.set(st.task, pane_id=pane)
                self.journal.event("pane_adopted", st.task, pane_id=pane)
            if st.phase == Phase.INTEGRATED and pane:
                self.backend.kill_pane(pane)
            if st.phase == Phase.LAUNCHING and not pane:
                # nothing was started: launch again from the top
                self.journal.event("relaunch_pending", st.task, message="launch was interrupted")
                self.journal.move(st.task, Event.RELAUNCH)
        self.inbox.drain()

    def _check_view(self) -> None:
        """Publish what sessions' activity changed; report (and undo) edits of the published
        view by anyone but the supervisor."""
        # a hook that found no listener in the moment before it started is read here
        self.inbox.drain()
        self.record.publish_pending()
        self.journal.view_edited(self.record.check_view())

    def _check_sessions(self, statuses: dict[str, TaskStatus]) -> None:
        """Pane liveness, limits and stalls of every working session (``cadence``: every
        ``SESSIONS_SECONDS``, however many events come in between), on the panes' thread's
        last look; a pane it did not see alive is asked about here."""
        self.desk.sweep(self.sessions.screen_of)  # before the stall checks: only real requests wait
        if not self.backend.looks_off_loop:
            self.panes.look()  # (a cluster's panes: each look is a Ray call)
        alive = self.panes.alive  # the panes' thread's last look (no tmux call here)
        if alive is None:
            return  # not looked at yet
        waiting = self.desk.waiting_tasks()  # one read of the requests for every task
        for tid, st in statuses.items():
            if tid in self.jobs or st.phase not in WORKING_PHASES or not st.pane_id:
                continue
            pane = decide.Pane(alive=True)
            if not alive.get(st.pane_id):
                found = self.backend.state(st.pane_id)  # dead, gone or new: the details
                if not found.exists or not found.alive:
                    pane = decide.Pane(alive=False, dead_status=found.dead_status)
            if pane.alive and self.accounting.notice_failed_turns(tid):  # Mistral Vibe's
                st = self.journal.record.task(tid)
            step = decide.watch(self._observe(st, pane, waiting))
            if step is not None:
                self._carry_out(tid, st, step)

    def _observe(
        self,
        st: TaskStatus,
        pane: decide.Pane | None = None,
        waiting: Collection[str] | None = None,
    ) -> decide.Observation:
        """What the pure core needs to know of one task now (``pane``: its liveness, when
        it was checked this tick; ``waiting``: the tasks with an open permission request,
        read once for the check). What costs a read (an open permission request) is looked
        at only where the stall rule can apply; the screen as the panes' thread sampled it."""
        busy = st.task in self.jobs
        now = time.time()
        stall_due = (
            pane is not None
            and pane.alive
            and not busy
            and st.phase in WORKING_PHASES
            and not st.limit_until
        )
        waiting_now = stall_due and (
            st.task in waiting if waiting is not None else self.desk.is_waiting(st.task)
        )
        activity = max(epoch(st.last_event_at), epoch(st.updated_at))
        if stall_due and not waiting_now:
            activity = max(activity, self.panes.screen_changed(st.task, now))
        return decide.Observation(
            task=st.task,
            phase=st.phase,
            now=now,
            busy=busy,
            prompt_received=lifecycle.prompt_received(st),
            not_logged_in=st.error == lifecycle.NOT_LOGGED_IN_ERROR,
            reported_blocked=st.task in self.journal.reported_blocked,
            blocked_reason=st.error or st.note or "blocked",
            pane=pane,
            limited=bool(st.limit_until),
            limit_until=epoch(st.limit_until),
            permission_waiting=waiting_now,
            last_activity=activity,
            nudged=st.nudged,
            stall_minutes=self.settings.run.stall_minutes,
        )

    def _carry_out(self, tid: str, st: TaskStatus, step: decide.TaskStep) -> None:
        """One step the core decided for ``tid``."""
        if isinstance(step, decide.Launch):
            self.jobs.submit(tid, self.sessions.start_task)
        elif isinstance(step, decide.Implement):
            # the next phase here, at once (durable with the job's first fsynced append,
            # before the prompt is pasted); the prompt in the job
            self.journal.event_unsynced("reacted", tid, to=st.phase.value)
            self.journal.move(tid, Event.IMPLEMENT, durable=False)
            self.jobs.submit(tid, self.sessions.deliver_implement)
        elif isinstance(step, decide.Verify):
            if step.reacted:  # (the job compares the refs before it consumes the work)
                self.journal.event_unsynced("reacted", tid, to=st.phase.value)
                self.journal.move(tid, Event.VERIFY, durable=False)
            self.jobs.submit(tid, self.verification.verify)
        elif isinstance(step, decide.Integrate):
            self.jobs.submit(tid, self.integration.integrate)
        elif isinstance(step, decide.Redeliver):
            self.jobs.submit(tid, self.sessions.redeliver)
        elif isinstance(step, decide.NotLoggedIn):
            error = NotLoggedInError("Claude Code is not logged in", hint=NOT_LOGGED_IN_HINT)
            self.journal.block(tid, error.render())
        elif isinstance(step, decide.ReportBlocked):
            # blocked by the session itself (`lo-orch signal blocked --note ...`)
            self.journal.report_blocked(tid, step.reason)
        elif isinstance(step, decide.Relaunch):
            self.jobs.submit(
                tid, functools.partial(self.sessions.pane_died, dead_status=step.dead_status)
            )
        elif isinstance(step, decide.Resume):
            self.jobs.submit(tid, self.sessions.resume_after_limit)
        elif isinstance(step, decide.Nudge):
            self.jobs.submit(tid, self.sessions.nudge)
        elif isinstance(step, decide.Block):
            self.journal.block(tid, step.reason)
        else:
            assert_never(step)

    def _make_desk(self) -> permission_desk.Desk:
        """Permission requests: the config's rules, lo-orch's own signals."""
        cfg = self.settings.permissions
        return permission_desk.Desk(
            permissions.Permissions.for_run(self.repo, self.state.name),
            permissions.parse_rules(cfg.allow, "[permissions] allow"),
            permissions.parse_rules(cfg.deny, "[permissions] deny"),
            session_bin(),  # what a session's $LO_ORCH_BIN is, expanded
            log=self.journal.event,
            closed=self._permission_closed,
            opened=lambda req: self.journal.notifier.notify(
                "permission_request",
                req.id,
                f"asks to use {req.tool}"
                + (f": {req.summary}" if req.summary else "")
                + f"; answer with `lo-orch permit {req.task} allow|deny`",
                req.task,
            ),
        )

    def _permission_closed(self, tid: str) -> None:
        """Nothing of ``tid`` waits for a person's answer any more."""
        if self.record.task(tid).waiting_for and not self.record.task(tid).limit_until:
            self.journal.set(tid, waiting_for=None)

    def _step_failed(self, task: str, exc: LoOrchError) -> None:
        """A task's step ended in an error (on the job's thread): what ``decide`` says."""
        if isinstance(exc, RefTamperedError):
            # not (necessarily) this task's doing: a ref of the run moved under its step
            self.journal.event(
                "refs_tampered",
                task,
                ref=exc.ref,
                expected=exc.expected,
                found=exc.found,
                message=exc.message,
            )
            kind, dead_status = decide.StepError.REFS_TAMPERED, None
        elif (pane := self.sessions.gone_under(task, exc)) is not None:
            kind, dead_status = decide.StepError.SESSION_GONE, pane.dead_status
        else:
            kind, dead_status = decide.StepError.OTHER, None
        step = decide.after_error(kind, exc.render(), dead_status)
        if isinstance(step, decide.CheckRefs):
            self.refguard.request()  # put back before the step is taken again
        elif isinstance(step, decide.Relaunch):
            self.sessions.lost_mid_step(task, exc, step.dead_status)
        elif isinstance(step, decide.Block):
            # an error a person can act on (not logged in, a dialog, a conflict...)
            self.journal.block(task, step.reason)
