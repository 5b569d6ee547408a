"""The supervisor's calls to session actors on a Ray cluster: ``ActorCalls``, the base of
``RayBackend`` (``relay.py`` and ``ray_backend.py`` build on it, as the supervisor is built
in layers): what it holds, how an actor is named, found and called, and the bits of a
launch every layer uses (the task's refs, the files and paths sent to a node, moving the
local worktree to the node's work)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loop_orchestrator import resources
from loop_orchestrator.cluster import bundles
from loop_orchestrator.config import ClusterConfig
from loop_orchestrator.errors import GitError, TmuxError
from loop_orchestrator.git.gateway import git
from loop_orchestrator.runstate.state import RunDir
from loop_orchestrator.sessions import listener
from loop_orchestrator.sessions.backend import RunLike, run_socket
from loop_orchestrator.sessions.tmux import TmuxBackend

log = logging.getLogger(__name__)

PANE_RE = re.compile(r"^ray:([A-Za-z0-9][A-Za-z0-9_-]*):([0-9]+)$")
#: how long a launch may wait for a free slot and the node's checkout
LAUNCH_TIMEOUT = 300.0
#: how long one call to a session actor may take
CALL_TIMEOUT = 60.0
#: ignored files of a worktree sent to the node (each, and all together)
MAX_FILE = 1 << 20
MAX_FILES = 32 << 20


class ActorCalls:
    """What ``RayBackend`` holds and how it reaches its session actors."""

    def __init__(self, run: RunLike, cluster: ClusterConfig) -> None:
        self.run_name = run.name
        self.repo = Path(run.repo)
        self.rundir = RunDir(self.repo)
        self.cluster = cluster
        self.digest = hashlib.sha256(
            f"{run.repo}\0{run.name}\0{run.created_at}".encode()
        ).hexdigest()[:10]
        self.prefix = f"lo-{run.name}-{self.digest}-"
        # the supervisor's own window (`run --detach`) stays in local tmux
        self.local = TmuxBackend(run.name, socket=run_socket(run))
        self.socket = self.local.socket
        self.session = self.local.session
        self._handles: dict[str, Any] = {}
        self._lock = threading.RLock()
        self._task_locks: dict[str, threading.Lock] = {}
        self._relays: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._deliver: Callable[[listener.Request], None] | None = None
        self._note: Callable[..., None] | None = None
        self._labels: dict[str, dict[str, str]] | None = None
        self._nodes: dict[str, dict[str, Any]] = {}
        self._stopped = threading.Event()
        #: what was measured: launch seconds, bundle bytes, sync seconds per task
        self.stats: dict[str, list[tuple[str, float]]] = {}

    def _ray(self) -> Any:
        from loop_orchestrator.cluster.connect import connect

        return connect(self.cluster)

    def _stat(self, task: str, what: str, value: float) -> None:
        self.stats.setdefault(task, []).append((what, value))

    def _name(self, task: str, generation: int) -> str:
        return f"{self.prefix}{task}-g{generation}"

    @staticmethod
    def _parse(pane_id: str) -> tuple[str, int]:
        match = PANE_RE.match(pane_id)
        if not match:
            msg = f"{pane_id!r} is not a pane id of a cluster session"
            raise TmuxError(msg, hint="Pane ids look like ray:TASK:N; `lo-orch status`.")
        return match.group(1), int(match.group(2))

    def _handle(self, pane_id: str) -> Any | None:
        task, gen = self._parse(pane_id)
        with self._lock:
            found = self._handles.get(pane_id)
        if found is not None:
            return found
        ray = self._ray()
        try:
            handle = ray.get_actor(self._name(task, gen), namespace=self.cluster.namespace)
        except ValueError:
            return None
        with self._lock:
            self._handles[pane_id] = handle
        return handle

    def _call(self, pane_id: str, method: str, *args: Any, timeout: float = CALL_TIMEOUT) -> Any:
        ray = self._ray()
        handle = self._handle(pane_id)
        if handle is None:
            msg = f"the session {pane_id} is gone (its actor is not in the cluster)"
            raise TmuxError(
                msg, hint="`lo-orch status` shows the task; the supervisor relaunches it."
            )
        try:
            return ray.get(getattr(handle, method).remote(*args), timeout=timeout)
        except ray.exceptions.RayError as exc:
            msg = f"the session {pane_id} did not answer {method}: {type(exc).__name__}"
            raise TmuxError(
                msg, hint="Its node may be lost; the supervisor relaunches it."
            ) from exc

    def list_panes(self) -> dict[str, str]:
        """pane id -> task of this run's live session actors (found by name)."""
        ray = self._ray()
        newest: dict[str, int] = {}
        for name in ray.util.list_named_actors(all_namespaces=False):
            if not isinstance(name, str) or not name.startswith(self.prefix):
                continue
            task, sep, gen = name[len(self.prefix) :].rpartition("-g")
            if sep and gen.isdigit() and task:
                newest[task] = max(newest.get(task, 0), int(gen))
        return {f"ray:{task}:{gen}": task for task, gen in newest.items()}

    def _task_lock(self, task: str) -> threading.Lock:
        with self._lock:
            return self._task_locks.setdefault(task, threading.Lock())

    def _labels_of(self, task: str) -> dict[str, str]:
        if self._labels is None:
            from loop_orchestrator.runstate import create as runs

            try:
                plan, _ = runs.read_plan(self.rundir)
                self._labels = {t.id: dict(t.node_labels or {}) for t in plan.tasks}
            except Exception:
                self._labels = {}
        return self._labels.get(task, {})

    def _refs(self, task: str) -> tuple[str, str]:
        base = f"refs/lo-orch/cluster/{self.run_name}/{task}"
        return f"{base}/head", f"{base}/wip"

    def _paths(self, spec_cwd: Path) -> dict[str, str]:
        """What the node must rewrite in a launch or prompt: supervisor path -> its kind."""
        paths: dict[str, str] = {path: kind for kind, path in resources.install_paths().items()}
        for p in (spec_cwd, spec_cwd.resolve()):
            paths[str(p)] = "checkout"
        for p in (self.rundir.root, self.rundir.root.resolve()):
            paths[str(p)] = "run"
        return paths

    def _run_files(self, text: str) -> dict[str, bytes]:
        """Files of the run folder ``text`` names (a prompt, an env value), as bytes."""
        found: dict[str, bytes] = {}
        root = str(self.rundir.root)
        for match in re.finditer(re.escape(root) + r"/[^\s'\"`)\]]+", text):
            path = Path(match.group(0).rstrip(".,:;"))
            try:
                rel = path.relative_to(self.rundir.root).as_posix()
                if path.is_file() and path.stat().st_size <= MAX_FILE:
                    found[bundles.safe_relpath(rel)] = path.read_bytes()
            except (OSError, ValueError, GitError):
                continue
        return found

    def _status_file(self, task: str) -> dict[str, bytes]:
        """The task's published status (a view: the session's tools read its phase there)."""
        path = self.rundir.status_path(task)
        with contextlib.suppress(OSError):
            return {f"status/{task}.json": path.read_bytes()}
        return {}

    def _apply(self, task: str, worktree: Path, head: str, wip: str) -> None:
        branch = f"refs/heads/lo/{self.run_name}/{task}"
        on = git(worktree, "symbolic-ref", "--quiet", "HEAD", check=False).stdout.strip()
        if on != branch:
            log.warning("worktree not on its branch; node work not applied", extra={"task": task})
            return
        # the local worktree mirrors the node's; a person may still have edited it: what
        # differs from what lo-orch last put there is kept before it is replaced
        applied_ref = self._applied_ref(task)
        applied = git(
            self.repo, "rev-parse", "--verify", "--quiet", applied_ref, check=False
        ).stdout.strip()
        kept_ref = f"refs/lo-orch/cluster/{self.run_name}/{task}/kept/{time.time_ns()}"
        if bundles.keep_edits(self.repo, worktree, applied or None, kept_ref):
            log.warning(
                "the local worktree of a remote task had edits: kept before the sync",
                extra={"task": task, "ref": kept_ref},
            )
        git(worktree, "reset", "--quiet", "--hard", head)
        bundles.apply_tree(worktree, wip)
        git(self.repo, "update-ref", applied_ref, wip)

    def _applied_ref(self, task: str) -> str:
        """The commit whose tree lo-orch last put in the task's local worktree."""
        return f"refs/lo-orch/cluster/{self.run_name}/{task}/applied"

    def _placed(self, task: str, info: dict[str, Any]) -> None:
        self._nodes[task] = info
        if self._note is not None:
            with contextlib.suppress(Exception):
                self._note(task, node=f"{info['host']} ({info['ip']}, {info['node_id'][:8]})")
