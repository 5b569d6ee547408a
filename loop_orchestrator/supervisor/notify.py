"""Notifications: tell a person, who may be away, that something needs them.

Events (the ``event`` field): ``permission_request`` (a session asks to use a tool),
``task_blocked`` (a task needs a person: it signalled blocked, stalled, ran out of rework
rounds or of its budget — the reason is the message), ``limit_wait`` (a rate or usage
limit parked a task until a time), ``gate1_waiting`` (a plan waits for `lo-orch approve`),
``gate2_waiting`` (the run is ready for `lo-orch merge`), ``run_finished`` (the supervisor
stopped: ``state`` says how).

Each event goes, once, to every channel that is on (``[notify]``):
- ``command``: a command line (split like a shell would, run without one) that receives
  one JSON object on stdin: ``{"id", "event", "run", "repo", "task", "message", "at"}``
  (``task`` null for run events) — no environment, no token, no prompt text. It runs in a
  new process group and is killed with it after ``timeout`` seconds;
- ``desktop``: ``notify-send`` (Linux) or ``osascript`` (macOS), only when on PATH;
- ``tmux``: ``display-message`` on each terminal attached to the run's own tmux session
  (its own server; not the supervisor's control-mode client), and a
  terminal bell on the supervisor's terminal.

"Once": the id of every event is appended to ``notify/sent.jsonl`` in the run's private
folder *before* it is sent, so a restarted supervisor never sends it again (a crash in
between loses that one notification rather than repeating it). Sending happens on one
worker thread, in order; a slow or failing channel delays only the notifications after it,
never the supervisor.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import shlex
import shutil
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

from loop_orchestrator import proc
from loop_orchestrator.runstate import private
from loop_orchestrator.runstate.state import now_iso

log = logging.getLogger(__name__)

FOLDER = "notify"
SENT_FILE = "sent.jsonl"
EVENTS = (
    "permission_request",
    "task_blocked",
    "limit_wait",
    "gate1_waiting",
    "gate2_waiting",
    "run_finished",
)
#: how long a channel's program (notify-send, tmux) may take
CHANNEL_TIMEOUT = 5.0


class Notifier:
    """Sends a run's notifications, each once. ``close()`` waits for what is queued."""

    def __init__(
        self,
        repo: Path,
        run: str,
        config: Any,
        *,
        tmux_socket: str | None = None,
        tmux_session: str | None = None,
        which: Callable[[str], str | None] = shutil.which,
    ) -> None:
        self.repo = repo
        self.run = run
        self.config = config  # config.NotifyConfig
        self.tmux_socket = tmux_socket
        self.tmux_session = tmux_session
        self.which = which
        self.folder = private.run_dir(repo, run) / FOLDER
        self.queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.worker: threading.Thread | None = None

    # recording -------------------------------------------------------------------------
    def _sent(self) -> set[str]:
        path = self.folder / SENT_FILE
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return set()
        ids = set()
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                ids.add(str(json.loads(line)["id"]))
        return ids

    def notify(self, event: str, key: str, message: str, task: str | None = None) -> bool:
        """Send ``event`` unless one with the same ``key`` was sent for this run; True if
        it is sent now."""
        assert event in EVENTS, event
        doc = {
            "id": f"{event}:{key}",
            "event": event,
            "run": self.run,
            "repo": str(self.repo),
            "task": task,
            "message": message,
            "at": now_iso(),
        }
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        with FileLock(str(self.folder / "sent.lock"), timeout=30):
            if doc["id"] in self._sent():
                return False
            with (self.folder / SENT_FILE).open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(doc) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        self._start()
        self.queue.put(doc)
        return True

    # sending ---------------------------------------------------------------------------
    def _start(self) -> None:
        if self.worker is None or not self.worker.is_alive():
            self.worker = threading.Thread(target=self._work, name="lo-notify", daemon=True)
            self.worker.start()

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued (waiting at most ``timeout`` seconds), then stop."""
        if self.worker is None:
            return
        self.queue.put(None)
        self.worker.join(timeout)

    def _work(self) -> None:
        while True:
            doc = self.queue.get()
            if doc is None:
                return
            for channel in (self._command, self._desktop, self._tmux):
                try:
                    channel(doc)
                except OSError as exc:  # a channel's program missing or broken
                    log.warning("notification channel failed", extra={"error": str(exc)})

    def _command(self, doc: dict[str, Any]) -> None:
        if not self.config.command.strip():
            return
        proc.run_in_group(
            shlex.split(self.config.command),
            json.dumps(doc) + "\n",
            self.config.timeout,
            cwd=self.repo,
        )

    def _desktop(self, doc: dict[str, Any]) -> None:
        if not self.config.desktop:
            return
        title = f"lo-orch {self.run}" + (f": {doc['task']}" if doc["task"] else "")
        text = _headline(doc)
        send, osa = self.which("notify-send"), self.which("osascript")
        if send:
            proc.run_in_group([send, "--app-name=lo-orch", title, text], None, CHANNEL_TIMEOUT)
        elif osa:
            # the text travels as arguments, never as AppleScript source
            proc.run_in_group(
                [
                    osa,
                    "-e",
                    "on run argv",
                    "-e",
                    "display notification (item 2 of argv) with title (item 1 of argv)",
                    "-e",
                    "end run",
                    title,
                    text,
                ],
                None,
                CHANNEL_TIMEOUT,
            )

    def _tmux(self, doc: dict[str, Any]) -> None:
        if not self.config.tmux:
            return
        if sys.stderr.isatty():
            sys.stderr.write("\a")
            sys.stderr.flush()
        tmux = self.which("tmux")
        if self.tmux_session and self.tmux_socket and tmux:
            text = f"lo-orch: {_headline(doc)}".replace("#", "##")  # no tmux formats
            server = [tmux, "-L", self.tmux_socket]
            # each person's terminal on the run's session, by name: left to tmux, the
            # message goes to one client, the supervisor's control-mode client as likely
            listed = proc.run(
                [*server, "list-clients", "-t", f"={self.tmux_session}", "-F", _CLIENT],
                check=False,
                timeout=CHANNEL_TIMEOUT,
            )
            for line in listed.stdout.splitlines() if listed.ok else []:
                control, _, name = line.partition(" ")
                if control != "1" and name:  # (a tmux before the field says nothing)
                    proc.run_in_group(
                        [*server, "display-message", "-c", name, text], None, CHANNEL_TIMEOUT
                    )


#: a client of the run's session: whether it is a control-mode client, and its name
_CLIENT = "#{client_control_mode} #{client_name}"


def _headline(doc: dict[str, Any]) -> str:
    who = f"{doc['task']}: " if doc["task"] else ""
    return f"{who}{doc['message']}"[:300]


def for_plan(repo: Path, run: str, config: Any, created_at: str, tasks: int) -> None:
    """Gate 1 waits: a plan was recorded (`lo-orch plan`, the run created at
    ``created_at``); sent before the command ends."""
    notifier = Notifier(repo, run, config)
    notifier.notify(
        "gate1_waiting",
        created_at,
        f"the plan ({tasks} tasks) waits for Gate 1: review it, then `lo-orch approve`",
    )
    notifier.close(timeout=config.timeout + 2 * CHANNEL_TIMEOUT)
