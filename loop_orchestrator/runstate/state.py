"""Run state on disk: the ``.orchestration/`` layout, atomic writes, the ledger.

Every JSON state file is written atomically (temp file in the same folder, fsync,
``os.replace``, fsync of the folder) under a ``filelock`` lock, so a reader never sees a
half-written file and a crash leaves either the old or the new content. The ledger is
append-only, one JSON object per line, each append fsynced.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)

from loop_orchestrator.errors import StateError
from loop_orchestrator.files import (
    ORCH_DIR,
    WORKTREES_DIR,
    append_line,
    atomic_write_text,
    fsync_path,
    locked,
)

M = TypeVar("M", bound=BaseModel)

#: ledger path -> the lock this process's threads take before the ledger's file lock: a
#: file lock another thread holds is waited for by polling (50 ms a try), a thread lock
#: is handed over at once (the file lock then only ever waits for another process)
_LEDGER_LOCKS: dict[Path, threading.Lock] = {}
_LEDGER_LOCKS_LOCK = threading.Lock()


def _ledger_lock(path: Path) -> threading.Lock:
    with _LEDGER_LOCKS_LOCK:
        return _LEDGER_LOCKS.setdefault(path, threading.Lock())


class Phase(StrEnum):
    """A task's phase (contract, docs/design.md section 3)."""

    PENDING = "pending"
    LAUNCHING = "launching"
    PLANNING = "planning"
    PLAN_READY = "plan_ready"
    IMPLEMENTING = "implementing"
    IMPL_DONE = "impl_done"
    VERIFYING = "verifying"
    APPROVED = "approved"
    INTEGRATED = "integrated"
    BLOCKED = "blocked"
    FAILED = "failed"


#: phases in which a task holds a live session (counts against the concurrency cap)
ACTIVE_PHASES = frozenset(
    {
        Phase.LAUNCHING,
        Phase.PLANNING,
        Phase.PLAN_READY,
        Phase.IMPLEMENTING,
        Phase.IMPL_DONE,
        Phase.VERIFYING,
        Phase.APPROVED,
    }
)
#: phases after which nothing more happens to a task without a human
TERMINAL_PHASES = frozenset({Phase.INTEGRATED, Phase.BLOCKED, Phase.FAILED})


class RunPhase(StrEnum):
    """A run's state (contract, docs/design.md section 3)."""

    AWAITING_PLAN_APPROVAL = "awaiting_plan_approval"
    RUNNING = "running"
    AWAITING_MERGE_REVIEW = "awaiting_merge_review"
    MERGED = "merged"
    STOPPED = "stopped"


def now_iso() -> str:
    """The current UTC time as ISO 8601 with microseconds (sortable, parseable)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


class TaskStatus(BaseModel):
    """``status/<task>.json`` (contract). Extra keys are kept for forward compatibility."""

    model_config = ConfigDict(extra="allow")

    task: str
    phase: Phase = Phase.PENDING
    wave: int = 0
    updated_at: str = ""
    worktree: str | None = None
    branch: str | None = None
    pane_id: str | None = None
    session_id: str | None = None
    rework_count: int = 0
    last_event: str | None = None
    note: str | None = None
    error: str | None = None
    commit: str | None = None
    # extensions (optional, additive)
    last_event_at: str | None = None
    relaunches: int = 0
    nudged: bool = False
    #: "<phase>:<rework_count>" of the last prompt whose delivery was confirmed
    delivered: str | None = None
    #: "<phase>:<rework_count>" of a prompt being delivered, and when that began: after a
    #: crash, a UserPromptSubmit hook later than that shows the prompt arrived
    delivering: str | None = None
    delivery_started_at: str | None = None
    #: when the UserPromptSubmit hook last fired for this task
    prompt_submitted_at: str | None = None
    stop_blocks: int = 0
    #: rework rounds a person granted on top of ``max_rework`` (`lo-orch retry`)
    extra_rounds: int = 0
    #: the last Notification hook's type (``permission_prompt``, ``idle_prompt``)
    last_notification: str | None = None
    #: when the session's last turn ended (Stop hook); None while it works on a prompt
    turn_ended_at: str | None = None
    #: what the session waits for that only a person can give (a permission dialog:
    #: "a person: Claude Code asks permission to use Bash: <command>"); None otherwise
    waiting_for: str | None = None
    #: when the task entered its current phase (the age `lo-orch status` shows)
    phase_since: str | None = None
    #: heuristic findings the session disputes with its last impl_done,
    #: ``[{"check", "note"}]`` (judged by the next verification)
    disputes: list[dict[str, str]] = Field(default_factory=list)
    #: tokens and dollars of the task's session so far, from Claude Code's transcript
    #: (usage.Usage.as_json: the four token counts, cost_usd (None = unknown),
    #: cost_known, models, notes, measured); None before anything was measured
    usage: dict[str, Any] | None = None
    #: the same per rework round (key: the round number as a string)
    usage_rounds: dict[str, dict[str, Any]] | None = None
    #: the task's budget in dollars a person set with `lo-orch retry --budget`
    budget_usd: float | None = None
    #: the session is parked by a rate or usage limit until then (``waiting_limit``):
    #: not a stall, not a failure; lo-orch resumes it after that time
    limit_until: str | None = None
    #: why, in plain words (``rate_limit from the model API``, ``usage limit, resets ...``)
    limit_reason: str | None = None
    #: ``rate_limit`` (lo-orch resumes it) or ``usage_limit`` (Claude Code resumes by
    #: itself after the reset; lo-orch only if it did not)
    limit_kind: str | None = None
    #: where the task's session runs when it runs on a cluster: "host (ip, node)"
    node: str | None = None
    limit_hits: int = 0
    #: what the task's session did to the run's refs, which lo-orch put back: the rework
    #: round it owes for it (sent when no step runs for it); None otherwise
    tampered: str | None = None
    #: times the task's session went with its cluster node (not its agent's doing: counted
    #: apart from ``relaunches``, capped by ``[cluster] max_node_losses``)
    node_losses: int = 0
    #: review rounds it had (a person's comments at Gate 2 sent back): counted apart from
    #: verification rework, capped by ``[run] max_review_rounds``
    review_rounds: int = 0
    #: the round number (``rework_count``) of its latest review round, and the request it
    #: carries (docs/design.md section 11)
    review_round_at: int | None = None
    review_request: str | None = None
    #: the integrated commit after a review round whose dependents' done-checks ran again
    dependents_checked: str | None = None


class RunState(BaseModel):
    """``run.json``: the run's identity, its git anchors and the gate approvals."""

    model_config = ConfigDict(extra="allow")

    name: str
    phase: RunPhase = RunPhase.AWAITING_PLAN_APPROVAL
    repo: str
    base_ref: str
    base_sha: str
    staging_branch: str
    feature_branch: str
    plan_sha256: str
    plan_source: str | None = None
    plan_source_sha256: str | None = None
    approved_plan_sha256: str | None = None
    approved_at: str | None = None
    integration: dict[str, Any] | None = None
    reviewed_commit: str | None = None
    merged_commit: str | None = None
    merged_at: str | None = None
    #: tmux server (``-L`` socket name) the run's sessions live on; None = default server
    tmux_socket: str | None = None
    #: tasks left out of the reviewed result (blocked or failed, run continued without them)
    skipped_tasks: list[str] = Field(default_factory=list)
    #: the Ray cluster the run's sessions run on (None: local tmux)
    cluster: dict[str, Any] | None = None
    created_at: str = ""
    updated_at: str = ""
    #: the plan's name when this run is a numbered instance of it (run ``demo-2`` of plan
    #: name ``demo``: an earlier run's kept worktrees or branches hold ``demo``); omitted
    #: from run.json otherwise, so a run with its plan's name looks as it always did
    plan_name: str | None = None

    @model_serializer(mode="wrap")
    def _omit_plan_name(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("plan_name") is None:
            data.pop("plan_name", None)
        return data


class RunDir:
    """Paths of one repository's ``.orchestration/`` folder."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo.resolve()
        self.root = self.repo / ORCH_DIR

    @property
    def plan_json(self) -> Path:
        return self.root / "plan.json"

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def conflict_matrix(self) -> Path:
        return self.root / "conflict-matrix.md"

    @property
    def status_dir(self) -> Path:
        return self.root / "status"

    @property
    def briefs_dir(self) -> Path:
        return self.root / "briefs"

    @property
    def plans_dir(self) -> Path:
        return self.root / "plans"

    @property
    def reviews_dir(self) -> Path:
        return self.root / "reviews"

    @property
    def evidence_dir(self) -> Path:
        return self.root / "evidence"

    @property
    def ledger(self) -> Path:
        return self.root / "ledger.jsonl"

    @property
    def supervisor_lock(self) -> Path:
        return self.root / "supervisor.lock"

    @property
    def locks_dir(self) -> Path:
        return self.root / "locks"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def worktrees(self) -> Path:
        return self.repo / WORKTREES_DIR

    def status_path(self, task: str) -> Path:
        return self.status_dir / f"{task}.json"

    def brief_path(self, task: str) -> Path:
        return self.briefs_dir / f"{task}.md"

    def agent_plan_path(self, task: str) -> Path:
        return self.plans_dir / f"{task}.md"

    def review_path(self, task: str, round_no: int) -> Path:
        return self.reviews_dir / f"{task}-r{round_no}.md"

    def task_evidence_dir(self, task: str) -> Path:
        return self.evidence_dir / task

    def worktree_path(self, run: str, task: str) -> Path:
        """``.worktrees/<run>/<task>``: one folder per run, so two runs never share one."""
        return self.worktrees / run / task


class Store:
    """Reads and writes one repository's run state."""

    def __init__(self, rundir: RunDir) -> None:
        self.dirs = rundir

    @classmethod
    def for_repo(cls, repo: Path) -> Store:
        return cls(RunDir(repo))

    # locking -----------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self, name: str) -> Iterator[None]:
        """Hold the inter-process lock ``name`` (one per state file; ``files.locked``, which
        makes the folder)."""
        with locked(self.dirs.locks_dir / f"{name}.lock"):
            yield

    # run.json ----------------------------------------------------------------------
    def has_run(self) -> bool:
        return self.dirs.run_json.exists()

    def read_run(self) -> RunState:
        path = self.dirs.run_json
        if not path.exists():
            msg = f"no run in {self.dirs.repo}"
            raise StateError(
                msg,
                hint="Create one with `lo-orch plan FILE` (or `lo-orch plan --goal TEXT`).",
            )
        return _load(RunState, path)

    def write_run(self, state: RunState) -> None:
        state.updated_at = now_iso()
        with self.locked("run"):
            atomic_write_text(self.dirs.run_json, state.model_dump_json(indent=2) + "\n")

    def update_run(self, fn: Callable[[RunState], None]) -> RunState:
        """Read, change with ``fn`` and write run.json under its lock."""
        with self.locked("run"):
            state = self.read_run()
            fn(state)
            state.updated_at = now_iso()
            atomic_write_text(self.dirs.run_json, state.model_dump_json(indent=2) + "\n")
        return state

    # status/<task>.json ------------------------------------------------------------
    def read_status(self, task: str) -> TaskStatus:
        path = self.dirs.status_path(task)
        if not path.exists():
            msg = f"no status for task {task!r}"
            raise StateError(
                msg,
                hint="Check the task id with `lo-orch status`.",
            )
        return _load(TaskStatus, path)

    def write_status(self, status: TaskStatus) -> None:
        status.updated_at = now_iso()
        with self.locked(f"status-{status.task}"):
            self._write_status(status)

    def _write_status(self, status: TaskStatus) -> None:
        text = status.model_dump_json(indent=2) + "\n"
        atomic_write_text(self.dirs.status_path(status.task), text)

    def update_status(self, task: str, **changes: Any) -> TaskStatus:
        """Read-modify-write one task's status under its lock; returns the new status.

        Only fields of ``TaskStatus`` may be changed: a misspelt name (``phse=``) is a
        ``TypeError`` here, not a silently saved new key (status files still *read* unknown
        keys, so a newer lo-orch's files stay readable).
        """
        unknown = sorted(set(changes) - set(TaskStatus.model_fields))
        if unknown:
            msg = f"update_status: TaskStatus has no field(s) {', '.join(unknown)}"
            raise TypeError(msg)
        with self.locked(f"status-{task}"):
            status = self.read_status(task)
            data = status.model_dump()
            data.update(changes)
            data["updated_at"] = now_iso()
            new = TaskStatus.model_validate(data)
            self._write_status(new)
        return new

    def list_statuses(self) -> list[TaskStatus]:
        folder = self.dirs.status_dir
        if not folder.is_dir():
            return []
        return [_load(TaskStatus, p) for p in sorted(folder.glob("*.json"))]

    def list_statuses_lenient(self) -> list[TaskStatus]:
        """Every status file that reads as one (a garbled file is left out, not fatal)."""
        folder = self.dirs.status_dir
        found = []
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            with contextlib.suppress(StateError, OSError):
                found.append(_load(TaskStatus, path))
        return found

    # ledger.jsonl ------------------------------------------------------------------
    def append_ledger(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one event to the ledger (never rewritten) and fsync it."""
        return self._ledger(event, fields, durable=True)

    def append_ledger_unsynced(self, event: str, **fields: Any) -> dict[str, Any]:
        """``append_ledger`` without the fsync, for the lines on the path a session waits
        on (what it reported, the supervisor's reaction): the ledger is the record's
        published view, and the record holds what those lines say durably; a power cut
        may lose them (the last lines only), a killed process never does."""
        return self._ledger(event, fields, durable=False)

    def _ledger(self, event: str, fields: dict[str, Any], *, durable: bool) -> dict[str, Any]:
        record: dict[str, Any] = {"ts": now_iso(), "event": event, **fields}
        line = json.dumps(record, sort_keys=False, default=str) + "\n"
        with _ledger_lock(self.dirs.ledger), self.locked("ledger"):
            append_line(self.dirs.ledger, line.encode("utf-8"))
        if durable:  # after the lock: an unsynced line (a session waits on it) never
            fsync_path(self.dirs.ledger)  # waits behind a disk; this fsync covers it too
        return record

    def read_ledger(self) -> list[dict[str, Any]]:
        path = self.dirs.ledger
        if not path.exists():
            return []
        records = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                # a torn last line after a power cut: everything before it still counts
                continue
        return records


def _load(model: type[M], path: Path) -> M:
    try:
        return model.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        msg = f"{path} is not a valid {model.__name__}: {exc.errors()[0]['msg']}"
        raise StateError(
            msg,
            hint="It was changed by hand or by another version; restore it or start a new run.",
        ) from exc
