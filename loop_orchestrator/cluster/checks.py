"""`lo-orch doctor` on a Ray cluster (``[cluster] backend = "ray"``): reachable, session
slots offered, every alive node's Ray and lo-orch versions against this machine's, tmux and
the agent CLI on each node that offers a slot (a zero-CPU probe pinned on each node),
whether a session could join the cluster (token authentication, the sandbox), and whether
the current plan's ``node_labels`` can be placed. The rows join doctor.py's."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import loop_orchestrator
from loop_orchestrator import __version__
from loop_orchestrator.agents.support import has_preset, install_command
from loop_orchestrator.cluster import connect as cluster_connect
from loop_orchestrator.cluster.connect import ray_module
from loop_orchestrator.config import Settings
from loop_orchestrator.errors import ClusterError, LoOrchError
from loop_orchestrator.readiness import Check, agent_argv
from loop_orchestrator.runstate.create import read_plan
from loop_orchestrator.runstate.state import RunDir

#: how long the doctor waits for a node to answer its probe
NODE_TIMEOUT = 60.0


@dataclass(frozen=True)
class NodeFacts:
    """What one alive Ray node says about itself (``probe_node`` runs there)."""

    node_id: str
    address: str
    slots: float
    labels: dict[str, str]
    ray_version: str = ""
    lo_orch_version: str = ""
    tmux: str = ""
    agent: str = ""
    #: the node's RAY_AUTH_MODE ("token": joining takes the cluster's token)
    auth: str = ""
    #: where bubblewrap is on its PATH ("" = not found)
    bwrap: str = ""
    #: why the probe gave no answer ("" when it did)
    error: str = ""

    @property
    def name(self) -> str:
        return f"node {self.node_id[:8]} ({self.address})"


def agent_program(settings: Settings) -> str | None:
    """The program a node needs on PATH for ``[agent]`` (None for the built-in scripted
    agent): the first word of ``[agent] command``, or the preset's CLI name."""
    if settings.agent.kind == "scripted":
        return None
    try:
        argv = agent_argv(settings)  # as the local doctor and a launch read it
    except ValueError:
        return settings.agent.command
    return argv[0] if argv else ""


def probe_node(agent: str | None) -> dict[str, str]:
    """Run on a node (a zero-CPU Ray task pinned there): its Ray and lo-orch versions and
    where tmux and the agent CLI are on its PATH ("" = not found)."""

    ray = ray_module()
    found = ""
    if agent:
        if "/" in agent:
            found = agent if os.access(agent, os.X_OK) else ""
        else:
            found = shutil.which(agent) or ""
    return {
        "ray": str(ray.__version__),
        "lo_orch": str(loop_orchestrator.__version__),
        "tmux": shutil.which("tmux") or "",
        "agent": found,
        "auth": os.environ.get("RAY_AUTH_MODE", ""),
        "bwrap": shutil.which("bwrap") or "",
    }


def cluster_facts(ray: Any, settings: Settings, timeout: float = NODE_TIMEOUT) -> list[NodeFacts]:
    """Probe every alive node of the cluster ``ray`` is connected to, all at once."""
    pinned_to = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy
    slot = settings.cluster.slot_resource
    agent = agent_program(settings)
    probe = ray.remote(num_cpus=0, max_retries=0)(probe_node)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    pending = {}
    for node in nodes:
        strategy = pinned_to(node["NodeID"], soft=False)
        pending[node["NodeID"]] = probe.options(scheduling_strategy=strategy).remote(agent)
    ready, _ = ray.wait(list(pending.values()), num_returns=len(pending), timeout=timeout)
    answered = set(ready)
    facts: list[NodeFacts] = []
    for node in nodes:
        node_id = node["NodeID"]
        base = {
            "node_id": node_id,
            "address": str(node.get("NodeManagerAddress", "?")),
            "slots": float(node.get("Resources", {}).get(slot, 0.0)),
            "labels": {
                k: str(v)
                for k, v in (node.get("Labels") or {}).items()
                if not k.startswith("ray.io/")  # Ray's own (node id, ...)
            },
        }
        ref = pending[node_id]
        if ref not in answered:
            facts.append(NodeFacts(**base, error=f"no answer within {timeout:.0f} s"))
            continue
        try:
            got = ray.get(ref)
        except ray.exceptions.RayError as exc:  # the probe failed there: a finding to show
            first = str(exc).strip().splitlines()
            facts.append(NodeFacts(**base, error=(first[-1] if first else type(exc).__name__)))
            continue
        facts.append(
            NodeFacts(
                **base,
                ray_version=got["ray"],
                lo_orch_version=got["lo_orch"],
                tmux=got["tmux"],
                agent=got["agent"],
                auth=got.get("auth", ""),
                bwrap=got.get("bwrap", ""),
            )
        )
    return facts


def judge_cluster(
    facts: list[NodeFacts],
    settings: Settings,
    *,
    ray_version: str,
    lo_orch_version: str,
    wanted_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> list[Check]:
    """One row for the cluster (slots offered), one per node (versions, tmux, the agent CLI
    where sessions can run) and one for the plan's node labels; every problem names the node
    and what to do."""
    slot = settings.cluster.slot_resource
    agent = agent_program(settings)
    hosts = [f for f in facts if f.slots > 0]
    total = sum(f.slots for f in hosts)
    checks: list[Check] = []
    summary = (
        f"{len(facts)} alive node{'s' if len(facts) != 1 else ''}; "
        f"{total:g} session slot{'s' if total != 1 else ''} ({slot}) on {len(hosts)}"
    )
    if not hosts:
        checks.append(
            Check(
                "cluster",
                "fail",
                f"{summary}: no node offers a session slot ({slot})",
                f"Start a node with slots: `ray start --address HEAD:6379 --resources "
                f"'{{\"{slot}\": 4}}'` (docs/cluster.md), or fix [cluster] slot_resource.",
            )
        )
    else:
        checks.append(Check("cluster", "ok", summary))
    for node in facts:
        checks.append(
            _judge_node(node, agent=agent, ray_version=ray_version, lo_version=lo_orch_version)
        )
    if hosts:
        checks.append(_judge_access([h for h in hosts if not h.error], settings))
    if wanted_labels:
        checks.append(_judge_labels(hosts, wanted_labels))
    return checks


def _names(nodes: list[NodeFacts]) -> str:
    return ", ".join(n.name for n in nodes)


def _judge_access(hosts: list[NodeFacts], settings: Settings) -> Check:
    """Whether a session could join the cluster: it runs as the node's user, and a session
    that joins runs code outside its sandbox and reaches every session's actor. lo-orch
    keeps the token out of a sandboxed session's reach (node.py); that takes token
    authentication on the nodes and the sandbox around their sessions."""
    open_nodes = [h for h in hosts if h.auth.lower() != "token"]
    problems: list[str] = []
    advice: list[str] = []
    if open_nodes:
        problems.append(f"token authentication is off on {_names(open_nodes)}")
        advice.append(
            "Start every node with RAY_AUTH_MODE=token and the cluster's token "
            "(`ray get-auth-token --generate` makes one)"
        )
    if settings.sandbox.mode == "off":
        problems.append("[sandbox] mode is off (a session can read the node's Ray token)")
        advice.append('Set [sandbox] mode = "auto"')
    else:
        bare = [h for h in hosts if not h.bwrap]
        if bare:
            problems.append(f"no bubblewrap on {_names(bare)}")
            advice.append("Install bubblewrap there (`apt-get install bubblewrap`)")
    if problems:
        return Check(
            "cluster access",
            "warn",
            "; ".join(problems) + ": a session there could join the cluster and run code "
            "outside its sandbox",
            "; ".join(advice) + " (docs/cluster.md, what crosses the network).",
        )
    return Check(
        "cluster access", "ok", "token authentication on; sessions sandboxed, the token hidden"
    )


def _judge_node(node: NodeFacts, *, agent: str | None, ray_version: str, lo_version: str) -> Check:
    if node.error:
        return Check(
            node.name,
            "fail",
            f"did not answer: {node.error}",
            f"Check that lo-orch {lo_version} is installed in that node's Python "
            "(`python -c 'import loop_orchestrator'` there) and `ray status` shows it.",
        )
    problems: list[str] = []
    advice: list[str] = []
    if node.ray_version != ray_version:
        problems.append(f"Ray {node.ray_version}, this machine has {ray_version}")
        advice.append(f"pip install 'ray=={ray_version}'")
    if node.lo_orch_version != lo_version:
        problems.append(f"lo-orch {node.lo_orch_version}, this machine has {lo_version}")
        advice.append(f"pip install 'loop-orchestrator[ray]=={lo_version}'")
    holds = f"{node.slots:g} slot{'s' if node.slots != 1 else ''}"
    if node.slots > 0:
        if not node.tmux:
            problems.append("tmux not on PATH")
            advice.append("apt-get install tmux")
        if agent and not node.agent:
            problems.append(f"{agent} (the agent CLI) not on PATH")
            advice.append(
                f"{install_command(agent)} (and sign it in there)"
                if agent == "claude" or has_preset(agent)
                else f"install {agent} there"
            )
    labels = ", ".join(f"{k}={v}" for k, v in sorted(node.labels.items()))
    detail = f"{holds}; Ray {node.ray_version}; lo-orch {node.lo_orch_version}" + (
        f"; labels {labels}" if labels else ""
    )
    if problems:
        return Check(
            node.name,
            "fail",
            "; ".join(problems),
            f"On {node.address} (node {node.node_id[:8]}): " + "; ".join(advice) + ".",
        )
    return Check(node.name, "ok", detail)


def _judge_labels(hosts: list[NodeFacts], wanted: Mapping[str, Mapping[str, str]]) -> Check:
    """Every task's node labels are all held by one node that offers a slot."""
    missing = [
        f"{task} ({', '.join(f'{k}={v}' for k, v in sorted(labels.items()))})"
        for task, labels in wanted.items()
        if labels and not any(all(h.labels.get(k) == v for k, v in labels.items()) for h in hosts)
    ]
    if missing:
        return Check(
            "node labels",
            "fail",
            "no node with a session slot has the labels of " + "; ".join(missing),
            'Start such a node with `ray start ... --labels \'{"KEY": "VALUE"}\'`, or change '
            "the plan's node_labels and run `lo-orch plan FILE` again.",
        )
    asked = sum(1 for labels in wanted.values() if labels)
    return Check("node labels", "ok", f"{asked} task{'s' if asked != 1 else ''} placeable")


def plan_labels(repo: Path | None) -> dict[str, dict[str, str]]:
    """The node labels each task of the repository's current run asks for ({} without a
    run, or when its plan cannot be read: other rows say so)."""
    if repo is None:
        return {}

    try:
        plan, _ = read_plan(RunDir(repo))
    except LoOrchError:
        return {}
    return {t.id: dict(t.node_labels) for t in plan.tasks if t.node_labels}


def check_cluster(repo: Path | None, settings: Settings) -> list[Check]:
    """The cluster rows of `lo-orch doctor` (none unless ``[cluster] backend = "ray"``):
    reachable, slots offered, every node's versions and tools, the plan's labels."""
    if settings.cluster.backend != "ray":
        return []

    try:
        ray = cluster_connect.ray_module()
        joined_here = not ray.is_initialized()
        ray = cluster_connect.connect(settings.cluster)
    except ClusterError as exc:
        return [Check("cluster", "fail", exc.message, exc.hint or "")]
    try:
        facts = cluster_facts(ray, settings)
    finally:
        if joined_here:
            cluster_connect.disconnect()
    return judge_cluster(
        facts,
        settings,
        ray_version=str(ray.__version__),
        lo_orch_version=__version__,
        wanted_labels=plan_labels(repo),
    )
