"""Sessions on a real multi-node Ray cluster on this machine (issue 19).

A module-wide ``ray.cluster_utils.Cluster``: a head without session slots and three worker
nodes with ``lo_session`` slots, each with its own working root (``LO_ORCH_NODE_ROOT``) and
an audit log of every path the session actors open or run a command in. The demo project
with two more tasks runs on it with the scripted agent, as locally.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import git

from loop_orchestrator import core, demo, integration, runs
from loop_orchestrator.config import ClusterConfig, Settings
from loop_orchestrator.state import Phase, RunDir, RunPhase, Store
from loop_orchestrator.supervisor import Supervisor

pytestmark = pytest.mark.slow

TASKS = ("tokenize", "slug", "counts", "report", "slugb", "tokenizeb")


@dataclass
class RayEnv:
    cluster: Any
    nodes: list[Any]
    base: Path
    audit: Path

    def settings(self, script: Path, **cluster: Any) -> Settings:
        settings = demo.demo_settings(script)
        return settings.model_copy(
            update={
                "cluster": ClusterConfig(backend="ray", address=self.cluster.address, **cluster)
            }
        )


@pytest.fixture(scope="module")
def ray_env() -> Iterator[RayEnv]:
    import ray
    from ray.cluster_utils import Cluster

    base = Path(tempfile.mkdtemp(prefix="lr-", dir="/tmp"))  # Ray's socket paths stay short
    home = base / "home"
    (home / "tmux").mkdir(parents=True)
    audit = base / "audit.log"
    env = {
        "HOME": str(home),
        "TMUX_TMPDIR": str(home / "tmux"),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "LO_ORCH_LOG_DIR": str(home / "logs"),
        "LO_ORCH_NODE_AUDIT": str(audit),
    }
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "temp_dir": str(base / "t"), "env_vars": env},
    )
    nodes = [
        cluster.add_node(
            num_cpus=1,
            resources={"lo_session": 2},
            env_vars={**env, "LO_ORCH_NODE_ROOT": str(base / f"n{i}")},
        )
        for i in range(3)
    ]
    cluster.wait_for_nodes()
    try:
        yield RayEnv(cluster, nodes, base, audit)
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]
        shutil.rmtree(base, ignore_errors=True)


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


def _approve(files: demo.DemoFiles, settings: Settings) -> None:
    core.plan_from_file(files.repo, files.plan, settings)
    runs.approve_plan(files.repo)


def _ledger(repo: Path) -> list[dict[str, Any]]:
    return Store(RunDir(repo)).read_ledger()


def _run_actors(run: str) -> list[str]:
    import ray

    return [
        n for n in ray.util.list_named_actors(all_namespaces=False) if n.startswith(f"lo-{run}-")
    ]


def test_six_tasks_run_on_two_nodes_to_gate2_and_merge(
    ray_env: RayEnv, six_tasks: demo.DemoFiles
) -> None:
    repo = six_tasks.repo
    settings = ray_env.settings(six_tasks.script)
    _approve(six_tasks, settings)
    run = Store(RunDir(repo)).read_run().name
    ray_env.audit.write_text("", encoding="utf-8")

    outcome = Supervisor(repo, settings).run()

    assert outcome.state == "review", outcome.message
    store = Store(RunDir(repo))
    statuses = {s.task: s for s in store.list_statuses()}
    assert {t: s.phase for t, s in statuses.items()} == dict.fromkeys(TASKS, Phase.INTEGRATED)
    assert all(s.pane_id and s.pane_id.startswith("ray:") for s in statuses.values())
    nodes = {s.node for s in statuses.values()}
    assert None not in nodes and len(nodes) >= 2, nodes
    assert store.read_run().cluster is not None
    events = _ledger(repo)
    assert [(e["task"], e["round"]) for e in events if e["event"] == "rework"] == [("counts", 1)]
    integrated = Counter(e["task"] for e in events if e["event"] == "task_integrated")
    assert integrated == dict.fromkeys(TASKS, 1)
    # the node's work came back as bundles into lo-orch's own refs
    assert git(repo, "for-each-ref", f"refs/lo-orch/cluster/{run}/counts/").count("commit") >= 2
    assert _run_actors(run) == []  # every session ended when its task was integrated

    review = integration.review(repo)
    integration.merge(repo, review)
    assert git(repo, "rev-parse", f"feat/{run}").strip() == review.commit
    assert "return ranked[:n]" in git(repo, "show", f"feat/{run}:textstats/counts.py")
    assert "def slugbify" in git(repo, "show", f"feat/{run}:textstats/slugb.py")
    assert store.read_run().phase == RunPhase.MERGED

    # the node code never opened or ran anything under the user's repository
    audit = ray_env.audit.read_text(encoding="utf-8")
    assert "checkout" in audit  # the audit saw the node's own work
    assert str(repo) not in audit and str(repo.resolve()) not in audit
