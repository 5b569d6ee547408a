"""The node's end of a remote session: ``SessionHost``, one detached Ray actor per task.

It runs on a node that offers a session slot and owns everything of the session there: a
checkout under ``connect.node_root`` (made from git bundles, never from the user's
repository path: the node gets only bytes), a private tmux server with the agent's pane
(``tmux.TmuxBackend``, the same argv and environment as locally with the paths
rewritten to the node's), the node's end of the inbox (a ``listener.Server`` on a
node-local run folder; ``identify`` accepts only processes descending from ITS pane, the
kernel's attestation as locally), whose requests the supervisor collects with
``next_requests`` and answers with ``answer``, and a checkpoint thread that turns the whole
working tree into a work-in-progress commit every ``checkpoint_seconds`` for the
supervisor to keep. The actor never decides anything: the supervisor does.

With ``LO_ORCH_NODE_AUDIT`` set (tests), every path the actor process opens and every
command it runs is appended to that file (``sys.addaudithook``), so a test can show the
node never touched the user's repository.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from loop_orchestrator import resources
from loop_orchestrator.cluster import bundles, reaper, transcripts
from loop_orchestrator.cluster.connect import node_root as root_of
from loop_orchestrator.cluster.connect import ray_env_names, ray_module, ray_secret_paths
from loop_orchestrator.cluster.terminal import TerminalHost
from loop_orchestrator.cost import usage
from loop_orchestrator.files import ORCH_DIR, WORKTREES_DIR, open_regular
from loop_orchestrator.git.gateway import git
from loop_orchestrator.resources import lo_orch_bin, python_hook
from loop_orchestrator.sessions import listener, procinfo, sandbox
from loop_orchestrator.sessions.backend import LaunchSpec
from loop_orchestrator.sessions.inbox import CLIENT_TIMEOUT
from loop_orchestrator.sessions.tmux import TmuxBackend

AUDIT_ENV = "LO_ORCH_NODE_AUDIT"
#: the lo-orch ref a node's checkpoints live under in its own checkout
WIP_REF = "refs/lo-orch/wip"
#: a queued request older than this is past answering in time: its sender gets None from
#: the listener and sends it again (a signal) or leaves it in the inbox folder
STALE_AFTER = CLIENT_TIMEOUT - 2
#: how long a PreToolUse hook waits for its tool's message to reach the transcript
TRANSCRIPT_WAIT = 3.0


def _install_audit(log_path: str) -> None:
    lock = threading.Lock()
    fh = Path(log_path).open("a", encoding="utf-8")  # noqa: SIM115 (open for the process' life)
    busy = threading.local()

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event not in ("open", "subprocess.Popen", "os.chdir", "os.exec"):
            return
        if getattr(busy, "on", False):
            return
        busy.on = True
        try:
            if event == "subprocess.Popen":
                what = f"{event}\t{args[1]!r}\tcwd={args[2]!r}"
            else:
                what = f"{event}\t{args[0]!r}"
            with lock:
                fh.write(what + "\n")
                fh.flush()
        finally:
            busy.on = False

    sys.addaudithook(hook)


def write_inside(root: Path, rel: str, data: bytes) -> None:
    """Write ``data`` to ``root/rel`` without following a link: the session writes in its
    checkout and plans folder, and a link it planted there must not carry the actor's
    write (the actor runs outside the session's sandbox) elsewhere. A linked folder on
    the way is refused; a link where the file goes is replaced by the file."""
    path = root / bundles.safe_relpath(rel)
    here = root
    for part in Path(rel).parts[:-1]:
        here = here / part
        if here.is_symlink():
            msg = f"{here} is a symbolic link; lo-orch does not write through it"
            raise RuntimeError(msg)
        here.mkdir(exist_ok=True)
    if path.is_symlink():
        path.unlink()
    # O_NOFOLLOW: a link put back meanwhile fails the open instead of being followed
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def read_regular(path: Path, limit: int) -> bytes | None:
    """The bytes of ``path`` if it is a regular file (not a link: the session may have
    pointed one at a file its sandbox hides) of at most ``limit`` bytes; else None."""
    fd = open_regular(path)
    if fd is None:
        return None
    if os.fstat(fd).st_size > limit:
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    return data if len(data) <= limit else None


def rewrite_paths(text: str, paths: dict[str, str], here: dict[str, str]) -> str:
    """``text`` with each supervisor path of ``paths`` (path -> kind) replaced by what that
    kind is here (``here``: kind -> path), longest first; a kind unknown here stays."""
    for old, kind in sorted(paths.items(), key=lambda kv: -len(kv[0])):
        if kind in here and old:
            text = text.replace(old, here[kind])
    return text


class SessionHost:
    """One task's session on this node (see the module docstring)."""

    def __init__(
        self,
        *,
        run: str,
        digest: str,
        task: str,
        generation: int,
        node_root: str,
        checkpoint_seconds: float,
    ) -> None:
        audit = os.environ.get(AUDIT_ENV, "").strip()
        if audit:
            _install_audit(audit)

        ray = ray_module()

        self.run, self.task, self.generation = run, task, generation
        self.node_id = str(ray.get_runtime_context().get_node_id())
        self.host = socket.gethostname()
        node_ip: Any = ray.util.get_node_ip_address
        self.ip = str(node_ip())
        self.home = root_of(node_root, self.node_id) / f"{run}-{digest}" / f"{task}-g{generation}"
        # the layout of the supervisor's machine: the task's checkout a worktree of the
        # node's repository under its .worktrees/<run>/<task>, the run folder in that
        # repository; so `lo-orch status` run in the checkout finds the run (whose files
        # the supervisor sends) as it does locally
        self.checkout = self.home / "repo" / WORKTREES_DIR / run / task
        self.run_dir = self.home / "repo" / ORCH_DIR
        self.socket = f"lon-{digest[:8]}-{task[:24]}-g{generation}"
        # the session's tmux server starts without this worker's Ray variables (a token, the
        # cluster's address): a session inherits the server's environment

        ray_vars = set(ray_env_names())
        clean = {k: v for k, v in os.environ.items() if k not in ray_vars}
        self.tmux = TmuxBackend(f"{run}-{task}"[:64], socket=self.socket, env=clean)
        self.branch = ""
        self.pane: str | None = None
        self.known: list[str] = []  # commits the supervisor has
        self.checkpoint_seconds = checkpoint_seconds
        self._lock = threading.RLock()
        self._cond = threading.Condition()
        self._pending: dict[str, listener.Request] = {}
        self._queue: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._checkpoint: dict[str, Any] | None = None
        self._last_wip_tree = ""
        self._server: listener.Server | None = None
        self._closed = threading.Event()
        self._term: Any = None
        #: the watcher that ends this session's tmux server if this process dies (reaper.py):
        #: its pid and start time
        self._reaper: tuple[int, str | None] | None = None
        #: what of the session's transcript the supervisor lacks (transcripts.py)
        self._tail: transcripts.Tail | None = None

    # set-up --------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "host": self.host,
            "ip": self.ip,
            "home": str(self.home),
            "checkout": str(self.checkout),
            "run_dir": str(self.run_dir),
            "socket": self.socket,
            "session": self.tmux.session,
            "pane": self.pane,
        }

    def setup(
        self,
        bundle: bytes,
        branch: str,
        head: str,
        wip: str | None,
        wip_ref: str,
        files: dict[str, bytes],
        run_files: dict[str, bytes],
    ) -> dict[str, Any]:
        """Make the checkout from ``bundle`` (branch ``branch`` at ``head``; the working
        tree of commit ``wip`` when given) and write the files sent alongside."""
        started = time.monotonic()
        with self._lock:
            if self.home.exists():
                shutil.rmtree(self.home)
            # the same layout as the supervisor's: a repository and the task's checkout as
            # its linked worktree (so the sandbox policy is the same too)
            repo = self.home / "repo"
            repo.mkdir(parents=True)
            self.run_dir.mkdir(parents=True, exist_ok=True)
            git(repo, "init", "--quiet")
            wanted = {f"refs/heads/{branch}": f"refs/lo-orch/in/{branch}"}
            if wip:
                wanted[wip_ref] = "refs/lo-orch/in/wip"
            got = bundles.import_bundle(repo, bundle, wanted)
            if got.get(f"refs/lo-orch/in/{branch}") != head:
                msg = f"the start bundle does not carry {branch} at {head}"
                raise RuntimeError(msg)
            git(repo, "update-ref", f"refs/heads/{branch}", head)
            git(repo, "worktree", "add", "--quiet", str(self.checkout), branch)
            if wip:
                bundles.apply_tree(self.checkout, wip)
            for rel, data in files.items():
                self._write(self.checkout, rel, data)
            for rel, data in run_files.items():
                self._write(self.run_dir, rel, data)
            self.branch = branch
            self.known = [head]
        return {"seconds": time.monotonic() - started, **self.info()}

    @staticmethod
    def _write(root: Path, rel: str, data: bytes) -> None:
        write_inside(root, rel, data)

    def put_files(self, run_files: dict[str, bytes]) -> None:
        """Files of the supervisor's run folder a prompt refers to (reviews, briefs)."""
        for rel, data in run_files.items():
            self._write(self.run_dir, rel, data)

    def _here(self) -> dict[str, str]:
        return {
            "checkout": str(self.checkout),
            "run": str(self.run_dir),
            **resources.install_paths(),
        }

    def _spec(self, argv: list[str], env: dict[str, str], paths: dict[str, str]) -> LaunchSpec:
        """The local launch rewritten for this node (``paths``: supervisor path -> what it
        is here: ``checkout``, ``run`` or a part of the lo-orch install,
        ``resources.install_paths``)."""
        here = self._here()

        def rewrite(text: str) -> str:
            return rewrite_paths(text, paths, here)

        node_env = {k: rewrite(v) for k, v in env.items()}
        node_env["LO_ORCH_RUN_DIR"] = str(self.run_dir)
        # the Python clients: this node's end of the inbox answers while no supervisor does
        # (it queues the report for the next), and their retry-or-leave is what it was made
        # for; the compiled client would hand an unanswered report over to be sent again
        node_env["LO_ORCH_BIN"] = lo_orch_bin()
        node_env["LO_ORCH_HOOK"] = python_hook()
        node_env["LO_ORCH_TMUX_SOCKET"] = self.socket
        brief = node_env.get("LO_ORCH_BRIEF")
        if brief:
            node_env["LO_ORCH_BRIEF"] = rewrite(brief)
        spec = LaunchSpec(self.task, self.checkout, [rewrite(a) for a in argv], node_env)
        return self._confine(spec)

    def _confine(self, spec: LaunchSpec) -> LaunchSpec:
        """A launch the supervisor confined (bubblewrap) is confined here by the node's own
        policy: its paths, not the supervisor's, are the ones to protect."""

        argv = spec.argv
        if not argv or Path(argv[0]).name != sandbox.BWRAP or "--" not in argv:
            return spec
        inner = argv[argv.index("--") + 1 :]
        policy = sandbox.Policy.for_task(
            repo=self.home / "repo", run_dir=self.run_dir, worktree=self.checkout, task=self.task
        )
        # locally every other task's worktree and the run folder lie inside the read-only
        # repository; here they are siblings under the run's node folder: read-only too
        shared = self.home.parent.resolve()
        # and what would let it join the cluster (outside any sandbox, as this node's user):
        # Ray's token and this node's Ray folder are hidden, its variables unset

        mine = self.home.resolve()
        secrets = [p.resolve() for p in ray_secret_paths()]
        policy = dataclasses.replace(
            policy,
            read_only=(*policy.read_only, shared),
            hidden=(*policy.hidden, *(p for p in secrets if not mine.is_relative_to(p))),
            unset_env=(*policy.unset_env, *ray_env_names()),
        )
        return sandbox.confine(LaunchSpec(spec.task, spec.cwd, inner, spec.env), policy)

    def launch(
        self,
        argv: list[str],
        env: dict[str, str],
        paths: dict[str, str],
        transcript: dict[str, Any] | None = None,
    ) -> str:
        """Start the agent in this node's tmux server; the inbox and checkpoints start.
        ``transcript``: ``{"session": id, "have": bytes | None}`` for an agent whose
        transcript the supervisor keeps a copy of (``have``: that copy, put where the
        agent's ``--resume`` looks on this node)."""
        with self._lock:
            spec = self._spec(argv, env, paths)
            if transcript is not None:
                self._follow_transcript(spec, transcript)
            if self._server is None:
                self._server = listener.Server(self.run_dir, self._identify, self._deliver)
                self._server.start()
                threading.Thread(target=self._checkpoints, daemon=True).start()
            if self.pane is not None and self.tmux.state(self.pane).exists:
                self.tmux.respawn(self.pane, spec)
            else:
                self.pane = self.tmux.launch(spec)
            if self._reaper is None or not reaper.running(*self._reaper):
                watcher = reaper.start(os.getpid(), self.socket)
                self._reaper = (watcher, procinfo.start_time(watcher))
            return self.pane

    def _follow_transcript(self, spec: LaunchSpec, transcript: dict[str, Any]) -> None:
        config = usage.config_dir({**os.environ, **spec.env})
        path = usage.transcript_path(config, self.checkout.resolve(), str(transcript["session"]))
        if self._tail is not None and self._tail.path == path:
            return  # the same session again (a respawn here): its file is here already
        have = transcript.get("have")
        have = have if isinstance(have, bytes) else b""
        if have and read_regular(path, transcripts.MAX_BYTES) is None:
            write_inside(config, path.relative_to(config).as_posix(), have)
        self._tail = transcripts.Tail(path, read_regular, have)

    def _wait_for_tool(self, message: dict[str, Any]) -> None:
        """A ``PreToolUse`` hook waits (briefly) for the message asking for its tool to
        reach the transcript, so the supervisor has it before the tool can run (as
        locally: Claude Code may run the hook before it has written that message)."""
        tail = self._tail
        payload = message.get("payload")
        ask = payload.get("tool_use_id") if isinstance(payload, dict) else None
        if tail is None or message.get("event") != "PreToolUse" or not isinstance(ask, str):
            return
        wanted, deadline = ask.encode("utf-8"), time.monotonic() + TRANSCRIPT_WAIT
        while ask and wanted not in (read_regular(tail.path, transcripts.MAX_BYTES) or b""):
            if time.monotonic() >= deadline:
                return
            time.sleep(0.02)

    def transcript_whole(self) -> dict[str, Any] | None:
        """The whole transcript (the supervisor's copy did not follow on from a delta)."""
        with self._cond:
            if self._tail is None:
                return None
            self._tail = transcripts.Tail(self._tail.path, read_regular)
            return self._tail.delta()

    # the session -----------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        if self.pane is None:
            return {"alive": False, "dead_status": None, "pid": None, "exists": False}
        st = self.tmux.state(self.pane)
        return {
            "alive": st.alive,
            "dead_status": st.dead_status,
            "pid": st.pid,
            "exists": st.exists,
        }

    def capture(self, lines: int) -> str:
        assert self.pane is not None
        return self.tmux.capture(self.pane, lines)

    def paste(self, text: str, bracketed: bool, paths: dict[str, str]) -> None:
        assert self.pane is not None
        self.tmux.paste(self.pane, rewrite_paths(text, paths, self._here()), bracketed=bracketed)

    def send_keys(self, keys: list[str]) -> None:
        assert self.pane is not None
        self.tmux.send_keys(self.pane, *keys)

    def attach_target(self) -> dict[str, str]:
        return {"socket": self.socket, "session": self.tmux.session, "pane": self.pane or ""}

    # the terminal relay of `lo-orch attach` (cluster/terminal.py does the pty work) --
    def _terminal(self) -> Any:
        if self._term is None:
            self._term = TerminalHost()
        return self._term

    def term_open(self, rows: int, cols: int) -> str:
        """A tmux client attached to this session, in a pty on this node (read-write);
        what it runs is decided here, never by the caller."""
        tmux = shutil.which("tmux") or "tmux"
        argv = [tmux, "-L", self.socket, "attach-session", "-t", f"={self.tmux.session}"]
        return str(self._terminal().open(argv, rows, cols))

    def term_read(self, term_id: str, timeout: float) -> bytes | None:
        data: bytes | None = self._terminal().read(term_id, timeout)
        return data

    def term_write(self, term_id: str, data: bytes) -> None:
        self._terminal().write(term_id, data)

    def term_resize(self, term_id: str, rows: int, cols: int) -> None:
        self._terminal().resize(term_id, rows, cols)

    def term_close(self, term_id: str) -> None:
        self._terminal().close(term_id)

    # the inbox -------------------------------------------------------------------------
    def _identify(self, pid: int) -> str | None:
        if self.pane is None:
            return None
        root = self.tmux.state(self.pane).pid
        return self.task if root is not None and root in procinfo.ancestors(pid) else None

    def _deliver(self, request: listener.Request) -> None:
        rid = str(next(self._ids))
        from_pane = request.task == self.task
        item = {
            "id": rid,
            "message": request.message,
            "from_pane": from_pane,
            "queued": time.monotonic(),
        }
        if from_pane:
            self._wait_for_tool(request.message)
        with self._cond:
            # read and queued under one lock: the deltas reach the supervisor in order
            if from_pane and self._tail is not None:
                item["transcript"] = self._tail.delta()
            self._pending[rid] = request
            self._queue.append(item)
            self._cond.notify_all()

    def next_requests(self, timeout: float) -> dict[str, Any]:
        """What the session sent since the last call (waits up to ``timeout`` for one), and
        the newest checkpoint not yet collected."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._queue and self._checkpoint is None and not self._closed.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            queue, self._queue = self._queue, []
            checkpoint, self._checkpoint = self._checkpoint, None
            # what the session wrote since the last request's delta, read after every
            # queued one: Claude Code may write a turn's last message after its Stop hook
            # ran (anthropics/claude-code#15813), and no request of the session may follow
            trailing = self._tail.delta() if self._tail is not None else None
        # what the session's tools left in this node's inbox folder while nobody answered:
        # a hint only (anyone on the node could have written it). First: each was sent
        # before its sender's wait of CLIENT_TIMEOUT ended unanswered, so before any
        # request still fresh below (a prompt's arrival is read before the signal after it)
        handed = [
            {"id": "", "message": kept.message, "from_pane": True, "stale": True}
            for kept in listener.drain(self.run_dir, [self.task])
        ]
        now = time.monotonic()
        for item in queue:
            if now - float(item.pop("queued")) <= STALE_AFTER:
                handed.append({**item, "stale": False})
                continue
            # nobody collected it while its sender waited (no supervisor ran): the sender
            # gets None now, and sends it again (a signal, to the supervisor now here) or
            # leaves it in the inbox folder. Handed over too, this copy would be a second
            # hint of the same message: a restarted supervisor asked a session to signal
            # again after its signal had counted.
            self.answer(item["id"], None)
        return {"requests": handed, "checkpoint": checkpoint, "transcript": trailing}

    def transcript_delta(self) -> dict[str, Any] | None:
        """What of the transcript the supervisor lacks (the session is about to end)."""
        with self._cond:
            return self._tail.delta() if self._tail is not None else None

    def answer(self, rid: str, reply: Any) -> None:
        with self._cond:
            request = self._pending.pop(rid, None)
        if request is not None:
            request.answer(reply)

    # commits back ------------------------------------------------------------------------
    def acknowledge(self, commits: list[str]) -> None:
        """The supervisor has these commits: later bundles leave them out."""
        with self._lock:
            self.known = list(dict.fromkeys([*commits, *self.known]))[:16]

    def export(self, known: list[str]) -> dict[str, Any]:
        """The task branch and a work-in-progress commit of the whole working tree, as one
        bundle without what the supervisor has (``known``)."""
        with self._lock:
            self.acknowledge(known)
            return self._export()

    def _export(self) -> dict[str, Any]:
        wip = bundles.wip_commit(self.checkout)
        git(self.checkout, "update-ref", WIP_REF, wip)
        head = git(self.checkout, "rev-parse", f"refs/heads/{self.branch}").stdout.strip()
        data = bundles.create(self.checkout, [f"refs/heads/{self.branch}", WIP_REF], self.known)
        tree = git(self.checkout, "rev-parse", f"{wip}^{{tree}}").stdout.strip()
        # the session's plan (plans/<task>.md), agent-written
        plan = read_regular(self.run_dir / "plans" / f"{self.task}.md", 1 << 20)
        return {
            "head": head,
            "wip": wip,
            "tree": tree,
            "bundle": data,
            "plan": plan,
            "at": time.time(),
        }

    def _checkpoints(self) -> None:
        while not self._closed.wait(self.checkpoint_seconds):
            try:
                with self._lock:
                    made = self._export()
            except Exception:  # a checkout mid-change: the next one
                continue
            if made["tree"] == self._last_wip_tree:
                continue
            self._last_wip_tree = made["tree"]
            with self._cond:
                self._checkpoint = made
                self._cond.notify_all()

    def close(self) -> None:
        """End the session: its tmux server, inbox and checkout go."""
        self._closed.set()
        with self._cond:
            self._cond.notify_all()
        if self._server is not None:
            self._server.close()
        with contextlib.suppress(Exception):
            self.tmux._tmux("kill-server", check=False)
        if self._reaper is not None:  # it sees the server gone and exits
            deadline = time.monotonic() + 10
            while reaper.running(*self._reaper) and time.monotonic() < deadline:
                time.sleep(0.05)
        shutil.rmtree(self.home, ignore_errors=True)
