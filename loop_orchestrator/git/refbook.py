"""The refs book: every ref value lo-orch set, and what it decided about refs, out of the
agents' reach (docs/design.md section 10, "Refs it owns").

``Workspace`` writes here before and after each ref it moves and compares git with it before
each merge, at integration and at Gate 2, and the supervisor whenever a ref file changes.
Names are strings: a full ref name (``refs/heads/lo/<run>/staging``) for a ref whose value
must match exactly, and other keys the workspace defines (a task's start commit, the run's
base). Nothing of it lives in ``.git`` (every agent's worktree shares it), so an agent
cannot widen a task's base or claim a branch as lo-orch's.

``RefBook`` is the interface; ``FileRefBook`` keeps it as one JSON file in the run's private
folder (``private.run_dir``). Whoever owns the supervisor's record may back it by that
record instead.

A book belongs to one *instance* of a run: two runs planned under the same name
share the private folder, but not what they recorded. A book opened for an instance reads a
book stamped with another instance (or none) as empty, so nothing an earlier run of the
same name set or kept (a branch, a worktree it left dirty) is ever taken for this run's;
the first write replaces the earlier run's entries.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Protocol

from loop_orchestrator.errors import StateError
from loop_orchestrator.files import atomic_write_text, locked, stat_key
from loop_orchestrator.runstate import private

REFS_FILE = "refs.json"
#: the key that stamps a book with the run instance it belongs to
INSTANCE_KEY = "run-instance"


class RefBook(Protocol):
    """What lo-orch recorded about refs: ``name -> sha``."""

    def get(self, name: str) -> str | None: ...

    def set(self, name: str, sha: str) -> None: ...

    def drop(self, name: str) -> None: ...

    def change(self, set_: dict[str, str], drop: tuple[str, ...] = ()) -> None:
        """Set the names of ``set_`` and drop those of ``drop``, in one change."""

    def items(self) -> dict[str, str]: ...


class FileRefBook:
    """A ``RefBook`` in one JSON file, changed under a file lock and written atomically
    (read without the lock)."""

    def __init__(self, path: Path, instance: str | None = None) -> None:
        """``instance``: the run instance this book is for (None: whatever the file holds)."""
        self.path = path
        self.instance = instance
        self._lock_path = path.with_name(path.name + ".lock")
        #: the file's stat when last parsed, and what it held
        self._parsed: tuple[tuple[int, int, int, int] | None, dict[str, str]] = (None, {})
        self._thread_lock = threading.Lock()

    @classmethod
    def for_run(cls, repo: Path, run: str, instance: str | None = None) -> FileRefBook:
        """The book of run ``run`` (instance ``instance``) in ``repo``, in the run's private
        folder."""
        return cls(private.run_dir(repo, run) / REFS_FILE, instance)

    def _read(self) -> tuple[dict[str, str], str | None]:
        """This instance's entries (an earlier instance's book reads as empty) and the stamp
        to write back (this instance's; a book opened for no instance keeps the file's)."""
        data = self._read_file()
        stamp = data.pop(INSTANCE_KEY, None)
        if self.instance is None:
            return data, stamp
        return (data if stamp == self.instance else {}), self.instance

    def _read_file(self) -> dict[str, str]:
        """The file's names and values: parsed again only when its stat changed (it is
        replaced whole at each write, a new inode: the supervisor read it a dozen times a
        task, each a parse and a check of every entry)."""
        try:
            st = self.path.stat()
            if self._parsed[0] == stat_key(st):
                return dict(self._parsed[1])
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(text)
        except ValueError as exc:
            msg = f"the refs book {self.path} is not valid JSON: {exc}"
            raise StateError(
                msg,
                hint="It is lo-orch's own record; restore it or start the "
                "run afresh under another name.",
            ) from exc
        if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in data.items()
        ):
            msg = f"the refs book {self.path} does not map names to shas"
            raise StateError(msg, hint="Restore it or start the run afresh under another name.")
        self._parsed = (stat_key(st), dict(data))
        return data

    def _write(self, data: dict[str, str], stamp: str | None) -> None:
        if stamp is not None:
            data = {**data, INSTANCE_KEY: stamp}
        atomic_write_text(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n")

    def get(self, name: str) -> str | None:
        # a read takes no file lock: the file is only ever replaced whole (a rename), so a
        # reader sees one book or the next, never half of one
        with self._thread_lock:
            return self._read()[0].get(name)

    def set(self, name: str, sha: str) -> None:
        self.change({name: sha})

    def drop(self, name: str) -> None:
        self.change({}, (name,))

    def change(self, set_: dict[str, str], drop: tuple[str, ...] = ()) -> None:
        """Set the names of ``set_`` and drop those of ``drop``: one write of the book (a
        durable one each: a ref's move recorded in two was a fifth of what a merge wrote)."""
        if INSTANCE_KEY in set_ or INSTANCE_KEY in drop:
            msg = f"{INSTANCE_KEY!r} is the book's own key"
            raise ValueError(msg)
        with self._thread_lock, locked(self._lock_path):
            data, stamp = self._read()
            new = {k: v for k, v in data.items() if k not in drop} | set_
            if new != data:
                self._write(new, stamp)

    def items(self) -> dict[str, str]:
        with self._thread_lock:  # (a read: no file lock, see ``get``)
            return dict(self._read()[0])
