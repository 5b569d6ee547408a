"""Lost nodes and a run's cluster refs on a real multi-node Ray cluster (issue 19's gaps).

The cluster is helpers.ray_cluster's (a head and three nodes with session slots); the
tests here add nodes with a label of their own (``lo-node: pin``) to place two sessions on
one node and remove it, and use a two-task run (tokenize, slug) of the demo.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import ray_cluster
from helpers.git import commit, git
from helpers.ray_cluster import (
    RayEnv,
    edit_demo,
    run_actors,
    staging_merges,
    supervise_in_background,
)
from helpers.runs import approve, ledger
from helpers.wait import wait_for

from loop_orchestrator.cluster import reaper
from loop_orchestrator.config import SandboxConfig
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.state import Phase, RunDir, Store
from loop_orchestrator.sessions import procinfo
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.supervisor.main import Supervisor
from loop_orchestrator.workspace import integration

pytestmark = pytest.mark.slow

#: the module's cluster (helpers.ray_cluster)
ray_env = ray_cluster.ray_env
PAIR = ("tokenize", "slug")
PIN = {"lo-node": "pin"}


@pytest.fixture
def two_tasks(tmp_path: Path, tmux_socket: str) -> demo.DemoFiles:
    """The demo with only its two independent tasks, under a run name of its own."""
    files = demo.prepare_demo(tmp_path)

    def keep_two(plan: dict[str, Any], script: dict[str, Any]) -> None:
        plan["tasks"] = [t for t in plan["tasks"] if t["id"] in PAIR]
        plan["name"] = f"nl{tmp_path.name[-6:]}".replace("_", "")
        for task in [k for k in script if k not in PAIR]:
            del script[task]

    edit_demo(files, keep_two)
    return files


def _pin_node(ray_env: RayEnv, name: str) -> Any:
    """A node with two session slots and the label ``lo-node: pin``."""
    return ray_env.cluster.add_node(
        num_cpus=1,
        resources={"lo_session": 2},
        labels=dict(PIN),
        env_vars={**ray_env.env, "LO_ORCH_NODE_ROOT": str(ray_env.base / name)},
    )


def _pin_label(ray_env: RayEnv, root: str, label: str) -> Any:
    """A node with two session slots and the label ``lo-node: <label>``."""
    return ray_env.cluster.add_node(
        num_cpus=1,
        resources={"lo_session": 2},
        labels={"lo-node": label},
        env_vars={**ray_env.env, "LO_ORCH_NODE_ROOT": str(ray_env.base / root)},
    )


def _sleep_first(script: dict[str, Any], task: str, seconds: float) -> None:
    """Every implement prompt of ``task`` (a relaunch gets it again) starts with a sleep."""
    script[task]["implement"][0] = [{"sleep": {"seconds": seconds}}, *script[task]["implement"][0]]


def _working_on(repo: Path, node: Any, tasks: tuple[str, ...]) -> bool:
    """Every one of ``tasks`` has its implement prompt confirmed by a session on ``node``."""
    store = Store(RunDir(repo))
    for task in tasks:
        st = store.read_status(task)
        if (
            st.phase != Phase.IMPLEMENTING
            or node.node_id[:8] not in (st.node or "")
            or not str(st.delivered or "").startswith("implementing")
        ):
            return False
    return True


def _shown(repo: Path) -> str:
    return "\n".join(
        f"{s.task}: {s.phase.value} node={s.node} delivered={s.delivered} error={s.error}"
        for s in Store(RunDir(repo)).list_statuses()
    )


def test_two_sessions_on_one_node_lose_it_twice_and_both_finish(
    ray_env: RayEnv, two_tasks: demo.DemoFiles
) -> None:
    """tokenize and slug both ask for `lo-node: pin`, so both run on the one pinned node;
    it is removed while both work (a second pinned node waits), and then that node too
    (a third waits): two lost nodes each, both tasks finish. A lost node is not an agent
    exit: it does not use the task's one relaunch, and nothing merges twice."""
    first = _pin_node(ray_env, "pin1")
    added = [first]
    try:

        def change(plan: dict[str, Any], script: dict[str, Any]) -> None:
            for entry in plan["tasks"]:
                entry["node_labels"] = dict(PIN)
            for task in PAIR:
                # working on the first two nodes until each is removed; on the last, at once
                hold = 'case "$LO_ORCH_RUN_DIR" in */pin3/*) ;; *) sleep 60;; esac'
                step = {"run": {"argv": ["sh", "-c", hold], "timeout": 120}}
                script[task]["implement"][0] = [step, *script[task]["implement"][0]]

        edit_demo(two_tasks, change)
        repo = two_tasks.repo
        settings = ray_env.settings(two_tasks.script, checkpoint_seconds=2.0)
        approve(two_tasks, settings)
        run = Store(RunDir(repo)).read_run().name
        thread, outcome = supervise_in_background(repo, settings)

        current = first
        removed: list[str] = []
        for n in (2, 3):
            wait_for(
                functools.partial(_working_on, repo, current, PAIR),
                240,
                f"both tasks working on pinned node {n - 1}",
                interval=0.3,
                shown=lambda: _shown(repo),
            )
            spare = _pin_node(ray_env, f"pin{n}")
            added.append(spare)
            ray_env.cluster.remove_node(current)
            added.remove(current)
            removed.append(current.node_id[:8])
            current = spare

        thread.join(timeout=400)
        assert outcome and outcome[0].state == "review", (outcome, _shown(repo))
    finally:
        for node in added:
            ray_env.cluster.remove_node(node)

    store = Store(RunDir(repo))
    events = ledger(repo)
    for task in PAIR:
        st = store.read_status(task)
        assert st.phase == Phase.INTEGRATED, st.error
        assert not any(node in (st.node or "") for node in removed), st.node
        assert st.node_losses == 2, task
        assert st.relaunches == 0, task  # the agent's own relaunch is still unused
        died = [e for e in events if e["event"] == "session_died" and e.get("task") == task]
        assert [e["cause"] for e in died] == ["node_lost", "node_lost"], died
        assert [e["node_losses"] for e in died] == [1, 2]
        assert staging_merges(repo, run, task) == 1, task
    assert not [e for e in events if e["event"] in ("task_blocked", "task_failed")]
    integrated = Counter(e["task"] for e in events if e["event"] == "task_integrated")
    assert integrated == dict.fromkeys(PAIR, 1)


def test_a_task_past_max_node_losses_fails_naming_the_cap(
    ray_env: RayEnv, two_tasks: demo.DemoFiles
) -> None:
    """With `[cluster] max_node_losses = 0` the first lost node fails the task (another
    pinned node was free: the cap, not placement, stopped it), with a message naming the
    setting and `lo-orch retry`; a retry starts the count again."""
    first = _pin_node(ray_env, "cap1")
    added = [first]
    try:

        def change(plan: dict[str, Any], script: dict[str, Any]) -> None:
            plan["tasks"] = [t for t in plan["tasks"] if t["id"] == "slug"]
            plan["tasks"][0]["node_labels"] = dict(PIN)
            _sleep_first(script, "slug", 60)

        edit_demo(two_tasks, change)
        repo = two_tasks.repo
        settings = ray_env.settings(two_tasks.script, max_node_losses=0)
        approve(two_tasks, settings)
        thread, outcome = supervise_in_background(repo, settings)
        wait_for(
            lambda: _working_on(repo, first, ("slug",)),
            180,
            "slug working on the pinned node",
            interval=0.3,
            shown=lambda: _shown(repo),
        )
        added.append(_pin_node(ray_env, "cap2"))
        ray_env.cluster.remove_node(first)
        added.remove(first)
        thread.join(timeout=200)
        assert outcome and outcome[0].state == "blocked", (outcome, _shown(repo))
    finally:
        for node in added:
            ray_env.cluster.remove_node(node)

    st = Store(RunDir(repo)).read_status("slug")
    assert st.phase == Phase.FAILED
    assert st.error is not None
    assert "max_node_losses = 0" in st.error and "lo-orch retry slug" in st.error
    failed = [e for e in ledger(repo) if e["event"] == "task_failed"]
    assert [(e["task"], e["cause"]) for e in failed] == [("slug", "node_lost")]
    assert not any(e["event"] == "session_died" for e in ledger(repo))

    again = runs.retry_task(repo, "slug")
    assert again.node_losses == 0 and again.phase != Phase.FAILED


def _cluster_refs(repo: Path, run: str) -> list[str]:
    out = git(repo, "for-each-ref", "--format=%(refname)", f"refs/lo-orch/cluster/{run}/")
    return out.split()


def test_cleanup_drops_the_runs_cluster_refs_but_keeps_a_persons_saved_edits(
    ray_env: RayEnv, two_tasks: demo.DemoFiles
) -> None:
    """A person edits slug's local worktree while slug works on its node: the sync before
    its signal keeps the edit as a kept/ ref. After Gate 2 (merge and its clean-up) no
    head/wip/out/applied ref of the run is left, the kept one is, and `lo-orch cleanup`
    names it with the command to see it."""

    def change(plan: dict[str, Any], script: dict[str, Any]) -> None:
        held = {"run": {"argv": ["sh", "-c", ray_cluster.HELD], "timeout": 300}}
        script["slug"]["implement"][0] = [held, *script["slug"]["implement"][0]]

    edit_demo(two_tasks, change)
    repo = two_tasks.repo
    settings = ray_env.settings(two_tasks.script)
    approve(two_tasks, settings)
    run = Store(RunDir(repo)).read_run().name
    thread, outcome = supervise_in_background(repo, settings)

    def slug_works() -> bool:
        st = Store(RunDir(repo)).read_status("slug")
        return st.phase == Phase.IMPLEMENTING and str(st.delivered or "").startswith("impl")

    wait_for(slug_works, 180, "slug implementing on a node", interval=0.3)
    worktree = RunDir(repo).worktree_path(run, "slug")
    (worktree / "my-notes.txt").write_text("a person's note\n", encoding="utf-8")
    ray_env.release(run, "slug")  # slug signals now: the sync finds the edit
    thread.join(timeout=300)
    assert outcome and outcome[0].state == "review", (outcome, _shown(repo))
    before = _cluster_refs(repo, run)
    assert any(r.endswith("/slug/wip") for r in before), before
    kept = [r for r in before if "/slug/kept/" in r]
    assert len(kept) == 1, before
    assert git(repo, "show", f"{kept[0]}:my-notes.txt") == "a person's note\n"

    merged = integration.merge(repo, integration.review(repo))

    assert _cluster_refs(repo, run) == kept
    assert merged.cleanup.refs_kept == kept
    assert any(r.endswith("/slug/wip") for r in merged.cleanup.refs_deleted)
    assert any(r.endswith("/tokenize/head") for r in merged.cleanup.refs_deleted)
    # `lo-orch cleanup` on the merged run says where the person's edits are
    shown = subprocess.run(
        [sys.executable, "-m", "loop_orchestrator", "cleanup", "--repo", str(repo)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert kept[0] in shown.stdout and "git show --stat <ref>" in shown.stdout
    assert _cluster_refs(repo, run) == kept
    assert [e["refs_kept"] for e in ledger(repo) if e["event"] == "cleanup"][-1] == kept


def test_a_new_run_of_the_same_name_does_not_take_an_earlier_runs_checkpoint(
    ray_env: RayEnv, two_tasks: demo.DemoFiles
) -> None:
    """An earlier run of the same name left slug's cluster refs (its worktree was kept,
    so its clean-up kept them): head, a wip checkpoint with that run's files, applied,
    and a person's kept edit. The new run's slug starts from its own base, not from that
    checkpoint; the stale working refs are dropped (the ledger names them), the kept one
    stays."""
    repo = two_tasks.repo
    plan = yaml.safe_load(two_tasks.plan.read_text(encoding="utf-8"))
    run = plan["name"]
    on = git(repo, "symbolic-ref", "--short", "HEAD").strip()
    base = git(repo, "rev-parse", "HEAD").strip()
    # what the earlier run's slug left: its branch head with a file, and a checkpoint on it
    git(repo, "switch", "-q", "-c", "earlier")
    old_head = commit(repo, {"earlier-run.txt": "from the earlier run\n"}, "earlier run")
    old_wip = commit(repo, {"earlier-wip.txt": "its checkpoint\n"}, "wip")
    git(repo, "switch", "-q", on)
    git(repo, "branch", "-q", "-D", "earlier")
    assert git(repo, "rev-parse", "HEAD").strip() == base
    prefix = f"refs/lo-orch/cluster/{run}/slug"
    for name, sha in (("head", old_head), ("wip", old_wip), ("applied", old_wip)):
        git(repo, "update-ref", f"{prefix}/{name}", sha)
    git(repo, "update-ref", f"{prefix}/kept/1", old_wip)

    settings = ray_env.settings(two_tasks.script)
    approve(two_tasks, settings)
    outcome = Supervisor(repo, settings).run()

    assert outcome.state == "review", (outcome.message, _shown(repo))
    st = Store(RunDir(repo)).read_status("slug")
    assert st.phase == Phase.INTEGRATED and st.commit is not None
    files = git(repo, "ls-tree", "-r", "--name-only", st.commit).split()
    assert "earlier-run.txt" not in files and "earlier-wip.txt" not in files
    ancestor = subprocess.run(
        ["git", "-C", str(repo), "merge-base", "--is-ancestor", old_head, st.commit], check=False
    )
    assert ancestor.returncode == 1
    dropped = [e for e in ledger(repo) if e["event"] == "cluster_refs_dropped"]
    assert len(dropped) == 1
    assert dropped[0]["refs"][f"{prefix}/wip"] == old_wip
    assert git(repo, "rev-parse", f"{prefix}/kept/1").strip() == old_wip


def test_an_agent_ending_itself_on_a_node_is_no_lost_node(
    ray_env: RayEnv, two_tasks: demo.DemoFiles
) -> None:
    """slug's agent, on its node, kills itself (SIGKILL to the agent's process) to get a
    fresh start, twice: its actor and node live on, so that is an agent's exit, not a lost
    node. One relaunch, then the task fails; the budget for lost nodes is not touched."""

    def change(plan: dict[str, Any], script: dict[str, Any]) -> None:
        plan["tasks"] = [t for t in plan["tasks"] if t["id"] == "slug"]
        suicide = {"run": {"argv": ["sh", "-c", "kill -9 $PPID"], "check": False}}
        script["slug"]["implement"] = [[suicide]]

    edit_demo(two_tasks, change)
    repo = two_tasks.repo
    settings = ray_env.settings(two_tasks.script, max_node_losses=5)
    approve(two_tasks, settings)

    outcome = Supervisor(repo, settings).run()

    assert outcome.state == "blocked", (outcome.message, _shown(repo))
    st = Store(RunDir(repo)).read_status("slug")
    assert st.phase == Phase.FAILED
    assert (st.relaunches, st.node_losses) == (1, 0)
    events = [e for e in ledger(repo) if e.get("task") == "slug"]
    assert [e["cause"] for e in events if e["event"] == "session_died"] == ["exited"]
    assert [e["cause"] for e in events if e["event"] == "task_failed"] == ["exited"]


def test_a_session_whose_tmux_server_ended_under_a_live_actor_leaves_no_actor_behind(
    ray_env: RayEnv, two_tasks: demo.DemoFiles, tmp_path: Path
) -> None:
    """slug's agent (unsandboxed) ends its node's tmux server: the pane is gone, its actor
    lives on. The relaunch runs in a new actor and ends the old one, which would otherwise
    hold its session slot (and its checkout) until cleanup."""
    marker = tmp_path / "server-ended-once"
    end_server = (
        f'test -e {marker} || {{ touch {marker}; tmux -L "$LO_ORCH_TMUX_SOCKET" kill-server; }}'
    )

    def change(plan: dict[str, Any], script: dict[str, Any]) -> None:
        plan["tasks"] = [t for t in plan["tasks"] if t["id"] == "slug"]
        first = script["slug"]["implement"][0]
        script["slug"]["implement"][0] = [
            {"run": {"argv": ["sh", "-c", end_server]}},
            {"sleep": {"seconds": 15}},  # the relaunched session, working: actors checked
            *first,
        ]

    edit_demo(two_tasks, change)
    repo = two_tasks.repo
    settings = ray_env.settings(two_tasks.script).model_copy(
        update={"sandbox": SandboxConfig(mode="off")}
    )
    approve(two_tasks, settings)
    run = Store(RunDir(repo)).read_run().name

    supervisor, outcome = supervise_in_background(repo, settings)
    store = Store(RunDir(repo))
    wait_for(lambda: store.read_status("slug").relaunches == 1, 120, "slug relaunched")
    wait_for(lambda: store.read_status("slug").delivered is not None, 120, "its prompt delivered")
    # the session that runs on is the relaunched one; the first one's actor is gone
    st = store.read_status("slug")
    live = [n for n in run_actors(run) if "-slug-g" in n]
    assert len(live) == 1 and live[0].endswith(f"-g{str(st.pane_id).rsplit(':', 1)[-1]}"), live
    supervisor.join(timeout=300)
    assert outcome and outcome[0].state == "review", (outcome, _shown(repo))
    assert marker.exists()
    st = store.read_status("slug")
    assert (st.relaunches, st.node_losses) == (1, 0)


def _ray_start(ray_env: RayEnv, root: str, label: str, slots: int = 2) -> subprocess.Popen[bytes]:
    """A node started as docs/cluster.md says (`ray start --address HEAD --block`), in a
    process group and session of its own, with ports of its own (several nodes on one
    machine) and a small object store."""
    env = {**os.environ, **ray_env.env, "LO_ORCH_NODE_ROOT": str(ray_env.base / root)}
    ports = [
        "--node-manager-port",
        "--object-manager-port",
        "--metrics-export-port",
        "--dashboard-agent-listen-port",
        "--dashboard-agent-grpc-port",
        "--runtime-env-agent-port",
    ]
    argv = [
        str(Path(sys.executable).parent / "ray"),
        "start",
        "--address",
        ray_env.cluster.address,
        "--num-cpus",
        "1",
        "--resources",
        json.dumps({"lo_session": slots}),
        "--labels",
        f"lo-node={label}",
        "--object-store-memory",
        str(80 << 20),
        *(word for flag in ports for word in (flag, str(_free_port()))),
        "--block",
    ]
    log = (ray_env.base / f"{root}.log").open("wb")
    return subprocess.Popen(
        argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _with_marker(marker: str) -> list[tuple[int, str]]:
    """(pid, start time) of every process whose environment holds ``marker`` (a node's
    own LO_ORCH_NODE_ROOT: its raylet, workers, reaper, tmux server, bubblewrap, agent)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in environ.split(b"\0"):
            born = procinfo.start_time(int(entry.name))
            if born is not None:
                found.append((int(entry.name), born))
    return found


def test_a_node_whose_ray_start_group_is_sigkilled_is_a_relaunch_and_leaves_nothing_running(
    ray_env: RayEnv, two_tasks: demo.DemoFiles
) -> None:
    """slug runs on a node started with `ray start` (label `lo-node: kill`); while it works,
    that whole process group gets SIGKILL, as when the machine dies. Ray sees its actor
    unavailable for a while (no crash: that is a silent session, then a lost one once the
    cluster drops the node): the task is relaunched on the spare node with the label, counted
    as one node loss, integrated once. Every process of the killed node's sessions (tmux
    server, bubblewrap, agent) ends with it. In the session on each node, `lo-orch status
    --json` finds the run, as in a local session."""
    node = _ray_start(ray_env, "kill1", "kill")
    spare = None
    marker = f"LO_ORCH_NODE_ROOT={ray_env.base / 'kill1'}"
    try:
        status_to_plan = (
            '$LO_ORCH_BIN status --json >> "$LO_ORCH_RUN_DIR/plans/slug.md" 2>&1; '
            'case "$LO_ORCH_RUN_DIR" in */kill1/*) sleep 300;; esac'
        )

        def change(plan: dict[str, Any], script: dict[str, Any]) -> None:
            plan["tasks"] = [t for t in plan["tasks"] if t["id"] == "slug"]
            plan["tasks"][0]["node_labels"] = {"lo-node": "kill"}
            step = {"run": {"argv": ["sh", "-c", status_to_plan], "check": False, "timeout": 600}}
            script["slug"]["implement"][0] = [step, *script["slug"]["implement"][0]]

        edit_demo(two_tasks, change)
        repo = two_tasks.repo
        settings = ray_env.settings(two_tasks.script)
        approve(two_tasks, settings)
        run = Store(RunDir(repo)).read_run().name
        wait_for(lambda: _with_marker(marker), 60, "the ray start node's processes")
        thread, outcome = supervise_in_background(repo, settings)
        store = Store(RunDir(repo))

        wait_for(
            lambda: (
                store.read_status("slug").phase == Phase.IMPLEMENTING
                and str(store.read_status("slug").delivered or "").startswith("implementing")
            ),
            180,
            "slug implementing on the ray start node",
            interval=0.3,
            shown=lambda: _shown(repo),
        )
        first_node = store.read_status("slug").node or ""
        spare = _pin_label(ray_env, "kill2", "kill")
        running = _with_marker(marker)
        names = {Path(f"/proc/{pid}/comm").read_text().strip() for pid, _ in running}
        assert {"tmux: server", "bwrap", "raylet"} <= names, names
        os.killpg(node.pid, signal.SIGKILL)  # the group of the `ray start` this test started
        node.wait()
        wait_for(
            lambda: not [p for p, born in running if reaper.running(p, born)],
            60,
            "every process of the killed node ended",
            interval=0.3,
        )
        thread.join(timeout=300)
        assert outcome and outcome[0].state == "review", (outcome, _shown(repo))
    finally:
        if node.poll() is None:
            os.killpg(node.pid, signal.SIGKILL)
            node.wait()
        if spare is not None:
            ray_env.cluster.remove_node(spare)
        # whatever of that node's outlived it (a failure of the test): ended by pid, each a
        # process of the node this test started
        for pid, born in _with_marker(marker):
            if reaper.running(pid, born):
                os.kill(pid, signal.SIGKILL)

    st = store.read_status("slug")
    assert st.phase == Phase.INTEGRATED, st.error
    assert (st.node_losses, st.relaunches) == (1, 0)
    assert st.node != first_node
    events = ledger(repo)
    died = [e for e in events if e["event"] == "session_died"]
    assert [e["cause"] for e in died] == ["node_lost"], died
    assert staging_merges(repo, run, "slug") == 1
    assert [e["task"] for e in events if e["event"] == "task_integrated"] == ["slug"]
    # the session on the spare node read the run as a local session does
    seen = RunDir(repo).agent_plan_path("slug").read_text(encoding="utf-8")
    assert '"tasks"' in seen, seen
    assert '"task": "slug"' in seen and '"phase": "implementing"' in seen


@pytest.mark.parametrize("frozen", ["machine", "actor"])
def test_a_node_or_actor_that_stops_answering_is_a_relaunch_counted_as_a_node_loss(
    ray_env: RayEnv, two_tasks: demo.DemoFiles, frozen: str
) -> None:
    """slug works on a node started with `ray start` (one slot, label `lo-node: frz-…`);
    then nothing there answers: ``machine``, every process of the node is stopped
    (SIGSTOP: a frozen machine, or one cut off the network); ``actor``, only the session's
    actor process is (its node answers the cluster: each call times out). After
    ``loss_grace_seconds`` of calls timing out (``call_timeout_seconds`` each) the task is
    relaunched (on the spare node, for a frozen machine), counted as one node loss,
    integrated once, and no error of Ray's ends the run."""
    label = f"frz-{frozen}"
    root = f"frz1-{frozen}"
    node = _ray_start(ray_env, root, label, slots=1)
    spare = None
    marker = f"LO_ORCH_NODE_ROOT={ray_env.base / root}"
    stopped: list[tuple[int, str]] = []
    try:
        hold = f'case "$LO_ORCH_RUN_DIR" in */{root}/*) sleep 300;; esac'

        def change(plan: dict[str, Any], script: dict[str, Any]) -> None:
            plan["tasks"] = [t for t in plan["tasks"] if t["id"] == "slug"]
            plan["tasks"][0]["node_labels"] = {"lo-node": label}
            step = {"run": {"argv": ["sh", "-c", hold], "check": False, "timeout": 600}}
            script["slug"]["implement"][0] = [step, *script["slug"]["implement"][0]]

        edit_demo(two_tasks, change)
        repo = two_tasks.repo
        settings = ray_env.settings(
            two_tasks.script, call_timeout_seconds=5.0, loss_grace_seconds=10.0
        )
        approve(two_tasks, settings)
        run = Store(RunDir(repo)).read_run().name
        wait_for(lambda: _with_marker(marker), 60, "the ray start node's processes")
        thread, outcome = supervise_in_background(repo, settings)
        store = Store(RunDir(repo))
        wait_for(
            lambda: (
                store.read_status("slug").phase == Phase.IMPLEMENTING
                and str(store.read_status("slug").delivered or "").startswith("implementing")
            ),
            180,
            "slug implementing on the ray start node",
            interval=0.3,
            shown=lambda: _shown(repo),
        )
        first = store.read_status("slug")
        spare = _pin_label(ray_env, f"frz2-{frozen}", label)
        running = _with_marker(marker)
        names = {pid: Path(f"/proc/{pid}/comm").read_text().strip() for pid, _ in running}
        if frozen == "machine":
            stopped = running
        else:
            stopped = [(p, b) for p, b in running if names[p].startswith("ray::Session")]
            assert len(stopped) == 1, names
        for pid, _ in stopped:
            os.kill(pid, signal.SIGSTOP)
        thread.join(timeout=300)
        assert outcome and outcome[0].state == "review", (outcome, _shown(repo))
    finally:
        # what was stopped, and the node this test started: ended by pid
        for pid, born in [*stopped, *_with_marker(marker)]:
            if reaper.running(pid, born):
                os.kill(pid, signal.SIGKILL)
        if node.poll() is None:
            os.killpg(node.pid, signal.SIGKILL)
        node.wait()
        if spare is not None:
            ray_env.cluster.remove_node(spare)

    st = store.read_status("slug")
    assert st.phase == Phase.INTEGRATED, st.error
    assert (st.node_losses, st.relaunches) == (1, 0)
    assert st.pane_id != first.pane_id  # a new session
    if frozen == "machine":
        assert st.node != first.node
    events = ledger(repo)
    died = [e for e in events if e["event"] == "session_died"]
    assert [e["cause"] for e in died] == ["node_lost"], died
    assert staging_merges(repo, run, "slug") == 1
    assert [e["task"] for e in events if e["event"] == "task_integrated"] == ["slug"]
