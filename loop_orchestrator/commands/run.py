"""`lo-orch run` (the supervisor, until Gate 2) and `lo-orch retry`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, assert_never

from loop_orchestrator import config
from loop_orchestrator.errors import LoOrchError, StateError
from loop_orchestrator.pullrequest import flow as pulls
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.state import TaskStatus
from loop_orchestrator.sessions.guard import refuse_in_session
from loop_orchestrator.supervisor import main as supervisor

if TYPE_CHECKING:
    from loop_orchestrator.supervisor.main import Outcome


@dataclass(frozen=True)
class RunResult:
    """How `lo-orch run` ended well: ``detached`` (``message`` says where the supervisor
    runs), ``review`` (Gate 2 waits) or ``merged``."""

    state: Literal["detached", "review", "merged"]
    message: str


def run(
    repo: Path,
    *,
    detach: bool = False,
    continue_blocked: bool = False,
    allow_dirty: bool = False,
    progress: Callable[[str], None] | None = None,
) -> RunResult:
    """Supervise the approved plan until Gate 2 (or start that in the run's tmux session);
    a merged run with a pull request: follow it (``lo-orch pr --follow``).

    Raises ``StateError`` when tasks that need a person stopped the run, ``LoOrchError``
    when integration failed or the run stopped.
    """

    followed = ""
    if not detach and pulls.has_pull_request(repo):
        # merged, with a pull request: what is left to supervise is what GitHub says of it
        refuse_in_session("lo-orch run")  # it may reopen the run: a person's act
        seen = pulls.follow(repo)
        followed = "\n".join(seen.lines())
        if not seen.rounds:
            return RunResult("merged", followed)
    settings = config.load_settings(repo)
    if allow_dirty:
        settings.workspace.allow_dirty = True
    if detach:
        where = supervisor.detach(repo, continue_blocked=continue_blocked, allow_dirty=allow_dirty)
        return RunResult("detached", where)
    sup = supervisor.Supervisor(
        repo, settings, continue_blocked=continue_blocked, progress=progress
    )
    done = result_of(sup.run())
    if followed:
        return RunResult(done.state, f"{followed}\n{done.message}")
    return done


def result_of(outcome: Outcome) -> RunResult:
    """What `lo-orch run` says of how the supervisor ended: a result, or the error with
    the hint that fits (tasks that need a person, an integration failure nobody owns, a
    run that stopped)."""
    from loop_orchestrator.supervisor.decide import OutcomeState

    state = outcome.state
    if state is OutcomeState.REVIEW:
        return RunResult("review", outcome.message)
    if state is OutcomeState.MERGED:
        return RunResult("merged", outcome.message)
    if state is OutcomeState.BLOCKED:
        raise StateError(
            "the run stopped with tasks that need a human:\n" + outcome.message,
            hint="Attach with `lo-orch attach TASK` to help, then `lo-orch run` again; or "
            "`lo-orch run --continue-blocked` to review and merge without them.",
        )
    if state is OutcomeState.INTEGRATION_FAILED:
        raise LoOrchError(
            outcome.message,
            hint="The failure names no file a task owns, so it waits for you: send the task "
            'that should fix it back with `lo-orch retry TASK --note "..."`, then '
            "`lo-orch run`.",
        )
    if state is OutcomeState.STOPPED:
        raise LoOrchError(
            outcome.message,
            hint="The run stopped before Gate 2: see why in `lo-orch status` and the run's "
            "ledger; when that is fixed, `lo-orch run` again.",
        )
    assert_never(state)


def retry(
    repo: Path, task: str, *, note: str | None = None, budget: float | None = None
) -> TaskStatus:
    """`lo-orch retry TASK [--note] [--budget]`: a blocked or failed task goes back to work;
    its status after."""

    return runs.retry_task(repo, task, note=note, budget=budget)
