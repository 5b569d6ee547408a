"""What managed sessions report: Claude Code hook events and `lo-orch signal`.

`lo-orch hook EVENT` runs for every hook event of every Claude Code session that loads the
plugin (each prompt, each stop, each notification), so its path stays light: the standard
library only (about 60 ms of CPU for a whole `python -m loop_orchestrator hook` run).
Importing ``state`` (pydantic models, filelock) alone costs about 200 ms, more than the whole
budget of 150 ms, which is why status and ledger are updated here as plain JSON, under the
same ``flock`` lock files and with the same atomic temp-file-and-rename as ``state.Store``
(filelock's Unix lock is ``flock`` on a file that stays in place, so both sides exclude each
other; tests/test_hooks.py checks it). ``signal_task`` is not on a hot path and goes through
``Store``.

Contract of a hook: in a session lo-orch does not manage, or when anything is missing or
broken, print nothing and exit 0, never disturbing the user's session. The one answer that
is not silence is the Stop gate: exit 2 with the reason on stderr (Claude keeps working).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from loop_orchestrator.errors import StateError, UsageError

if TYPE_CHECKING:
    from loop_orchestrator.state import TaskStatus

# Mirrors of state.ORCH_DIR / WORKTREES_DIR / the status lock name and plan.ID_RE, kept here
# so this module imports no pydantic (tests assert they agree).
ORCH_DIR = ".orchestration"
WORKTREES_DIR = ".worktrees"
TASK_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}\Z")
EVENT_RE = re.compile(r"^[A-Za-z]{1,40}$")

#: phases in which a session owes a signal before it stops, and the signal it owes
GATED_PHASES: Mapping[str, str] = {"planning": "plan_ready", "implementing": "impl_done"}
#: Stop blocks per task between two signals; Claude Code itself overrides after 8 in a row
MAX_STOP_BLOCKS = 3
#: `StopFailure.error` when Claude Code has no credentials (seen with 2.1.332, never logged in)
AUTH_FAILED = "authentication_failed"
NOT_LOGGED_IN_ERROR = "not logged in: run `claude` and /login"
NOT_LOGGED_IN_HINT = "Run `claude` and type /login, then `lo-orch run` again."

SIGNAL_PHASES = ("plan_ready", "impl_done", "blocked")
#: the phase a signal must follow (``blocked`` may follow any active phase)
SIGNAL_FROM = {"plan_ready": "planning", "impl_done": "implementing"}

_LOCK_TIMEOUT = 5.0


class HookTarget(NamedTuple):
    """The task a hook event belongs to."""

    run_dir: Path  # the absolute .orchestration folder
    task: str
    by_env: bool  # identified by LO_ORCH_TASK/LO_ORCH_RUN_DIR (else by the payload's cwd)

    @property
    def status_path(self) -> Path:
        return self.run_dir / "status" / f"{self.task}.json"


class HookOutcome(NamedTuple):
    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""


QUIET = HookOutcome()


def now_iso() -> str:
    # same format as state.now_iso (sortable, parseable)
    return datetime.now(UTC).isoformat(timespec="microseconds")


# locating the task ----------------------------------------------------------------------


def locate(payload: Mapping[str, Any], env: Mapping[str, str]) -> HookTarget | None:
    """The managed task this event belongs to, or None for a session lo-orch does not run.

    ``LO_ORCH_TASK`` + ``LO_ORCH_RUN_DIR`` (the pane's environment) decide when both are
    set; otherwise the payload's ``cwd`` must lie in ``<repo>/.worktrees/<task>`` of a repo
    whose ``.orchestration/status/<task>.json`` exists. Either way the status file must
    exist, so a stale environment or a foreign ``.worktrees`` folder stays silent.
    """
    task = env.get("LO_ORCH_TASK", "")
    run_dir = env.get("LO_ORCH_RUN_DIR", "")
    if task and run_dir:
        target = HookTarget(Path(run_dir), task, by_env=True)
        if TASK_ID_RE.match(task) and Path(run_dir).is_absolute() and target.status_path.is_file():
            return target
        return None
    cwd = payload.get("cwd")
    if not isinstance(cwd, str) or not cwd.startswith("/"):
        return None
    parts = Path(cwd).parts
    # innermost first: a repository may itself sit in some other tool's .worktrees folder
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == WORKTREES_DIR and TASK_ID_RE.match(parts[i + 1]):
            target = HookTarget(Path(*parts[:i]) / ORCH_DIR, parts[i + 1], by_env=False)
            if target.status_path.is_file():
                return target
    return None


# the hook -------------------------------------------------------------------------------


def run_hook(event: str, raw: str, env: Mapping[str, str]) -> HookOutcome:
    """Record one hook event for its task; the answer to give Claude Code.

    Never raises: a failure is written to ``<run dir>/logs/hooks.log`` when the run is
    known and the hook stays silent, because a broken supervisor must not break the
    user's session.
    """
    if not EVENT_RE.match(event):
        return QUIET
    try:
        payload = json.loads(raw) if raw.strip() else None
    except ValueError:
        return QUIET
    if not isinstance(payload, dict):
        return QUIET
    try:
        target = locate(payload, env)
    except OSError:
        return QUIET
    if target is None:
        return QUIET
    try:
        return _handle(event, payload, target, env)
    except Exception:
        # The one catch-all: whatever broke is logged with its traceback, and Claude Code
        # must not show the user a hook error for lo-orch's own problem.
        _log_failure(target, event)
        return QUIET


def hook_main(event: str) -> int:
    """``lo-orch hook EVENT`` without click: read stdin, answer, return the exit code."""
    stdin = sys.stdin
    raw = "" if stdin is None or stdin.isatty() else stdin.read()
    outcome = run_hook(event, raw, os.environ)
    if outcome.stdout:
        sys.stdout.write(outcome.stdout)
        sys.stdout.flush()
    if outcome.stderr:
        sys.stderr.write(outcome.stderr)
        sys.stderr.flush()
    return outcome.exit_code


def _handle(
    event: str, payload: dict[str, Any], target: HookTarget, env: Mapping[str, str]
) -> HookOutcome:
    sid = payload.get("session_id")
    sid = sid if isinstance(sid, str) and sid else None
    now = now_iso()
    ledger: dict[str, Any] = {"hook_event": event, "task": target.task, "session_id": sid}
    reason: str | None = None

    with _flock(target.run_dir / "locks" / f"status-{target.task}.lock"):
        status = json.loads(target.status_path.read_text(encoding="utf-8"))
        if not isinstance(status, dict):
            return QUIET
        known = status.get("session_id")
        if not target.by_env and (sid is None or known != sid):
            # Found by cwd only: answer only the session lo-orch launched (--session-id),
            # never a user's own `claude` opened in the same worktree.
            return QUIET
        status["last_event"] = event
        status["last_event_at"] = now
        if known is None and sid is not None:
            status["session_id"] = sid

        if event == "UserPromptSubmit":
            # the delivery confirmation the supervisor waits for; the text itself is never
            # stored (a prompt can hold anything), only its size and a digest
            status["prompt_submitted_at"] = now
            prompt = payload.get("prompt")
            if isinstance(prompt, str):
                digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]
                ledger.update(prompt_chars=len(prompt), prompt_sha256=digest)
                status["last_prompt_sha256"] = digest
        elif event == "StopFailure":
            error = payload.get("error")
            ledger["error"] = error
            if error == AUTH_FAILED:
                status["error"] = NOT_LOGGED_IN_ERROR
        elif event == "Notification":
            ntype = payload.get("notification_type")
            ledger["notification_type"] = ntype
            message = payload.get("message")
            if isinstance(message, str):
                ledger["message"] = message[:200]
            if isinstance(ntype, str):
                status["last_notification"] = ntype
        elif event == "SessionEnd":
            ledger["reason"] = payload.get("reason")
        elif event == "SessionStart":
            ledger["source"] = payload.get("source")
        elif event == "Stop":
            active = payload.get("stop_hook_active") is True
            ledger["stop_hook_active"] = active
            reason = _stop_reason(status, active, target, env)
            ledger["decision"] = "block" if reason else "allow"
            if reason:
                status["stop_blocks"] = _int(status.get("stop_blocks")) + 1

        status["updated_at"] = now
        # the ledger line first: whoever sees the status change (the supervisor confirming
        # a delivery) finds its cause already logged
        _append_ledger(target.run_dir, "hook", ledger)
        _write_json_atomic(target.status_path, status)

    if reason:
        return HookOutcome(exit_code=2, stderr=reason + "\n")
    return QUIET


def _stop_reason(
    status: Mapping[str, Any], active: bool, target: HookTarget, env: Mapping[str, str]
) -> str | None:
    """The loop gate: why this session may not stop yet, or None to let it stop.

    A session asked to plan or implement that stops without signalling is sent back, once
    per stop (never while ``stop_hook_active``: it is already continuing because of a
    block) and at most ``MAX_STOP_BLOCKS`` times until it signals.
    """
    phase = status.get("phase")
    owed = GATED_PHASES.get(phase) if isinstance(phase, str) else None
    if owed is None or active:
        return None
    blocks = _int(status.get("stop_blocks"))
    if blocks >= MAX_STOP_BLOCKS:
        return None
    if env.get("LO_ORCH_BIN"):
        cmd, task_opt = "$LO_ORCH_BIN", ""
    else:
        cmd, task_opt = "lo-orch", f" --task {target.task}"
    work = (
        "write the plan the brief asks for"
        if owed == "plan_ready"
        else "finish the implementation and run the task's done-checks and tests"
    )
    return (
        f"loop-orchestrator: task {target.task} is in phase {phase} and has not reported "
        f"yet. Do not stop here: {work}, then run `{cmd} signal {owed}{task_opt}`. If you "
        f"cannot finish, run `{cmd} signal blocked{task_opt} --note \"<what is missing and "
        f"what you need>\"` instead. (Stop reminder {blocks + 1} of {MAX_STOP_BLOCKS}.)"
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# light-weight state writes (see the module docstring for why not state.Store) ----------


@contextlib.contextmanager
def _flock(path: Path, timeout: float = _LOCK_TIMEOUT) -> Iterator[None]:
    """Hold ``flock`` on ``path`` (the lock files ``Store.locked`` uses)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    msg = f"{path} is held by another process"
                    raise TimeoutError(msg) from None
                time.sleep(0.01)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Temp file in the same folder, fsync, rename over, fsync the folder."""
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.hook.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, text.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _append_ledger(run_dir: Path, event: str, fields: Mapping[str, Any]) -> None:
    """One line in ledger.jsonl, as ``Store.append_ledger`` writes it."""
    record = {"ts": now_iso(), "event": event, **fields}
    line = json.dumps(record, default=str) + "\n"
    with _flock(run_dir / "locks" / "ledger.lock"):
        fd = os.open(run_dir / "ledger.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)


def _log_failure(target: HookTarget, event: str) -> None:
    import traceback  # only on failure: keeps the hook's import time down

    with contextlib.suppress(OSError):
        logs = target.run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with (logs / "hooks.log").open("a", encoding="utf-8") as fh:
            fh.write(f"{now_iso()} hook {event} for task {target.task} failed:\n")
            fh.write(traceback.format_exc())


# signals ------------------------------------------------------------------------------


class SignalResult(NamedTuple):
    status: TaskStatus
    previous: str  # the phase before the signal
    changed: bool  # False: the task was already in that phase (a repeated signal)


def signal_task(run_dir: Path, phase: str, *, task: str, note: str | None = None) -> SignalResult:
    """Record a session's report (`lo-orch signal`): check the transition, update, log.

    ``plan_ready`` follows ``planning``, ``impl_done`` follows ``implementing``, and
    ``blocked`` (which needs a note) may follow any active phase. Repeating the signal a
    task is already in changes nothing. The check and the write are one step under the
    status lock.
    """
    from loop_orchestrator.state import ACTIVE_PHASES, Phase, RunDir, Store

    if phase not in SIGNAL_PHASES:
        msg = f"unknown signal {phase!r}"
        raise UsageError(
            msg,
            hint=f"Signal one of: {', '.join(SIGNAL_PHASES)}.",
        )
    if not TASK_ID_RE.match(task):
        msg = f"{task!r} is not a task id"
        raise UsageError(
            msg,
            hint="Pass --task with the task's id (see `lo-orch status`).",
        )
    note = note.strip() if note else None
    if phase == "blocked" and not note:
        msg = "`signal blocked` needs a note saying what is missing"
        raise UsageError(
            msg,
            hint='For example: lo-orch signal blocked --note "needs ownership of app/db.py"',
        )
    store = Store(RunDir(run_dir.parent))
    seen: dict[str, str] = {}

    def apply(status: TaskStatus) -> None:
        current = status.phase.value
        seen["previous"] = current
        if current == phase:
            seen["repeat"] = "yes"
            return
        allowed = (
            status.phase in ACTIVE_PHASES if phase == "blocked" else current == SIGNAL_FROM[phase]
        )
        if not allowed:
            raise StateError(
                f"task {task} is in phase {current}; `signal {phase}` "
                + (
                    "needs a task with a live session"
                    if phase == "blocked"
                    else f"only follows phase {SIGNAL_FROM[phase]}"
                ),
                hint=_signal_hint(current),
            )
        status.phase = Phase(phase)
        if note:
            status.note = note
        if phase == "blocked":
            status.error = note
        # a signal settles the Stop gate's count for the next phase
        status.stop_blocks = 0
        # logged before the status is written: the supervisor reacts to the status at once
        store.append_ledger("signal", task=task, phase=phase, previous=current, note=note)

    if not store.dirs.status_path(task).is_file():
        msg = f"no task {task!r} in the run at {store.dirs.root}"
        raise StateError(
            msg,
            hint="Check the task id with `lo-orch status`; inside a session it is $LO_ORCH_TASK.",
        )
    status = store.modify_status(task, apply)
    return SignalResult(status, seen["previous"], changed="repeat" not in seen)


def _signal_hint(current: str) -> str:
    if current == "planning":
        return "Finish the plan, then `signal plan_ready` (or `signal blocked --note ...`)."
    if current == "implementing":
        return "Finish the task, then `signal impl_done` (or `signal blocked --note ...`)."
    if current in ("pending", "launching"):
        return "Wait for the prompt that starts the task's planning or implementation."
    return (
        "Nothing is owed in this phase; the supervisor moves the task on. "
        "Check with `lo-orch status --json`."
    )
