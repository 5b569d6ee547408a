"""The supervisor's calls to session actors on a Ray cluster: ``ActorCalls``, one
collaborator of ``RayBackend`` (``mirror.Mirror`` and ``relay.Relay`` are given one): the
run an actor belongs to, how an actor is named, found and called, one lock per task, and
what was measured."""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

from loop_orchestrator.cluster import loss
from loop_orchestrator.cluster.connect import connect
from loop_orchestrator.config import ClusterConfig
from loop_orchestrator.errors import ClusterError, PaneGoneError, TmuxError
from loop_orchestrator.runstate.state import RunDir
from loop_orchestrator.sessions.backend import RunLike

log = logging.getLogger(__name__)

PANE_RE = re.compile(r"^ray:([A-Za-z0-9][A-Za-z0-9_-]*):([0-9]+)$")
#: how long a launch may wait for a free slot and the node's checkout
LAUNCH_TIMEOUT = 300.0
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
        #: task -> the Ray node id its session runs on (``Relay.placed``)
        self.node_ids: dict[str, str] = {}
        #: since when each session has not answered (monotonic)
        self.silences = loss.Silences()
        #: panes judged lost (``loss.verdict``): they stay lost whatever answers later
        self.lost: set[str] = set()
        #: how long a silent session may stay silent before it counts as lost
        self.grace = cluster.loss_grace_seconds
        #: how long one call to a session actor may take
        self.call_timeout = cluster.call_timeout_seconds

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
        """The actor holding ``pane_id`` (None: it is not in the cluster). Ray's errors
        (the cluster not answering) are raised as they are: ``ask`` judges them."""
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

    def ask(
        self, pane_id: str, method: str, *args: Any, timeout: float | None = None
    ) -> tuple[loss.Met, Any]:
        """``method(*args)`` on the actor holding ``pane_id``: what the call met and its
        answer (None unless answered). No exception of Ray's comes out."""
        if pane_id in self.lost:
            return loss.Met.NAME_GONE, None
        ray = self.ray()
        try:
            handle = self.handle(pane_id)
            if handle is None:
                return loss.Met.NAME_GONE, None
            got = ray.get(
                getattr(handle, method).remote(*args),
                timeout=self.call_timeout if timeout is None else timeout,
            )
        except (ray.exceptions.RayError, ConnectionError, RuntimeError, ValueError) as exc:
            return loss.kind_of(exc, ray.exceptions), None
        self.silences.answered(pane_id)  # a silence before this answer is over
        return loss.Met.ANSWERED, got

    def judge(self, pane_id: str, met: loss.Met) -> loss.Verdict:
        """What ``met`` (of a call to ``pane_id``) means (``loss.verdict``). A session
        judged lost is forgotten and its actor ended, should it answer again (a network
        cut healed): its relaunch is the task's session from now on."""
        if met is loss.Met.ANSWERED:
            return "live"
        task, _ = self.parse(pane_id)
        silent_for = self.silences.unanswered(pane_id, time.monotonic())
        cluster_answers, node_alive = self._node_alive(self.node_ids.get(task))
        found = loss.verdict(
            met,
            cluster_answers=cluster_answers,
            node_alive=node_alive,
            silent_for=silent_for,
            grace=self.grace,
        )
        if found == "lost" and pane_id not in self.lost:
            log.warning(
                "remote session lost", extra={"pane": pane_id, "met": met.value, "task": task}
            )
            self.end(pane_id)
            with self.lock:
                self.lost.add(pane_id)
            self.silences.answered(pane_id)  # nothing more to wait for
        return found

    def end(self, pane_id: str) -> None:
        """Forget ``pane_id``'s actor and have Ray end it (never raises)."""
        with self.lock:
            handle = self._handles.pop(pane_id, None)
        if handle is None:
            return
        try:
            self.ray().kill(handle, no_restart=True)
        except Exception as exc:  # gone already, or the cluster not answering
            log.info("session actor not ended", extra={"pane": pane_id, "error": str(exc)})

    def _node_alive(self, node_id: str | None) -> tuple[bool, bool | None]:
        """Whether the cluster answers, and whether it lists ``node_id`` as alive."""
        ray = self.ray()
        try:
            nodes = ray.nodes()
        except (ray.exceptions.RayError, ConnectionError, RuntimeError):
            return False, None
        if not node_id:
            return True, None
        alive = {str(n.get("NodeID")): bool(n.get("Alive")) for n in nodes}
        return True, alive.get(node_id, False)

    def call(self, pane_id: str, method: str, *args: Any, timeout: float | None = None) -> Any:
        """``method(*args)`` on the actor holding ``pane_id``; PaneGoneError when it did
        not answer (lost, or silent for now: the supervisor's liveness check says which),
        TmuxError when it answered with an error."""
        met, got = self.ask(pane_id, method, *args, timeout=timeout)
        found = self.judge(pane_id, met)
        if found == "live":
            return got
        if found == "error":
            msg = f"the session {pane_id} failed {method} on its node"
            raise TmuxError(msg, hint="`lo-orch status` shows the task; its log has the cause.")
        what = "is gone" if found == "lost" else "does not answer"
        msg = f"the session {pane_id} {what} ({met.value}, calling {method})"
        raise PaneGoneError(
            msg, hint="Its node may be lost; the supervisor relaunches the task on another node."
        )

    def list_panes(self) -> dict[str, str]:
        """pane id -> task of this run's live session actors (found by name)."""
        ray = self.ray()
        newest: dict[str, int] = {}
        # the run's namespace by name, as get_actor asks: this process may have joined the
        # cluster in another one first (a connection is made once per process)
        try:
            actors = ray.util.list_named_actors(all_namespaces=True)
        except (ray.exceptions.RayError, ConnectionError, RuntimeError) as exc:
            msg = f"the Ray cluster did not list the run's sessions: {type(exc).__name__}: {exc}"
            raise ClusterError(
                msg, hint="`ray status` on the head shows whether the cluster is up."
            ) from exc
        for actor in actors:
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
