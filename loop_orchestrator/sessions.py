"""Agent sessions: the backend interface and the local tmux backend (delivery: delivery.py).

The supervisor talks only to a ``SessionBackend`` (create the place for a task's session,
launch, deliver, read the screen, alive?, kill, the command a user runs to attach), so a
backend that runs sessions elsewhere can come later without touching it.

tmux facts this relies on (tmux 3.3a): a shell command given as several arguments is
executed directly (no ``default-shell``), so the user's shell never parses agent argv;
``remain-on-exit`` is inherited by panes split from a window that has it, which avoids the
race of setting it after a fast-dying process already exited; pane ids (``%N``) are unique
per server but reused after a server restart, so every pane operation first checks that the
pane belongs to this run's session.

libtmux is used for the exact session lookup; everything else goes through ``proc.run``
with plain tmux argument lists, because delivery needs stdin (``load-buffer -``), options
libtmux does not expose (``-e`` on respawn-pane, pane user options) and timeouts (libtmux
calls have none, and a supervisor must never hang on a wedged tmux server).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shlex
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import libtmux
from libtmux import exc as libtmux_exc

from loop_orchestrator import proc
from loop_orchestrator.errors import TmuxError

if TYPE_CHECKING:
    from loop_orchestrator.cluster.ray_backend import RayBackend
    from loop_orchestrator.config import ClusterConfig

log = logging.getLogger(__name__)

SOCKET_ENV = "LO_ORCH_TMUX_SOCKET"
#: agent panes per window before a new window is opened
PANES_PER_WINDOW = 4
#: size of a detached session's windows (tmux's default 80x24 is too small for 4 panes)
DEFAULT_SIZE = ("240", "60")
#: how long one tmux client call may take before it counts as a failure
TMUX_TIMEOUT = 20.0

_INSTALL_HINT = "Install it with `apt-get install tmux` (Debian/Ubuntu) or `brew install tmux`."
_RUN_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_PANE_ID_RE = re.compile(r"^%[0-9]+$")
_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: keys ``send_keys`` accepts: tmux key names, C-/M- chords and single visible characters
_NAMED_KEYS = frozenset(
    {
        "Enter",
        "Escape",
        "Tab",
        "BTab",
        "BSpace",
        "Space",
        "Up",
        "Down",
        "Left",
        "Right",
        "Home",
        "End",
        "PageUp",
        "PageDown",
        "PPage",
        "NPage",
        "DC",
        "IC",
    }
)
_KEY_RE = re.compile(
    r"^(?:[CMS]-(?:[A-Za-z0-9\[\]\\]|Space|Enter|Up|Down|Left|Right)|F[0-9]{1,2}|\S)$"
)
#: a process on the placeholder pane of an empty window (never an agent)
_KEEPER_ARGV = (
    "/bin/sh",
    "-c",
    "printf '%s\\n' 'loop-orchestrator: agent panes open here'; exec sleep 2147483647",
)
_PANE_FIELDS = (
    "#{pane_id}\t#{session_name}\t#{window_id}\t#{pane_dead}\t#{pane_dead_status}"
    "\t#{pane_dead_signal}\t#{pane_pid}\t#{@lo_task}\t#{@lo_keeper}"
)


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
    configured (issue 12, item 6).

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


def run_backend(run: RunLike, cluster: ClusterConfig | None = None) -> TmuxBackend | RayBackend:
    """The session backend of a run: the one place it is built (on the run's own server).

    A run that recorded ``cluster`` in run.json (issue 19) has its sessions on that Ray
    cluster, from any terminal; ``cluster`` (the settings) chooses only for a run that has
    not started yet (a run begun on tmux stays there).
    """
    recorded: Any = getattr(run, "cluster", None)
    if isinstance(recorded, dict) and recorded.get("backend") == "ray":
        from loop_orchestrator.cluster.ray_backend import RayBackend, cluster_settings

        return RayBackend(run, cluster_settings(recorded))
    fresh = str(getattr(run, "phase", "")) == "awaiting_plan_approval"
    if recorded is None and cluster is not None and cluster.backend == "ray" and fresh:
        from loop_orchestrator.cluster.ray_backend import RayBackend

        return RayBackend(run, cluster)
    return TmuxBackend(run.name, socket=run_socket(run))


def session_name(run_name: str) -> str:
    return f"lo-{run_name}"


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
    """What to run in a task's pane: ``argv`` is executed as is, ``env`` is added to it."""

    task: str
    cwd: Path
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class PaneState:
    pane_id: str
    alive: bool
    dead_status: int | None
    pid: int | None
    exists: bool


class SessionBackend(Protocol):
    """Where agent sessions run. The supervisor talks only to this."""

    def ensure_session(self) -> None: ...

    def launch(self, spec: LaunchSpec) -> str: ...

    def respawn(self, pane_id: str, spec: LaunchSpec) -> None: ...

    def state(self, pane_id: str) -> PaneState: ...

    def capture(self, pane_id: str, lines: int = 200) -> str: ...

    def paste(self, pane_id: str, text: str, *, bracketed: bool = True) -> None: ...

    def send_keys(self, pane_id: str, *keys: str) -> None: ...

    def kill_pane(self, pane_id: str) -> None: ...

    def kill_session(self) -> None: ...

    def attach_argv(self, pane_id: str | None) -> list[str]: ...

    def session_exists(self) -> bool: ...

    def list_panes(self) -> dict[str, str]: ...

    def alive_panes(self) -> dict[str, bool]: ...

    def task_pids(self) -> dict[int, str]: ...


@dataclass(frozen=True)
class _PaneInfo:
    pane_id: str
    session: str
    window_id: str
    dead: bool
    dead_status: int | None
    pid: int | None
    task: str
    keeper: bool


def _parse_pane_line(line: str) -> _PaneInfo | None:
    parts = line.split("\t")
    if len(parts) != 9:
        return None
    pane_id, session, window_id, dead, status, signal, pid, task, keeper = parts
    is_dead = dead == "1"
    dead_status: int | None = None
    if is_dead:
        if status.strip().lstrip("-").isdigit():
            dead_status = int(status)
        elif signal.strip().isdigit():
            dead_status = 128 + int(signal)  # killed by a signal: the shell's convention
    return _PaneInfo(
        pane_id=pane_id,
        session=session,
        window_id=window_id,
        dead=is_dead,
        dead_status=dead_status,
        pid=int(pid) if pid.isdigit() and not is_dead else None,
        task=task,
        keeper=keeper == "1",
    )


def _check_pane_id(pane_id: str) -> None:
    if not _PANE_ID_RE.match(pane_id):
        msg = f"{pane_id!r} is not a tmux pane id"
        raise TmuxError(
            msg,
            hint="Pane ids look like %3; the status file may have been edited by hand.",
        )


def _check_spec(spec: LaunchSpec) -> None:
    if not spec.argv:
        msg = f"nothing to run for task {spec.task}: the command is empty"
        raise TmuxError(msg)
    if not spec.task:
        msg = "a session needs a task id"
        raise TmuxError(msg)
    for key, value in spec.env.items():
        if not _ENV_KEY_RE.match(key) or "\0" in value:
            msg = f"invalid environment variable for task {spec.task}: {key!r}"
            raise TmuxError(
                msg,
                hint="Names are letters, digits and underscores; values cannot hold NUL.",
            )
    if not Path(spec.cwd).is_dir():
        msg = f"the working folder of task {spec.task} does not exist: {spec.cwd}"
        raise TmuxError(
            msg,
        )


def _pane_command(argv: list[str]) -> list[str]:
    """The pane's command: ``/bin/sh -c "exec <argv quoted>"`` as separate tmux arguments.

    ``shlex.join`` makes every piece of ``argv`` a literal word for ``sh``, and handing tmux
    three arguments makes it exec ``/bin/sh`` itself rather than the user's default-shell
    (fish and others quote differently). ``exec`` keeps the agent as the pane's process.
    """
    return ["/bin/sh", "-c", "exec " + shlex.join(argv)]


def _env_options(env: dict[str, str]) -> list[str]:
    options: list[str] = []
    for key, value in env.items():
        options += ["-e", f"{key}={value}"]
    return options


class TmuxBackend:
    """Agent sessions as panes of the tmux session ``lo-<run>``.

    Agent panes are tiled, at most four per window; a window is opened with a placeholder
    ("keeper") pane that is removed once the first agent pane is split from it. Panes keep
    ``remain-on-exit on`` so an exit is seen with its status. Panes carry the user option
    ``@lo_task`` so a restarted supervisor finds them again.
    """

    def __init__(self, run_name: str, socket: str | None = None) -> None:
        if not _RUN_NAME_RE.match(run_name):
            msg = f"{run_name!r} cannot name a tmux session"
            raise TmuxError(
                msg,
                hint="Run names use letters, digits, '-' and '_' only.",
            )
        self.run_name = run_name
        self.session = session_name(run_name)
        self.socket = socket if socket is not None else tmux_socket()
        self._lock = threading.RLock()
        self._server: libtmux.Server | None = None
        self._version_ok = False

    # plumbing ----------------------------------------------------------------------
    def _tmux_bin(self) -> str:
        found = shutil.which("tmux")
        if not found:
            msg = "tmux not found"
            raise TmuxError(msg, hint=_INSTALL_HINT)
        return found

    def _server_args(self) -> list[str]:
        return ["-L", self.socket] if self.socket else []

    def _tmux(self, *args: str, input: str | None = None, check: bool = True) -> proc.Result:
        argv = [self._tmux_bin(), *self._server_args(), *args]
        result = proc.run(argv, input=input, timeout=TMUX_TIMEOUT, check=False)
        if check and not result.ok:
            detail = result.stderr.strip() or (
                "timed out" if result.returncode is None else f"exit {result.returncode}"
            )
            msg = f"tmux {args[0]} failed for session {self.session}: {detail}"
            raise TmuxError(
                msg,
                hint="Check the tmux server with `tmux"
                + (f" -L {self.socket}" if self.socket else "")
                + " ls`.",
            )
        return result

    def _libtmux_server(self) -> libtmux.Server:
        if self._server is None:
            self._server = libtmux.Server(socket_name=self.socket)
        return self._server

    def _panes(self) -> list[_PaneInfo]:
        """Every pane of this run's session (empty when there is no session)."""
        result = self._tmux(
            "list-panes", "-s", "-t", f"={self.session}", "-F", _PANE_FIELDS, check=False
        )
        if not result.ok:
            return []
        infos = [_parse_pane_line(line) for line in result.stdout.splitlines()]
        return [i for i in infos if i is not None and i.session == self.session]

    def _pane_info(self, pane_id: str) -> _PaneInfo | None:
        """The pane if it exists *in this run's session*; another session's pane is None."""
        _check_pane_id(pane_id)
        result = self._tmux("list-panes", "-t", pane_id, "-F", _PANE_FIELDS, check=False)
        if not result.ok:
            return None
        for line in result.stdout.splitlines():
            info = _parse_pane_line(line)
            if info is not None and info.pane_id == pane_id:
                return info if info.session == self.session else None
        return None

    def _own_pane(self, pane_id: str, action: str) -> _PaneInfo:
        info = self._pane_info(pane_id)
        if info is None:
            msg = f"cannot {action} pane {pane_id}: it is not a pane of session {self.session}"
            raise TmuxError(
                msg,
                hint="The session may have ended; `lo-orch status` shows the task's state.",
            )
        return info

    # sessions ----------------------------------------------------------------------
    def session_exists(self) -> bool:
        self._tmux_bin()
        try:
            return bool(self._libtmux_server().has_session(self.session, exact=True))
        except libtmux_exc.TmuxCommandNotFound as exc:
            msg = "tmux not found"
            raise TmuxError(msg, hint=_INSTALL_HINT) from exc

    def _check_version(self) -> None:
        """tmux 3.0 or newer: ``-e`` on split-window/respawn-pane and pane options."""
        if self._version_ok:
            return
        result = self._tmux("-V", check=False)
        match = re.search(r"(\d+)\.(\d+)", result.stdout)
        if match and (int(match.group(1)), int(match.group(2))) < (3, 0):
            msg = f"{result.stdout.strip()} is too old: lo-orch needs tmux 3.0 or newer"
            raise TmuxError(msg, hint=_INSTALL_HINT)
        self._version_ok = True

    def ensure_session(self) -> None:
        """Create ``lo-<run>`` (detached) unless it exists."""
        with self._lock:
            self._check_version()
            if self.session_exists():
                return
            result = self._tmux(
                "new-session",
                "-d",
                "-s",
                self.session,
                "-n",
                "agents",
                "-x",
                DEFAULT_SIZE[0],
                "-y",
                DEFAULT_SIZE[1],
                "-P",
                "-F",
                "#{window_id}\t#{pane_id}",
                *_KEEPER_ARGV,
                check=False,
            )
            if not result.ok:
                if self.session_exists():  # created by someone else meanwhile
                    return
                msg = f"could not create tmux session {self.session}: {result.stderr.strip()}"
                raise TmuxError(
                    msg,
                    hint=_INSTALL_HINT if "not found" in result.stderr else None,
                )
            window_id, pane_id = result.stdout.strip().split("\t")
            self._prepare_window(window_id, pane_id)
            log.info("tmux session created", extra={"session": self.session})

    def _prepare_window(self, window_id: str, keeper_pane: str) -> None:
        self._tmux("set-option", "-w", "-t", window_id, "remain-on-exit", "on")
        self._tmux("set-option", "-p", "-t", keeper_pane, "@lo_keeper", "1")

    def kill_session(self) -> None:
        """Kill ``lo-<run>`` by its exact name (never a prefix match)."""
        with self._lock:
            if not self.session_exists():
                return
            self._tmux("kill-session", "-t", f"={self.session}")
            log.info("tmux session killed", extra={"session": self.session})

    # panes -------------------------------------------------------------------------
    def launch(self, spec: LaunchSpec) -> str:
        """Start ``spec`` in a new tiled pane (a new window when the last one has 4)."""
        _check_spec(spec)
        with self._lock:
            self.ensure_session()
            window_id = self._window_with_room() or self._new_window()
            try:
                pane_id = self._split(window_id, spec)
            except TmuxError as exc:
                if "no space for new pane" not in exc.message:
                    raise
                # a small attached client shrank the window: open another one
                window_id = self._new_window()
                pane_id = self._split(window_id, spec)
            self._tmux("set-option", "-p", "-t", pane_id, "@lo_task", spec.task)
            for info in self._panes():
                if info.window_id == window_id and info.keeper:
                    self._tmux("kill-pane", "-t", info.pane_id)
            self._tmux("select-layout", "-t", window_id, "tiled")
        log.info("agent pane launched", extra={"task": spec.task, "pane": pane_id})
        return pane_id

    def _new_window(self) -> str:
        result = self._tmux(
            "new-window",
            "-d",
            "-t",
            f"={self.session}:",
            "-n",
            "agents",
            "-P",
            "-F",
            "#{window_id}\t#{pane_id}",
            *_KEEPER_ARGV,
        )
        window_id, keeper = result.stdout.strip().split("\t")
        self._prepare_window(window_id, keeper)
        return window_id

    def _split(self, window_id: str, spec: LaunchSpec) -> str:
        # Splitting from a window with remain-on-exit makes the pane inherit it before the
        # agent runs, so even an instant exit leaves a dead pane with its status.
        self._tmux("select-layout", "-t", window_id, "tiled")
        result = self._tmux(
            "split-window",
            "-d",
            "-t",
            window_id,
            "-c",
            str(spec.cwd),
            *_env_options(spec.env),
            "-P",
            "-F",
            "#{pane_id}",
            *_pane_command(spec.argv),
        )
        return result.stdout.strip()

    def _window_with_room(self) -> str | None:
        counts: dict[str, int] = {}
        other: set[str] = set()  # windows holding a pane that is no agent (the supervisor)
        for info in self._panes():  # in window order
            counts.setdefault(info.window_id, 0)
            if info.task:
                counts[info.window_id] += 1
            elif not info.keeper:
                other.add(info.window_id)
        for window_id, count in counts.items():
            if count < PANES_PER_WINDOW and window_id not in other:
                return window_id
        return None

    def open_window(self, name: str, spec: LaunchSpec) -> str:
        """Run ``spec`` in a window of its own named ``name`` (not an agent pane: it is not
        tagged with a task and agents are never tiled into it); returns its pane id."""
        _check_spec(spec)
        with self._lock:
            self.ensure_session()
            result = self._tmux(
                "new-window",
                "-d",
                "-t",
                f"={self.session}:",
                "-n",
                name,
                "-c",
                str(spec.cwd),
                *_env_options(spec.env),
                "-P",
                "-F",
                "#{pane_id}",
                *_pane_command(spec.argv),
            )
            pane_id = result.stdout.strip()
            self._tmux("set-option", "-p", "-t", pane_id, "remain-on-exit", "on")
        log.info("window opened", extra={"window": name, "pane": pane_id})
        return pane_id

    def respawn(self, pane_id: str, spec: LaunchSpec) -> None:
        """Run ``spec`` again in the same pane (``respawn-pane -k``), dead or alive."""
        _check_spec(spec)
        with self._lock:
            self._own_pane(pane_id, "respawn")
            self._tmux(
                "respawn-pane",
                "-k",
                "-t",
                pane_id,
                "-c",
                str(spec.cwd),
                *_env_options(spec.env),
                *_pane_command(spec.argv),
            )
            self._tmux("set-option", "-p", "-t", pane_id, "@lo_task", spec.task)
        log.info("agent pane respawned", extra={"task": spec.task, "pane": pane_id})

    def state(self, pane_id: str) -> PaneState:
        info = self._pane_info(pane_id)
        # tmux marks a pane dead when its pty closes, a moment before it collects the exit
        # status on SIGCHLD. With libutempter (Debian's tmux) that SIGCHLD can be lost for
        # good: utempter's own handler is installed while tmux removes the utmp record of
        # the closing pane (tmux/tmux#311), leaving a zombie and no status. The fix the
        # tmux author suggests is to send tmux a SIGCHLD, which only makes it reap.
        nudged = False
        deadline = time.monotonic() + 1.0
        while info is not None and info.dead and info.dead_status is None:
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
            if not nudged:
                nudged = self._nudge_server()
            info = self._pane_info(pane_id)
        if info is None:
            return PaneState(pane_id, alive=False, dead_status=None, pid=None, exists=False)
        return PaneState(
            pane_id, alive=not info.dead, dead_status=info.dead_status, pid=info.pid, exists=True
        )

    def _nudge_server(self) -> bool:
        """Send this tmux server a SIGCHLD so it reaps exited panes (see ``state``)."""
        result = self._tmux("display-message", "-p", "#{pid}", check=False)
        pid = result.stdout.strip()
        if not result.ok or not pid.isdigit():
            return False
        try:
            os.kill(int(pid), signal.SIGCHLD)
        except OSError:
            return False
        log.debug("tmux server nudged to reap", extra={"server_pid": pid})
        return True

    def capture(self, pane_id: str, lines: int = 200) -> str:
        """The pane's text: the visible screen plus ``lines`` lines of history (0: none).

        Spaces the program wrote at a line's end are kept (``-N``), so a ready pattern such
        as ``^> `` can match a prompt that ends in a space.
        """
        self._own_pane(pane_id, "read")
        start = str(-max(lines, 0))
        return self._tmux("capture-pane", "-p", "-N", "-t", pane_id, "-S", start).stdout

    def paste(self, pane_id: str, text: str, *, bracketed: bool = True) -> None:
        """Paste ``text`` through a uniquely named tmux buffer (deleted after the paste).

        ``bracketed`` sends it as a bracketed paste (``-p``; only when the program asked
        for it, as a terminal would). Without it every line break becomes a space, so a
        line-oriented program receives one line.
        """
        self._own_pane(pane_id, "paste into")
        name = f"lo-{uuid.uuid4().hex}"
        self._tmux("load-buffer", "-b", name, "-", input=text)
        mode = ["-p"] if bracketed else ["-s", " "]
        try:
            self._tmux("paste-buffer", "-d", *mode, "-b", name, "-t", pane_id)
        except TmuxError:
            self._tmux("delete-buffer", "-b", name, check=False)
            raise

    def send_keys(self, pane_id: str, *keys: str) -> None:
        """Send named keys ("Enter", "Down", "C-c", a single character), never text."""
        for key in keys:
            if key not in _NAMED_KEYS and not _KEY_RE.match(key):
                msg = f"send_keys takes key names, not text: {key[:40]!r}"
                raise TmuxError(
                    msg,
                    hint="Deliver text with paste(); send Enter separately.",
                )
        self._own_pane(pane_id, "send keys to")
        self._tmux("send-keys", "-t", pane_id, *keys)

    def kill_pane(self, pane_id: str) -> None:
        """Kill one of this session's panes by id; a pane of another session is refused."""
        _check_pane_id(pane_id)
        with self._lock:
            result = self._tmux("list-panes", "-t", pane_id, "-F", _PANE_FIELDS, check=False)
            if not result.ok:
                return  # already gone
            self._own_pane(pane_id, "kill")
            if all(info.pane_id == pane_id for info in self._panes()):
                # The session's last pane: without it the session ends, the tmux server
                # exits, and a new server numbers panes from %0 again, so a task's recorded
                # pane id could name another task's pane. A keeper window keeps it alive.
                self._new_window()
            self._tmux("kill-pane", "-t", pane_id)
        log.info("agent pane killed", extra={"pane": pane_id})

    def list_panes(self) -> dict[str, str]:
        """pane id -> task for every agent pane of the session (found by ``@lo_task``)."""
        return {info.pane_id: info.task for info in self._panes() if info.task}

    def alive_panes(self) -> dict[str, bool]:
        """pane id -> alive, for every pane of the session, in one tmux call."""
        return {info.pane_id: not info.dead for info in self._panes()}

    def task_pids(self) -> dict[int, str]:
        """The process id of every live agent pane -> its task (``@lo_task``).

        tmux starts the pane's process and reports its pid: the root of everything the
        session runs, which no process inside the pane can change.
        """
        return {info.pid: info.task for info in self._panes() if info.task and info.pid}

    def windows(self) -> dict[str, list[str]]:
        """window id -> its pane ids, in window order (for tests and `doctor`)."""
        out: dict[str, list[str]] = {}
        for info in self._panes():
            out.setdefault(info.window_id, []).append(info.pane_id)
        return out

    # attach ------------------------------------------------------------------------
    def attach_argv(self, pane_id: str | None) -> list[str]:
        """The command a user runs to see the session, focused on ``pane_id`` if given.

        Inside tmux (``$TMUX``) on the same server it switches the client; inside another
        tmux server it attaches a nested client (``TMUX`` unset, as tmux requires).
        """
        if not self.session_exists():
            msg = f"run {self.run_name} has no tmux session ({self.session})"
            raise TmuxError(
                msg,
                hint="Sessions exist while tasks run; start them with `lo-orch run`.",
            )
        base = [self._tmux_bin(), *self._server_args()]
        focus: list[str] = []
        if pane_id is not None:
            self._own_pane(pane_id, "attach to")
            focus = ["select-window", "-t", pane_id, ";", "select-pane", "-t", pane_id, ";"]
        target = f"={self.session}"
        inside = os.environ.get("TMUX", "")
        if inside and self._same_server(inside):
            return [*base, *focus, "switch-client", "-t", target]
        prefix = ["env", "-u", "TMUX"] if inside else []
        return [*prefix, *base, *focus, "attach-session", "-t", target]

    def _same_server(self, tmux_env: str) -> bool:
        socket_path = tmux_env.split(",")[0]
        result = self._tmux("display-message", "-p", "#{socket_path}", check=False)
        return result.ok and result.stdout.strip() == socket_path
