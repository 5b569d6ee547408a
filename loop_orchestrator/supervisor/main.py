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
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from loop_orchestrator.errors import (
    LockHeldError,
    LoOrchError,
    NotLoggedInError,
)
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.plan import schedule
from loop_orchestrator.resources import lo_orch_bin
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.state import (
    ACTIVE_PHASES,
    Phase,
    RunDir,
    RunPhase,
    Store,
    TaskStatus,
    now_iso,
)
from loop_orchestrator.sessions import listener
from loop_orchestrator.sessions.backend import LaunchSpec, run_socket
from loop_orchestrator.sessions.factory import run_backend
from loop_orchestrator.supervisor import lifecycle, notify
from loop_orchestrator.supervisor.base import TICK_SECONDS, WORKING_PHASES
from loop_orchestrator.supervisor.health import SessionHealth
from loop_orchestrator.supervisor.lifecycle import (
    NOT_LOGGED_IN_HINT,
    Action,
    Event,
)

log = logging.getLogger(__name__)


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


class Supervisor(SessionHealth):
    """Drives every task of one run from ``pending`` to ``integrated`` (the layers it is built
    of: ``supervisor_base``)."""

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

    def _loop(self) -> None:
        while True:
            if self.fatal is not None:
                raise self.fatal
            self.record.refresh()  # a person's `lo-orch retry` is appended by another process
            self._collect_jobs()
            self._check_view()
            statuses = self._statuses()
            self._dispatch(statuses)
            self._ask_pending(statuses)
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

    def _finish(self) -> Outcome:
        from loop_orchestrator.workspace import integration

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
