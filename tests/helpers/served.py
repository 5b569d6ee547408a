"""A run whose sessions' reports are heard: a real inbox socket judged by the supervisor's
real ``Reports`` over a real ``Record``, without the rest of the supervisor.

A task's session is identified as the supervisor does it: the sender's parent chain must
reach the pid registered as that task's pane (``Served.panes``; by default this test
process stands for the first task's pane), or a pane that ``extra_panes()`` reports (a
real tmux backend's ``task_pids``).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers import REPO_ROOT
from helpers.runs import run_state
from loop_orchestrator.permissions.desk import Desk
from loop_orchestrator.runstate import journal as record
from loop_orchestrator.runstate.journal import Record
from loop_orchestrator.runstate.state import Phase, RunDir, Store, TaskStatus
from loop_orchestrator.sessions import listener, procinfo
from loop_orchestrator.supervisor.lifecycle import delivery_key
from loop_orchestrator.supervisor.reports import Reports

RUN = "demo"


@dataclass
class Served:
    """A run with a listening inbox judged by ``Reports``."""

    repo: Path
    rec: Record
    #: task -> the pid standing for its pane
    panes: dict[str, int]
    asked_again: list[tuple[str, str]] = field(default_factory=list)

    @property
    def run_dir(self) -> Path:
        return RunDir(self.repo).root

    def status(self, task: str = "alpha") -> TaskStatus:
        return Record.open(self.repo, RUN).task(task)

    def view(self, task: str = "alpha") -> dict[str, Any]:
        data: dict[str, Any] = json.loads(RunDir(self.repo).status_path(task).read_text())
        return data

    def ledger(self, event: str) -> list[dict[str, Any]]:
        return [r for r in Store.for_repo(self.repo).read_ledger() if r["event"] == event]

    def set(self, task: str, **changes: Any) -> None:
        self.rec.update_task(task, **changes)


def working(phase: Phase, rework: int = 0) -> dict[str, Any]:
    """A task in ``phase`` whose session has received that phase's prompt."""
    return {"phase": phase, "rework_count": rework, "delivered": delivery_key(phase, rework)}


def start_run(repo: Path, tasks: tuple[str, ...] = ("alpha", "beta")) -> Record:
    """An approved run's record (no plan file: only what the inbox needs)."""
    rec = record.start(repo, run_state(repo, RUN), [TaskStatus(task=t) for t in tasks])
    rec.publish_all()
    return rec


@contextlib.contextmanager
def serve(
    repo: Path,
    tasks: dict[str, dict[str, Any]],
    extra_panes: Callable[[], dict[int, str]] = dict,
    desk: Desk | None = None,
) -> Iterator[Served]:
    """Record a run with ``tasks`` (task -> initial changes) and listen for its sessions
    (``desk``: the permission desk PermissionRequest events go to)."""
    names = tuple(tasks)
    rec = start_run(repo, names)
    for task, changes in tasks.items():
        if changes:
            rec.update_task(task, **changes)
    store = Store.for_repo(repo)
    s = Served(repo, rec, {names[0]: os.getpid()})

    def event(name: str, task: str | None = None, **fields: Any) -> None:
        store.append_ledger(name, **({"task": task} if task else {}), **fields)

    reports = Reports(
        rec, store, list(names), event, lambda t, sig: s.asked_again.append((t, sig)), desk=desk
    )

    def identify(pid: int) -> str | None:
        by_pid = {**{p: t for t, p in s.panes.items()}, **extra_panes()}
        for ancestor in procinfo.ancestors(pid):
            if ancestor in by_pid:
                return by_pid[ancestor]
        return None

    server = listener.Server(s.run_dir, identify, lambda req: req.answer(reports.handle(req)))
    server.start()
    try:
        yield s
    finally:
        server.close()


def sub_env(**extra: str) -> dict[str, str]:
    """The environment for a real `lo-orch` subprocess run from this checkout."""
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), **extra}


def env_for(run_dir: Path, task: str = "alpha", **extra: str) -> dict[str, str]:
    """What lo-orch puts in ``task``'s session environment (its task, its run folder)."""
    return {"LO_ORCH_TASK": task, "LO_ORCH_RUN_DIR": str(run_dir), **extra}


def lo_orch_env(
    args: list[str], env: dict[str, str], stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """`lo-orch ARGS` in a subprocess with ``env`` added to this one's environment."""
    return subprocess.run(
        [sys.executable, "-m", "loop_orchestrator", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=sub_env(**env),
        timeout=60,
        check=False,
    )


@contextlib.contextmanager
def alpha_and_beta(repo: Path) -> Iterator[Served]:
    """The run the wire tests serve: alpha planning, beta implementing, both prompted."""
    with serve(repo, {"alpha": working(Phase.PLANNING), "beta": working(Phase.IMPLEMENTING)}) as s:
        yield s
