"""Sessions on a real multi-node Ray cluster on this machine.

A module-wide ``ray.cluster_utils.Cluster``: a head without session slots and three worker
nodes with ``lo_session`` slots, each with its own working root (``LO_ORCH_NODE_ROOT``) and
an audit log of every path the session actors open or run a command in. The demo project
with two more tasks runs on it with the scripted agent, as locally.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import ray_cluster
from helpers.agents import claude_settings, endpoint_for
from helpers.git import git
from helpers.ray_cluster import (
    RayEnv,
    edit_demo,
    node_tmux_servers,
    run_actors,
    staging_merges,
    supervise_in_background,
)
from helpers.runs import approve, ledger
from helpers.wait import wait_for

from loop_orchestrator.cluster.node import SessionHost
from loop_orchestrator.cluster.ray_backend import RayBackend, cluster_settings
from loop_orchestrator.config import ClusterConfig
from loop_orchestrator.cost import usage
from loop_orchestrator.runstate import progress as statusdoc
from loop_orchestrator.runstate.state import Phase, RunDir, RunPhase, Store
from loop_orchestrator.sessions.attach import attach_command
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.supervisor.main import Supervisor
from loop_orchestrator.workspace import integration

pytestmark = pytest.mark.slow
#: the module's cluster (helpers.ray_cluster)
ray_env = ray_cluster.ray_env

FORGE = (
    "import os, pathlib\n"
    "from loop_orchestrator.sessions import inbox\n"
    "print(inbox.send(pathlib.Path(os.environ['LO_ORCH_RUN_DIR']),"
    " {'type': 'signal', 'task': 'tokenize', 'phase': 'impl_done'}))\n"
)
TASKS = ("tokenize", "slug", "counts", "report", "slugb", "tokenizeb")


def _copy_task(plan: dict[str, Any], script: dict[str, Any], old: str, new: str) -> None:
    """A second, independent task made from ``old`` by renaming every ``old`` in it."""
    entry = next(t for t in plan["tasks"] if t["id"] == old)
    plan["tasks"].append(yaml.safe_load(yaml.safe_dump(entry).replace(old, new)))
    script[new] = yaml.safe_load(yaml.safe_dump(script[old]).replace(old, new))


@pytest.fixture
def six_tasks(tmp_path: Path, tmux_socket: str) -> demo.DemoFiles:
    files = demo.prepare_demo(tmp_path)
    plan = yaml.safe_load(files.plan.read_text(encoding="utf-8"))
    script = yaml.safe_load(files.script.read_text(encoding="utf-8"))
    _copy_task(plan, script, "slug", "slugb")
    _copy_task(plan, script, "tokenize", "tokenizeb")
    plan["name"] = f"ray{tmp_path.name[-6:]}".replace("_", "")
    files.plan.write_text(yaml.safe_dump(plan, sort_keys=False), encoding="utf-8")
    files.script.write_text(yaml.safe_dump(script, sort_keys=False), encoding="utf-8")
    return files


def _print_figures(supervisor: Supervisor, repo: Path) -> None:
    """What this run measured (shown with ``pytest -s``; benchmarks/cluster.py measures)."""
    from datetime import datetime

    backend = supervisor.backend
    assert isinstance(backend, RayBackend)
    stats = backend.stats
    for task, figures in sorted(stats.items()):
        by: dict[str, list[float]] = {}
        for what, value in figures:
            by.setdefault(what, []).append(value)
        print(task, {k: [round(v, 3) for v in vs] for k, vs in by.items()})
    events = ledger(repo)
    signals = [(e["task"], e["ts"]) for e in events if e["event"] == "signal"]
    for task, ts in signals:
        after = [
            e["ts"]
            for e in events
            if e["event"] == "reacted" and e["task"] == task and e["ts"] >= ts
        ]
        if after:
            lag = datetime.fromisoformat(after[0]) - datetime.fromisoformat(ts)
            print("signal->reaction", task, round(lag.total_seconds(), 3))


def _forge(run: str) -> list[dict[str, Any]]:
    """slug's steps that forge: impl_done for tokenize straight into the node's inbox, and
    staging, feature and cluster refs planted in its checkout, a file beside its folder."""
    return [
        # straight into the node's inbox (the CLI would stop at the missing status file)
        {"run": {"argv": [sys.executable, "-c", FORGE], "check": False}},
        {
            "run": {
                "argv": [
                    "sh",
                    "-c",
                    f"git branch -f lo/{run}/staging HEAD; git branch feat/{run} HEAD; "
                    f"git update-ref refs/lo-orch/cluster/{run}/tokenize/head HEAD; "
                    # beside its own folder on the node: other tasks' checkouts
                    'echo planted > "$LO_ORCH_RUN_DIR/../../planted.txt"; exit 0',
                ]
            }
        },
    ]


def test_six_tasks_run_on_two_nodes_to_gate2_and_merge(
    ray_env: RayEnv, six_tasks: demo.DemoFiles
) -> None:
    """Six tasks on the cluster reach Gate 2 and merge. On the way, slug's session signals
    impl_done for tokenize through its node's inbox and plants staging and feature branches
    in its checkout: refused, logged, and no ref moves (one run for both: a wrong
    implementation of either fails this test)."""

    def change(plan: dict[str, Any], script: dict[str, Any]) -> None:
        write_plan = 'echo "# tokenize: regex, tests first" > "$LO_ORCH_RUN_DIR/plans/tokenize.md"'
        script["tokenize"]["plan"].insert(0, {"run": {"argv": ["sh", "-c", write_plan]}})
        script["slug"]["implement"][0] = [*_forge(plan["name"]), *script["slug"]["implement"][0]]

    edit_demo(six_tasks, change)
    repo = six_tasks.repo
    settings = ray_env.settings(six_tasks.script)
    approve(six_tasks, settings)
    run = Store(RunDir(repo)).read_run().name
    ray_env.audit.write_text("", encoding="utf-8")

    supervisor = Supervisor(repo, settings)
    outcome = supervisor.run()

    assert outcome.state == "review", outcome.message
    # the forgery: refused and logged; tokenize's own impl_done was the one judged
    events = ledger(repo)
    refused = [e for e in events if e["event"] == "event_rejected" and e.get("task") == "tokenize"]
    assert refused and "from the session of task slug" in refused[0]["message"]
    assert git(repo, "branch", "--list", f"feat/{run}").strip() == ""
    assert list(ray_env.base.glob(f"n*/*/{run}-*/planted.txt")) == []
    assert (
        list(ray_env.base.glob(f"n*/*/{run}-*/slug-g*/repo/.worktrees/*/slug")) == []
    )  # cleaned up
    for task in TASKS:
        assert staging_merges(repo, run, task) == 1, task
    _print_figures(supervisor, repo)
    store = Store(RunDir(repo))
    statuses = {s.task: s for s in store.list_statuses()}
    assert {t: s.phase for t, s in statuses.items()} == dict.fromkeys(TASKS, Phase.INTEGRATED)
    assert all(s.pane_id and s.pane_id.startswith("ray:") for s in statuses.values())
    nodes = {s.node for s in statuses.values()}
    assert None not in nodes and len(nodes) >= 2, nodes
    assert store.read_run().cluster is not None
    # the plan the session wrote on its node came back with its signal
    plan_file = RunDir(repo).agent_plan_path("tokenize")
    assert plan_file.read_text(encoding="utf-8") == "# tokenize: regex, tests first\n"
    doc = statusdoc.status_document(repo)
    headers, rows = statusdoc.with_nodes(
        doc, statusdoc.STATUS_HEADERS, statusdoc.status_rows(repo, doc)
    )
    at = headers.index("node")
    assert {row[0]: row[at] for row in rows} == {t: s.node for t, s in statuses.items()}
    events = ledger(repo)
    assert [(e["task"], e["round"]) for e in events if e["event"] == "rework"] == [("counts", 1)]
    integrated = Counter(e["task"] for e in events if e["event"] == "task_integrated")
    assert integrated == dict.fromkeys(TASKS, 1)
    # the node's work came back as bundles into lo-orch's own refs
    assert git(repo, "for-each-ref", f"refs/lo-orch/cluster/{run}/counts/").count("commit") >= 2
    assert run_actors(run) == []  # every session ended when its task was integrated

    review = integration.review(repo)
    integration.merge(repo, review)
    assert git(repo, "rev-parse", f"feat/{run}").strip() == review.commit
    assert "return ranked[:n]" in git(repo, "show", f"feat/{run}:textstats/counts.py")
    assert "def slugbify" in git(repo, "show", f"feat/{run}:textstats/slugb.py")
    assert store.read_run().phase == RunPhase.MERGED

    # the node code never opened or ran anything under the user's repository
    audit = ray_env.audit.read_text(encoding="utf-8")
    assert "/.worktrees/" in audit  # the audit saw the node's own work
    assert str(repo) not in audit and str(repo.resolve()) not in audit


def test_a_lost_node_costs_at_most_one_checkpoint(
    ray_env: RayEnv, six_tasks: demo.DemoFiles
) -> None:
    """The node of a working session is removed after its first checkpoint: the task is
    launched on another node from that checkpoint and finishes; nothing merges twice."""

    note = (
        "if [ -e notes.txt ]; then cp notes.txt seen-at-start.txt; fi; "
        "echo written-before-the-loss >> notes.txt"
    )

    def change(plan: dict[str, Any], script: dict[str, Any]) -> None:
        entry = next(t for t in plan["tasks"] if t["id"] == "tokenize")
        entry["owns"] += ["notes.txt", "seen-at-start.txt"]
        first = script["tokenize"]["implement"][0]
        script["tokenize"]["implement"][0] = [
            {"run": {"argv": ["sh", "-c", note]}},
            # time for a checkpoint on the first node (the relaunch, which starts from it,
            # goes on at once)
            {"run": {"argv": ["sh", "-c", "[ -e seen-at-start.txt ] || sleep 6"]}},
            *first,
        ]

    edit_demo(six_tasks, change)
    repo = six_tasks.repo
    settings = ray_env.settings(six_tasks.script, checkpoint_seconds=1.0)
    approve(six_tasks, settings)
    run = Store(RunDir(repo)).read_run().name
    supervisor, outcome = supervise_in_background(repo, settings)
    wip_ref = f"refs/lo-orch/cluster/{run}/tokenize/wip"

    def checkpointed() -> bool:
        found = git(repo, "for-each-ref", "--format=%(objectname)", wip_ref).strip()
        return bool(found) and "notes.txt" in git(repo, "ls-tree", "--name-only", found)

    wait_for(checkpointed, 120, "a checkpoint of tokenize", interval=0.2)
    lost = Store(RunDir(repo)).read_status("tokenize")
    where = lost.node or ""
    victim = next(n for n in ray_env.nodes if n.node_id[:8] in where)
    generation = str(lost.pane_id).rsplit(":", 1)[-1]
    tmux_tmpdir = Path(ray_env.env["TMUX_TMPDIR"])
    assert node_tmux_servers(tmux_tmpdir, f"-tokenize-g{generation}")
    ray_env.cluster.remove_node(victim)
    ray_env.nodes.remove(victim)
    # the lost node's session does not go on unseen: its reaper ends the tmux server (and
    # the agent in it) once the actor's process is gone
    wait_for(
        lambda: not node_tmux_servers(tmux_tmpdir, f"-tokenize-g{generation}"),
        30,
        "the lost session's tmux server ended",
    )
    try:
        supervisor.join(timeout=300)
        assert outcome and outcome[0].state == "review", outcome
    finally:
        ray_env.add_node("n-new")
    status = Store(RunDir(repo)).read_status("tokenize")
    assert status.phase == Phase.INTEGRATED
    assert victim.node_id[:8] not in (status.node or "")
    events = ledger(repo)
    assert any(e["event"] == "session_died" and e.get("task") == "tokenize" for e in events)
    # the relaunched checkout began with the checkpointed file (the lost work: the rest)
    assert status.commit is not None
    seen = git(repo, "show", f"{status.commit}:seen-at-start.txt")
    assert seen == "written-before-the-loss\n"
    # a lost node is no rework round, and nothing was merged twice
    assert [(e["task"], e["round"]) for e in events if e["event"] == "rework"] == [("counts", 1)]
    for task in TASKS:
        assert staging_merges(repo, run, task) == 1, task


@pytest.mark.claude
def test_real_claude_code_on_a_node_is_priced_and_resumes_its_conversation_on_another(
    ray_env: RayEnv, tmp_path: Path, tmux_socket: str
) -> None:
    """The real Claude Code CLI in a node's session (the scripted model plays the model):
    the transcript it writes there reaches the supervisor's machine before each tool runs,
    so its spend is the endpoint's figures exactly; the node is removed while a tool runs,
    and the session relaunched on another node resumes the same conversation
    (``--resume`` finds the transcript there) and finishes the task."""
    import threading

    from loop_orchestrator.simulator.endpoint import ModelEndpoint

    files = demo.prepare_demo(tmp_path)
    marker = tmp_path / "slow-tool-started"
    slow = f"test -e {marker} || {{ touch {marker}; sleep 100; }}"

    def change(plan: dict[str, Any], script: dict[str, Any]) -> None:
        plan["name"] = f"rayc{tmp_path.name[-6:]}".replace("_", "")
        plan["tasks"] = [t for t in plan["tasks"] if t["id"] == "tokenize"]
        first = script["tokenize"]["implement"][0]
        script["tokenize"]["implement"][0] = [{"run": {"argv": ["sh", "-c", slow]}}, *first]

    edit_demo(files, change)
    # the nodes' Claude Code is set up (as `claude` run once there leaves it); the trust
    # dialog of the node's checkout is answered on screen
    node_config = Path(ray_env.env["HOME"]) / ".claude.json"
    if not node_config.exists():
        node_config.write_text('{"hasCompletedOnboarding": true}\n', encoding="utf-8")
    repo = files.repo
    with endpoint_for(ModelEndpoint, files) as endpoint:
        base = claude_settings(endpoint)
        settings = base.model_copy(
            update={
                "cluster": ClusterConfig(
                    backend="ray", address=ray_env.cluster.address, checkpoint_seconds=2.0
                )
            }
        )
        approve(files, settings)
        outcome: list[Any] = []
        running = Supervisor(repo, settings)
        supervisor = threading.Thread(target=lambda: outcome.append(running.run()), daemon=True)
        supervisor.start()
        wait_for(marker.exists, 240, "the slow tool started on the node", interval=0.2)
        st = Store(RunDir(repo)).read_status("tokenize")
        assert st.session_id and st.worktree
        copy = usage.session_transcript(Path(st.worktree), st.session_id, dict(os.environ))
        # the message that asked for the tool was home before the tool could run
        assert slow.encode() in copy.read_bytes()
        victim = next(n for n in ray_env.nodes if n.node_id[:8] in (st.node or ""))
        # a lost machine's disk goes with it (here the nodes share one HOME, and Claude
        # Code's --resume would find the old node's file by its session id)
        (on_node,) = (Path(ray_env.env["HOME"]) / ".claude" / "projects").glob(
            f"*/{st.session_id}.jsonl"
        )
        assert on_node.read_bytes() == copy.read_bytes()  # the copy is the node's, exactly
        on_node.unlink()
        ray_env.cluster.remove_node(victim)
        ray_env.nodes.remove(victim)
        try:
            supervisor.join(timeout=400)
            assert outcome and outcome[0].state == "review", outcome
        finally:
            ray_env.add_node("n-c")
        replies = endpoint.logged(kind="reply", task="tokenize")
    status = Store(RunDir(repo)).read_status("tokenize")
    assert status.phase == Phase.INTEGRATED
    assert victim.node_id[:8] not in (status.node or "")
    assert any(e["event"] == "session_died" for e in ledger(repo) if e.get("task") == "tokenize")
    # one conversation throughout: after the plan and implement prompts on the lost node,
    # the prompt sent again on the new node is the third of the same session (a fresh
    # session there would have started over at the first)
    assert {r["session"] for r in replies} == {status.session_id}
    again = [r for r in replies if r["prompt"] >= 3]
    assert again and again[0]["prompt_kind"] == "implement", replies
    assert again[0]["messages"] > min(r["messages"] for r in replies if r["prompt"] == 2)
    # the spend is what the endpoint sent, to the message, on both nodes
    sent = dict.fromkeys(usage.TOKEN_KEYS, 0)
    for r in replies:
        for k in usage.TOKEN_KEYS:
            sent[k] += r["usage"][k]
    assert status.usage is not None
    assert {k: status.usage[k] for k in usage.TOKEN_KEYS} == sent
    assert status.usage["cost_usd"] is not None and status.usage["cost_usd"] > 0
    # what came over the network is what the transcript gained, not the file at each event
    final = usage.session_transcript(
        Path(str(status.worktree)), str(status.session_id), dict(os.environ)
    )
    size = len(final.read_bytes())
    assert isinstance(running.backend, RayBackend)
    stats = running.backend.stats
    deltas = [v for what, v in stats["tokenize"] if what == "transcript_bytes"]
    print(f"transcript {size} bytes; {len(deltas)} deltas, {sum(deltas):.0f} bytes sent")
    assert len(deltas) > 3 and sum(deltas) <= 1.5 * size


JOIN = (
    "import sys, ray\n"
    "ray.init(address=sys.argv[1], log_to_driver=False)\n"
    "print('JOINED', ray.cluster_resources())\n"
)


def test_a_session_on_a_node_cannot_reach_the_cluster(
    ray_env: RayEnv, tmp_path: Path, tmux_socket: str
) -> None:
    """A session that wants to run code outside its sandbox through Ray (an actor is any
    program, as the node's user): it finds no Ray variable in its environment or its tmux
    server's, no token in ~/.ray, nothing in the node's Ray folder, and joining the
    cluster, by its address or by looking for it, fails."""
    files = demo.prepare_demo(tmp_path)
    address = ray_env.cluster.address
    probe = (
        "{ echo ENV; env | grep '^RAY_'; tmux -L \"$LO_ORCH_TMUX_SOCKET\" show-environment -g"
        " 2>/dev/null | grep '^RAY_'; echo TOKEN; cat \"$HOME/.ray/auth_token\" 2>/dev/null;"
        f" echo; echo FOLDER; ls -A {ray_env.base / 't'} 2>/dev/null; echo JOIN;"
        f' timeout 90 {sys.executable} -c "$JOIN" {address} 2>&1 | grep JOINED;'
        f' timeout 90 {sys.executable} -c "$JOIN" auto 2>&1 | grep JOINED;'
        " echo END; } > probe.txt"
    )

    def change(plan: dict[str, Any], script: dict[str, Any]) -> None:
        plan["name"] = f"rayp{tmp_path.name[-6:]}".replace("_", "")
        plan["tasks"] = [t for t in plan["tasks"] if t["id"] == "tokenize"]
        plan["tasks"][0]["owns"] += ["probe.txt"]
        first = script["tokenize"]["implement"][0]
        run = {"argv": ["env", f"JOIN={JOIN}", "sh", "-c", probe], "check": False}
        script["tokenize"]["implement"][0] = [{"run": run}, *first]

    edit_demo(files, change)
    repo = files.repo
    settings = ray_env.settings(files.script)
    approve(files, settings)
    outcome = Supervisor(repo, settings).run()
    assert outcome.state == "review", outcome.message
    status = Store(RunDir(repo)).read_status("tokenize")
    seen = git(repo, "show", f"{status.commit}:probe.txt")
    assert seen.startswith("ENV\nTOKEN\n") and seen.endswith("FOLDER\nJOIN\nEND\n"), seen
    # the attack is real: the node does hold these, outside the session's reach, and the
    # token is what joining takes
    assert (Path(ray_env.env["HOME"]) / ".ray" / "auth_token").is_file()
    assert any((ray_env.base / "t").iterdir())
    joins = {}
    for name, env in {
        "with the token": dict(os.environ),
        "without": {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_TOKEN")},
    }.items():
        done = subprocess.run(
            [sys.executable, "-c", JOIN, address],
            env={**env, "HOME": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        joins[name] = "JOINED" in done.stdout
    assert joins == {"with the token": True, "without": False}


def test_a_killed_supervisor_readopts_the_remote_sessions(
    ray_env: RayEnv, six_tasks: demo.DemoFiles
) -> None:
    """`lo-orch run` SIGKILLed while slug works on its node: the next `lo-orch run` finds
    slug's actor by name, relays its signal, and starts no second session for it."""

    def change(plan: dict[str, Any], script: dict[str, Any]) -> None:
        script["slug"]["implement"][0] = [
            {"run": {"argv": ["sh", "-c", ray_cluster.HELD], "timeout": 600}},
            *script["slug"]["implement"][0],
        ]

    edit_demo(six_tasks, change)
    repo = six_tasks.repo
    ray_env.write_config(six_tasks, "concurrency = 4")
    settings = ray_env.settings(six_tasks.script)
    approve(six_tasks, settings)
    run = Store(RunDir(repo)).read_run().name
    argv = [sys.executable, "-m", "loop_orchestrator", "run", "--repo", str(repo)]
    first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:

        def slug_works_on_its_node() -> bool:
            # killed while slug (asleep) works and no other session is mid-task: what is
            # tested is adopting a live session (a signal sent while no supervisor runs:
            # test_cluster_ray_signals.py)
            assert first.poll() is None, "the first supervisor ended"
            store = Store(RunDir(repo))
            others = [s.phase for s in store.list_statuses() if s.task != "slug"]
            return (
                store.read_status("slug").phase == Phase.IMPLEMENTING
                and any("-slug-g" in name for name in run_actors(run))
                and all(p in (Phase.INTEGRATED, Phase.PENDING) for p in others)
            )

        wait_for(slug_works_on_its_node, 150, "slug implementing on a node", interval=0.2)
    finally:
        first.kill()
        first.wait()
    before = [name for name in run_actors(run) if "-slug-g" in name]
    assert len(before) == 1
    # with no supervisor running, `lo-orch attach slug` still reaches the remote session
    pane = Store(RunDir(repo)).read_status("slug").pane_id
    assert pane is not None
    relay = attach_command(repo, "slug")
    assert relay[1:3] == ["-m", "loop_orchestrator.cluster.remote_attach"]
    assert relay[-2:] == ["--pane", pane]
    state = Store(RunDir(repo)).read_run()
    assert state.cluster is not None
    _attach_through_the_relay(relay, RayBackend(state, cluster_settings(state.cluster)), pane)
    over_ssh = RayBackend(state, cluster_settings({**state.cluster, "ssh": "me@{host}"}))
    ssh = over_ssh.attach_argv(pane)
    assert ssh[:2] == ["ssh", "-t"] and ssh[2].startswith("me@")
    remote = shlex.split(ssh[3])  # what runs on the node: a client of the session's own server
    assert remote[:3] == ["tmux", "-L", remote[2]] and remote[3] == "attach-session"
    has = subprocess.run(
        ["tmux", "-L", remote[2], "has-session", "-t", remote[5]],
        env={**os.environ, "TMUX_TMPDIR": ray_env.env["TMUX_TMPDIR"]},
        capture_output=True,
        check=False,
    )
    assert has.returncode == 0, has.stderr

    proc2 = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
    try:
        # slug goes on (and signals) once the second supervisor has started: the signal
        # it then relays comes from the session it adopted
        wait_for(
            lambda: (
                sum(1 for e in ledger(repo) if e["event"] == "supervisor_started") == 2
                or proc2.poll() is not None
            ),
            120,
            "the second supervisor started",
            interval=0.2,
        )
        ray_env.release(run, "slug")
        out, err = proc2.communicate(timeout=300)  # six tasks on Ray, on two shared cores
    except subprocess.TimeoutExpired:
        proc2.send_signal(signal.SIGABRT)
        out, err = proc2.communicate()
        print("ERR", err.decode(errors="replace")[-12000:])
        raise
    second = subprocess.CompletedProcess(argv, proc2.returncode, out.decode(), err.decode())

    assert second.returncode == 0, second.stdout + second.stderr
    events = ledger(repo)
    assert sum(1 for e in events if e["event"] == "supervisor_started") == 2
    launched = Counter(e["task"] for e in events if e["event"] == "session_launched")
    assert launched["slug"] == 1  # the live remote session was adopted, not launched again
    assert not any(e["event"] == "session_died" for e in events)
    statuses = {s.task: s.phase for s in Store(RunDir(repo)).list_statuses()}
    assert statuses == dict.fromkeys(TASKS, Phase.INTEGRATED)
    for task in TASKS:
        assert staging_merges(repo, run, task) == 1, task
    assert run_actors(run) == []


def _attach_through_the_relay(relay: list[str], backend: RayBackend, pane: str) -> None:
    """`lo-orch attach`'s relay (the package's own endpoint to the node's actor) in a real
    terminal: the remote session's screen shows up, tmux's detach key typed here reaches
    the node's client, and the relay ends cleanly, leaving the session alive."""
    viewer = f"lo-view-{os.getpid()}"
    command = shlex.join(["sh", "-c", f'{shlex.join(relay)}; echo "relay-exit=$?"; sleep 60'])

    def tmux(*args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", viewer, *args], capture_output=True, text=True, check=False
        ).stdout

    remote = [ln.strip() for ln in backend.capture(pane, lines=0).splitlines()]
    remote = [ln for ln in remote if len(ln) >= 8]  # lines distinctive enough to look for
    assert remote, "the remote session shows nothing to look for"
    subprocess.run(
        [
            *("tmux", "-L", viewer, "-f", "/dev/null", "new-session", "-d", "-s", "view"),
            *("-x", "200", "-y", "50", command),
        ],
        check=True,
    )
    try:
        wait_for(
            lambda: any(ln in tmux("capture-pane", "-p", "-t", "=view:") for ln in remote),
            60,
            "the remote screen in the local terminal",
            shown=lambda: tmux("capture-pane", "-p", "-t", "=view:"),
        )
        tmux("send-keys", "-t", "=view:", "C-b", "d")  # tmux's own detach, typed here
        wait_for(
            lambda: "relay-exit=0" in tmux("capture-pane", "-p", "-t", "=view:"),
            30,
            "the relay ending after the detach",
            shown=lambda: tmux("capture-pane", "-p", "-t", "=view:"),
        )
    finally:
        tmux("kill-server")
    assert backend.state(pane).alive  # a detach leaves the session working


def test_cleanup_ends_this_runs_remote_sessions_only(
    ray_env: RayEnv, six_tasks: demo.DemoFiles
) -> None:
    """`lo-orch cleanup --abandon` from another terminal, its supervisor killed: the run's
    actors, their tmux servers and checkouts go; an actor of another run (same name prefix,
    another digest) is left alone."""
    import ray

    def change(plan: dict[str, Any], script: dict[str, Any]) -> None:
        script["slug"]["implement"][0] = [{"sleep": {"seconds": 300}}]

    edit_demo(six_tasks, change)
    repo = six_tasks.repo
    settings = ray_env.settings(six_tasks.script)
    approve(six_tasks, settings)
    run = Store(RunDir(repo)).read_run().name
    # join this module's cluster first: a test before may have left this process outside
    # it, and `.remote` would then join whatever cluster Ray's address file names
    run_actors(run)
    # another run's session actor whose name starts like this run's (another digest)
    decoy: Any = (
        ray.remote(SessionHost)
        .options(
            name=f"lo-{run}-0123456789-slug-g1",
            namespace=settings.cluster.namespace,
            lifetime="detached",
            num_cpus=0,
        )
        .remote(
            run=run,
            digest="0123456789",
            task="slug",
            generation=1,
            node_root=str(ray_env.base / "decoy"),
            checkpoint_seconds=60.0,
        )
    )
    ray_env.write_config(six_tasks, "concurrency = 4")
    argv = [sys.executable, "-m", "loop_orchestrator", "run", "--repo", str(repo)]
    supervisor = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:

        def slug_implementing() -> bool:
            assert supervisor.poll() is None, "the supervisor ended"
            return Store(RunDir(repo)).read_status("slug").phase == Phase.IMPLEMENTING

        wait_for(slug_implementing, 120, "slug implementing", interval=0.2)
        supervisor.kill()
        supervisor.wait()
        ours = [n for n in run_actors(run) if "0123456789" not in n]
        assert ours
        checkouts = list(ray_env.base.glob(f"n*/*/{run}-*/slug-g*/repo/.worktrees/*/slug"))
        assert checkouts

        integration.cleanup(repo, abandon=True)

        assert [n for n in run_actors(run) if "0123456789" not in n] == []
        assert not any(p.exists() for p in checkouts)
        assert ray.get(decoy.info.remote(), timeout=30)["session"]
    finally:
        supervisor.kill()
        supervisor.wait()
        ray.kill(decoy)


def test_a_task_asking_for_a_node_label_runs_there(
    ray_env: RayEnv, six_tasks: demo.DemoFiles
) -> None:
    """tokenize asks for `lo-node: gpu` (plan field node_labels): only the one node with
    that label gets it, though the others have free slots."""
    gpu = ray_env.cluster.add_node(
        num_cpus=1,
        resources={"lo_session": 1},
        labels={"lo-node": "gpu"},
        env_vars={**ray_env.env, "LO_ORCH_NODE_ROOT": str(ray_env.base / "gpu")},
    )
    try:

        def change(plan: dict[str, Any], script: dict[str, Any]) -> None:
            plan["tasks"] = [t for t in plan["tasks"] if t["id"] == "tokenize"]
            plan["tasks"][0]["node_labels"] = {"lo-node": "gpu"}

        edit_demo(six_tasks, change)
        repo = six_tasks.repo
        settings = ray_env.settings(six_tasks.script)
        approve(six_tasks, settings)

        outcome = Supervisor(repo, settings).run()

        assert outcome.state == "review", outcome.message
        statuses = {s.task: s for s in Store(RunDir(repo)).list_statuses()}
        assert gpu.node_id[:8] in (statuses["tokenize"].node or "")
    finally:
        ray_env.cluster.remove_node(gpu)


@pytest.mark.parametrize(
    ("auth", "named"),
    [
        ({}, "RAY_AUTH_MODE is not set"),
        ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 32}, "refused this machine's token"),
    ],
    ids=["without_token_mode", "with_a_wrong_token"],
)
def test_a_cluster_refusing_the_token_fails_doctor_at_once_naming_what_to_set(
    ray_env: RayEnv, git_repo: Path, tmp_path: Path, auth: dict[str, str], named: str
) -> None:
    """The module's cluster has token authentication on; `lo-orch doctor` without
    RAY_AUTH_MODE=token, or with a token that is not the cluster's, fails within seconds
    (Ray's own join retries for about 20 s), saying what is wrong and what to set."""
    config = git_repo / ".loop-orchestrator" / "config.toml"
    config.parent.mkdir()
    config.write_text(
        f'[agent]\nkind = "scripted"\n[cluster]\nbackend = "ray"\n'
        f'address = "{ray_env.cluster.address}"\n',
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update({**auth, "HOME": str(tmp_path)})  # no ~/.ray/auth_token either
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "loop_orchestrator", "doctor", "--repo", str(git_repo)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    took = time.monotonic() - started
    assert done.returncode == 1, done.stdout + done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("cluster"))
    assert "FAIL" in row and named in row, done.stdout
    shown = done.stdout + done.stderr
    assert "RAY_AUTH_MODE=token" in shown and "RAY_AUTH_TOKEN_PATH" in shown
    assert "Traceback" not in done.stderr
    assert took < 15, took  # python, Ray's import and one handshake
