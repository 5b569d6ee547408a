"""What every part of the supervisor stands on: what it holds, the ledger and task records,
the job pool, blocking a task, healing a worktree, pasting raw text into a pane.

``supervisor.Supervisor`` is built in layers, each a class in its own module:
``supervisor_base`` (this), ``supervisor_limits`` (rate and usage limits, spend, budgets),
``supervisor_delivery`` (launching sessions, prompts, nudges, a pane that died),
``supervisor_verify`` (verification, rework, integration), ``supervisor_health`` (what
sessions report, liveness and stalls, starting and reconciling a run) and ``supervisor``
(the entry and the main loop).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from loop_orchestrator.agents.contract import (
    AgentContext,
    lo_orch_bin,
    make_adapter,
)
from loop_orchestrator.config import Settings, load_tool_profile
from loop_orchestrator.cost import limits, spend, usage
from loop_orchestrator.errors import (
    GitError,
    LoOrchError,
    RefTamperedError,
)
from loop_orchestrator.git import gateway as gitutil
from loop_orchestrator.permissions import desk as permission_desk
from loop_orchestrator.permissions import requests as permissions
from loop_orchestrator.plan import schedule
from loop_orchestrator.plan.model import Task
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.state import (
    Phase,
    RunDir,
    RunState,
    Store,
    TaskStatus,
)
from loop_orchestrator.sessions.backend import run_backend, wait_until
from loop_orchestrator.sessions.delivery import Deliverer
from loop_orchestrator.supervisor import lifecycle, notify, recovery
from loop_orchestrator.supervisor.lifecycle import (
    Event,
)
from loop_orchestrator.supervisor.reports import Reports
from loop_orchestrator.workspace import workspace

log = logging.getLogger(__name__)

#: phases in which the session is expected to be alive and working
WORKING_PHASES = frozenset({Phase.LAUNCHING, Phase.PLANNING, Phase.IMPLEMENTING})
TICK_SECONDS = 0.5
SCREEN_SAMPLE_SECONDS = 15.0
#: how long after an interrupted delivery began its UserPromptSubmit hook may still come
DELIVERY_GRACE_SECONDS = 5.0

Progress = Callable[[str], None]


def epoch(iso: str | None) -> float:
    """Seconds since the epoch of an ISO time (0.0 for none or an unreadable one)."""
    if not iso:
        return 0.0
    from datetime import datetime

    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return 0.0


def wait_for_text(path: Path, needle: str, timeout: float) -> bool:
    """Wait until the file at ``path`` holds ``needle`` (False after ``timeout``)."""
    wanted = needle.encode("utf-8")

    def present() -> bool:
        try:
            return wanted in path.read_bytes()
        except OSError:
            return False

    return wait_until(present, timeout, interval=0.02)


class SupervisorBase:
    """What a supervisor holds, and the small steps every layer uses."""

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
        self.rundir = RunDir(repo)
        self.store = Store(self.rundir)
        self.record, self.plan = runs.load_approved(repo)
        self.continue_blocked = continue_blocked
        self.progress = progress or (lambda _msg: None)
        self.cap = runs.effective_concurrency(self.plan, settings)
        self.waves = schedule.wave_of(self.plan, self.cap)
        self.deps = schedule.dependencies(self.plan)
        self.ws = workspace.Workspace.for_run(repo, self.state, settings.workspace)
        self.backend = run_backend(self.state, settings.cluster)
        cluster = getattr(self.backend, "cluster", None)
        if cluster is not None and self.state.cluster is None:  # every later command finds it
            from loop_orchestrator.cluster import refs as cluster_refs
            from loop_orchestrator.cluster.ray_backend import cluster_record

            # a new run on the cluster: refs of an earlier run of the same name are not its
            # own (a stale checkpoint would be applied to its worktrees); kept/ refs stay
            stale = cluster_refs.drop(repo, self.state.name)
            if stale:
                self.store.append_ledger(
                    "cluster_refs_dropped",
                    refs=stale,
                    message="left by an earlier run of the same name; not this run's",
                )
            self.record.update_run(cluster=cluster_record(cluster))
        self.adapter = make_adapter(settings, repo)
        self.deliverer = Deliverer(stagger=settings.run.stagger_seconds)
        self.tools = load_tool_profile(repo)
        self.pool = ThreadPoolExecutor(max_workers=self.cap + 2, thread_name_prefix="lo-task")
        self.jobs: dict[str, Future[None]] = {}
        self.wake = threading.Event()
        #: task -> the signal to ask its session for again (it arrived unattested); the
        #: loop asks (``_ask_pending``), and once per signal and round (``asked``)
        self.asks: dict[str, str] = {}
        self.asks_lock = threading.Lock()
        self.asked: dict[str, str] = {}
        #: pane process id -> task, to tell which session a message comes from
        self.pane_pids: dict[int, str] = {}
        self.pane_pids_lock = threading.Lock()
        self.last_view_check = 0.0
        #: each task's brief as rendered for its session (the file is agent-writable)
        self.briefs: dict[str, str] = {}
        #: an error that stops the whole run, raised by the loop (a job cannot raise it)
        self.fatal: LoOrchError | None = None
        # Workspace is not thread-safe (ref moves and the refs book go together): one writer.
        self.git_lock = threading.Lock()
        self.screens: dict[str, tuple[int, float, float]] = {}
        self.integration: Any = None  # the last integration.IntegrationResult
        self.last_liveness = 0.0
        self.reported_blocked: set[str] = set()
        self.plan_ids = [t.id for t in self.plan.tasks]
        self.prices = usage.prices_from(settings)
        #: every message's usage read from the sessions' transcripts (private, monotonic)
        self.spend = spend.SpendBook(self.record.folder / spend.BOOK_FILE)
        #: task -> how its transcript was tampered with (first seen)
        self.tampered: dict[str, str] = {}
        #: concurrency lowered after repeated rate limits, raised after a quiet period
        self.governor = limits.Governor(self.cap, quiet=settings.run.limit_quiet_seconds)
        self.run_budget_noted = False
        self.notifier = notify.Notifier(
            repo,
            self.state.name,
            settings.notify,
            tmux_socket=self.backend.socket,
            tmux_session=self.backend.session,
        )
        self.desk = self._make_desk()
        self.reports = self._reports()
        # the checks' Python environments as they are before any agent runs
        from loop_orchestrator.verify import pyenv

        self.site_baseline = pyenv.take_baseline(
            repo, [d.argv() for t in self.plan.tasks for d in t.done if d.check]
        )
        if self.backend.socket != self.state.tmux_socket:
            self.record.update_run(tmux_socket=self.backend.socket)

    def _make_desk(self) -> permission_desk.Desk:
        """Permission requests (issue 17): the config's rules, lo-orch's own signals."""

        cfg = self.settings.permissions
        return permission_desk.Desk(
            permissions.Permissions.for_run(self.repo, self.state.name),
            permissions.parse_rules(cfg.allow, "[permissions] allow"),
            permissions.parse_rules(cfg.deny, "[permissions] deny"),
            lo_orch_bin(),
            log=self._event,
            closed=self._permission_closed,
            opened=lambda req: self.notifier.notify(
                "permission_request",
                req.id,
                f"asks to use {req.tool}"
                + (f": {req.summary}" if req.summary else "")
                + f"; answer with `lo-orch permit {req.task} allow|deny`",
                req.task,
            ),
        )

    def _reports(self) -> Reports:
        """What sessions report, applied (built by ``supervisor_health``, the layer that can
        call every other)."""
        raise NotImplementedError

    def _permission_closed(self, tid: str) -> None:
        """Nothing of ``tid`` waits for a person's answer any more."""
        if self.record.task(tid).waiting_for and not self.record.task(tid).limit_until:
            self._set(tid, waiting_for=None)

    def _screen_of(self, tid: str) -> str | None:
        pane = self.record.task(tid).pane_id
        return self.backend.capture(pane, lines=0) if pane else None

    @property
    def state(self) -> RunState:
        """The run as the supervisor's record has it (never read back from run.json)."""
        return self.record.run

    def _event(self, event: str, task: str | None = None, **fields: Any) -> None:
        self.store.append_ledger(event, **({"task": task} if task else {}), **fields)
        text = fields.get("message") or ", ".join(f"{k}={v}" for k, v in fields.items())
        self.progress(f"{task + ': ' if task else ''}{event}{' — ' + str(text) if text else ''}")

    def _set(self, task: str, **changes: Any) -> TaskStatus:
        """Record a change of a task (not its phase: that is ``_move``) and publish it."""
        assert "phase" not in changes, "phase changes go through the lifecycle (_move)"
        return self.record.update_task(task, **changes)

    def _move(self, task: str, event: Event, **changes: Any) -> TaskStatus:
        """Move a task by the lifecycle's table (an illegal move is a bug: it raises)."""
        phase = lifecycle.next_phase(self.record.task(task).phase, event)
        return self.record.update_task(task, phase=phase, **changes)

    def _statuses(self) -> dict[str, TaskStatus]:
        """Every task's status, from the record (in memory; the files are only the view)."""
        tasks = self.record.tasks()
        return {t: tasks[t] for t in self.plan_ids if t in tasks}

    def _submit(self, task: str, fn: Callable[[str], None]) -> None:
        self.jobs[task] = self.pool.submit(self._guarded, task, fn)

    def _guarded(self, task: str, fn: Callable[[str], None]) -> None:
        try:
            fn(task)
        except RefTamperedError as exc:
            # not this task's problem: a ref of the run moved under it. The whole run
            # stops (the loop raises it), and no other step starts meanwhile.
            self._event(
                "refs_tampered",
                task,
                ref=exc.ref,
                expected=exc.expected,
                found=exc.found,
                message=exc.message,
            )
            self.fatal = exc
        except LoOrchError as exc:
            if self._died_under(task, exc):
                return  # its session died under this step: relaunched as any dead session
            # an error a person can act on (not logged in, a dialog, a conflict...)
            self._block(task, exc.render())
        finally:
            self.wake.set()

    def _died_under(self, task: str, exc: LoOrchError) -> bool:
        """Was ``exc`` the session dying under a step (and is that handled)? The delivery
        layer answers; here: no."""
        return False

    def _block(self, tid: str, reason: str) -> None:
        self.reported_blocked.add(tid)
        self._event("task_blocked", tid, message=reason)
        self._move(tid, Event.BLOCK, error=reason)
        self._notify_blocked(tid)

    def _retries(self, tid: str | None = None) -> int:
        """How often a person retried ``tid`` (any task): part of a notification's key."""
        return sum(
            1
            for e in self.store.read_ledger()
            if e.get("event") == "task_retried" and (tid is None or e.get("task") == tid)
        )

    def _notify_blocked(self, tid: str) -> None:
        import hashlib

        st = self.record.task(tid)
        reason = st.error or st.note or ""
        # the same blocking seen again by a restarted supervisor has the same key; a block
        # after a person's `lo-orch retry` a new one (the key only decides what is resent)
        retries = self._retries(tid)
        digest = hashlib.sha256(reason.encode()).hexdigest()[:12]
        key = f"{tid}:{retries}:{st.rework_count}:{digest}"
        self.notifier.notify(
            "task_blocked",
            key,
            f"blocked: {st.error or st.note or 'needs a person'}; help it, "
            f"then `lo-orch retry {tid}`",
            tid,
        )

    def _recorded_verdict(self, tid: str, commit: str) -> Any:
        """The verdict of ``commit`` if the supervisor recorded exactly it, else None."""
        from loop_orchestrator import verify

        if self.record.verdict(tid, commit) is None:
            return None
        verdict = verify.load_verdict(self.rundir, tid, commit)
        if verdict is None or not self.record.verdict_matches(
            tid, commit, verdict.model_dump_json()
        ):
            self._event(
                "verdict_untrusted",
                tid,
                commit=commit,
                message="the verdict file differs from the recorded one; verifying again",
            )
            return None
        return verdict

    def _clear_index_lock(self, tid: str, *, wait: float = 10.0) -> recovery.LockOutcome:
        outcome = recovery.clear_stale_index_lock(self.ws.worktree_path(tid), wait=wait)
        if outcome.cleared:
            self._event(
                "index_lock_cleared",
                tid,
                path=str(outcome.path),
                message=f"stale {outcome.path} removed (no git process held it)",
            )
        return outcome

    def _heal_worktree(self, tid: str) -> None:
        """Make a deleted task worktree again from its branch before its session is asked
        for anything more, and start the session again in it (its working folder was the
        deleted one). When it cannot be made again, the task is blocked at once with the
        reason (a ``GitError``: ``_guarded`` blocks), never sent a round it cannot do."""
        st = self.record.task(tid)
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
        self._event(
            "worktree_recreated",
            tid,
            path=str(path),
            branch=branch,
            commit=head,
            message=f"{path} was deleted: made again from {branch} at {head[:12]} "
            "(work that was not committed there is lost)",
        )
        task = self.plan.task(tid)
        ctx = self._context(task, st)
        self.adapter.prepare(ctx)
        spec = self.adapter.launch_spec(ctx, resume=bool(st.session_id))
        pane = self.backend.state(st.pane_id) if st.pane_id else None
        if pane is not None and pane.exists and st.pane_id:
            pane_id = st.pane_id
            self.backend.respawn(pane_id, spec)
        else:
            pane_id = self.backend.launch(spec)
            self._set(tid, pane_id=pane_id)
        self._event(
            "session_relaunched",
            tid,
            pane_id=pane_id,
            message="started again in the recreated worktree",
        )
        self.adapter.wait_ready(self.backend, pane_id, timeout=self.settings.agent.ready_timeout)

    def _context(self, task: Task, st: TaskStatus) -> AgentContext:
        return AgentContext.create(
            task=task.id,
            run_name=self.state.name,
            repo=self.repo,
            worktree=self.ws.worktree_path(task.id),
            run_dir=self.rundir.root,
            brief_path=self.rundir.brief_path(task.id),
            settings=self.settings,
            session_id=st.session_id,
        )

    def _deliver_raw(self, tid: str, text: str) -> None:
        self._heal_worktree(tid)
        st = self.record.task(tid)
        if st.pane_id:
            self.deliverer.deliver(
                self.backend, st.pane_id, text.strip(), bracketed=self.adapter.bracketed_paste
            )
