"""The commands about one task's session: `lo-orch attach`, `send`, `permit`, and what a
managed session reports, `lo-orch signal` and `lo-orch hook`.

The package is imported inside each function: `hook` and `signal` run on every prompt and
stop of every session and must start fast (``entry.py`` answers them before click).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # pydantic and filelock: not on the hook path
    from loop_orchestrator.permissions.requests import PermissionRequest as PermissionRequest


@dataclass(frozen=True)
class Attach:
    """The tmux client to run for `lo-orch attach` (the caller hands it the terminal)."""

    argv: tuple[str, ...]


def attach(repo: Path, task: str | None = None) -> Attach:
    """`lo-orch attach [TASK]`: attach (or switch) to the run's tmux session, on TASK's
    pane."""
    from loop_orchestrator.sessions import attach as attaching

    return Attach(tuple(attaching.attach_command(repo, task)))


@dataclass(frozen=True)
class Sent:
    """A message recorded for a task's session."""

    task: str
    message_id: str


def send(repo: Path, task: str, message: str) -> Sent:
    """`lo-orch send TASK MESSAGE`: recorded; the running supervisor delivers it."""
    from loop_orchestrator.runstate import create as runs

    return Sent(task, runs.send_message(repo, task, message))


@dataclass(frozen=True)
class Permitted:
    """The permission request a person answered."""

    task: str
    request_id: str
    tool: str
    summary: str


def permit(
    repo: Path,
    task: str,
    decision: Literal["allow", "deny"],
    *,
    always: bool = False,
    request_id: str | None = None,
) -> Permitted:
    """`lo-orch permit TASK allow|deny [--always] [--id ID]`: the request answered."""
    from loop_orchestrator.permissions import requests as permissions

    req = permissions.answer(repo, task, decision, always=always, request_id=request_id)
    return Permitted(req.task, req.id, req.tool, req.summary)


def pending(repo: Path) -> tuple[PermissionRequest, ...]:
    """The run's open permission requests, oldest first: what `lo-orch permit` answers
    (the dashboard lists them and answers the one chosen)."""
    from loop_orchestrator.permissions import requests as permissions

    return tuple(permissions.pending(repo))


@dataclass(frozen=True)
class Signalled:
    """What the supervisor made of a session's report: ``changed`` False when it was a
    repeat, or left for the next supervisor (``message`` says which)."""

    task: str
    previous: str
    phase: str
    changed: bool
    message: str


def signal(
    phase: str,
    *,
    task: str | None,
    note: str | None,
    disputes: tuple[str, ...],
    repo: Path | None,
    environ: Mapping[str, str],
) -> Signalled:
    """`lo-orch signal PHASE [--task] [--note] [--dispute CODE]... [--repo]`: a session's
    report to the supervisor. The task defaults to ``$LO_ORCH_TASK``; the run to
    ``$LO_ORCH_RUN_DIR`` unless ``repo`` is given."""
    from loop_orchestrator.errors import UsageError
    from loop_orchestrator.sessions import hooks

    task = task or environ.get("LO_ORCH_TASK")
    if not task:
        msg = "no task given and LO_ORCH_TASK is not set"
        raise UsageError(
            msg,
            hint="Pass --task TASK (the task ids are listed by `lo-orch status`).",
        )
    run_dir_env = environ.get("LO_ORCH_RUN_DIR")
    if repo is None and run_dir_env:
        run_dir = Path(run_dir_env)
    else:
        from loop_orchestrator.commands.repo import find_repo
        from loop_orchestrator.runstate.state import RunDir

        run_dir = RunDir(find_repo(repo)).root
    result = hooks.signal_task(run_dir, phase, task=task, note=note, disputes=disputes)
    return Signalled(task, result.previous, result.phase, result.changed, result.message)


@dataclass(frozen=True)
class Hooked:
    """What a hook event answers Claude Code: exit code 2 (the Stop gate) with the reason on
    stderr, or 0 with a permission decision on stdout, or 0 and silence."""

    exit_code: int
    stdout: str
    stderr: str


def hook(event: str, raw: str, environ: Mapping[str, str]) -> Hooked:
    """`lo-orch hook EVENT`: record a Claude Code hook event (its JSON in ``raw``) for its
    task; what to answer Claude Code (never raises)."""
    from loop_orchestrator.sessions import hooks

    outcome = hooks.run_hook(event, raw, environ)
    return Hooked(outcome.exit_code, outcome.stdout, outcome.stderr)
