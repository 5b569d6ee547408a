"""The supervisor's end of sessions on a Ray cluster: ``RayBackend``, a ``SessionBackend``.

Each task's session is a detached, named ``node.SessionHost`` actor (``lo-<run>-<digest>-
<task>-g<generation>`` in the ``[cluster] namespace``, one ``slot_resource`` each, the
task's ``node_labels`` as its label selector, never restarted by Ray: a lost node is seen
as a gone pane (``PaneState.lost``: counted apart from an agent's exit, up to ``[cluster]
max_node_losses``), and the supervisor's dead-pane path launches the task again). Pane ids are
``ray:<task>:<generation>``: unique per run and found again by a restarted supervisor from
the actors' names (``list_panes``).

What crosses the wire is bytes: the task's branch and the worktree's state as a git bundle
plus small ignored files on launch; prompts (paths of the supervisor's run folder are
rewritten to the node's, and the files they name sent first); requests of the node's inbox
(``serve``: one relay thread per session; a request is attested by the actor that holds the
pane the sender descends from, never by what it says); and bundles back. Before a signal
is handed to the supervisor, the node's branch and its whole working tree come back
(``sync``) and the local worktree is moved to them, so verification, integration and both
gates run on this machine unchanged. Checkpoints (every ``checkpoint_seconds``) are kept
as ``refs/lo-orch/cluster/<run>/<task>/wip``; a relaunch starts from the newer of that and
the local worktree.

The class is built in layers: ``actors.ActorCalls`` (state, naming and calling actors),
``relay.Relay`` (what comes back: requests, commits, checkpoints, transcripts), and here
the backend interface (launch, state, screens, attach).
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from loop_orchestrator.cluster import bundles
from loop_orchestrator.cluster.actors import CALL_TIMEOUT, LAUNCH_TIMEOUT, MAX_FILE, MAX_FILES
from loop_orchestrator.cluster.relay import Relay
from loop_orchestrator.config import ClusterConfig
from loop_orchestrator.errors import ClusterError, TmuxError
from loop_orchestrator.git.gateway import git, is_ancestor
from loop_orchestrator.sessions.backend import LaunchSpec, PaneState

log = logging.getLogger(__name__)


def cluster_record(cluster: ClusterConfig) -> dict[str, Any]:
    """What run.json keeps of the cluster (``cluster``), so later commands reach it."""
    return {
        "backend": "ray",
        "address": cluster.address,
        "namespace": cluster.namespace,
        "slot_resource": cluster.slot_resource,
        "checkpoint_seconds": cluster.checkpoint_seconds,
        "node_root": cluster.node_root,
        "ssh": cluster.ssh,
    }


def cluster_settings(recorded: dict[str, Any]) -> ClusterConfig:
    """The ``[cluster]`` settings a run recorded (``cluster_record``)."""
    known = {k: v for k, v in recorded.items() if k in ClusterConfig.model_fields}
    return ClusterConfig.model_validate({**known, "backend": "ray"})


class RayBackend(Relay):
    """Sessions as ``SessionHost`` actors on a Ray cluster (see the module docstring)."""

    # sessions --------------------------------------------------------------------------
    def ensure_session(self) -> None:
        self._ray()

    def session_exists(self) -> bool:
        return bool(self.list_panes()) or self.local.session_exists()

    def kill_session(self) -> None:
        """End every session of this run (by its actors' names) and the local window."""
        self._stopped.set()
        for pane_id in list(self.list_panes()):
            self.kill_pane(pane_id)
        self.local.kill_session()

    def open_window(self, name: str, spec: LaunchSpec) -> str:
        return self.local.open_window(name, spec)

    # launch ----------------------------------------------------------------------------
    def _start_point(self, task: str, worktree: Path) -> None:
        """Bring the newest checkpoint into the worktree when it is newer than what the
        worktree holds (a relaunch after a lost node)."""
        _head_ref, wip_ref = self._refs(task)
        wip = git(
            self.repo, "rev-parse", "--verify", "--quiet", wip_ref, check=False
        ).stdout.strip()
        if not wip:
            return
        parent = git(self.repo, "rev-parse", f"{wip}^").stdout.strip()
        tip = git(worktree, "rev-parse", "HEAD").stdout.strip()
        if parent == tip or not is_ancestor(self.repo, parent, tip):
            self._apply(task, worktree, parent, wip)

    def launch(self, spec: LaunchSpec) -> str:
        ray = self._ray()
        from loop_orchestrator.cluster.node import SessionHost
        from loop_orchestrator.workspace import worktrees

        task, worktree = spec.task, Path(spec.cwd)
        started = time.monotonic()
        # one session per task: an earlier one still here lost its pane under a live actor
        # (its tmux server ended); it would hold its slot until cleanup. Its work since the
        # last checkpoint goes with it, as with a lost node
        for old, owner in self.list_panes().items():
            if owner == task:
                log.warning("ending a stale session of the task", extra={"pane": old})
                self.kill_pane(old)
        with self._task_lock(task):
            self._start_point(task, worktree)
            branch = git(worktree, "symbolic-ref", "--short", "HEAD").stdout.strip()
            head = git(worktree, "rev-parse", "HEAD").stdout.strip()
            wip = bundles.wip_commit(worktree)
            out_ref = f"refs/lo-orch/cluster/{self.run_name}/{task}/out"
            git(self.repo, "update-ref", out_ref, wip)
            git(self.repo, "update-ref", self._applied_ref(task), wip)  # what it holds now
            data = bundles.create(self.repo, [f"refs/heads/{branch}", out_ref])
            files: dict[str, bytes] = {}
            total = 0
            for rel in worktrees.ignored_files(worktree):
                path = worktree / rel
                with contextlib.suppress(OSError):
                    if path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_FILE:
                        blob = path.read_bytes()
                        total += len(blob)
                        if total > MAX_FILES:
                            break
                        files[rel] = blob
            run_files = self._run_files(" ".join([*spec.argv, *spec.env.values()]))
            run_files.update(self._status_file(task))
        generation = int(time.time() * 1000)
        pane_id = f"ray:{task}:{generation}"
        options: dict[str, Any] = {
            "name": self._name(task, generation),
            "namespace": self.cluster.namespace,
            "lifetime": "detached",
            "num_cpus": 0,
            "resources": {self.cluster.slot_resource: 1},
            "max_restarts": 0,
            "max_concurrency": 16,
        }
        labels = self._labels_of(task)
        if labels:
            options["label_selector"] = labels
        host_cls = ray.remote(SessionHost)
        handle = host_cls.options(**options).remote(
            run=self.run_name,
            digest=self.digest,
            task=task,
            generation=generation,
            node_root=self.cluster.node_root,
            checkpoint_seconds=self.cluster.checkpoint_seconds,
        )
        with self._lock:
            self._handles[pane_id] = handle
        try:
            info = ray.get(
                handle.setup.remote(ray.put(data), branch, head, wip, out_ref, files, run_files),
                timeout=LAUNCH_TIMEOUT,
            )
            ray.get(
                handle.launch.remote(
                    spec.argv, spec.env, self._paths(worktree), self._transcript(spec, carry=True)
                ),
                timeout=CALL_TIMEOUT,
            )
        except ray.exceptions.RayError as exc:
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)
            msg = f"could not start task {task}'s session on the cluster: {exc}"
            raise ClusterError(
                msg,
                hint="`ray status` shows whether a node offers a free "
                f"{self.cluster.slot_resource} slot (and the labels the task asks for).",
            ) from exc
        self._stat(task, "launch_seconds", time.monotonic() - started)
        self._stat(task, "start_bundle_bytes", float(len(data)))
        self._placed(task, info)
        self._start_relay(pane_id)
        log.info("remote session launched", extra={"task": task, "pane": pane_id})
        return pane_id

    def respawn(self, pane_id: str, spec: LaunchSpec) -> None:
        self._call(
            pane_id,
            "launch",
            spec.argv,
            spec.env,
            self._paths(Path(spec.cwd)),
            self._transcript(spec, carry=False),  # same node: its file is there
        )

    # the sessions' state and screens ----------------------------------------------
    def state(self, pane_id: str) -> PaneState:
        ray = self._ray()
        handle = self._handle(pane_id)
        if handle is None:  # its actor is gone: the session went with its host
            return PaneState(
                pane_id, alive=False, dead_status=None, pid=None, exists=False, lost=True
            )
        try:
            got = ray.get(handle.state.remote(), timeout=CALL_TIMEOUT)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.ActorUnavailableError):
            return PaneState(pane_id, alive=True, dead_status=None, pid=None, exists=True)
        except ray.exceptions.RayError as exc:
            with self._lock:
                self._handles.pop(pane_id, None)
            # lost with its host only when the actor itself died (its node, its process);
            # an actor that answered with an error is the session's own failure
            lost = isinstance(exc, ray.exceptions.RayActorError)
            return PaneState(
                pane_id, alive=False, dead_status=None, pid=None, exists=False, lost=lost
            )
        return PaneState(
            pane_id,
            alive=bool(got["alive"]),
            dead_status=got["dead_status"],
            pid=None,  # a process id on another machine means nothing here
            exists=bool(got["exists"]),
        )

    def capture(self, pane_id: str, lines: int = 200) -> str:
        return str(self._call(pane_id, "capture", lines))

    def paste(self, pane_id: str, text: str, *, bracketed: bool = True) -> None:
        task, _ = self._parse(pane_id)
        files = {**self._run_files(text), **self._status_file(task)}
        self._call(pane_id, "put_files", files)
        worktree = self.rundir.worktree_path(self.run_name, task)
        self._call(pane_id, "paste", text, bracketed, self._paths(worktree))

    def send_keys(self, pane_id: str, *keys: str) -> None:
        self._call(pane_id, "send_keys", list(keys))

    def kill_pane(self, pane_id: str) -> None:
        ray = self._ray()
        handle = self._handle(pane_id)
        with self._lock:
            self._handles.pop(pane_id, None)
            self._relays.discard(pane_id)
        if handle is None:
            return
        with contextlib.suppress(ray.exceptions.RayError):
            ray.get(handle.close.remote(), timeout=CALL_TIMEOUT)
        with contextlib.suppress(Exception):
            ray.kill(handle, no_restart=True)
        log.info("remote session killed", extra={"pane": pane_id})

    def alive_panes(self) -> dict[str, bool]:
        ray = self._ray()
        calls: dict[str, Any] = {}
        for pane_id in self.list_panes():
            handle = self._handle(pane_id)
            if handle is not None:
                calls[pane_id] = handle.state.remote()
        out: dict[str, bool] = {}
        for pane_id, ref in calls.items():
            try:
                out[pane_id] = bool(ray.get(ref, timeout=CALL_TIMEOUT)["alive"])
            except (ray.exceptions.GetTimeoutError, ray.exceptions.ActorUnavailableError):
                out[pane_id] = True
            except ray.exceptions.RayError:
                out[pane_id] = False
        return out

    def task_pids(self) -> dict[int, str]:
        return {}  # remote sessions are attested by their node (see ``serve``)

    def nodes(self) -> dict[str, dict[str, Any]]:
        """task -> where its session runs (host, ip, node id), for live sessions."""
        for pane_id, task in self.list_panes().items():
            if task not in self._nodes:
                with contextlib.suppress(TmuxError):
                    self._nodes[task] = self._call(pane_id, "info")
        return dict(self._nodes)

    # attach ----------------------------------------------------------------------------
    def attach_argv(self, pane_id: str | None) -> list[str]:
        panes = self.list_panes()
        if pane_id is None:
            if not panes:
                msg = f"run {self.run_name} has no session on the cluster"
                raise TmuxError(msg, hint="Sessions exist while tasks run; `lo-orch status`.")
            pane_id = sorted(panes)[0]
        target = self._call(pane_id, "attach_target")
        info = self._call(pane_id, "info")
        if self.cluster.ssh:
            dest = self.cluster.ssh.replace("{host}", str(info["ip"]))
            remote = shlex.join(
                ["tmux", "-L", target["socket"], "attach-session", "-t", f"={target['session']}"]
            )
            return ["ssh", "-t", dest, remote]
        return [
            sys.executable,
            "-m",
            "loop_orchestrator.cluster.remote_attach",
            "--repo",
            str(self.repo),
            "--pane",
            pane_id,
        ]
