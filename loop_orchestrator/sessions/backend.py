"""Agent sessions: the backend interface (delivery: delivery.py).

The supervisor talks only to a ``SessionBackend`` (create the place for a task's session,
launch, deliver, read the screen, alive?, kill, the command a user runs to attach, relay
remote sessions' requests), so a backend that runs sessions elsewhere fits without touching
it. The local tmux backend is ``tmux.py``, the Ray one ``cluster/ray_backend.py``;
``factory.run_backend`` is the one place a run's backend is built.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from loop_orchestrator.config import ClusterConfig
from loop_orchestrator.sessions.listener import Request

log = logging.getLogger(__name__)

SOCKET_ENV = "LO_ORCH_TMUX_SOCKET"


def tmux_socket() -> str | None:
    """The private tmux server name from ``LO_ORCH_TMUX_SOCKET`` (``tmux -L``), if set."""
    value = os.environ.get(SOCKET_ENV, "").strip()
    return value or None


class RunLike(Protocol):
    """What ``run_socket`` reads of a run (``state.RunState``)."""

    name: str
    repo: str
    created_at: str
    tmux_socket: str | None


def run_socket(run: RunLike) -> str:
    """The tmux server (``tmux -L`` name) of a run; never the user's default server unless
    configured.

    The server a run recorded when its supervisor started wins, so every later command
    (`attach`, `status`, `merge`, `cleanup`) reaches it from any terminal, whatever ``$TMUX``
    or ``LO_ORCH_TMUX_SOCKET`` say there (tmux without ``-L`` follows ``$TMUX``: a `merge`
    typed in a pane of another server once killed nothing and said it had). Before that,
    ``LO_ORCH_TMUX_SOCKET`` chooses (``default`` is tmux's own default server), else a
    server of the run's own, named after the repository, the run and when it was planned:
    a second run of the same name never shares the first one's server.
    """
    if run.tmux_socket:
        return run.tmux_socket
    chosen = tmux_socket()
    if chosen:
        return chosen
    digest = hashlib.sha256(f"{run.repo}\0{run.name}\0{run.created_at}".encode()).hexdigest()
    return f"lo-{run.name[:40]}-{digest[:10]}"


def run_owner(run: RunLike) -> str:
    """The run's identity on a tmux server (``@lo_run`` of its session): its repository, name
    and when it was planned, so two runs never take each other's session or panes."""
    digest = hashlib.sha256(f"{run.repo}\0{run.name}\0{run.created_at}".encode()).hexdigest()
    return digest[:16]


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds passed; returns the outcome."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


@dataclass
class LaunchSpec:
    """What to run in a task's pane: ``argv`` is executed as is, ``env`` is added to it.

    ``transcript`` is where the agent keeps its conversation on this machine (Claude Code:
    ``<config dir>/projects/<cwd>/<session id>.jsonl``), when lo-orch reads it (spend) or
    the agent needs it to resume: a backend that runs the session elsewhere keeps a copy
    there and takes it along when the session moves."""

    task: str
    cwd: Path
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    transcript: Path | None = None


@dataclass
class PaneState:
    pane_id: str
    alive: bool
    dead_status: int | None
    pid: int | None
    exists: bool
    #: the session went with its host (a cluster backend: its actor or node is gone), not
    #: by its agent exiting or a person killing it; never true for a local pane
    lost: bool = False


class SessionBackend(Protocol):
    """Where agent sessions run. The supervisor talks only to this."""

    @property
    def socket(self) -> str | None:
        """The local tmux server (``tmux -L`` name; None: tmux's default) of the run's own
        windows (the supervisor's, `run --detach`)."""
        ...

    @property
    def session(self) -> str:
        """The local tmux session of the run's own windows."""
        ...

    @property
    def cluster(self) -> ClusterConfig | None:
        """The cluster the sessions run on (None: this machine)."""
        ...

    @property
    def looks_off_loop(self) -> bool:
        """Whether the panes may be looked at (``alive_panes``, ``capture``) on a thread of
        the supervisor's own while its loop runs (``supervisor/panewatch.py``); else the
        loop looks at them itself."""
        ...

    def open_window(self, name: str, spec: LaunchSpec) -> str:
        """Run ``spec`` in a local window of its own named ``name`` (not a task's pane)."""
        ...

    def serve(self, deliver: Callable[[Request], None], note: Callable[..., None]) -> None:
        """Hand requests of sessions whose inbox the supervisor's listener cannot reach to
        ``deliver``; ``note(task, **fields)`` records where a session runs. A no-op where
        sessions use the local inbox."""
        ...

    def stop(self) -> None:
        """Stop what ``serve`` started (the sessions keep running)."""
        ...

    def ensure_session(self) -> None: ...

    def launch(self, spec: LaunchSpec) -> str: ...

    def respawn(self, pane_id: str, spec: LaunchSpec) -> None: ...

    def state(self, pane_id: str) -> PaneState: ...

    def capture(self, pane_id: str, lines: int = 200) -> str: ...

    def look(self, pane_id: str, lines: int = 0) -> tuple[PaneState, str]:
        """The pane's ``state`` and its text (``capture``) in one look, for a poll that
        wants both; a pane that is gone has no text, nor one whose text could not be read
        (a ``TmuxError``)."""
        ...

    def paste(self, pane_id: str, text: str, *, bracketed: bool = True) -> None: ...

    def send_keys(self, pane_id: str, *keys: str) -> None: ...

    def kill_pane(self, pane_id: str) -> None: ...

    def kill_session(self) -> None: ...

    def attach_argv(self, pane_id: str | None) -> list[str]: ...

    def session_exists(self) -> bool: ...

    def list_panes(self) -> dict[str, str]: ...

    def alive_panes(self) -> dict[str, bool]: ...

    def task_pids(self) -> dict[int, str]: ...
