"""The supervisor's calls to session actors on a Ray cluster: ``ActorCalls``, one
collaborator of ``RayBackend`` (``mirror.Mirror`` and ``relay.Relay`` are given one): the
run an actor belongs to, how an actor is named, found and called, one lock per task, and
what was measured."""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from pathlib import Path
from typing import Any

from loop_orchestrator.cluster.connect import connect
from loop_orchestrator.config import ClusterConfig
from loop_orchestrator.errors import PaneGoneError, TmuxError
from loop_orchestrator.runstate.state import RunDir
from loop_orchestrator.sessions.backend import RunLike

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
    """How ``RayBackend`` reaches the session actors of one run."""

    def __init__(self, run: RunLike, cluster: ClusterConfig) -> None:
        self.run_name = run.name
        self.repo = Path(run.repo)
        self.rundir = RunDir(self.repo)
        self.cluster = cluster
        self.digest = hashlib.sha256(
            f"{run.repo}\0{run.name}\0{run.created_at}".encode()
        ).hexdigest()[:10]
        self.prefix = f"lo-{run.name}-{self.digest}-"
        self._handles: dict[str, Any] = {}
        self.lock = threading.RLock()
        self._task_locks: dict[str, threading.Lock] = {}
        #: what was measured: launch seconds, bundle bytes, sync seconds per task
        self.stats: dict[str, list[tuple[str, float]]] = {}

    def ray(self) -> Any:
        """The ``ray`` module, connected to the run's cluster."""
        return connect(self.cluster)

    def stat(self, task: str, what: str, value: float) -> None:
        self.stats.setdefault(task, []).append((what, value))

    def name(self, task: str, generation: int) -> str:
        """The actor name of a task's session of ``generation``."""
        return f"{self.prefix}{task}-g{generation}"

    @staticmethod
    def parse(pane_id: str) -> tuple[str, int]:
        """``(task, generation)`` of a pane id ``ray:TASK:N``; TmuxError for another."""
        match = PANE_RE.match(pane_id)
        if not match:
            msg = f"{pane_id!r} is not a pane id of a cluster session"
            raise TmuxError(msg, hint="Pane ids look like ray:TASK:N; `lo-orch status`.")
        return match.group(1), int(match.group(2))

    def keep(self, pane_id: str, handle: Any) -> None:
        """Remember the actor of a session just started."""
        with self.lock:
            self._handles[pane_id] = handle

    def forget(self, pane_id: str) -> None:
        with self.lock:
            self._handles.pop(pane_id, None)

    def handle(self, pane_id: str) -> Any | None:
        """The actor holding ``pane_id`` (None: it is not in the cluster)."""
        task, gen = self.parse(pane_id)
        with self.lock:
            found = self._handles.get(pane_id)
        if found is not None:
            return found
        ray = self.ray()
        try:
            handle = ray.get_actor(self.name(task, gen), namespace=self.cluster.namespace)
        except ValueError:
            return None
        with self.lock:
            self._handles[pane_id] = handle
        return handle

    def call(self, pane_id: str, method: str, *args: Any, timeout: float = CALL_TIMEOUT) -> Any:
        """``method(*args)`` on the actor holding ``pane_id``; PaneGoneError when it is gone
        (not in the cluster, or it died), TmuxError when it does not answer."""
        ray = self.ray()
        handle = self.handle(pane_id)
        if handle is None:
            msg = f"the session {pane_id} is gone (its actor is not in the cluster)"
            raise PaneGoneError(
                msg, hint="`lo-orch status` shows the task; the supervisor relaunches it."
            )
        try:
            return ray.get(getattr(handle, method).remote(*args), timeout=timeout)
        except ray.exceptions.RayActorError as exc:
            msg = f"the session {pane_id} is gone (its actor died): {type(exc).__name__}"
            raise PaneGoneError(
                msg, hint="Its node may be lost; the supervisor relaunches it."
            ) from exc
        except ray.exceptions.RayError as exc:
            msg = f"the session {pane_id} did not answer {method}: {type(exc).__name__}"
            raise TmuxError(
                msg, hint="Its node may be lost; the supervisor relaunches it."
            ) from exc

    def list_panes(self) -> dict[str, str]:
        """pane id -> task of this run's live session actors (found by name)."""
        ray = self.ray()
        newest: dict[str, int] = {}
        # the run's namespace by name, as get_actor asks: this process may have joined the
        # cluster in another one first (a connection is made once per process)
        for actor in ray.util.list_named_actors(all_namespaces=True):
            if not isinstance(actor, dict) or actor.get("namespace") != self.cluster.namespace:
                continue
            name = actor.get("name")
            if not isinstance(name, str) or not name.startswith(self.prefix):
                continue
            task, sep, gen = name[len(self.prefix) :].rpartition("-g")
            if sep and gen.isdigit() and task:
                newest[task] = max(newest.get(task, 0), int(gen))
        return {f"ray:{task}:{gen}": task for task, gen in newest.items()}

    def task_lock(self, task: str) -> threading.Lock:
        """The lock held while a task's worktree is moved to or from its node."""
        with self.lock:
            return self._task_locks.setdefault(task, threading.Lock())
