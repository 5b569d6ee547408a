"""The supervisor's loop sleeps between events (``cadence``): what it checks on its own
clocks is still checked on time while nothing happens. End to end: real tmux, git and the
scripted agent."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
from helpers.runs import approve, edit_script, ledger, only
from helpers.wait import wait_for

from loop_orchestrator.runstate.state import Phase, RunDir, Store
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.supervisor import cadence
from loop_orchestrator.supervisor.journal import epoch
from loop_orchestrator.supervisor.main import Supervisor

pytestmark = pytest.mark.slow

#: what the check may take beyond its period on a loaded 2-core machine (tmux calls)
SLACK = 2.5


def _status(repo: Path, task: str) -> dict[str, object]:
    try:
        loaded = json.loads(RunDir(repo).status_path(task).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def test_a_pane_killed_and_a_view_edited_while_the_loop_idles_are_noticed_in_time(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    """slug's session hangs while it implements: no event reaches the supervisor. Its
    status file is edited, then its pane killed, twice: each is noticed within its
    period (plus slack), not at the next event (there is none: the run would never end)."""
    repo = demo_files.repo
    only(demo_files, "slug")
    edit_script(demo_files, lambda d: d["slug"].update(implement=[["hang"]]))
    settings = demo.demo_settings(demo_files.script)
    approve(demo_files, settings)
    killed: list[float] = []
    edited: list[float] = []
    status_file = RunDir(repo).status_path("slug")

    def attack() -> None:
        for round_no in range(2):

            def working(relaunched: int = round_no) -> bool:
                st = _status(repo, "slug")
                return st.get("relaunches") == relaunched and str(
                    st.get("delivered") or ""
                ).startswith("implementing")

            wait_for(working, 90, f"slug working after {round_no} relaunch(es)")
            time.sleep(1.5)  # the loop has nothing to do: it sleeps
            forged = {**_status(repo, "slug"), "phase": "approved"}
            status_file.write_text(json.dumps(forged), encoding="utf-8")
            edited.append(time.time())
            time.sleep(cadence.VIEW_SECONDS + SLACK)
            pane = str(_status(repo, "slug")["pane_id"])
            subprocess.run(["tmux", "-L", tmux_socket, "kill-pane", "-t", pane], check=True)
            killed.append(time.time())

    attacker = threading.Thread(target=attack, daemon=True)
    attacker.start()
    outcome = Supervisor(repo, settings).run()
    attacker.join(timeout=10)

    assert len(killed) == 2, outcome.message
    assert outcome.state == "blocked", outcome.message
    assert Store(RunDir(repo)).read_status("slug").phase == Phase.FAILED
    events = ledger(repo)
    # the first death relaunches the session, the second fails the task
    died = [epoch(e["ts"]) for e in events if e["event"] in ("session_died", "task_failed")]
    assert len(died) == 2
    for kill, seen in zip(killed, died, strict=True):
        assert 0 <= seen - kill <= cadence.SESSIONS_SECONDS + SLACK, (kill, seen)
    noticed = [epoch(e["ts"]) for e in events if e["event"] == "view_edited"]
    for edit in edited:
        assert any(0 <= t - edit <= cadence.VIEW_SECONDS + SLACK for t in noticed), (
            edit,
            noticed,
        )
