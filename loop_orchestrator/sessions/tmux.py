"""The local tmux session backend: agent sessions as panes of the tmux session ``lo-<run>``
on the run's own server (``sessions.run_socket``).

tmux facts this relies on (tmux 3.3a): a shell command given as several arguments is
executed directly (no ``default-shell``), so the user's shell never parses agent argv;
``remain-on-exit`` is inherited by panes split from a window that has it, which avoids the
race of setting it after a fast-dying process already exited; pane ids (``%N``) are unique
per server but reused after a server restart, so every pane operation first checks that the
pane belongs to this run's session.

Every call is a plain tmux argument list run by ``proc.run`` (libtmux is not used: delivery
needs stdin (``load-buffer -``), options libtmux does not expose (``-e`` on respawn-pane,
pane user options) and timeouts, which libtmux calls have none of: a supervisor must never
hang on a wedged tmux server). While a supervisor serves (``serve`` to ``stop``) the calls
it can are sent to one control-mode client of the server instead (``tmuxcontrol``): the
same commands and answers, without a tmux process for each.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Callable

from loop_orchestrator import proc
from loop_orchestrator.config import ClusterConfig
from loop_orchestrator.errors import PaneGoneError, TmuxError
from loop_orchestrator.sessions import tmuxcontrol
from loop_orchestrator.sessions.backend import LaunchSpec, PaneState, tmux_socket
from loop_orchestrator.sessions.listener import Request
from loop_orchestrator.sessions.tmuxargs import (
    KEY_RE,
    NAMED_KEYS,
    PANE_FIELDS,
    THEN,
    PaneInfo,
    Sep,
    check_pane_id,
    check_spec,
    command_line,
    commands,
    env_options,
    pane_command,
    parse_pane_line,
)

log = logging.getLogger(__name__)

#: agent panes per window before a new window is opened
PANES_PER_WINDOW = 4
#: size of a detached session's windows (tmux's default 80x24 is too small for 4 panes)
DEFAULT_SIZE = ("240", "60")
#: how long one tmux client call may take before it counts as a failure
TMUX_TIMEOUT = 20.0

_INSTALL_HINT = "Install it with `apt-get install tmux` (Debian/Ubuntu) or `brew install tmux`."
_RUN_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
#: a run tag a tmux format can hold as it is (``TmuxBackend._ours_format``; the session's
#: name always can: ``_RUN_NAME_RE``)
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_-]+\Z")
#: keys a tmux command string can hold as they are (``send_keys`` in one call)
_PLAIN_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*\Z")
#: what tmux prints when it refused to act on a pane (the commands' own output is empty)
_REFUSED = "lo-orch-refused"
#: a process on the placeholder pane of an empty window (never an agent)
_KEEPER_ARGV = (
    "/bin/sh",
    "-c",
    "printf '%s\\n' 'loop-orchestrator: agent panes open here'; exec sleep 2147483647",
)


def session_name(run_name: str) -> str:
    return f"lo-{run_name}"


#: PATH -> the tmux program found on it
_TMUX_BINS: dict[str, str] = {}


class TmuxBackend:
    """Agent sessions as panes of the tmux session ``lo-<run>``.

    Agent panes are tiled, at most four per window; a window is opened with a placeholder
    ("keeper") pane that is removed once the first agent pane is split from it. Panes keep
    ``remain-on-exit on`` so an exit is seen with its status. Panes carry the user option
    ``@lo_task`` so a restarted supervisor finds them again.
    """

    def __init__(
        self,
        run_name: str,
        socket: str | None = None,
        env: dict[str, str] | None = None,
        owner: str | None = None,
        repo: str | None = None,
    ) -> None:
        if not _RUN_NAME_RE.match(run_name):
            msg = f"{run_name!r} cannot name a tmux session"
            raise TmuxError(
                msg,
                hint="Run names use letters, digits, '-' and '_' only.",
            )
        self.run_name = run_name
        self.session = session_name(run_name)
        #: the run this backend serves (``backend.run_owner``), tagged on the session it
        #: creates as ``@lo_run``: a session of the same name made by another run (two
        #: repositories, or two runs of one name, on a server the user chose) is not ours
        self.owner = owner
        self.repo = repo
        #: the environment tmux commands run in (so the server starts with it): None = ours
        self.env = env
        self.socket = socket if socket is not None else tmux_socket()
        self._lock = threading.RLock()
        self._version_ok = False
        self._version: tuple[int, int] | None = None
        #: the control-mode client calls go through while serving
        self.channel = tmuxcontrol.Channel(
            lambda: [self._tmux_bin(), *self._server_args()],
            self.session,
            self._tmux_version,
            lambda: proc.without_tokens(self.env),
            self._outlive_clients(),
        )

    @property
    def cluster(self) -> ClusterConfig | None:
        """None: the sessions run on this machine."""
        return None

    @property
    def looks_off_loop(self) -> bool:
        """True: a look is a tmux call, safe from any thread."""
        return True

    def serve(self, deliver: Callable[[Request], None], note: Callable[..., None]) -> None:
        """Nothing to relay: local sessions reach the supervisor's listener themselves.
        From now on until ``stop`` (a supervisor's run) calls go through a control-mode
        client where they can (``tmuxcontrol.Channel``)."""
        self.channel.start()

    def stop(self) -> None:
        """Close the control-mode client ``serve`` let calls use."""
        self.channel.stop()

    # plumbing ----------------------------------------------------------------------
    def _tmux_bin(self) -> str:
        path = os.environ.get("PATH", "")
        found = _TMUX_BINS.get(path)
        if found is None or not os.access(found, os.X_OK):
            # (looked up once per PATH: a search of PATH per tmux call was a good share
            # of what the supervisor's threads spent on tmux)
            found = shutil.which("tmux")
            if found:
                _TMUX_BINS[path] = found
        if not found:
            msg = "tmux not found"
            raise TmuxError(msg, hint=_INSTALL_HINT)
        return found

    def _server_args(self) -> list[str]:
        return ["-L", self.socket] if self.socket else []

    def _tmux(self, *args: str | Sep, input: str | None = None, check: bool = True) -> proc.Result:
        """One tmux call: ``args`` are the words of its commands, ``THEN`` between two."""
        result = self.channel.call(args, TMUX_TIMEOUT) if input is None else None
        if result is None:
            argv = [self._tmux_bin(), *self._server_args(), *command_line(args)]
            # the server starts with this environment and every pane inherits it: no token
            env = proc.without_tokens(self.env)
            result = proc.run(argv, env=env, input=input, timeout=TMUX_TIMEOUT, check=False)
        if check and not result.ok:
            detail = result.stderr.strip() or (
                "timed out" if result.returncode is None else f"exit {result.returncode}"
            )
            msg = f"tmux {' ; '.join(commands(args))} failed for session {self.session}: {detail}"
            raise TmuxError(msg, hint=self._server_hint())
        return result

    def _outlive_clients(self) -> tuple[str, ...]:
        """The call that makes the session outlive every client that detaches from it:
        the person's (`lo-orch attach`) and the supervisor's control-mode client, whose
        detach a user's ``set -g destroy-unattached on`` answers by ending every agent."""
        return ("set-option", "-t", f"={self.session}:", "destroy-unattached", "off")

    def _server_hint(self) -> str:
        return f"Check the tmux server with `tmux{f' -L {self.socket}' if self.socket else ''} ls`."

    def _listed(self) -> list[PaneInfo]:
        """Every pane of the session named ``lo-<run>``, whoever's (empty when there is none);
        each carries the session's tag (``@lo_run`` is the session's option)."""
        result = self._tmux(
            "list-panes", "-s", "-t", f"={self.session}", "-F", PANE_FIELDS, check=False
        )
        infos = [parse_pane_line(line) for line in result.stdout.splitlines()] if result.ok else []
        return [i for i in infos if i is not None and i.session == self.session]

    def _panes(self) -> list[PaneInfo]:
        """Every pane of this run's session (empty when there is no session)."""
        return [i for i in self._listed() if self._ours(i)]

    def _session_panes(self) -> list[PaneInfo]:
        """``ensure_session``, then ``_panes``: one tmux call when the session exists (its
        tag read from the listing)."""
        self._check_version()
        listed = self._listed()
        if not listed:  # (no such session: made, then listed)
            self.ensure_session()
            return self._panes()
        self._refuse_another_runs_session(listed[0].run)
        return [i for i in listed if self._ours(i)]

    def _ours(self, info: PaneInfo) -> bool:
        """Whether the pane is in this run's session: the name, and no other run's tag (an
        untagged session is one an earlier lo-orch made for this run)."""
        return info.session == self.session and (self.owner is None or info.run in ("", self.owner))

    def _refuse_another_runs_session(self, owner: str) -> None:
        """``TmuxError`` when the session's tag ``owner`` is another run's."""
        if self.owner is None or owner in ("", self.owner):
            return
        repo = self._tmux(
            "show-options", "-q", "-v", "-t", f"={self.session}:", "@lo_repo", check=False
        ).stdout.strip()
        msg = (
            f"tmux server {self.socket or 'default'} already has a session {self.session} "
            f"of another run (of {repo or 'another repository'})"
        )
        raise TmuxError(
            msg,
            hint="Finish or end that run first (`lo-orch cleanup` in its repository), give "
            "this run another name in its plan, or unset LO_ORCH_TMUX_SOCKET so that each "
            "run has a tmux server of its own.",
        )

    def _pane_info(self, pane_id: str) -> PaneInfo | None:
        """The pane if it exists *in this run's session*; another session's pane is None."""
        check_pane_id(pane_id)
        result = self._tmux("display-message", "-p", "-t", pane_id, PANE_FIELDS, check=False)
        if not result.ok:
            return None
        info = parse_pane_line(result.stdout.rstrip("\n"))
        if info is None or info.pane_id != pane_id:
            return None
        return info if self._ours(info) else None

    def _own_pane(self, pane_id: str, action: str) -> PaneInfo:
        info = self._pane_info(pane_id)
        if info is None:
            msg = f"cannot {action} pane {pane_id}: it is not a pane of session {self.session}"
            raise PaneGoneError(
                msg,
                hint="The session may have ended; `lo-orch status` shows the task's state.",
            )
        return info

    # sessions ----------------------------------------------------------------------
    def session_exists(self) -> bool:
        return self._session_tag() is not None

    def _session_tag(self) -> str | None:
        """The ``@lo_run`` tag of the session ``lo-<run>`` ("" when untagged), None when there
        is no such session: one tmux call (tmux prints empty fields for a missing target;
        the name it prints must be this one exactly)."""
        result = self._tmux(
            "display-message",
            "-p",
            "-t",
            f"={self.session}:",
            "#{session_name}\t#{@lo_run}",
            check=False,
        )
        name, _, tag = result.stdout.rstrip("\n").partition("\t")
        return tag if result.ok and name == self.session else None

    def _tmux_version(self) -> tuple[int, int] | None:
        """The server's tmux version (asked once; None when it did not say)."""
        self._check_version()
        return self._version

    def _check_version(self) -> None:
        """tmux 3.0 or newer: ``-e`` on split-window/respawn-pane and pane options."""
        if self._version_ok:
            return
        result = self._tmux("-V", check=False)
        match = re.search(r"(\d+)\.(\d+)", result.stdout)
        self._version = (int(match.group(1)), int(match.group(2))) if match else None
        if self._version is not None and self._version < (3, 0):
            msg = f"{result.stdout.strip()} is too old: lo-orch needs tmux 3.0 or newer"
            raise TmuxError(msg, hint=_INSTALL_HINT)
        self._version_ok = True

    def ensure_session(self) -> None:
        """Create ``lo-<run>`` (detached) unless it exists."""
        with self._lock:
            self._check_version()
            tag = self._session_tag()
            if tag is not None:
                self._refuse_another_runs_session(tag)
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
                # (in the same call: tmux ends an unattached session that has the option
                # on, a user's `set -g destroy-unattached on`, before a next call)
                THEN,
                *self._outlive_clients(),
                check=False,
            )
            if not result.ok:
                tag = self._session_tag()
                if tag is not None:  # created by someone else meanwhile
                    self._refuse_another_runs_session(tag)
                    return
                msg = f"could not create tmux session {self.session}: {result.stderr.strip()}"
                raise TmuxError(
                    msg,
                    hint=_INSTALL_HINT if "not found" in result.stderr else None,
                )
            window_id, pane_id = result.stdout.strip().split("\t")
            if self.owner is not None:
                self._tmux("set-option", "-t", f"={self.session}:", "@lo_run", self.owner)
                if self.repo:
                    self._tmux("set-option", "-t", f"={self.session}:", "@lo_repo", self.repo)
            self._prepare_window(window_id, pane_id)
            self.channel.session_made()
            log.info("tmux session created", extra={"session": self.session})

    def _prepare_window(self, window_id: str, keeper_pane: str) -> None:
        self._tmux("set-option", "-w", "-t", window_id, "remain-on-exit", "on")
        self._tmux("set-option", "-p", "-t", keeper_pane, "@lo_keeper", "1")

    def kill_session(self) -> None:
        """Kill ``lo-<run>`` by its exact name (never a prefix match)."""
        with self._lock:
            tag = self._session_tag()
            if tag is None:
                return
            if self.owner is not None and tag not in ("", self.owner):
                log.info("another run's tmux session left alone", extra={"session": self.session})
                return
            self.channel.close()  # (attached to the session: ended with it)
            self._tmux("kill-session", "-t", f"={self.session}")
            log.info("tmux session killed", extra={"session": self.session})

    # panes -------------------------------------------------------------------------
    def launch(self, spec: LaunchSpec) -> str:
        """Start ``spec`` in a new tiled pane (a new window when the last one has 4)."""
        check_spec(spec)
        with self._lock:
            panes = self._session_panes()
            window_id = _window_with_room(panes)
            if window_id is None:
                window_id, keeper = self._new_window()
                keepers = [keeper]
            else:
                keepers = [i.pane_id for i in panes if i.window_id == window_id and i.keeper]
            try:
                pane_id = self._split(window_id, spec)
            except TmuxError as exc:
                if "no space for new pane" not in exc.message:
                    raise
                # a small attached client shrank the window: open another one
                window_id, keeper = self._new_window()
                keepers = [keeper]
                pane_id = self._split(window_id, spec)
            # one call: the pane tagged with its task, the window's keeper gone (an agent
            # holds the window now), the panes tiled
            ended = [a for keeper in keepers for a in ("kill-pane", "-t", keeper, THEN)]
            self._tmux(
                *("set-option", "-p", "-t", pane_id, "@lo_task", spec.task, THEN),
                *ended,
                *("select-layout", "-t", window_id, "tiled"),
            )
        log.info("agent pane launched", extra={"task": spec.task, "pane": pane_id})
        return pane_id

    def _new_window(self) -> tuple[str, str]:
        """A new window of the session holding only a keeper pane: (window id, keeper)."""
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
        return window_id, keeper

    def _split(self, window_id: str, spec: LaunchSpec) -> str:
        # Splitting from a window with remain-on-exit makes the pane inherit it before the
        # agent runs, so even an instant exit leaves a dead pane with its status.
        result = self._tmux(
            *("select-layout", "-t", window_id, "tiled", THEN),
            "split-window",
            "-d",
            "-t",
            window_id,
            "-c",
            str(spec.cwd),
            *env_options(spec.env),
            "-P",
            "-F",
            "#{pane_id}",
            *pane_command(spec.argv),
        )
        return result.stdout.strip()

    def open_window(self, name: str, spec: LaunchSpec) -> str:
        """Run ``spec`` in a window of its own named ``name`` (not an agent pane: it is not
        tagged with a task and agents are never tiled into it); returns its pane id."""
        check_spec(spec)
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
                *env_options(spec.env),
                "-P",
                "-F",
                "#{pane_id}",
                *pane_command(spec.argv),
            )
            pane_id = result.stdout.strip()
            self._tmux("set-option", "-p", "-t", pane_id, "remain-on-exit", "on")
        log.info("window opened", extra={"window": name, "pane": pane_id})
        return pane_id

    def respawn(self, pane_id: str, spec: LaunchSpec) -> None:
        """Run ``spec`` again in the same pane (``respawn-pane -k``), dead or alive."""
        check_spec(spec)
        with self._lock:
            self._own_pane(pane_id, "respawn")
            self._tmux(
                "respawn-pane",
                "-k",
                "-t",
                pane_id,
                "-c",
                str(spec.cwd),
                *env_options(spec.env),
                *pane_command(spec.argv),
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
        return _state_of(info)

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

    def _at_once(self, pane_id: str, lines: int) -> tuple[PaneInfo, str] | None:
        """One tmux call: this run's pane's fields, then its text (tmux runs a command list
        in order and ends it at the first command that fails: no pane, no text). None when
        the call failed or the pane is not this run's: the callers ask again, one by one."""
        check_pane_id(pane_id)
        both = self._tmux(
            *("display-message", "-p", "-t", pane_id, PANE_FIELDS, THEN),
            *("capture-pane", "-p", "-N", "-t", pane_id, "-S", str(-max(lines, 0))),
            check=False,
        )
        if not both.ok:
            return None
        head, _, text = both.stdout.partition("\n")
        info = parse_pane_line(head)
        if info is None or info.pane_id != pane_id or not self._ours(info):
            return None
        return info, text

    def look(self, pane_id: str, lines: int = 0) -> tuple[PaneState, str]:
        """One tmux call for a pane that is there, alive or with its exit status (a dead
        pane whose status tmux has not collected yet is asked about by ``state``)."""
        found = self._at_once(pane_id, lines)
        if found is not None and not (found[0].dead and found[0].dead_status is None):
            info, text = found
            return _state_of(info), text
        state = self.state(pane_id)
        if not state.exists:
            return state, ""
        try:
            return state, self.capture(pane_id, lines)
        except TmuxError:  # (PaneGoneError too: gone since, the next look says so)
            return state, ""

    def capture(self, pane_id: str, lines: int = 200) -> str:
        """The pane's text: the visible screen plus ``lines`` lines of history (0: none).

        Spaces the program wrote at a line's end are kept (``-N``), so a ready pattern such
        as ``^> `` can match a prompt that ends in a space.
        """
        found = self._at_once(pane_id, lines)
        if found is not None:
            return found[1]
        start = str(-max(lines, 0))
        self._own_pane(pane_id, "read")
        try:
            return self._tmux("capture-pane", "-p", "-N", "-t", pane_id, "-S", start).stdout
        except TmuxError as exc:
            if self._pane_info(pane_id) is None:  # it went since _own_pane looked
                raise PaneGoneError(exc.message, hint=exc.hint) from exc
            raise

    def _ours_format(self) -> str | None:
        """A tmux format that is 1 for a pane of this run's session (``_ours``): the server
        judges it in the very command that acts on the pane (``if-shell -F``), so nothing
        can change between the look and the act, and it costs no call of its own. None when
        the run tag is not a plain word a format can hold as it is (the action then looks
        first, in a call of its own). The same rule as ``_ours``, which judges a pane's
        fields in Python: ``test_sessions`` holds the two to the same answers."""
        if self.owner is not None and not _PLAIN_WORD.match(self.owner):
            return None
        cond = f"#{{==:#{{session_name}},{self.session}}}"
        if self.owner is not None:  # (an untagged session is one an earlier lo-orch made)
            tag = f"#{{||:#{{==:#{{@lo_run}},}},#{{==:#{{@lo_run}},{self.owner}}}}}"
            cond = f"#{{&&:{cond},{tag}}}"
        return cond

    def _refused(self, pane_id: str, action: str) -> PaneGoneError:
        """Why tmux refused to ``action`` the pane: gone, another session's, or exited."""
        info = self._pane_info(pane_id)
        if info is not None and info.dead:
            msg = f"cannot {action} pane {pane_id}: its program exited"
            return PaneGoneError(msg, hint="`lo-orch status` shows the task's state.")
        msg = f"cannot {action} pane {pane_id}: it is not a pane of session {self.session}"
        return PaneGoneError(
            msg, hint="The session may have ended; `lo-orch status` shows the task's state."
        )

    def paste(self, pane_id: str, text: str, *, bracketed: bool = True) -> None:
        """Paste ``text`` through a uniquely named tmux buffer (deleted after the paste)
        into this run's pane while its program runs: ``PaneGoneError`` for a pane that is
        gone, another session's or dead (tmux 3.3a's server exits when a paste reaches a
        dead pane, taking every session of the run with it).

        ``bracketed`` sends it as a bracketed paste (``-p``; only when the program asked
        for it, as a terminal would). Without it every line break becomes a space, so a
        line-oriented program receives one line.

        One tmux call: the buffer is loaded, then pasted only if the server finds the pane
        this run's and alive, else deleted.
        """
        check_pane_id(pane_id)
        name = f"lo-{uuid.uuid4().hex}"
        mode = "-p" if bracketed else "-s ' '"
        ours = self._ours_format()
        if ours is None:  # (names a format cannot hold: whose pane it is, asked first)
            self._own_pane(pane_id, "paste into")
        alive = "#{?pane_dead,0,1}"  # (judged by the server whatever the names)
        cond = alive if ours is None else f"#{{&&:{ours},{alive}}}"
        result = self._tmux(
            *("load-buffer", "-b", name, "-", THEN),
            *("if-shell", "-F", "-t", pane_id, _itself(pane_id, cond)),
            f"paste-buffer -d {mode} -b {name} -t {pane_id}",
            f"delete-buffer -b {name} ; display-message -p {_REFUSED}",
            input=text,
            check=False,
        )
        if not result.ok:
            self._tmux("delete-buffer", "-b", name, check=False)
            detail = result.stderr.strip() or f"exit {result.returncode}"
            msg = f"tmux paste-buffer failed for session {self.session}: {detail}"
            raise TmuxError(msg, hint=self._server_hint())
        if _REFUSED in result.stdout:
            raise self._refused(pane_id, "paste into")

    def send_keys(self, pane_id: str, *keys: str) -> None:
        """Send named keys ("Enter", "Down", "C-c", a single character), never text, to
        this run's pane (``PaneGoneError`` for one that is gone or another session's)."""
        for key in keys:
            if key not in NAMED_KEYS and not KEY_RE.match(key):
                msg = f"send_keys takes key names, not text: {key[:40]!r}"
                raise TmuxError(
                    msg,
                    hint="Deliver text with paste(); send Enter separately.",
                )
        check_pane_id(pane_id)
        cond = self._ours_format()
        if cond is None or not all(_PLAIN_KEY.match(key) for key in keys):
            self._own_pane(pane_id, "send keys to")
            self._tmux("send-keys", "-t", pane_id, *keys)
            return
        result = self._tmux(  # (one call: sent only if the server finds the pane ours)
            *("if-shell", "-F", "-t", pane_id, _itself(pane_id, cond)),
            f"send-keys -t {pane_id} {' '.join(keys)}",
            f"display-message -p {_REFUSED}",
            check=False,
        )
        if not result.ok:
            detail = result.stderr.strip() or f"exit {result.returncode}"
            msg = f"tmux send-keys failed for session {self.session}: {detail}"
            raise TmuxError(msg, hint=self._server_hint())
        if _REFUSED in result.stdout:
            raise self._refused(pane_id, "send keys to")

    def kill_pane(self, pane_id: str) -> None:
        """Kill one of this session's panes by id; a pane of another session is refused."""
        check_pane_id(pane_id)
        with self._lock:
            # (a pane id is never another pane's while its server runs)
            ids = [info.pane_id for info in self._panes()]
            if pane_id not in ids:
                result = self._tmux("list-panes", "-t", pane_id, "-F", PANE_FIELDS, check=False)
                if not result.ok:
                    return  # already gone
                self._own_pane(pane_id, "kill")  # (another session's: refused)
            if set(ids) <= {pane_id}:  # (or none listed: a keeper, to be safe)
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
        session runs, which no process inside the pane can change. Asked after a launch in
        progress ends: its process runs from the split on, but is tagged by the next call.
        """
        with self._lock:
            panes = self._panes()
        return {info.pid: info.task for info in panes if info.task and info.pid}

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
        focus: list[str | Sep] = []
        if pane_id is not None:
            self._own_pane(pane_id, "attach to")
            focus = ["select-window", "-t", pane_id, THEN, "select-pane", "-t", pane_id, THEN]
        target = f"={self.session}"
        inside = os.environ.get("TMUX", "")
        if inside and self._same_server(inside):
            return [*base, *command_line([*focus, "switch-client", "-t", target])]
        prefix = ["env", "-u", "TMUX"] if inside else []
        return [*prefix, *base, *command_line([*focus, "attach-session", "-t", target])]

    def _same_server(self, tmux_env: str) -> bool:
        socket_path = tmux_env.split(",")[0]
        result = self._tmux("display-message", "-p", "#{socket_path}", check=False)
        return result.ok and result.stdout.strip() == socket_path


def _itself(pane_id: str, cond: str) -> str:
    """``cond`` judged by the server for ``pane_id`` itself: ``if-shell -t`` a pane that is
    gone judges its format for an attached client's pane instead (the supervisor's control
    client is one, a person's ``lo-orch attach`` another), which is then no answer for it.
    (``pane_id`` is checked: ``%`` and digits, which a format holds as they are.)"""
    return f"#{{&&:#{{==:#{{pane_id}},{pane_id}}},{cond}}}"


def _state_of(info: PaneInfo) -> PaneState:
    """A pane that is there, as ``state`` says it."""
    return PaneState(
        info.pane_id, alive=not info.dead, dead_status=info.dead_status, pid=info.pid, exists=True
    )


def _window_with_room(panes: list[PaneInfo]) -> str | None:
    """The first window (in window order) holding fewer than ``PANES_PER_WINDOW`` agent
    panes and nothing else but a keeper (the supervisor's own window is not tiled into)."""
    counts: dict[str, int] = {}
    other: set[str] = set()  # windows holding a pane that is no agent (the supervisor)
    for info in panes:
        counts.setdefault(info.window_id, 0)
        if info.task:
            counts[info.window_id] += 1
        elif not info.keeper:
            other.add(info.window_id)
    for window_id, count in counts.items():
        if count < PANES_PER_WINDOW and window_id not in other:
            return window_id
    return None
