"""A local session's relaunch budget (issue 19's gap): lost cluster nodes are counted apart
(``node_losses``, ``[cluster] max_node_losses``), but a local pane that goes away is an
agent's session ending, as before: one relaunch, then the task fails. And when the
clean-up drops a run's cluster refs (plain git refs: tested without a cluster here)."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest
from helpers.git import git
from helpers.runs import approve, edit_script, ledger, only
from helpers.wait import wait_for

from loop_orchestrator.cluster import refs
from loop_orchestrator.runstate.state import Phase, RunDir, Store
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.supervisor.main import Supervisor
from loop_orchestrator.workspace import integration

pytestmark = pytest.mark.slow


def _status(repo: Path, task: str) -> dict[str, object]:
    try:
        loaded = json.loads(RunDir(repo).status_path(task).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def test_a_local_pane_killed_twice_gets_one_relaunch_then_fails(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    """A person (or the agent) kills slug's tmux pane while it works, and again after its
    relaunch: the pane is gone as a lost node's session is, yet it is no lost node. The
    first kill uses the one relaunch, the second fails the task, however many node losses
    `[cluster] max_node_losses` would allow."""
    repo = demo_files.repo
    only(demo_files, "slug")
    edit_script(demo_files, lambda d: d["slug"].update(implement=[["hang"]]))
    settings = demo.demo_settings(demo_files.script)
    settings.cluster.max_node_losses = 5
    approve(demo_files, settings)
    killed: list[str] = []

    def kill_twice() -> None:
        # (pane ids are no mark of a new pane: the run's tmux server ends with its last
        # pane, and a new server numbers its panes from the start again)
        for round_no in range(2):

            def working(relaunched: int = round_no) -> bool:
                st = _status(repo, "slug")
                return st.get("relaunches") == relaunched and str(
                    st.get("delivered") or ""
                ).startswith("implementing")

            wait_for(
                working,
                90,
                f"slug working after {round_no} relaunch(es)",
                shown=lambda: json.dumps(_status(repo, "slug")),
            )
            pane = str(_status(repo, "slug")["pane_id"])
            subprocess.run(["tmux", "-L", tmux_socket, "kill-pane", "-t", pane], check=True)
            killed.append(pane)

    killer = threading.Thread(target=kill_twice, daemon=True)
    killer.start()
    outcome = Supervisor(repo, settings).run()
    killer.join(timeout=10)

    assert len(killed) == 2
    assert outcome.state == "blocked", outcome.message
    status = Store(RunDir(repo)).read_status("slug")
    assert status.phase == Phase.FAILED
    assert status.relaunches == 1 and status.node_losses == 0
    assert status.error is not None and "again after a relaunch" in status.error
    events = [e for e in ledger(repo) if e.get("task") == "slug"]
    died = [e["cause"] for e in events if e["event"] == "session_died"]
    assert died == ["exited"]
    assert [e["cause"] for e in events if e["event"] == "task_failed"] == ["exited"]


def _refs(repo: Path, run: str) -> set[str]:
    out = git(repo, "for-each-ref", "--format=%(refname)", f"refs/lo-orch/cluster/{run}/")
    return set(out.split())


def test_cleanup_keeps_a_resumable_tasks_cluster_refs_until_the_run_is_over(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    """The clean-up rule for `refs/lo-orch/cluster/<run>/` without a cluster (the refs are
    plain git; as a Ray run leaves them): a plain `lo-orch cleanup` of an unfinished run
    drops only the integrated task's working refs (slug, failed, may still be retried from
    its checkpoint); `cleanup --abandon` drops slug's too. A kept/ ref (a person's saved
    edits) survives both, and each clean-up lists it."""
    repo = demo_files.repo
    only(demo_files, "tokenize", "slug")
    edit_script(demo_files, lambda d: d["slug"].update(implement=[[{"exit": 3}]]))
    settings = demo.demo_settings(demo_files.script)
    approve(demo_files, settings)
    outcome = Supervisor(repo, settings).run()
    assert outcome.state == "blocked", outcome.message
    run = Store(RunDir(repo)).read_run().name
    head = git(repo, "rev-parse", "HEAD").strip()
    prefix = f"refs/lo-orch/cluster/{run}"
    working = {f"{prefix}/{t}/{n}" for t in ("tokenize", "slug") for n in refs.WORKING}
    kept = f"{prefix}/slug/kept/1764000000000000000"
    for ref in [*working, kept]:
        git(repo, "update-ref", ref, head)
    # another run whose name starts like this one's: never touched
    other = f"refs/lo-orch/cluster/{run}x/slug/wip"
    git(repo, "update-ref", other, head)

    first = integration.cleanup(repo)

    slug_refs = {r for r in working if "/slug/" in r}
    assert _refs(repo, run) == {*slug_refs, kept}
    assert set(first.refs_deleted) == working - slug_refs
    assert first.refs_kept == [kept]

    second = integration.cleanup(repo, abandon=True)

    assert _refs(repo, run) == {kept}
    assert set(second.refs_deleted) == slug_refs
    assert second.refs_kept == [kept]
    assert git(repo, "rev-parse", other).strip() == head
