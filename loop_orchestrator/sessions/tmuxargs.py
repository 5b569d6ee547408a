"""What lo-orch hands tmux and reads back from it: checks of pane ids, launch specs and
keys before they reach tmux, the pane command and its environment options, a call's
command line (every word as it is, ``THEN`` between commands), and the pane list format
(``PANE_FIELDS``) with its parser. Used by ``tmux.TmuxBackend``.
"""

import enum
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from loop_orchestrator.errors import TmuxError
from loop_orchestrator.sessions.backend import LaunchSpec

#: agent panes per window before a new window is opened

PANE_ID_RE = re.compile(r"^%[0-9]+$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: keys ``send_keys`` accepts: tmux key names, C-/M- chords and single visible characters
NAMED_KEYS = frozenset(
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
KEY_RE = re.compile(
    r"^(?:[CMS]-(?:[A-Za-z0-9\[\]\\]|Space|Enter|Up|Down|Left|Right)|F[0-9]{1,2}|\S)$"
)
PANE_FIELDS = (
    "#{pane_id}\t#{session_name}\t#{window_id}\t#{pane_dead}\t#{pane_dead_status}"
    "\t#{pane_dead_signal}\t#{pane_pid}\t#{@lo_task}\t#{@lo_keeper}\t#{@lo_run}"
)


@dataclass(frozen=True)
class PaneInfo:
    pane_id: str
    session: str
    window_id: str
    dead: bool
    dead_status: int | None
    pid: int | None
    task: str
    keeper: bool
    #: the run whose session holds the pane (its session's ``@lo_run``; empty if untagged)
    run: str = ""


def parse_pane_line(line: str) -> PaneInfo | None:
    parts = line.split("\t")
    if len(parts) != 10:
        return None
    pane_id, session, window_id, dead, status, signal, pid, task, keeper, run = parts
    is_dead = dead == "1"
    dead_status: int | None = None
    if is_dead:
        if status.strip().lstrip("-").isdigit():
            dead_status = int(status)
        elif signal.strip().isdigit():
            dead_status = 128 + int(signal)  # killed by a signal: the shell's convention
    return PaneInfo(
        pane_id=pane_id,
        session=session,
        window_id=window_id,
        dead=is_dead,
        dead_status=dead_status,
        pid=int(pid) if pid.isdigit() and not is_dead else None,
        task=task,
        keeper=keeper == "1",
        run=run,
    )


def check_pane_id(pane_id: str) -> None:
    if not PANE_ID_RE.match(pane_id):
        msg = f"{pane_id!r} is not a tmux pane id"
        raise TmuxError(
            msg,
            hint="Pane ids look like %3; the status file may have been edited by hand.",
        )


def check_spec(spec: LaunchSpec) -> None:
    if not spec.argv:
        msg = f"nothing to run for task {spec.task}: the command is empty"
        raise TmuxError(msg)
    if not spec.task:
        msg = "a session needs a task id"
        raise TmuxError(msg)
    for key, value in spec.env.items():
        if not ENV_KEY_RE.match(key) or "\0" in value:
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


def pane_command(argv: list[str]) -> list[str]:
    """The pane's command: ``/bin/sh -c "exec <argv quoted>"`` as separate tmux arguments.

    ``shlex.join`` makes every piece of ``argv`` a literal word for ``sh``, and handing tmux
    three arguments makes it exec ``/bin/sh`` itself rather than the user's default-shell
    (fish and others quote differently). ``exec`` keeps the agent as the pane's process.
    """
    return ["/bin/sh", "-c", "exec " + shlex.join(argv)]


def env_options(env: dict[str, str]) -> list[str]:
    options: list[str] = []
    for key, value in env.items():
        options += ["-e", f"{key}={value}"]
    return options


class Sep(enum.Enum):
    """What stands between two commands of one tmux call (``THEN``)."""

    THEN = ";"


THEN = Sep.THEN


def literal(arg: str) -> str:
    """``arg`` written so that tmux reads it as it is: tmux ends a command at an argument
    ending in ``;`` unless that ``;`` is escaped (``-e X=a;`` made the rest of a
    split-window a command of its own; the key ``;`` ended a send-keys)."""
    return arg[:-1] + "\\;" if arg.endswith(";") else arg


def command_line(args: Sequence[str | Sep]) -> list[str]:
    """tmux's arguments for ``args``: each word as it is, ``THEN`` between commands."""
    return [a.value if isinstance(a, Sep) else literal(a) for a in args]


def commands(args: Sequence[str | Sep]) -> list[str]:
    """The names of the commands ``args`` holds (for messages)."""
    names = [args[0], *(args[i + 1] for i, a in enumerate(args[:-1]) if a is THEN)]
    return [str(n) for n in names]
