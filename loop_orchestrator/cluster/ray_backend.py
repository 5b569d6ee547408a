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
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import queue
import re
import shlex
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loop_orchestrator import listener, private
from loop_orchestrator.cluster import bundles, transcripts
from loop_orchestrator.config import ClusterConfig
from loop_orchestrator.errors import ClusterError, GitError, TmuxError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.gitutil import git, is_ancestor
from loop_orchestrator.inbox import CLIENT_TIMEOUT
from loop_orchestrator.sessions import LaunchSpec, PaneState, RunLike, run_socket
from loop_orchestrator.state import RunDir
from loop_orchestrator.tmux import TmuxBackend

log = logging.getLogger(__name__)

PANE_RE = re.compile(r"^ray:([A-Za-z0-9][A-Za-z0-9_-]*):([0-9]+)$")
#: how long a launch may wait for a free slot and the node's checkout
LAUNCH_TIMEOUT = 300.0
#: how long one call to a session actor may take
CALL_TIMEOUT = 60.0
#: how long ``serve`` waits for what the sessions left while no supervisor ran
FIRST_PULL_TIMEOUT = 20.0
#: ignored files of a worktree sent to the node (each, and all together)
MAX_FILE = 1 << 20
MAX_FILES = 32 << 20


def is_ray_pane(pane_id: str | None) -> bool:
    return bool(pane_id and PANE_RE.match(pane_id))


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


class RayBackend:
    """Sessions as ``SessionHost`` actors on a Ray cluster (see the module docstring)."""

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

    # plumbing --------------------------------------------------------------------------
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

    def _task_lock(self, task: str) -> threading.Lock:
        with self._lock:
            return self._task_locks.setdefault(task, threading.Lock())

    def _labels_of(self, task: str) -> dict[str, str]:
        if self._labels is None:
            from loop_orchestrator import runs

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
        from loop_orchestrator.cluster.node import install_paths

        paths: dict[str, str] = {path: kind for kind, path in install_paths().items()}
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

    def launch(self, spec: LaunchSpec) -> str:
        ray = self._ray()
        from loop_orchestrator import worktrees
        from loop_orchestrator.cluster.node import SessionHost

        task, worktree = spec.task, Path(spec.cwd)
        started = time.monotonic()
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

    def _placed(self, task: str, info: dict[str, Any]) -> None:
        self._nodes[task] = info
        if self._note is not None:
            with contextlib.suppress(Exception):
                self._note(task, node=f"{info['host']} ({info['ip']}, {info['node_id'][:8]})")

    def respawn(self, pane_id: str, spec: LaunchSpec) -> None:
        self._call(
            pane_id,
            "launch",
            spec.argv,
            spec.env,
            self._paths(Path(spec.cwd)),
            self._transcript(spec, carry=False),  # same node: its file is there
        )

    # transcripts (transcripts.py) ------------------------------------------------------
    def _copies_file(self) -> Path:
        return private.run_dir(self.repo, self.run_name) / "transcripts.json"

    def _transcript(self, spec: LaunchSpec, *, carry: bool) -> dict[str, Any] | None:
        """What the node needs to follow the session's transcript (and, for a session
        moving to a new node, the copy to resume from); records where the copy is kept."""
        if spec.transcript is None:
            return None
        copy = spec.transcript
        with self._lock:
            copies = self._copies()
            if copies.get(spec.task) != str(copy):
                copies[spec.task] = str(copy)
                atomic_write_text(self._copies_file(), json.dumps(copies, indent=2))
        have = None
        if carry:
            with contextlib.suppress(OSError):
                have = copy.read_bytes() if copy.is_file() else None
        return {"session": copy.stem, "have": have}

    def _copies(self) -> dict[str, str]:
        """task -> where the supervisor keeps its session's transcript."""
        try:
            found = json.loads(self._copies_file().read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}

    def _keep_transcript(self, pane_id: str, task: str, delta: Any) -> None:
        if not isinstance(delta, dict):
            return
        with self._lock:
            copy = self._copies().get(task)
        if copy is None:
            return
        if not transcripts.keep(Path(copy), delta):
            whole = self._call(pane_id, "transcript_whole")
            if not isinstance(whole, dict) or not transcripts.keep(Path(copy), whole):
                return
            delta = whole
        data = delta.get("data")
        self._stat(task, "transcript_bytes", float(len(data) if isinstance(data, bytes) else 0))

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

    # signals and commits back -------------------------------------------------------------
    def serve(self, deliver: Callable[[listener.Request], None], note: Callable[..., None]) -> None:
        """Relay every session's requests to ``deliver`` (the supervisor's own handling);
        ``note(task, **fields)`` records where a session runs."""
        self._deliver, self._note = deliver, note
        self._stopped.clear()
        first: list[threading.Event] = []
        for pane_id in self.list_panes():
            first.append(self._start_relay(pane_id))
            task, _ = self._parse(pane_id)
            if task not in self._nodes:
                with contextlib.suppress(TmuxError):
                    self._placed(task, self._call(pane_id, "info"))
        # what the sessions sent while no supervisor ran is handed over before the
        # supervisor's loop decides anything, as the local inbox folder is read first: a
        # restarted supervisor would otherwise resend a prompt whose arrival is among
        # those messages, and pass over a signal to ask for again meanwhile
        deadline = time.monotonic() + FIRST_PULL_TIMEOUT
        for done in first:
            done.wait(max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        """Stop relaying (the sessions keep running); waits for the relay threads, since a
        thread still inside a Ray call when the process exits hangs Ray's shutdown."""
        self._stopped.set()
        with self._lock:
            threads = list(self._threads)
            self._threads.clear()
        deadline = time.monotonic() + 10.0
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        # leave the cluster now, in order: Ray's own exit-time shutdown was seen to hang a
        # finished `lo-orch run` (the detached session actors are not affected)
        from loop_orchestrator.cluster.connect import disconnect

        disconnect()

    def _start_relay(self, pane_id: str) -> threading.Event:
        """Relay ``pane_id``'s requests; the event is set once its first batch is handed
        over (or the relay ended)."""
        first = threading.Event()
        with self._lock:
            if self._deliver is None or pane_id in self._relays:
                first.set()
                return first
            self._relays.add(pane_id)
        thread = threading.Thread(
            target=self._relay, args=(pane_id, first), name=f"lo-relay-{pane_id}", daemon=True
        )
        with self._lock:
            self._threads.append(thread)
        thread.start()
        return first

    def _relay(self, pane_id: str, first: threading.Event) -> None:
        try:
            self._relay_requests(pane_id, first)
        finally:
            first.set()

    def _relay_requests(self, pane_id: str, first: threading.Event) -> None:
        ray = self._ray()
        task, _ = self._parse(pane_id)
        while not self._stopped.is_set():
            with self._lock:
                if pane_id not in self._relays:
                    return
            handle = self._handle(pane_id)
            if handle is None:
                break
            try:
                # the first call does not wait: it collects what is there
                wait = 2.0 if first.is_set() else 0.0
                got = ray.get(handle.next_requests.remote(wait), timeout=CALL_TIMEOUT)
            except ray.exceptions.GetTimeoutError:
                continue
            except ray.exceptions.RayError:
                break
            if got.get("checkpoint"):
                try:
                    self._keep_checkpoint(task, got["checkpoint"])
                except Exception:
                    log.exception("a checkpoint could not be stored", extra={"task": task})
            for req in got.get("requests", []):
                # one at a time, in the order the session sent them (as a local session's
                # hooks and signals arrive): a signal is never judged before the hook that
                # confirmed its prompt
                try:
                    self._one(pane_id, task, handle, req)
                except Exception:
                    log.exception("a remote request could not be relayed", extra={"task": task})
            first.set()
        with self._lock:
            self._relays.discard(pane_id)

    def _one(self, pane_id: str, task: str, handle: Any, req: dict[str, Any]) -> None:
        ray = self._ray()
        message = req.get("message")
        if not isinstance(message, dict) or self._deliver is None:
            return
        from_pane = req.get("from_pane") is True
        if from_pane and req.get("transcript"):
            # before the request is handled: its spend is booked from this copy
            try:
                self._keep_transcript(pane_id, task, req["transcript"])
            except (OSError, TmuxError) as exc:
                log.warning("transcript not kept", extra={"task": task, "error": str(exc)})
        if req.get("stale"):
            # nobody waits for its answer: a hint, as a message left in the inbox folder
            self._deliver(listener.Request(message, task, None, attested=False))
            return
        if from_pane and message.get("type") == "signal":
            try:
                self.sync(pane_id)
            except Exception as exc:
                # its work did not come back: judged on the old copy it would fail for
                # nothing. Not judged: a live session's client sends it again (no answer),
                # a lost node's session is relaunched by the dead-pane path.
                log.warning(
                    "the node's work could not be fetched",
                    extra={"task": task, "error": str(exc)},
                )
                return
        # the task is the one whose pane the sender descends from (the node's kernel says),
        # never what the message claims
        request = listener.Request(message, task if from_pane else None, None, attested=True)
        self._deliver(request)
        try:
            reply = request._answer.get(timeout=CLIENT_TIMEOUT - 2)
        except queue.Empty:
            reply = None
        with contextlib.suppress(ray.exceptions.RayError):
            handle.answer.remote(req["id"], reply)

    def sync(self, pane_id: str) -> tuple[str, str]:
        """Fetch the node's branch and working tree and move the local worktree to them."""
        task, _ = self._parse(pane_id)
        worktree = self.rundir.worktree_path(self.run_name, task)
        started = time.monotonic()
        with self._task_lock(task):
            known = git(worktree, "rev-parse", "HEAD").stdout.strip()
            got = self._call(pane_id, "export", [known], timeout=LAUNCH_TIMEOUT)
            head, wip = self._import(task, got)
            self._apply(task, worktree, head, wip)
            plan = got.get("plan")
            if isinstance(plan, bytes):  # where a local session writes it (agent-writable)
                atomic_write_text(
                    self.rundir.agent_plan_path(task), plan.decode("utf-8", errors="replace")
                )
        self._call(pane_id, "acknowledge", [head])
        self._stat(task, "sync_seconds", time.monotonic() - started)
        return head, wip

    def _import(self, task: str, got: dict[str, Any]) -> tuple[str, str]:
        head_ref, wip_ref = self._refs(task)
        branch = f"refs/heads/lo/{self.run_name}/{task}"
        data = got.get("bundle") or b""
        head, wip = str(got.get("head", "")), str(got.get("wip", ""))
        if data:
            self._stat(task, "bundle_bytes", float(len(data)))
            # only the task branch and the checkpoint ref, into lo-orch's own refs
            got_refs = bundles.import_bundle(
                self.repo, data, {branch: head_ref, "refs/lo-orch/wip": wip_ref}
            )
            head = got_refs.get(head_ref, head)
            wip = got_refs.get(wip_ref, wip)
        for sha in (head, wip):
            if (
                not re.fullmatch(r"[0-9a-f]{40}", sha)
                or not git(self.repo, "cat-file", "-e", f"{sha}^{{commit}}", check=False).ok
            ):
                msg = f"the node of task {task} sent no usable commit ({sha[:40]!r})"
                raise GitError(msg)
        git(self.repo, "update-ref", head_ref, head)
        git(self.repo, "update-ref", wip_ref, wip)
        return head, wip

    def _keep_checkpoint(self, task: str, got: dict[str, Any]) -> None:
        with self._task_lock(task):
            self._import(task, got)
        self._stat(task, "checkpoint_bytes", float(len(got.get("bundle") or b"")))
