"""The refs book: every ref value lo-orch set, and what it decided about refs, out of the
agents' reach (DESIGN.md section 10, "Refs it owns").

``Workspace`` writes here before and after each ref it moves and compares git with it before
each merge, at integration and at Gate 2. Names are strings: a full ref name
(``refs/heads/lo/<run>/staging``) for a ref whose value must match exactly, and other keys
the workspace defines (a task's start commit, the run's base). Nothing of it lives in
``.git`` (every agent's worktree shares it), so an agent cannot widen a task's base or claim
a branch as lo-orch's.

``RefBook`` is the interface; ``FileRefBook`` keeps it as one JSON file in the run's private
folder (``private.run_dir``). Whoever owns the supervisor's record may back it by that
record instead.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Protocol

from filelock import FileLock

from loop_orchestrator import private
from loop_orchestrator.errors import StateError

REFS_FILE = "refs.json"


class RefBook(Protocol):
    """What lo-orch recorded about refs: ``name -> sha``."""

    def get(self, name: str) -> str | None: ...

    def set(self, name: str, sha: str) -> None: ...

    def drop(self, name: str) -> None: ...

    def items(self) -> dict[str, str]: ...


class FileRefBook:
    """A ``RefBook`` in one JSON file, written atomically under a file lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = FileLock(str(path) + ".lock")
        self._thread_lock = threading.Lock()

    @classmethod
    def for_run(cls, repo: Path, run: str) -> FileRefBook:
        """The book of run ``run`` in ``repo``, in the run's private folder."""
        return cls(private.run_dir(repo, run) / REFS_FILE)

    def _read(self) -> dict[str, str]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(text)
        except ValueError as exc:
            msg = f"the refs book {self.path} is not valid JSON: {exc}"
            raise StateError(msg, hint="It is lo-orch's own record; restore it or start the "
                             "run afresh under another name.") from exc
        if not isinstance(data, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
            msg = f"the refs book {self.path} does not map names to shas"
            raise StateError(msg, hint="Restore it or start the run afresh under another name.")
        return data

    def _write(self, data: dict[str, str]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".refs-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(data, indent=1, sort_keys=True) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            Path(tmp).replace(self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get(self, name: str) -> str | None:
        with self._thread_lock, self._lock:
            return self._read().get(name)

    def set(self, name: str, sha: str) -> None:
        with self._thread_lock, self._lock:
            data = self._read()
            if data.get(name) != sha:
                data[name] = sha
                self._write(data)

    def drop(self, name: str) -> None:
        with self._thread_lock, self._lock:
            data = self._read()
            if data.pop(name, None) is not None:
                self._write(data)

    def items(self) -> dict[str, str]:
        with self._thread_lock, self._lock:
            return dict(self._read())
