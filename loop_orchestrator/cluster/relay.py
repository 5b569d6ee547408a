"""What comes back from a Ray cluster's sessions: ``Relay``, one collaborator of
``RayBackend``, given its ``actors.ActorCalls`` and ``mirror.Mirror``.

``serve``: one relay thread per session pulls what the session's tools sent to its node's
inbox and hands it to the supervisor, attested by the actor that holds the pane the sender
descends from, never by what it says; a restarted supervisor gets what the sessions left
before its loop decides anything. Before a signal is handed over, the mirror's ``sync``
brings the node's work into the local worktree; checkpoints the node sends are stored by
the mirror. A Claude Code session's transcript is kept on this machine too
(``transcripts.py``), updated before each request is handled. Where each session runs
(``nodes``) is recorded here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loop_orchestrator.cluster import loss, transcripts
from loop_orchestrator.cluster.actors import ActorCalls
from loop_orchestrator.cluster.connect import disconnect
from loop_orchestrator.cluster.mirror import Mirror
from loop_orchestrator.errors import TmuxError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.runstate import private
from loop_orchestrator.sessions import listener
from loop_orchestrator.sessions.backend import LaunchSpec
from loop_orchestrator.sessions.inbox import CLIENT_TIMEOUT

log = logging.getLogger(__name__)

#: how long ``serve`` waits for what the sessions left while no supervisor ran
FIRST_PULL_TIMEOUT = 20.0


class Relay:
    """Requests, checkpoints and transcripts back from the sessions' nodes."""

    def __init__(self, calls: ActorCalls, mirror: Mirror) -> None:
        self.calls = calls
        self.mirror = mirror
        self._lock = calls.lock
        self._relays: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._deliver: Callable[[listener.Request], None] | None = None
        self._note: Callable[..., None] | None = None
        self._stopped = threading.Event()
        #: task -> where its session runs (host, ip, node id)
        self.nodes: dict[str, dict[str, Any]] = {}

    def _copies_file(self) -> Path:
        return private.run_dir(self.calls.repo, self.calls.run_name) / "transcripts.json"

    def transcript(self, spec: LaunchSpec, *, carry: bool) -> dict[str, Any] | None:
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

    def keep_transcript(self, pane_id: str, task: str, delta: Any) -> None:
        """Put a delta of the session's transcript into the supervisor's copy (a failure
        is logged: the copy stays what it was, and the next delta asks for the whole)."""
        try:
            self._keep_transcript(pane_id, task, delta)
        except (OSError, TmuxError) as exc:
            log.warning("transcript not kept", extra={"task": task, "error": str(exc)})

    def _keep_transcript(self, pane_id: str, task: str, delta: Any) -> None:
        if not isinstance(delta, dict):
            return
        with self._lock:
            copy = self._copies().get(task)
        if copy is None:
            return
        if not transcripts.keep(Path(copy), delta):
            whole = self.calls.call(pane_id, "transcript_whole")
            if not isinstance(whole, dict) or not transcripts.keep(Path(copy), whole):
                return
            delta = whole
        data = delta.get("data")
        self.calls.stat(
            task, "transcript_bytes", float(len(data) if isinstance(data, bytes) else 0)
        )

    def placed(self, task: str, info: dict[str, Any]) -> None:
        """Record where the task's session runs (and tell the supervisor, once serving)."""
        self.nodes[task] = info
        self.calls.node_ids[task] = str(info.get("node_id", ""))
        if self._note is not None:
            with contextlib.suppress(Exception):
                self._note(task, node=f"{info['host']} ({info['ip']}, {info['node_id'][:8]})")

    def serve(self, deliver: Callable[[listener.Request], None], note: Callable[..., None]) -> None:
        """Relay every session's requests to ``deliver`` (the supervisor's own handling);
        ``note(task, **fields)`` records where a session runs."""
        self._deliver, self._note = deliver, note
        self._stopped.clear()
        first: list[threading.Event] = []
        for pane_id in self.calls.list_panes():
            first.append(self.start(pane_id))
            task, _ = self.calls.parse(pane_id)
            if task not in self.nodes:
                with contextlib.suppress(TmuxError):
                    self.placed(task, self.calls.call(pane_id, "info"))
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
        disconnect()

    def halt(self) -> None:
        """Let every relay thread end (the run's sessions are being killed)."""
        self._stopped.set()

    def forget(self, pane_id: str) -> None:
        """Stop relaying ``pane_id`` (its session was killed)."""
        with self._lock:
            self._relays.discard(pane_id)

    def start(self, pane_id: str) -> threading.Event:
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
        task, _ = self.calls.parse(pane_id)
        while not self._stopped.is_set():
            with self._lock:
                if pane_id not in self._relays:
                    return
            # the first call does not wait: it collects what is there
            wait = 2.0 if first.is_set() else 0.0
            met, got = self.calls.ask(pane_id, "next_requests", wait)
            if met is not loss.Met.ANSWERED:
                if self.calls.judge(pane_id, met) in ("lost", "error"):
                    break
                # silent for now (its node or the network): ask again, the supervisor's
                # liveness check decides when it is lost
                self._stopped.wait(1.0)
                continue
            handle = self.calls.handle(pane_id) if pane_id not in self.calls.lost else None
            if handle is None:
                break
            if got.get("checkpoint"):
                try:
                    self.mirror.keep_checkpoint(task, got["checkpoint"])
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
            if got.get("transcript"):  # taken after the requests' own: kept after them
                self.keep_transcript(pane_id, task, got["transcript"])
            first.set()
        with self._lock:
            self._relays.discard(pane_id)

    def _one(self, pane_id: str, task: str, handle: Any, req: dict[str, Any]) -> None:
        ray = self.calls.ray()
        message = req.get("message")
        if not isinstance(message, dict) or self._deliver is None:
            return
        from_pane = req.get("from_pane") is True
        if from_pane and req.get("transcript"):
            # before the request is handled: its spend is booked from this copy
            self.keep_transcript(pane_id, task, req["transcript"])
        if req.get("stale"):
            # nobody waits for its answer: a hint, as a message left in the inbox folder
            self._deliver(listener.Request(message, task, None, attested=False))
            return
        if from_pane and message.get("type") == "signal":
            try:
                self.mirror.sync(pane_id)
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
