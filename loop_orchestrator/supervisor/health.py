"""The supervisor's watch over sessions and the run: starting a run and removing what a
killed one left, reconciling state after a restart, what sessions report (signals, hooks,
the status view), and pane liveness and stalls.
"""

from __future__ import annotations

import functools
import logging
import os
import time

from loop_orchestrator import templating
from loop_orchestrator.runstate.state import (
    Phase,
    RunPhase,
    TaskStatus,
)
from loop_orchestrator.sessions import listener, procinfo
from loop_orchestrator.supervisor import recovery
from loop_orchestrator.supervisor.base import (
    SCREEN_SAMPLE_SECONDS,
    TICK_SECONDS,
    WORKING_PHASES,
    epoch,
)
from loop_orchestrator.supervisor.lifecycle import (
    SIGNAL_FROM,
    Event,
)
from loop_orchestrator.supervisor.reports import Reports
from loop_orchestrator.supervisor.verification import Verification

log = logging.getLogger(__name__)


class SessionHealth(Verification):
    """Starting and reconciling a run, what sessions report, liveness and stalls."""

    def _reports(self) -> Reports:
        """What sessions report, applied: it calls back into every layer."""
        return Reports(
            self.record,
            self.store,
            self.plan_ids,
            self._event,
            self._ask_again,
            turn_ended=self._turn_ended,
            block=self._block,
            limit_hit=self._limit_hit,
            desk=self.desk,
            observe=self._refresh_usage,
        )

    def _interrupted(self) -> None:
        """Ctrl-C: stop supervising, leave the sessions running; a second Ctrl-C quits at
        once (state on disk is crash-safe: `lo-orch run` resumes either way)."""
        running = sorted(t for t, f in self.jobs.items() if not f.done())
        self.store.append_ledger("supervisor_interrupted", running=running)
        if running:
            self.progress(
                f"stopping: letting {', '.join(running)} finish the current step "
                "(Ctrl-C again to quit now); the sessions keep running"
            )
        try:
            self.pool.shutdown(wait=True, cancel_futures=True)
        except KeyboardInterrupt:
            os._exit(130)

    def _start_run(self) -> None:
        first = self.state.phase == RunPhase.AWAITING_PLAN_APPROVAL
        if first:
            self.ws.preflight(allow_dirty=self.settings.workspace.allow_dirty)
        self.ws.ensure_excludes()
        self.ws.create_staging(self.state.base_sha)
        self._remove_leftovers()
        self.backend.ensure_session()
        self._view_edited(self.record.publish_all())
        if self.state.phase != RunPhase.RUNNING:
            self.record.update_run(phase=RunPhase.RUNNING)
        self._event(
            "supervisor_started",
            run=self.state.name,
            pid=os.getpid(),
            resumed=not first,
            message=f"run {self.state.name}, {len(self.plan.tasks)} tasks, cap {self.cap}",
        )

    def _remove_leftovers(self) -> None:
        """What a killed supervisor (or a killed git process) left: its temporary checkouts
        and stale ``index.lock`` files in task worktrees (issue 12, item 4)."""
        removed = recovery.remove_orphan_checkouts(self.repo)
        if removed:
            self._event(
                "checkouts_removed",
                paths=[str(p) for p in removed],
                message=f"{len(removed)} temporary checkout(s) of a killed supervisor removed",
            )
        for st in self.record.tasks().values():
            if st.worktree:
                self._clear_index_lock(st.task, wait=0.0)

    def _reconcile(self) -> None:
        panes = self.backend.list_panes()  # pane id -> task, from the pane's @lo_task tag
        by_task = {task: pane for pane, task in panes.items()}
        for st in self.record.tasks().values():
            pane = by_task.get(st.task)
            if pane and pane != st.pane_id:
                # launched, then killed before the pane id was saved: adopt it
                self._set(st.task, pane_id=pane)
                self._event("pane_adopted", st.task, pane_id=pane)
            if st.phase == Phase.INTEGRATED and pane:
                self.backend.kill_pane(pane)
            if st.phase == Phase.LAUNCHING and not pane:
                # nothing was started: launch again from the top
                self._event("relaunch_pending", st.task, message="launch was interrupted")
                self._move(st.task, Event.RELAUNCH)
        self._drain_inbox()

    def _drain_inbox(self) -> None:
        """What sessions left while no supervisor listened: hints, never decisions."""
        for request in listener.drain(self.rundir.root, self.plan_ids):
            self.reports.handle(request)

    def _identify(self, pid: int) -> str | None:
        """The task whose session ``pid`` descends from (the kernel's parent chain), or None.

        Called by the inbox's threads for every message: only the pane's process id, which
        tmux reports and no agent can choose, ties a message to a task.
        """
        chain = procinfo.ancestors(pid)
        for attempt in range(2):
            with self.pane_pids_lock:
                known = dict(self.pane_pids)
            for ancestor in chain:
                if ancestor in known:
                    return known[ancestor]
            if attempt == 0:
                fresh = self.backend.task_pids()
                with self.pane_pids_lock:
                    self.pane_pids = fresh
        return None

    def _receive(self, request: listener.Request) -> None:
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

    def _ask_again(self, tid: str, signal: str) -> None:
        """A signal arrived unattested (no supervisor listened): the loop asks the session
        for it once more (``_ask_pending``). Called on the inbox's and the relays' threads,
        as the hint comes: a step of the task running then does not make it lost."""
        with self.asks_lock:
            self.asks[tid] = signal
        self.wake.set()

    def _ask_pending(self, statuses: dict[str, TaskStatus]) -> None:
        """Ask sessions for the signals that arrived unattested: after the task's running
        step, while the task still waits for that signal, once per signal and round."""
        with self.asks_lock:
            waiting = dict(self.asks)
        for tid, signal in waiting.items():
            if tid in self.jobs:
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
            self._event("signal_asked_again", tid, phase=signal)
            self._submit(tid, functools.partial(self._signal_again, signal=signal))

    def _signal_again(self, tid: str, *, signal: str) -> None:
        text = templating.render("prompt_signal_again.md.j2", task=tid, signal=signal)
        self._deliver_raw(tid, text)

    def _check_view(self) -> None:
        """Report (and undo) edits of the published view by anyone but the supervisor."""
        now = time.monotonic()
        if now - self.last_view_check < TICK_SECONDS:
            return
        self.last_view_check = now
        # a hook that found no listener in the moment before it started is read here
        self._drain_inbox()
        self._view_edited(self.record.check_view())

    def _view_edited(self, edited: list[str]) -> None:
        """Record that the published view (status files) was edited outside lo-orch and
        rewritten from the record (``Record.publish_all`` / ``check_view`` name them)."""
        if edited:
            self._event(
                "view_edited",
                files=edited,
                message=f"{', '.join(edited)} changed outside lo-orch: ignored, "
                "rewritten from the supervisor's record",
            )

    def _check_sessions(self, statuses: dict[str, TaskStatus]) -> None:
        now = time.monotonic()
        if now - self.last_liveness < TICK_SECONDS:
            return
        self.last_liveness = now
        self.desk.sweep(self._screen_of)  # before the stall checks: only real requests wait
        alive = self.backend.alive_panes()  # one tmux call for every pane
        for tid, st in statuses.items():
            if tid in self.jobs or st.phase not in WORKING_PHASES or not st.pane_id:
                continue
            if not alive.get(st.pane_id):
                pane = self.backend.state(st.pane_id)  # dead or gone: the details
                if not pane.exists or not pane.alive:
                    # (a parked session too: noticed now, not when its wait ends)
                    self._submit(
                        tid, functools.partial(self._pane_died, dead_status=pane.dead_status)
                    )
                    continue
            if st.limit_until:
                if time.time() >= epoch(st.limit_until):
                    self._submit(tid, self._resume_after_limit)
                continue  # parked by a limit: not a stall
            self._check_stall(st)

    def _check_stall(self, st: TaskStatus) -> None:
        assert st.pane_id is not None
        if self.desk.is_waiting(st.task):
            # a permission dialog waits for a person: not a stall (status says so). Only a
            # request the desk keeps open (its hook waits, its dialog is on screen): a
            # session cannot switch the stall check off with a forged hook event.
            return
        now = time.time()
        # (screen hash, when it last changed, when it was last sampled)
        seen = self.screens.get(st.task)
        if seen is None or now - seen[2] >= SCREEN_SAMPLE_SECONDS:
            screen_hash = hash(self.backend.capture(st.pane_id, lines=50))
            changed = now if seen is None or screen_hash != seen[0] else seen[1]
            seen = (screen_hash, changed, now)
            self.screens[st.task] = seen
        activity = max(epoch(st.last_event_at), epoch(st.updated_at), seen[1])
        limit = self.settings.run.stall_minutes * 60
        if now - activity < limit:
            return
        if not st.nudged:
            self._submit(st.task, self._nudge)
        else:
            self._block(
                st.task,
                f"no activity for {self.settings.run.stall_minutes:g} minutes "
                "after a nudge; attach with `lo-orch attach` to see why",
            )
