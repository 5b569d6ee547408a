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

``RayBackend`` is the backend interface (launch, state, screens, attach) over three
collaborators: ``actors.ActorCalls`` (naming, finding and calling the run's actors),
``mirror.Mirror`` (the local worktrees kept in step with the nodes') and ``relay.Relay``
(what comes back: requests, checkpoints, transcripts, where each session runs). What a
launch or a prompt sends along (the run folder's files, the paths a node rewrites) is
this module's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loop_orchestrator import resources
from loop_orchestrator.cluster import bundles, loss
from loop_orchestrator.cluster.actors import (
    LAUNCH_TIMEOUT,
    MAX_FILE,
    MAX_FILES,
    ActorCalls,
)
from loop_orchestrator.cluster.mirror import Mirror
from loop_orchestrator.cluster.node import SessionHost
from loop_orchestrator.cluster.relay import Relay
from loop_orchestrator.config import ClusterConfig
from loop_orchestrator.errors import ClusterError, GitError, TmuxError
from loop_orchestrator.git.gateway import git
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.sessions.backend import LaunchSpec, PaneState, RunLike, run_socket
from loop_orchestrator.sessions.listener import Request
from loop_orchestrator.sessions.tmux import TmuxBackend
from loop_orchestrator.workspace import worktrees

log = logging.getLogger(__name__)

#: how long the node may take to start a session's agent (whatever the call timeout)
START_TIMEOUT = 60.0


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
        "call_timeout_seconds": cluster.call_timeout_seconds,
        "loss_grace_seconds": cluster.loss_grace_seconds,
    }


def cluster_settings(recorded: dict[str, Any]) -> ClusterConfig:
    """The ``[cluster]`` settings a run recorded (``cluster_record``)."""
    known = {k: v for k, v in recorded.items() if k in ClusterConfig.model_fields}
    return ClusterConfig.model_validate({**known, "backend": "ray"})


class RayBackend:
    """Sessions as ``SessionHost`` actors on a Ray cluster (see the module docstring)."""

    def __init__(self, run: RunLike, cluster: ClusterConfig) -> None:
        self.calls = ActorCalls(run, cluster)
        self.mirror = Mirror(self.calls)
        self.relay = Relay(self.calls, self.mirror)
        # the supervisor's own window (`run --detach`) stays in local tmux
        self.local = TmuxBackend(run.name, socket=run_socket(run))
        self.repo = self.calls.repo
        self.run_name = run.name
        self.rundir = self.calls.rundir
        self._labels: dict[str, dict[str, str]] | None = None

    @property
    def cluster(self) -> ClusterConfig:
        return self.calls.cluster

    @property
    def looks_off_loop(self) -> bool:
        """False: a look is a Ray call, and one made on a thread of its own could outlive
        the run (it reconnected the driver after a run had ended)."""
        return False

    @property
    def socket(self) -> str | None:
        return self.local.socket

    @property
    def session(self) -> str:
        return self.local.session

    @property
    def stats(self) -> dict[str, list[tuple[str, float]]]:
        """What was measured: launch seconds, bundle bytes, sync seconds per task."""
        return self.calls.stats

    # sessions --------------------------------------------------------------------------
    def ensure_session(self) -> None:
        self.calls.ray()

    def session_exists(self) -> bool:
        return bool(self.list_panes()) or self.local.session_exists()

    def list_panes(self) -> dict[str, str]:
        return self.calls.list_panes()

    def kill_session(self) -> None:
        """End every session of this run (by its actors' names) and the local window."""
        self.relay.halt()
        for pane_id in list(self.list_panes()):
            self.kill_pane(pane_id)
        self.local.kill_session()

    def open_window(self, name: str, spec: LaunchSpec) -> str:
        return self.local.open_window(name, spec)

    # what comes back ---------------------------------------------------------------------
    def serve(self, deliver: Callable[[Request], None], note: Callable[..., None]) -> None:
        self.relay.serve(deliver, note)

    def stop(self) -> None:
        self.relay.stop()

    def sync(self, pane_id: str) -> tuple[str, str]:
        """Bring the node's work into the task's local worktree (``mirror.Mirror.sync``)."""
        return self.mirror.sync(pane_id)

    # launch ----------------------------------------------------------------------------
    def launch(self, spec: LaunchSpec) -> str:
        calls = self.calls
        ray = calls.ray()
        task, worktree = spec.task, Path(spec.cwd)
        started = time.monotonic()
        # one session per task: an earlier one still here lost its pane under a live actor
        # (its tmux server ended); it would hold its slot until cleanup. Its work since the
        # last checkpoint goes with it, as with a lost node
        for old, owner in self.list_panes().items():
            if owner == task:
                log.warning("ending a stale session of the task", extra={"pane": old})
                self.kill_pane(old)
        with calls.task_lock(task):
            self.mirror.start_point(task, worktree)
            branch = git(worktree, "symbolic-ref", "--short", "HEAD").stdout.strip()
            head = git(worktree, "rev-parse", "HEAD").stdout.strip()
            wip = bundles.wip_commit(worktree)
            out_ref = f"refs/lo-orch/cluster/{self.run_name}/{task}/out"
            git(self.repo, "update-ref", out_ref, wip)
            git(self.repo, "update-ref", self.mirror.applied_ref(task), wip)  # what it holds now
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
            run_files.update(self._run_view())
        generation = int(time.time() * 1000)
        pane_id = f"ray:{task}:{generation}"
        options: dict[str, Any] = {
            "name": calls.name(task, generation),
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
        handle = None
        try:
            handle = host_cls.options(**options).remote(
                run=self.run_name,
                digest=calls.digest,
                task=task,
                generation=generation,
                node_root=self.cluster.node_root,
                checkpoint_seconds=self.cluster.checkpoint_seconds,
            )
            calls.keep(pane_id, handle)
            info = ray.get(
                handle.setup.remote(ray.put(data), branch, head, wip, out_ref, files, run_files),
                timeout=LAUNCH_TIMEOUT,
            )
            ray.get(
                handle.launch.remote(
                    spec.argv,
                    spec.env,
                    self._paths(worktree),
                    self.relay.transcript(spec, carry=True),
                ),
                timeout=START_TIMEOUT,
            )
        except (ray.exceptions.RayError, ConnectionError, RuntimeError) as exc:
            calls.forget(pane_id)
            if handle is not None:
                with contextlib.suppress(Exception):
                    ray.kill(handle, no_restart=True)
            msg = f"could not start task {task}'s session on the cluster: {exc}"
            raise ClusterError(
                msg,
                hint="`ray status` shows whether a node offers a free "
                f"{self.cluster.slot_resource} slot (and the labels the task asks for).",
            ) from exc
        calls.stat(task, "launch_seconds", time.monotonic() - started)
        calls.stat(task, "start_bundle_bytes", float(len(data)))
        self.relay.placed(task, info)
        self.relay.start(pane_id)
        log.info("remote session launched", extra={"task": task, "pane": pane_id})
        return pane_id

    def respawn(self, pane_id: str, spec: LaunchSpec) -> None:
        self.calls.call(
            pane_id,
            "launch",
            spec.argv,
            spec.env,
            self._paths(Path(spec.cwd)),
            self.relay.transcript(spec, carry=False),  # same node: its file is there
            timeout=START_TIMEOUT,
        )

    # the sessions' state and screens ----------------------------------------------
    def state(self, pane_id: str) -> PaneState:
        """The session's pane; ``lost`` when its actor went away with its node, whichever
        way (``loss.verdict``). A session that is silent for now counts as alive."""
        met, got = self.calls.ask(pane_id, "state")
        found = self.calls.judge(pane_id, met)
        if found == "live":
            return PaneState(
                pane_id,
                alive=bool(got["alive"]),
                dead_status=got["dead_status"],
                pid=None,  # a process id on another machine means nothing here
                exists=bool(got["exists"]),
            )
        if found == "silent":
            return PaneState(pane_id, alive=True, dead_status=None, pid=None, exists=True)
        self.relay.forget(pane_id)
        self.calls.forget(pane_id)
        # "error": the actor answered with an error: the session's own failure, no loss
        return PaneState(
            pane_id, alive=False, dead_status=None, pid=None, exists=False, lost=found == "lost"
        )

    def capture(self, pane_id: str, lines: int = 200) -> str:
        return str(self.calls.call(pane_id, "capture", lines))

    def look(self, pane_id: str, lines: int = 0) -> tuple[PaneState, str]:
        state = self.state(pane_id)
        if not state.exists:
            return state, ""
        try:
            return state, self.capture(pane_id, lines)
        except TmuxError:
            return state, ""

    def paste(self, pane_id: str, text: str, *, bracketed: bool = True) -> None:
        task, _ = self.calls.parse(pane_id)
        files = {**self._run_files(text), **self._run_view()}
        self.calls.call(pane_id, "put_files", files)
        worktree = self.rundir.worktree_path(self.run_name, task)
        self.calls.call(pane_id, "paste", text, bracketed, self._paths(worktree))

    def send_keys(self, pane_id: str, *keys: str) -> None:
        self.calls.call(pane_id, "send_keys", list(keys))

    def kill_pane(self, pane_id: str) -> None:
        self.relay.forget(pane_id)
        # the transcript's last lines first (its final message may have been written after
        # the session's last request): the spend is booked from the copy here
        met, last = self.calls.ask(pane_id, "transcript_delta")
        if met is loss.Met.ANSWERED:
            if last:
                task, _ = self.calls.parse(pane_id)
                self.relay.keep_transcript(pane_id, task, last)
            self.calls.ask(pane_id, "close")
        self.calls.end(pane_id)
        log.info("remote session killed", extra={"pane": pane_id})

    def alive_panes(self) -> dict[str, bool]:
        """pane id -> alive, asked of every session at once; False for one that did not
        answer (``state`` then says whether it is lost or only silent)."""
        ray = self.calls.ray()
        asked: dict[Any, str] = {}
        out: dict[str, bool] = {}
        try:
            for pane_id in self.list_panes():
                handle = self.calls.handle(pane_id)
                out[pane_id] = False
                if handle is not None:
                    asked[handle.state.remote()] = pane_id
            timeout = self.calls.call_timeout
            ready, _ = ray.wait(list(asked), num_returns=len(asked), timeout=timeout)
        except (ray.exceptions.RayError, ConnectionError, RuntimeError, ClusterError):
            return out
        for ref in ready:
            with contextlib.suppress(ray.exceptions.RayError):
                out[asked[ref]] = bool(ray.get(ref, timeout=timeout)["alive"])
        return out

    def task_pids(self) -> dict[int, str]:
        return {}  # remote sessions are attested by their node (see ``serve``)

    def nodes(self) -> dict[str, dict[str, Any]]:
        """task -> where its session runs (host, ip, node id), for live sessions."""
        nodes = self.relay.nodes
        for pane_id, task in self.list_panes().items():
            if task not in nodes:
                with contextlib.suppress(TmuxError):
                    nodes[task] = self.calls.call(pane_id, "info")
                    self.calls.node_ids[task] = str(nodes[task].get("node_id", ""))
        return dict(nodes)

    # attach ----------------------------------------------------------------------------
    def attach_argv(self, pane_id: str | None) -> list[str]:
        panes = self.list_panes()
        if pane_id is None:
            if not panes:
                msg = f"run {self.run_name} has no session on the cluster"
                raise TmuxError(msg, hint="Sessions exist while tasks run; `lo-orch status`.")
            pane_id = sorted(panes)[0]
        target = self.calls.call(pane_id, "attach_target")
        info = self.calls.call(pane_id, "info")
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

    # what a launch or a prompt sends along --------------------------------------------
    def _labels_of(self, task: str) -> dict[str, str]:
        if self._labels is None:
            try:
                plan, _ = runs.read_plan(self.rundir)
                self._labels = {t.id: dict(t.node_labels or {}) for t in plan.tasks}
            except Exception:
                self._labels = {}
        return self._labels.get(task, {})

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

    def _run_view(self) -> dict[str, bytes]:
        """The run as a session's tools read it (`lo-orch status`, the task's phase): run.json,
        plan.json and every task's status, as files of the node's run folder. A view: the
        supervisor's state stays here. run.json goes without its cluster record: a command
        in a session never joins the cluster (it has no token to), so it reads only files."""
        found: dict[str, bytes] = {}
        with contextlib.suppress(OSError, ValueError):
            run = json.loads(self.rundir.run_json.read_text(encoding="utf-8"))
            if isinstance(run, dict):
                run.pop("cluster", None)
                found["run.json"] = json.dumps(run, indent=2).encode()
        with contextlib.suppress(OSError):
            found["plan.json"] = self.rundir.plan_json.read_bytes()
        with contextlib.suppress(OSError):
            for path in sorted(self.rundir.status_dir.glob("*.json")):
                if path.is_file() and not path.is_symlink():
                    found[f"status/{path.name}"] = path.read_bytes()
        return found
