"""The supervisor's own record of a run: a hash-chained, authenticated journal.

What a run *is* (the approved plan, every task's phase and round, which prompt each session
received, the verdicts bound to commits, the integration and the gates; the ref values it
set are in ``refbook``, beside it) lives here, not in ``.orchestration/``: that folder is
reachable by every agent, so ``status/*.json``, ``run.json`` and the ledger are only the
*published view* of this record. The supervisor writes the view from the record; it never
reads the view back as truth, and an edit to the view is reported and overwritten
(``Record.check_view``).

The journal is kept in the run's private folder (``private.run_dir``: outside the
repository, ``0700``, named in no agent's environment or brief, hidden by the sandbox).
Each line is one JSON entry ``{"seq", "ts", "kind", "data", "mac"}`` whose ``mac`` is an
HMAC-SHA256, under a key kept beside the journal, of the previous line's ``mac`` and this
entry: a line edited, inserted, removed or reordered breaks the chain and
``RecordTamperedError`` names the line. Without the sandbox an agent running as the same
user can still find the key; the record then still makes every other protection hold
(nothing is read back from ``.orchestration/``), and an agent that forges the journal as
well has to know the format — the sandbox closes that door (README, "Trust boundary").

Entries are appended under a file lock (the supervisor, ``approve``, ``retry`` and
``merge`` may write) and fsynced before the call that appended them returns; a torn last
line (a power cut mid-append) is dropped. The fsync waits outside the record's lock (a
``step`` appends under the lock and syncs once after it is let go), so one thread's fsync
never holds up another's read of the record, and appends written while an fsync ran are
made durable together by the next one (group commit).
"""

from __future__ import annotations

import contextlib
import copy
import enum
import hashlib
import hmac
import json
import logging
import os
import secrets
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loop_orchestrator.errors import StateError
from loop_orchestrator.files import append_line, atomic_write_text, fsync_path, locked, stat_key
from loop_orchestrator.runstate import comments as review_comments
from loop_orchestrator.runstate import private
from loop_orchestrator.runstate.state import (
    RunDir,
    RunState,
    TaskStatus,
    now_iso,
)

log = logging.getLogger(__name__)

KEY_FILE = "key"
JOURNAL_FILE = "journal.jsonl"
LOCK_FILE = "journal.lock"
_GENESIS = "0" * 64


#: values a copy may share with the record: nothing can change them in place
_IMMUTABLE = (str, int, float, bool, type(None), enum.Enum)


def status_copy(status: TaskStatus) -> TaskStatus:
    """A copy of ``status`` that no change to it reaches the record through: its fields and
    extras copied, the containers among them (disputes, usage) copied deep, the rest shared
    (strings, numbers, enums cannot change). A deep copy of every field (``model_copy(deep=
    True)``) cost 100 us, five times per hook event the supervisor answers."""
    new = status.model_copy()  # (a new __dict__, extras and fields-set, nothing validated)
    for values in (new.__dict__, new.__pydantic_extra__ or {}):
        for key, value in values.items():
            if not isinstance(value, _IMMUTABLE):
                values[key] = copy.deepcopy(value)
    return new


class RecordTamperedError(StateError):
    """The supervisor's journal does not verify: someone edited it."""


class NoRecordError(StateError):
    """No approved run is recorded for this repository and run name."""


@dataclass
class RecordedVerdict:
    """The journal's record of a verdict the supervisor computed, bound to one commit (the
    verdict itself, with its findings, is ``verify.models.Verdict``)."""

    commit: str
    passed: bool
    digest: str  # sha256 of the verdict file it wrote as evidence


@dataclass
class Folded:
    """The state the journal adds up to."""

    run: RunState | None = None
    tasks: dict[str, TaskStatus] = field(default_factory=dict)
    verdicts: dict[str, dict[str, RecordedVerdict]] = field(default_factory=dict)
    approved_plan_sha256: str | None = None
    #: a person's messages for sessions (`lo-orch send`): id -> (task, text), until delivered
    messages: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: review comments at Gate 2 and the requests that sent them back
    comments: review_comments.Comments = field(default_factory=review_comments.Comments)


def _canonical(entry: Mapping[str, Any]) -> bytes:
    return json.dumps(entry, sort_keys=True, separators=(",", ":"), default=str).encode()


def _mac(key: bytes, prev: str, entry: Mapping[str, Any]) -> str:
    return hmac.new(key, prev.encode() + b"\n" + _canonical(entry), hashlib.sha256).hexdigest()


def _file_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Record:
    """One run's journal, its folded state and its published view."""

    def __init__(self, repo: Path, run: str) -> None:
        self.repo = repo.resolve()
        self.run_name = run
        self.dirs = RunDir(self.repo)
        self.folder = private.run_dir(self.repo, run)
        self.path = self.folder / JOURNAL_FILE
        self._lock_path = self.folder / LOCK_FILE
        #: the supervisor's threads share one Record: one reader/writer at a time
        self._mutex = threading.RLock()
        self.state = Folded()
        self._seq = 0
        self._last_mac = _GENESIS
        self._offset = 0
        #: sha256 of the text last published per view file (to see edits by others)
        self._published: dict[Path, str] = {}
        #: view file -> its stat when it was last read and found as published: unchanged
        #: since (same inode, size, mtime and ctime; nobody but the kernel sets a ctime),
        #: it is not read again to see whether someone edited it
        self._seen_as_published: dict[Path, tuple[tuple[int, int, int, int], str]] = {}
        #: view files found edited by someone else when they were about to be rewritten
        self._edited: set[str] = set()
        #: tasks changed with ``publish=False`` whose status file is not rewritten yet
        self._unpublished: set[str] = set()
        #: task -> a copy of its status, shared by ``tasks()`` until the task changes
        self._copies: dict[str, TaskStatus] = {}
        #: tasks whose status changed since ``take_changed`` was last asked
        self._changed: set[str] = set()
        #: how many ``step``s the thread holding ``_mutex`` is in (0: none)
        self._steps = 0
        #: journal bytes known durable (fsynced); one fsync at a time (``sync``)
        self._synced = 0
        self._sync_lock = threading.Lock()
        self._key = self._load_key()

    # opening --------------------------------------------------------------------------
    @classmethod
    def open(cls, repo: Path, run: str) -> Record:
        """The record of ``run``; raises NoRecordError when Gate 1 never approved it."""
        rec = cls(repo, run)
        if not rec.path.exists():
            msg = f"no approval of run {run!r} is recorded for {rec.repo}"
            raise NoRecordError(
                msg,
                hint="Review the plan (`lo-orch status`), then approve it with `lo-orch approve`.",
            )
        rec.refresh()
        if rec.state.run is None:
            msg = f"the record of run {run!r} holds no approved run"
            raise NoRecordError(msg, hint="Approve the plan again with `lo-orch approve`.")
        return rec

    @classmethod
    def exists(cls, repo: Path, run: str) -> bool:
        return (private.run_dir(repo, run, create=False) / JOURNAL_FILE).exists()

    def _load_key(self) -> bytes:
        path = self.folder / KEY_FILE
        try:
            key = path.read_bytes()
        except FileNotFoundError:
            key = b""
        if len(key) >= 32:
            return key
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            key = secrets.token_bytes(32)
            os.write(fd, key)
            os.fsync(fd)
        finally:
            os.close(fd)
        return key

    # reading --------------------------------------------------------------------------
    def refresh(self) -> bool:
        """Read what others appended since the last read; True when something was new."""
        with self._mutex:
            return self._refresh()

    def _refresh(self) -> bool:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return False
        if size == self._offset:
            return False
        with self.path.open("rb") as fh:
            fh.seek(self._offset)
            data = fh.read()
        changed = False
        consumed = 0
        for raw in data.splitlines(keepends=True):
            if not raw.endswith(b"\n"):
                break  # an append in progress, or torn by a crash: read it next time
            consumed += len(raw)
            if not raw.strip():
                continue
            self._apply_line(raw)
            changed = True
        self._offset += consumed
        if changed:
            self._expect_foreign_views()
        return changed

    def _expect_foreign_views(self) -> None:
        """Another process (a person's `lo-orch retry`, `merge`) appended and published: what
        it wrote is what the record now says, so that is what the view files should hold
        (not an edit to report)."""
        for path in list(self._published):
            if path == self.dirs.run_json and self.state.run is not None:
                body = self.state.run.model_dump_json(indent=2)
            elif path.parent == self.dirs.status_dir and path.stem in self.state.tasks:
                body = self.state.tasks[path.stem].model_dump_json(indent=2)
            else:
                continue
            self._published[path] = _file_digest(body + "\n")

    def _apply_line(self, raw: bytes) -> None:
        where = f"{self.path} entry {self._seq + 1}"
        try:
            entry = json.loads(raw)
            mac = entry.pop("mac")
        except (ValueError, KeyError, AttributeError):
            msg = f"{where} is not a journal entry"
            raise RecordTamperedError(msg, hint=_TAMPER_HINT) from None
        if entry.get("seq") != self._seq + 1 or not hmac.compare_digest(
            str(mac), _mac(self._key, self._last_mac, entry)
        ):
            msg = f"{where} does not verify: the supervisor's record was changed"
            raise RecordTamperedError(msg, hint=_TAMPER_HINT)
        self._seq += 1
        self._last_mac = str(mac)
        self._fold(entry["kind"], entry.get("data") or {})

    # writing --------------------------------------------------------------------------
    def append(self, kind: str, **data: Any) -> None:
        """Append one entry (after reading anything others appended first); durable when
        this returns, or, inside a ``step``, when the step ends."""
        self._append(kind, data)

    def _append(
        self, kind: str, data: dict[str, Any], folded: tuple[int, TaskStatus] | None = None
    ) -> None:
        """``append``; ``folded``: (the journal's length it was computed at, the task's
        status with this ``task`` entry folded in), used instead of folding again when
        nobody appended since (else the entry is folded onto what they wrote)."""
        with self.step(), locked(self._lock_path):
            self._refresh()
            entry = {"seq": self._seq + 1, "ts": now_iso(), "kind": kind, "data": data}
            mac = _mac(self._key, self._last_mac, entry)
            line = json.dumps({**entry, "mac": mac}, default=str).encode() + b"\n"
            append_line(self.path, line, mode=0o600)
            self._seq += 1
            self._last_mac = mac
            self._offset += len(line)
            if folded is not None and folded[0] == self._seq - 1:
                self.state.tasks[str(data["task"])] = folded[1]
                self._folded_task(str(data["task"]))
            else:
                self._fold(kind, json.loads(json.dumps(data, default=str)))

    @contextlib.contextmanager
    def step(self, *, durable: bool = True) -> Iterator[None]:
        """Hold the record across a read and the change it decides (one step for other
        threads); what the step appended is fsynced once the lock is let go, before the
        step returns (the outermost step syncs). ``durable=False``: not synced now, but
        with the next append that is (an fsync covers everything written before it)."""
        with self._mutex:
            self._steps += 1
            try:
                yield
            finally:
                self._steps -= 1
                outermost = self._steps == 0
        if outermost and durable:
            self.sync()

    def sync(self) -> None:
        """Make every entry written so far durable: one fsync, unless one that began after
        the last write already did (then it only waits for that one)."""
        # ``_offset`` is read without the record's lock (a thread in a step may call this
        # while it holds that lock, and waits for ``_sync_lock`` meanwhile): it only ever
        # grows, and past bytes already written
        wanted = self._offset
        with self._sync_lock:
            if self._synced >= wanted:
                return
            upto = self._offset  # (what others wrote meanwhile rides along)
            fsync_path(self.path)
            self._synced = upto

    def _fold(self, kind: str, data: Mapping[str, Any]) -> None:
        """Add one entry to the state, and note which tasks it changed."""
        _fold(self.state, kind, data)
        if kind == "task":
            self._folded_task(str(data["task"]))
        elif kind == "approved":
            self._copies.clear()
            self._changed.update(self.state.tasks)

    def _folded_task(self, task: str) -> None:
        self._copies.pop(task, None)
        self._changed.add(task)

    # tasks ----------------------------------------------------------------------------
    @property
    def run(self) -> RunState:
        assert self.state.run is not None
        return self.state.run

    def task(self, task: str) -> TaskStatus:
        """A copy of the task's recorded status."""
        with self._mutex:
            return status_copy(self._status(task))

    def _status(self, task: str) -> TaskStatus:
        """The task's recorded status itself (not a copy: read it, never change it)."""
        try:
            return self.state.tasks[task]
        except KeyError:
            msg = f"no task {task!r} in run {self.run_name!r}"
            raise StateError(msg, hint="Check the task id with `lo-orch status`.") from None

    def tasks(self) -> dict[str, TaskStatus]:
        """Every task's status: copies shared by every caller until the task changes (read
        them, never change them), so asking again costs no copy of an unchanged task."""
        with self._mutex:
            copies = self._copies
            for t, s in self.state.tasks.items():
                if t not in copies:
                    copies[t] = status_copy(s)
            return dict(copies)

    def take_changed(self) -> set[str]:
        """The tasks whose status changed (in this process or, once read, another) since the
        last call; the supervisor's loop looks again at those only."""
        with self._mutex:
            changed, self._changed = self._changed, set()
            return changed

    def has_changed(self) -> bool:
        """Whether a task changed since ``take_changed`` was last asked."""
        return bool(self._changed)

    def update_task(
        self, task: str, *, durable: bool = True, publish: bool = True, **changes: Any
    ) -> TaskStatus:
        """Record a change of one task and publish its status file; the new status.

        A field the status model does not have is an error (a typo must not be stored).
        ``durable=False``: fsynced with the next append that is (``step``).
        ``publish=False``: the status file is rewritten later, by ``publish_pending`` or the
        task's next published change (a session's activity: a file written per tool call
        was a third of what a hook cost the supervisor).
        A change to what the task holds already is no change: nothing is appended (a
        delivery's end marked by its session's hook and by the delivery itself).
        """
        data = _changes(TaskStatus, "status", changes)
        with self.step(durable=durable):
            self._refresh()
            current = self._status(task)
            if "phase" in data and data["phase"] != current.phase.value:
                data["phase_since"] = data["updated_at"]
            # folded as a replay folds it (the data as the journal holds it): a bad value
            # is refused here, before anything is written
            wire = json.loads(json.dumps(data, default=str))
            folded = TaskStatus.model_validate({**current.model_dump(), **wire})
            if any(getattr(folded, k) != getattr(current, k) for k in data if k != "updated_at"):
                self._append("task", {"task": task, "set": data}, (self._seq, folded))
            elif not (publish and task in self._unpublished):
                return self.task(task)  # (what it holds already: no entry, no file written)
            new = self.task(task)
            if publish:
                self.publish_task(new)
                self._unpublished.discard(task)
            else:
                self._unpublished.add(task)
        return new

    def publish_pending(self) -> None:
        """Rewrite the status files of the tasks changed without being published."""
        with self._mutex:
            for task in sorted(self._unpublished):
                self.publish_task(self._status(task))
            self._unpublished.clear()

    def update_run(self, **changes: Any) -> RunState:
        """Record a change of the run and publish run.json; the new run state."""
        data = _changes(RunState, "run", changes)
        with self.step():
            RunState.model_validate({**self.run.model_dump(), **data})
            self.append("run", set=data)
            self.publish_run()
            return self.run.model_copy(deep=True)

    def pending_messages(self) -> dict[str, tuple[str, str]]:
        """A person's messages not yet delivered: id -> (task, text), oldest first."""
        with self._mutex:
            return dict(self.state.messages)

    def comments(self) -> review_comments.Comments:
        """A copy of the review comments and requests as recorded."""
        with self._mutex:
            return self.state.comments.model_copy(deep=True)

    # verdicts ------------------------------------------------------------------------
    def record_verdict(self, task: str, commit: str, passed: bool, evidence_text: str) -> None:
        self.append(
            "verdict", task=task, commit=commit, passed=passed, digest=_file_digest(evidence_text)
        )

    def verdict(self, task: str, commit: str) -> RecordedVerdict | None:
        return self.state.verdicts.get(task, {}).get(commit)

    def verdict_matches(self, task: str, commit: str, evidence_text: str) -> bool:
        """Whether ``evidence_text`` is exactly the verdict file recorded for ``commit``."""
        v = self.verdict(task, commit)
        return v is not None and hmac.compare_digest(v.digest, _file_digest(evidence_text))

    # the published view ---------------------------------------------------------------
    def publish_task(self, status: TaskStatus) -> None:
        self._publish(self.dirs.status_path(status.task), status.model_dump_json(indent=2))

    def publish_run(self) -> None:
        self._publish(self.dirs.run_json, self.run.model_dump_json(indent=2))

    def _publish(self, path: Path, body: str) -> None:
        """Write one view file; an edit by someone else since our last write is noted
        first (``check_view`` reports it), so overwriting it never hides it. Not fsynced:
        the journal is durable, and the view is rebuilt from it at every start."""
        text = body + "\n"
        with self._mutex:
            if path in self._published and self._edited_since(path, self._published[path]):
                self._edited.add(str(path.relative_to(self.dirs.root)))
            self._wrote(path, text, atomic_write_text(path, text, durable=False))

    def _wrote(self, path: Path, text: str, written: os.stat_result) -> None:
        """Remember ``text`` as what ``path`` holds, and the stat its file had once in place
        (read through the descriptor that wrote it: an edit since changes the stat at the
        path). The next write then compares stats, not the file read back: a view file was
        read and hashed at every change of its task."""
        digest = _file_digest(text)
        self._published[path] = digest
        self._seen_as_published[path] = (stat_key(written), digest)

    def _edited_since(self, path: Path, digest: str) -> bool:
        """Whether the view file ``path`` differs from what was published (``digest``): read
        only when its stat changed since it was last found as published."""
        seen = _stat_key(path)
        if seen is not None and self._seen_as_published.get(path) == (seen, digest):
            return False
        if self._on_disk_digest(path) != digest:
            return True
        if seen is not None:
            self._seen_as_published[path] = (seen, digest)
        return False

    @staticmethod
    def _on_disk_digest(path: Path) -> str:
        try:
            return _file_digest(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            return ""

    def publish_all(self) -> list[str]:
        """Rewrite every view file from the record; the files that differed (edited).
        Under the record's lock: a session's activity recorded meanwhile (``publish=False``)
        is either in what is written here or still pending after it, never dropped."""
        with self._mutex:
            edited = []
            views = [(self.dirs.run_json, self.run.model_dump_json(indent=2) + "\n")]
            views += [
                (self.dirs.status_path(t), s.model_dump_json(indent=2) + "\n")
                for t, s in sorted(self.state.tasks.items())
            ]
            for path, text in views:
                try:
                    on_disk = path.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    on_disk = None
                if on_disk is not None and _view_differs(on_disk, text):
                    edited.append(str(path.relative_to(self.dirs.root)))
                if on_disk != text:
                    self._wrote(path, text, atomic_write_text(path, text, durable=False))
                else:
                    self._published[path] = _file_digest(text)
            self._unpublished.clear()  # (every task's file is the record's now)
            return edited

    def check_view(self) -> list[str]:
        """View files changed by someone else since they were published (including edits
        a later publish overwrote); republished."""
        with self._mutex:
            edited = set(self._edited)
            self._edited.clear()
            for path, digest in list(self._published.items()):
                if self._edited_since(path, digest):
                    edited.add(str(path.relative_to(self.dirs.root)))
            if edited:
                self.publish_all()
            return sorted(edited)


def _changes(
    model: type[TaskStatus] | type[RunState], what: str, changes: Mapping[str, Any]
) -> dict[str, Any]:
    """``changes`` as journal data (enums as their values, a new ``updated_at``); a field
    ``model`` does not have is an error, so a typo is never stored."""
    unknown = sorted(set(changes) - set(model.model_fields))
    if unknown:
        msg = f"unknown {what} field(s) {', '.join(unknown)}"
        raise TypeError(msg)
    data = {k: (v.value if hasattr(v, "value") else v) for k, v in changes.items()}
    data["updated_at"] = now_iso()
    return data


def _stat_key(path: Path) -> tuple[int, int, int, int] | None:
    """What changes with any write or rename of a file (None: not there)."""
    try:
        return stat_key(path.stat())
    except OSError:
        return None


def _view_differs(on_disk: str, text: str) -> bool:
    """Whether a view file says something else than the record (``updated_at`` aside)."""
    try:
        a, b = json.loads(on_disk), json.loads(text)
    except ValueError:
        return True
    if not isinstance(a, dict) or not isinstance(b, dict):
        return True
    a.pop("updated_at", None)
    b.pop("updated_at", None)
    return bool(a != b)


def _fold(state: Folded, kind: str, data: Mapping[str, Any]) -> None:
    if kind == "approved":
        state.run = RunState.model_validate(data["run"])
        state.approved_plan_sha256 = data["run"].get("approved_plan_sha256")
        state.tasks = {t["task"]: TaskStatus.model_validate(t) for t in data.get("tasks", [])}
        state.verdicts = {}
        state.messages = {}
        state.comments = review_comments.Comments()
    elif kind == "run" and state.run is not None:
        state.run = RunState.model_validate({**state.run.model_dump(), **data["set"]})
    elif kind == "task":
        task = data["task"]
        old = state.tasks.get(task)
        base = old.model_dump() if old else {"task": task}
        state.tasks[task] = TaskStatus.model_validate({**base, **data["set"]})
    elif kind == "verdict":
        state.verdicts.setdefault(data["task"], {})[data["commit"]] = RecordedVerdict(
            data["commit"], bool(data["passed"]), str(data["digest"])
        )
    elif kind == "message":
        state.messages[str(data["id"])] = (str(data["task"]), str(data["text"]))
    elif kind == "message_done":
        state.messages.pop(str(data["id"]), None)
    else:  # other kinds (notes) change nothing
        review_comments.fold(state.comments, kind, data)


def start(repo: Path, run: RunState, tasks: list[TaskStatus]) -> Record:
    """Begin the record of a run at Gate 1 (``lo-orch approve``).

    An earlier journal of the same run name that recorded another plan is archived
    beside it (never deleted); approving the same plan again changes nothing.
    """
    rec = Record(repo, run.name)
    if rec.path.exists():
        with contextlib.suppress(RecordTamperedError):
            rec.refresh()
        if (
            rec.state.run is not None
            and rec.state.approved_plan_sha256 == run.approved_plan_sha256
            and rec.state.run.created_at == run.created_at
        ):
            return rec
        archived = rec.folder / f"journal-{now_iso().replace(':', '')}.jsonl"
        rec.path.replace(archived)
        log.info("earlier journal archived", extra={"path": str(archived)})
        rec = Record(repo, run.name)
    rec.append(
        "approved",
        run=run.model_dump(mode="json"),
        tasks=[t.model_dump(mode="json") for t in tasks],
    )
    return rec


_TAMPER_HINT = (
    "Nothing more is trusted from this run. Inspect the journal; to start over, "
    "`lo-orch cleanup` and plan the run again."
)
