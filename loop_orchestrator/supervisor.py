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
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from loop_orchestrator import (
    gitutil,
    lifecycle,
    limits,
    listener,
    notify,
    permissions,
    procinfo,
    recovery,
    runs,
    schedule,
    spend,
    templating,
    usage,
    workspace,
)
from loop_orchestrator.agents.base import (
    AgentContext,
    bracketed_paste,
    lo_orch_bin,
    make_adapter,
)
from loop_orchestrator.config import Settings, load_tool_profile
from loop_orchestrator.delivery import Deliverer, prompt_confirmation
from loop_orchestrator.errors import (
    GitError,
    LockHeldError,
    LoOrchError,
    MergeConflictError,
    NotLoggedInError,
    RefTamperedError,
)
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.lifecycle import (
    NOT_LOGGED_IN_HINT,
    Action,
    Event,
    delivery_key,
)
from loop_orchestrator.plan import Task
from loop_orchestrator.reports import Reports
from loop_orchestrator.sessions import LaunchSpec, run_backend, run_socket, wait_until
from loop_orchestrator.state import (
    ACTIVE_PHASES,
    Phase,
    RunDir,
    RunPhase,
    RunState,
    Store,
    TaskStatus,
    now_iso,
)

log = logging.getLogger(__name__)

#: phases in which the session is expected to be alive and working
WORKING_PHASES = frozenset({Phase.LAUNCHING, Phase.PLANNING, Phase.IMPLEMENTING})
TICK_SECONDS = 0.5
SCREEN_SAMPLE_SECONDS = 15.0
#: how long after an interrupted delivery began its UserPromptSubmit hook may still come
DELIVERY_GRACE_SECONDS = 5.0

Progress = Callable[[str], None]


@dataclass
class Outcome:
    """How a supervisor run ended."""

    state: str  # "review" | "blocked" | "integration_failed" | "merged" | "stopped"
    message: str
    blocked: dict[str, str] = field(default_factory=dict)


def lock_holder(rundir: RunDir) -> int | None:
    """The pid of the process holding the supervisor lock now, or None when nobody does.

    Asked of the kernel (``/proc/locks``: the ``flock`` on ``supervisor.lock``), never of
    what a supervisor last wrote: one killed with SIGKILL leaves its ``supervisor.json``
    behind, and `lo-orch status` must not call that run alive (issue 12, item 7). Without
    ``/proc/locks`` the pid in ``supervisor.json`` counts if that process still runs.
    """
    try:
        st = rundir.supervisor_lock.stat()
    except OSError:
        return None
    try:
        table = Path("/proc/locks").read_text(encoding="utf-8")
    except OSError:
        table = None
    if table is not None:
        for line in table.splitlines():
            parts = line.split()
            if len(parts) < 6 or parts[1] == "->" or parts[1] != "FLOCK":
                continue
            try:
                major, minor, inode = parts[5].split(":")
                if (
                    int(inode) == st.st_ino
                    and int(major, 16) == os.major(st.st_dev)
                    and int(minor, 16) == os.minor(st.st_dev)
                ):
                    return int(parts[4])
            except ValueError:
                continue
        return None
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        data = json.loads((rundir.root / "supervisor.json").read_text(encoding="utf-8"))
        pid = int(data["pid"])
        os.kill(pid, 0)
        return pid
    return None


@contextlib.contextmanager
def supervisor_lock(rundir: RunDir) -> Iterator[None]:
    """Hold the repository's supervisor lock; name the holder when it is taken."""
    rundir.root.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(rundir.supervisor_lock), timeout=0)
    info = rundir.root / "supervisor.json"
    try:
        lock.acquire()
    except Timeout:
        pid = lock_holder(rundir)
        holder = f"pid {pid}" if pid else "another process"
        with contextlib.suppress(OSError, ValueError, KeyError):
            data = json.loads(info.read_text(encoding="utf-8"))
            if pid is None or data["pid"] == pid:
                holder = f"pid {data['pid']} (started {data['started_at']})"
        msg = f"another supervisor is running for this repository: {holder}"
        raise LockHeldError(
            msg,
            hint="Watch it with `lo-orch status --watch`, or stop it (Ctrl-C in its window) "
            "before starting another.",
        ) from None
    try:
        atomic_write_text(info, json.dumps({"pid": os.getpid(), "started_at": now_iso()}) + "\n")
        yield
    finally:
        with contextlib.suppress(OSError):
            info.unlink()
        lock.release()


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
            from loop_orchestrator.cluster.ray_backend import cluster_record

            self.record.update_run(cluster=cluster_record(cluster))
        self.adapter = make_adapter(settings, repo)
        self.deliverer = Deliverer(stagger=settings.run.stagger_seconds)
        self.tools = load_tool_profile(repo)
        self.pool = ThreadPoolExecutor(max_workers=self.cap + 2, thread_name_prefix="lo-task")
        self.jobs: dict[str, Future[None]] = {}
        self.wake = threading.Event()
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
        self.reports = Reports(
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
        # the checks' Python environments as they are before any agent runs
        from loop_orchestrator.verify import pyenv

        self.site_baseline = pyenv.take_baseline(
            repo, [d.argv() for t in self.plan.tasks for d in t.done if d.check]
        )
        if self.backend.socket != self.state.tmux_socket:
            self.record.update_run(tmux_socket=self.backend.socket)

    def _make_desk(self) -> permissions.Desk:
        """Permission requests (issue 17): the config's rules, lo-orch's own signals."""
        from loop_orchestrator.agents.base import lo_orch_bin

        cfg = self.settings.permissions
        return permissions.Desk(
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

    # ledger and progress --------------------------------------------------------------
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

    # entry ----------------------------------------------------------------------------
    def run(self) -> Outcome:
        ended = self.state.phase in (RunPhase.AWAITING_MERGE_REVIEW, RunPhase.MERGED)
        try:
            outcome = self._run_locked()
        except BaseException:
            self.notifier.close(timeout=0)
            raise
        if not ended:
            self._notify_finished(outcome)
        return outcome

    def _notify_finished(self, outcome: Outcome) -> None:
        """The run stopped: tell the person (and wait a moment for the channels)."""
        import hashlib

        first = outcome.message.splitlines()[0] if outcome.message else ""
        if outcome.state == "review":
            self.notifier.notify(
                "gate2_waiting",
                str(getattr(self.integration, "commit", "")),
                "the run is ready for Gate 2: review it with `lo-orch merge`",
            )
        digest = hashlib.sha256(f"{outcome.state}\n{outcome.message}".encode()).hexdigest()[:16]
        # a restart that ends the same way is not news; after a person's retry it is
        retries = self._retries()
        self.notifier.notify(
            "run_finished",
            f"{outcome.state}:{retries}:{digest}",
            f"the supervisor stopped ({outcome.state}): {first}"[:300],
        )
        self.notifier.close(timeout=self.settings.notify.timeout + 2 * notify.CHANNEL_TIMEOUT)

    def _run_locked(self) -> Outcome:
        with supervisor_lock(self.rundir):
            if self.state.phase == RunPhase.AWAITING_MERGE_REVIEW:
                return Outcome("review", "the run is waiting for Gate 2: `lo-orch merge`")
            if self.state.phase == RunPhase.MERGED:
                return Outcome("merged", "the run is already merged")
            self._start_run()
            # What sessions left while no supervisor listened is read before anyone is
            # heard: a signal waiting to connect is judged after the prompt-arrival hook
            # that was left before it (a kill mid-delivery, then a fast session).
            self._reconcile()
            server = listener.Server(self.rundir.root, self._identify, self._receive)
            server.start()
            serve = getattr(self.backend, "serve", None)  # remote sessions' inboxes (issue 19)
            if serve is not None:
                serve(self._receive, self._set)
            try:
                while True:
                    self._loop()
                    outcome = self._finish()
                    if outcome.state != "integration_failed" or not self._route_integration():
                        return outcome
            except KeyboardInterrupt:
                self._interrupted()
                raise
            finally:
                server.close()
                getattr(self.backend, "stop", lambda: None)()
                self.pool.shutdown(wait=True, cancel_futures=True)

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
        edited = self.record.publish_all()
        if edited:
            self._event(
                "view_edited",
                files=edited,
                message=f"{', '.join(edited)} changed outside lo-orch: ignored, "
                "rewritten from the supervisor's record",
            )
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

    # reconciliation after a restart ---------------------------------------------------
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

    # main loop --------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            if self.fatal is not None:
                raise self.fatal
            self.record.refresh()  # a person's `lo-orch retry` is appended by another process
            self._collect_jobs()
            self._check_view()
            statuses = self._statuses()
            self._dispatch(statuses)
            self._pass_messages(statuses)
            self._check_sessions(statuses)
            phases = {t: s.phase for t, s in self._statuses().items()}
            limited = any(
                s.limit_until and s.phase in WORKING_PHASES for s in self._statuses().values()
            )
            for tid in [] if limited else self._ready(phases):
                # (no new session while a limit holds the account)
                if tid in self.jobs:
                    continue
                spent = self._run_budget_spent(tid)
                if spent:
                    self._block(tid, spent)
                    phases[tid] = Phase.BLOCKED
                    continue
                self._event("task_released", tid, wave=self.waves[tid])
                self._move(tid, Event.RELEASE, error=None)
                self._submit(tid, self._start_task)
                phases[tid] = Phase.LAUNCHING
            if not self.jobs and self._settled(phases):
                return
            self.wake.wait(TICK_SECONDS)
            self.wake.clear()

    def _statuses(self) -> dict[str, TaskStatus]:
        """Every task's status, from the record (in memory; the files are only the view)."""
        tasks = self.record.tasks()
        return {t: tasks[t] for t in self.plan_ids if t in tasks}

    def _settled(self, phases: dict[str, Phase]) -> bool:
        """Nothing is running and nothing can start: all integrated, or the rest is stuck."""
        if any(p in ACTIVE_PHASES for p in phases.values()):
            return False
        return not self._ready(phases)

    def _ready(self, phases: dict[str, Phase]) -> list[str]:
        before = self.governor.current
        cap = self.governor.tick(time.time())
        if cap != before:
            self._event(
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
            # an error a person can act on (not logged in, a dialog, a conflict...)
            self._block(task, exc.render())
        finally:
            self.wake.set()

    def _collect_jobs(self) -> None:
        for task, fut in list(self.jobs.items()):
            if not fut.done():
                continue
            del self.jobs[task]
            exc = fut.exception()
            if exc is not None:
                # a bug, not a user error: keep the run going, mark the task failed
                log.error("task job crashed", exc_info=exc, extra={"task": task})
                self._event("task_failed", task, message=f"internal error: {exc!r}")
                self._move(task, Event.FAIL, error=f"internal error: {exc!r}")

    def _dispatch(self, statuses: dict[str, TaskStatus]) -> None:
        for tid, st in statuses.items():
            if st.phase != Phase.BLOCKED:
                self.reported_blocked.discard(tid)  # retried by a person (`lo-orch retry`)
            if tid in self.jobs:
                continue
            step = lifecycle.action(st)
            if step is Action.START:
                self._submit(tid, self._start_task)
            elif step is Action.IMPLEMENT:
                self._event("reacted", tid, to=st.phase.value)
                self._submit(tid, self._to_implement)
            elif step is Action.VERIFY:
                if st.phase == Phase.IMPL_DONE:
                    self._event("reacted", tid, to=st.phase.value)
                self._submit(tid, self._verify)
            elif step is Action.INTEGRATE:
                self._submit(tid, self._integrate)
            elif step is Action.REDELIVER:
                self._submit(tid, self._redeliver)
            elif step is Action.NOT_LOGGED_IN:
                error = NotLoggedInError("Claude Code is not logged in", hint=NOT_LOGGED_IN_HINT)
                self._block(tid, error.render())
            if st.phase == Phase.BLOCKED and tid not in self.reported_blocked:
                # blocked by the session itself (`lo-orch signal blocked --note ...`)
                self.reported_blocked.add(tid)
                self._event("task_blocked", tid, message=st.error or st.note or "blocked")
                self._notify_blocked(tid)

    def _pass_messages(self, statuses: dict[str, TaskStatus]) -> None:
        """A person's `lo-orch send`: delivered like a prompt, one job at a time per task."""
        for mid, (tid, text) in self.record.pending_messages().items():
            st = statuses.get(tid)
            if st is None or tid in self.jobs:
                continue
            if st.phase not in ACTIVE_PHASES | {Phase.BLOCKED} or not st.pane_id:
                self.record.append("message_done", id=mid, delivered=False)
                self._event(
                    "message_dropped",
                    tid,
                    id=mid,
                    message=f"no session to deliver it to ({st.phase.value})",
                )
                continue
            self._submit(tid, functools.partial(self._deliver_message, mid=mid, text=text))

    def _deliver_message(self, tid: str, *, mid: str, text: str) -> None:
        try:
            self._deliver_raw(tid, text)
        except LoOrchError as exc:  # the session is busy in a dialog, or gone: say so
            self.record.append("message_done", id=mid, delivered=False)
            self._event("message_failed", tid, id=mid, message=exc.render())
            return
        self.record.append("message_done", id=mid, delivered=True)
        self._event("message_delivered", tid, id=mid)

    # what sessions report ------------------------------------------------------------------
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
        """A signal arrived unattested (no supervisor listened): ask for it once more."""
        if tid in self.jobs:
            return
        self._submit(
            tid,
            lambda t: self._deliver_raw(
                t, templating.render("prompt_signal_again.md.j2", task=t, signal=signal)
            ),
        )

    def _check_view(self) -> None:
        """Report (and undo) edits of the published view by anyone but the supervisor."""
        now = time.monotonic()
        if now - self.last_view_check < TICK_SECONDS:
            return
        self.last_view_check = now
        # a hook that found no listener in the moment before it started is read here
        self._drain_inbox()
        edited = self.record.check_view()
        if edited:
            self._event(
                "view_edited",
                files=edited,
                message=f"{', '.join(edited)} changed outside lo-orch: ignored, "
                "rewritten from the supervisor's record",
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

    # liveness and stalls ----------------------------------------------------------------
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
                if time.time() >= _ts(st.limit_until):
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
        activity = max(_ts(st.last_event_at), _ts(st.updated_at), seen[1])
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

    # task jobs ------------------------------------------------------------------------
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
        wait_idle = getattr(self.adapter, "wait_idle", None)
        if wait_idle is not None:  # an agent that drops a prompt sent while it works
            wait_idle(self.backend, st.pane_id, timeout=self.settings.agent.ready_timeout)
        self.deliverer.deliver(
            self.backend,
            st.pane_id,
            text,
            confirmed=confirmed,
            bracketed=bracketed_paste(self.adapter),
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
        started = _ts(st.delivery_started_at)
        deadline = started + DELIVERY_GRACE_SECONDS
        while True:
            if _ts(st.prompt_submitted_at) >= started > 0:
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

    def _deliver_raw(self, tid: str, text: str) -> None:
        self._heal_worktree(tid)
        st = self.record.task(tid)
        if st.pane_id:
            self.deliverer.deliver(
                self.backend, st.pane_id, text.strip(), bracketed=bracketed_paste(self.adapter)
            )

    def _pane_died(self, tid: str, dead_status: int | None = None) -> None:
        """Relaunch a dead session once (resuming it), then fail the task."""
        st = self.record.task(tid)
        pane = self.backend.state(st.pane_id) if st.pane_id else None
        screen = self.backend.capture(st.pane_id) if pane and pane.exists and st.pane_id else ""
        evidence = self.rundir.task_evidence_dir(tid)
        evidence.mkdir(parents=True, exist_ok=True)
        screen_file = evidence / f"last-screen-{st.relaunches}.txt"
        atomic_write_text(screen_file, screen)
        if st.relaunches >= 1:
            error = (
                f"the session exited (status {dead_status}) again after a relaunch; "
                f"last screen in {screen_file}"
            )
            self._event("task_failed", tid, exit_status=dead_status, message=error)
            self._move(tid, Event.FAIL, error=error)
            return
        parked = bool(st.limit_until) and time.time() < _ts(st.limit_until)
        self._event(
            "session_died",
            tid,
            exit_status=dead_status,
            message="relaunching once"
            + (" (parked by a limit: no prompt until its wait ends)" if parked else ""),
        )
        # a parked session keeps its prompt as delivered (--resume brings the conversation
        # back): a new prompt would only meet the limit again
        st = (
            self._set(tid, relaunches=st.relaunches + 1, delivering=None)
            if parked
            else self._set(tid, relaunches=st.relaunches + 1, delivered=None, delivering=None)
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

    # rate and usage limits ------------------------------------------------------------------
    def _limit_hit(self, tid: str, error: str, said: str | None = None) -> None:
        """Claude Code gave up on a turn for a limit: park the task until it resets (the
        reset time from what the session said, ``said``, else from its screen)."""
        from datetime import UTC, datetime, timedelta

        st = self.record.task(tid)
        if st.phase not in WORKING_PHASES:
            return
        now = datetime.now(UTC)
        reset = limits.usage_limit_reset(said or "", now)
        if reset is None and st.pane_id:
            reset = limits.usage_limit_reset(self.backend.capture(st.pane_id, lines=60), now)
        if reset is not None:
            kind, reason = "usage_limit", f"usage limit, resets {reset:%H:%M} UTC"
            until = reset + timedelta(seconds=self.settings.run.usage_limit_grace_seconds)
        else:
            kind, reason = "rate_limit", f"{error} from the model API"
            until = now + timedelta(seconds=self.settings.run.limit_wait_seconds)
        until_iso = until.isoformat(timespec="seconds")
        self._set(
            tid,
            limit_until=until_iso,
            limit_reason=reason,
            limit_kind=kind,
            limit_hits=st.limit_hits + 1,
            waiting_for=f"waiting_limit: {reason}; lo-orch resumes it at {until:%H:%M:%S} UTC",
        )
        self._event("limit_hit", tid, error=error, kind=kind, until=until_iso, message=reason)
        self.notifier.notify(
            "limit_wait",
            f"{tid}:{until_iso}",
            f"{reason}; lo-orch resumes it at {until:%H:%M:%S} UTC",
            tid,
        )
        before = self.governor.current
        if kind == "rate_limit" and self.governor.hit(time.time()) < before:
            self._event(
                "concurrency_lowered",
                concurrency=self.governor.current,
                message=f"repeated rate limits: at most {self.governor.current} "
                "session(s) at once for now",
            )

    def _resume_after_limit(self, tid: str) -> None:
        """The limit's time is up and the session did not resume by itself: a short prompt."""
        st = self.record.task(tid)
        if not st.limit_until or st.phase not in WORKING_PHASES:
            return
        reason = st.limit_reason or "a limit"
        self._set(tid, limit_until=None, limit_kind=None, waiting_for=None)
        self._event("limit_resumed", tid, message=reason)
        phase = (
            st.phase.value
            if st.rework_count == 0 or st.phase != Phase.IMPLEMENTING
            else f"{st.phase.value} (rework {st.rework_count})"
        )
        self._deliver_raw(
            tid,
            templating.render("prompt_resume_limit.md.j2", task=tid, reason=reason, phase=phase),
        )

    # usage and budgets ----------------------------------------------------------------------
    def _refresh_usage(self, tid: str, tool_use_id: str | None = None) -> usage.Usage | None:
        """Read the task's session transcript again; record (and ledger) what changed.

        The path is derived from the session id lo-orch chose, the worktree and the Claude
        config dir, never taken from the session. Only for Claude Code sessions. With
        ``tool_use_id`` (a PreToolUse hook: the tool waits for this answer) it first waits,
        briefly, for the message that asks for that tool to reach the transcript: Claude
        Code may start the hook before it has written that message, and the tool (which
        may erase the transcript) must not run before lo-orch has read it.
        """
        st = self.record.task(tid)
        if self.adapter.name != "claude" or not st.session_id or not st.worktree:
            return None
        env = {**os.environ, **self.settings.agent.env}
        try:
            path = usage.session_transcript(Path(st.worktree), st.session_id, env)
        except ValueError:  # a session id that is not a UUID: nothing lo-orch launched
            return None
        if tool_use_id:
            _wait_for_text(path, tool_use_id, TRANSCRIPT_WAIT)
        # the spend is lo-orch's own book of every message it has read, never less than
        # before (a session that truncates its transcript does not spend less: spend.py)
        seen = self.spend.observe(tid, st.session_id, path)
        booked = self.spend.messages(tid)
        now = usage.price(booked, self.prices)
        if seen.missing and not booked:
            now = usage.unknown(f"transcript missing: {path}")
        if seen.bad:
            now.notes.append(usage.bad_note(seen.bad, path))
        if seen.tampered:
            self.tampered[tid] = "; ".join(seen.tampered)
            self._event(
                "transcript_tampered",
                tid,
                transcript=str(path),
                message="; ".join(seen.tampered) + "; the spend kept is lo-orch's "
                "own record of what it read",
            )
        if tid in self.tampered:
            now.notes.append(
                f"transcript tampered with ({self.tampered[tid]}): the spend "
                "is lo-orch's own record of what it read"
            )
        data = now.as_json()
        if data == st.usage:
            return now
        rounds = {str(r): u.as_json() for r, u in sorted(now.rounds.items())}
        self._set(tid, usage=data, usage_rounds=rounds)
        self.store.append_ledger("usage", task=tid, round=st.rework_count, **data)
        return now

    def _run_usage(self) -> usage.Usage:
        return usage.total(
            usage.Usage.from_json(st.usage)
            for st in self._statuses().values()
            if st.usage is not None
        )

    def _task_budget(self, tid: str) -> float | None:
        st = self.record.task(tid)
        if st.budget_usd is not None:
            return st.budget_usd
        planned = self.plan.task(tid).max_cost_usd
        return planned if planned is not None else self.settings.run.task_max_cost_usd

    def _turn_ended(self, tid: str) -> str | None:
        """At the end of a turn (a hook): refresh the usage; why the task must stop now, if
        it is over its budget while it works on a prompt (a task that signalled is stopped
        before its next prompt instead, see ``_deliver``)."""
        if self.record.task(tid).phase not in (Phase.PLANNING, Phase.IMPLEMENTING):
            self._refresh_usage(tid)
            return None
        return self._over_budget(tid)

    def _over_budget(self, tid: str) -> str | None:
        """Refresh the task's usage; why it must stop if it spent its budget (else None)."""
        now = self._refresh_usage(tid)
        cap = self._task_budget(tid)
        if now is None or cap is None:
            return None
        if now.cost_usd is None or now.cost_usd < cap:
            # (an unknown cost cannot be held against a budget; its notes say why)
            return None
        return (
            f"over its budget: spent {usage.money(now.cost_usd)} of "
            f"{usage.money(cap)}; give it more with `lo-orch retry {tid} --budget "
            "DOLLARS` (its new total budget)"
        )

    def _run_budget_spent(self, tid: str) -> str | None:
        """Why ``tid`` may not start: the run's budget is spent (a person's own budget for
        the task, `lo-orch retry --budget`, overrides it)."""
        cap = self.settings.run.max_cost_usd
        if cap is None or self.record.task(tid).budget_usd is not None:
            return None
        spent = self._run_usage().cost_usd
        if spent is None or spent < cap:
            return None
        return (
            f"not started: the run's budget is spent ({usage.money(spent)} of "
            f"{usage.money(cap)}); start it with `lo-orch retry {tid} --budget DOLLARS`"
        )

    # verification and integration ----------------------------------------------------------
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

    # briefs --------------------------------------------------------------------------------
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

    # the end of a supervisor run --------------------------------------------------------
    def _finish(self) -> Outcome:
        from loop_orchestrator import integration

        for tid in self.plan_ids:  # the last turns' figures, before anyone reviews them
            self._refresh_usage(tid)
        run_usage = self._run_usage()
        self.store.append_ledger("run_usage", **run_usage.as_json())
        statuses = self._statuses()
        stuck = {
            t: (s.error or s.note or s.phase.value)
            for t, s in statuses.items()
            if s.phase in (Phase.BLOCKED, Phase.FAILED)
        }
        waiting = schedule.waiting_on(self.plan, {t: s.phase for t, s in statuses.items()})
        if stuck and not self.continue_blocked:
            lines = [f"{t}: {why}" for t, why in stuck.items()]
            lines += [f"{t}: waiting on {', '.join(c)}" for t, c in waiting.items()]
            self._event("run_paused", message=f"{len(stuck)} task(s) need a human")
            return Outcome("blocked", "\n".join(lines), stuck)
        skipped = sorted(set(stuck) | set(waiting))
        result = integration.integrate(
            self.repo, self.settings, self.plan, skipped=skipped, record=self.record
        )
        self.integration = result
        if not result.passed:
            self._event("integration_failed", exit_code=result.exit_code, message=result.summary)
            return Outcome("integration_failed", result.summary)
        self._event("awaiting_merge_review", staging=result.commit, skipped=skipped)
        return Outcome("review", result.summary)


def _ts(iso: str | None) -> float:
    if not iso:
        return 0.0
    from datetime import datetime

    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return 0.0


#: how long a PreToolUse answer waits for the tool's message to reach the transcript
TRANSCRIPT_WAIT = 3.0


def _wait_for_text(path: Path, needle: str, timeout: float) -> bool:
    """Wait until the file at ``path`` holds ``needle`` (False after ``timeout``)."""
    wanted = needle.encode("utf-8")

    def present() -> bool:
        try:
            return wanted in path.read_bytes()
        except OSError:
            return False

    return wait_until(present, timeout, interval=0.02)
