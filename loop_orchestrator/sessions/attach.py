"""`lo-orch attach [TASK]`: which tmux command attaches to a run, focused on a task's pane."""

from __future__ import annotations

from pathlib import Path

from loop_orchestrator.errors import TmuxError
from loop_orchestrator.runstate.state import Store
from loop_orchestrator.sessions.factory import run_backend


def attach_command(repo: Path, task: str | None = None) -> list[str]:
    """The argv of ``lo-orch attach [TASK]``: attach/switch to the run, focused on TASK."""
    store = Store.for_repo(repo)
    run = store.read_run()
    # the run's own tmux server (recorded by `lo-orch run`) unless the environment says
    backend = run_backend(run)
    pane_id: str | None = None
    if task is not None:
        status = store.read_status(task)
        if not status.pane_id:
            msg = f"task {task} has no session (phase {status.phase.value})"
            raise TmuxError(
                msg,
                hint="A task gets a pane when it starts; `lo-orch status` shows which run.",
            )
        pane_id = status.pane_id
        if backend.session_exists() and pane_id not in backend.list_panes():
            msg = f"the pane of task {task} ({pane_id}) no longer exists"
            raise TmuxError(
                msg,
                hint="`lo-orch run` relaunches it; `lo-orch attach` without TASK shows the rest.",
            )
    return backend.attach_argv(pane_id)
