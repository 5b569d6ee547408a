"""`lo-orch doctor` on a Ray cluster, joining it (connect.py), and the warning that the local
backend ignores node labels.

The cluster tests use a real local Ray cluster (``ray.cluster_utils.Cluster``): a head
without session slots, and per test the worker nodes it needs, each started with its own
environment (``env_vars``: a PATH without the agent CLI, a PYTHONPATH with another copy of
lo-orch), removed again at the end of the test.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO_ROOT
from helpers.cli import invoke, write_plan
from helpers.wait import wait_for

from loop_orchestrator import __version__
from loop_orchestrator.cluster.checks import (
    NodeFacts,
    agent_program,
    check_cluster,
    judge_cluster,
    probe_node,
)
from loop_orchestrator.cluster.connect import _reachable, connect, ray_module
from loop_orchestrator.commands.doctor import doctor
from loop_orchestrator.config import ClusterConfig, SandboxConfig, Settings
from loop_orchestrator.errors import ClusterError
from loop_orchestrator.readiness import Check, check_agent

AGENT = "lo-r2-agent"


def closed_port() -> int:
    """A local TCP port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def ray_settings(address: str, **cluster: Any) -> Settings:
    return Settings.model_validate(
        {
            "agent": {"kind": "command", "command": AGENT},
            "cluster": {"backend": "ray", "address": address, **cluster},
        }
    )


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


# joining: address parsing and fast failure (no cluster) --------------------------------


@pytest.mark.parametrize(
    "address", ["head.example", "ray://head.example", "ray://:10001", "host:port", ":6379"]
)
def test_an_address_that_is_not_host_port_is_refused(address: str) -> None:
    with pytest.raises(ClusterError, match="is not host:port") as caught:
        _reachable(address)
    assert caught.value.hint and "ray://" in caught.value.hint


@pytest.mark.parametrize("template", ["ray://127.0.0.1:{}", "127.0.0.1:{}", "ray://[::1]:{}"])
def test_an_address_nobody_answers_at_fails_fast(template: str) -> None:
    address = template.format(closed_port())
    started = time.monotonic()
    with pytest.raises(ClusterError, match="cannot reach the Ray cluster") as caught:
        connect(ClusterConfig(backend="ray", address=address))
    assert time.monotonic() - started < 5.5  # Ray alone would retry for minutes
    assert address in caught.value.message
    assert caught.value.hint and "ray status" in caught.value.hint
    assert not ray_module().is_initialized()


def test_doctor_reports_an_unreachable_cluster(git_repo: Path) -> None:
    port = closed_port()
    config = git_repo / ".loop-orchestrator" / "config.toml"
    config.parent.mkdir()
    config.write_text(
        f'[agent]\nkind = "scripted"\n[cluster]\nbackend = "ray"\naddress = "ray://127.0.0.1:{port}"\n',
        encoding="utf-8",
    )
    started = time.monotonic()
    result = invoke("doctor", "--repo", git_repo)
    assert time.monotonic() - started < 30
    assert result.code == 1, result
    row = next(line for line in result.stdout.splitlines() if line.startswith("cluster"))
    assert "FAIL" in row and f"127.0.0.1:{port}" in row
    assert "cluster" in result.stderr  # named among the failed checks


def test_token_authentication_without_a_token_says_what_to_set(
    git_repo: Path, tmp_path: Path
) -> None:
    """RAY_AUTH_MODE=token and no token anywhere (no ~/.ray/auth_token, no
    RAY_AUTH_TOKEN_PATH, no RAY_AUTH_TOKEN): `lo-orch doctor` fails at once naming what to
    set, instead of Ray's exception or its retries."""
    config = git_repo / ".loop-orchestrator" / "config.toml"
    config.parent.mkdir()
    with socket.socket() as listening:  # somebody answers at the address
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        cluster = f'[cluster]\nbackend = "ray"\naddress = "127.0.0.1:{port}"\n'
        config.write_text(f'[agent]\nkind = "scripted"\n{cluster}', encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        home = tmp_path / "home"
        home.mkdir()
        env.update({"RAY_AUTH_MODE": "token", "HOME": str(home)})
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "loop_orchestrator", "doctor", "--repo", str(git_repo)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert time.monotonic() - started < 20, done.stderr
    assert done.returncode == 1, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("cluster"))
    assert "FAIL" in row and "no token" in row, done.stdout
    assert "RAY_AUTH_TOKEN_PATH" in done.stdout + done.stderr
    assert "~/.ray/auth_token" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "InvalidAuthToken" not in done.stderr


def test_no_cluster_rows_on_the_local_backend(git_repo: Path) -> None:
    checks = doctor(git_repo).checks
    assert any(c.name == "git" for c in checks)  # the machine's rows are there
    assert not any(c.name == "cluster" or c.name.startswith("node ") for c in checks)


# judging what nodes said (pure) ---------------------------------------------------------


def facts(node_id: str, **kw: Any) -> NodeFacts:
    base: dict[str, Any] = {
        "node_id": node_id,
        "address": "10.0.0.7",
        "slots": 2.0,
        "labels": {},
        "ray_version": "2.60.0",
        "lo_orch_version": __version__,
        "tmux": "/usr/bin/tmux",
        "agent": f"/usr/bin/{AGENT}",
    }
    base.update(kw)
    return NodeFacts(**base)


def judge(nodes: list[NodeFacts], wanted: dict[str, dict[str, str]] | None = None) -> list[Check]:
    return judge_cluster(
        nodes,
        ray_settings("auto"),
        ray_version="2.60.0",
        lo_orch_version=__version__,
        wanted_labels=wanted,
    )


def test_judge_names_the_node_and_what_to_do() -> None:
    checks = judge(
        [
            facts("a" * 56),
            facts("b" * 56, ray_version="2.59.0"),
            facts("c" * 56, lo_orch_version="0.0.9", tmux=""),
            facts("d" * 56, slots=0.0, agent="", tmux=""),  # holds no session: tools not needed
            facts("e" * 56, error="ModuleNotFoundError: No module named 'loop_orchestrator'"),
        ]
    )
    rows = by_name(checks)
    assert (
        rows["cluster"].status == "ok"
        and "8 session slots (lo_session) on 4" in rows["cluster"].detail
    )
    assert rows["node aaaaaaaa (10.0.0.7)"].status == "ok"
    ray_row = rows["node bbbbbbbb (10.0.0.7)"]
    assert ray_row.status == "fail" and "Ray 2.59.0, this machine has 2.60.0" in ray_row.detail
    assert "ray==2.60.0" in ray_row.hint and "10.0.0.7" in ray_row.hint
    lo_row = rows["node cccccccc (10.0.0.7)"]
    assert lo_row.status == "fail" and f"lo-orch 0.0.9, this machine has {__version__}" in (
        lo_row.detail
    )
    assert "tmux not on PATH" in lo_row.detail and "apt-get install tmux" in lo_row.hint
    assert rows["node dddddddd (10.0.0.7)"].status == "ok"
    dead = rows["node eeeeeeee (10.0.0.7)"]
    assert dead.status == "fail" and "No module named" in dead.detail


def test_judge_fails_without_slots_and_on_unplaceable_labels() -> None:
    rows = by_name(judge([facts("a" * 56, slots=0.0)]))
    assert rows["cluster"].status == "fail" and "no node offers a session slot" in (
        rows["cluster"].detail
    )
    assert "--resources" in rows["cluster"].hint
    nodes = [facts("a" * 56, labels={"lo-node": "gpu"}), facts("b" * 56, labels={"zone": "eu"})]
    # both labels exist, but on different nodes: no one node can hold the task
    rows = by_name(judge(nodes, {"train": {"lo-node": "gpu", "zone": "eu"}, "fit": {"zone": "eu"}}))
    assert rows["node labels"].status == "fail"
    assert "train (lo-node=gpu, zone=eu)" in rows["node labels"].detail
    assert "fit" not in rows["node labels"].detail
    rows = by_name(judge(nodes, {"fit": {"zone": "eu"}}))
    assert rows["node labels"].status == "ok"


def test_judge_warns_when_a_session_could_join_the_cluster() -> None:
    """A session runs as its node's user: without token authentication, or without the
    sandbox that hides the token, it could join the cluster and run code outside it."""
    safe = {"auth": "token", "bwrap": "/usr/bin/bwrap"}
    rows = by_name(judge([facts("a" * 56, **safe), facts("d" * 56, slots=0.0)]))
    assert rows["cluster access"].status == "ok"
    rows = by_name(judge([facts("a" * 56, **safe), facts("b" * 56, auth="", bwrap="/b")]))
    access = rows["cluster access"]
    assert access.status == "warn" and "token authentication is off on node bbbbbbbb" in (
        access.detail
    )
    assert "aaaaaaaa" not in access.detail and "RAY_AUTH_MODE=token" in access.hint
    rows = by_name(judge([facts("a" * 56, auth="token", bwrap="")]))
    assert "no bubblewrap on node aaaaaaaa" in rows["cluster access"].detail
    assert "apt-get install bubblewrap" in rows["cluster access"].hint
    off = ray_settings("auto").model_copy(update={"sandbox": SandboxConfig(mode="off")})
    checks = judge_cluster(
        [facts("a" * 56, **safe)], off, ray_version="2.60.0", lo_orch_version=__version__
    )
    access = by_name(checks)["cluster access"]
    assert access.status == "warn" and "[sandbox] mode is off" in access.detail
    assert "bubblewrap" not in access.detail  # not needed when the sandbox is off anyway


def labelled_plan(labels: dict[str, dict[str, str]]) -> dict[str, Any]:
    """A valid plan, one task per entry of ``labels`` (task id -> its node_labels)."""
    tasks = []
    for n, (task, wanted) in enumerate(labels.items()):
        item: dict[str, Any] = {
            "id": task,
            "title": f"task {task}",
            "objective": f"Write part {n}.",
            "owns": [f"part{n}.py"],
            "done": [{"criterion": f"part{n}.py exists", "check": f"test -f part{n}.py"}],
        }
        if wanted:
            item["node_labels"] = wanted
        tasks.append(item)
    return {"goal": "labels", "name": "labels", "tasks": tasks}


def test_agent_program_follows_the_agent_kind() -> None:
    assert agent_program(Settings()) == "claude"
    assert agent_program(Settings.model_validate({"agent": {"kind": "codex"}})) == "codex"
    assert agent_program(Settings.model_validate({"agent": {"kind": "scripted"}})) is None
    custom = Settings.model_validate({"agent": {"kind": "command", "command": "my-cli --fast"}})
    assert agent_program(custom) == "my-cli"


def test_a_command_line_of_paths_is_read_as_the_local_doctor_and_a_launch_read_it(
    tmp_path: Path,
) -> None:
    """`/path/python /path/agent.py`: the program is the first word, on a node as locally
    (the node's probe finds it; taken as one path it would be "not on PATH"); a whole line
    that is a file (a path with a space) is one word, as a launch takes it."""
    script = tmp_path / "agent.py"
    script.write_text("print('hi')\n", encoding="utf-8")
    line = f"{sys.executable} {script}"
    settings = Settings.model_validate({"agent": {"kind": "command", "command": line}})
    assert agent_program(settings) == sys.executable
    assert check_agent(settings).status == "ok"
    assert probe_node(agent_program(settings))["agent"] == sys.executable
    spaced = tmp_path / "my agent"
    spaced.write_text("#!/bin/sh\n", encoding="utf-8")
    spaced.chmod(0o755)
    whole = Settings.model_validate({"agent": {"kind": "command", "command": str(spaced)}})
    assert agent_program(whole) == str(spaced)
    assert check_agent(whole).status == "ok"
    assert probe_node(agent_program(whole))["agent"] == str(spaced)


# the local backend ignores node labels: plan and approve say so --------------------------


def test_plan_and_approve_warn_that_tmux_ignores_node_labels(
    git_repo: Path, tmp_path: Path
) -> None:
    data = labelled_plan({"gpu-part": {"lo-node": "gpu"}, "plain": {}})
    result = invoke("plan", write_plan(tmp_path, data, "labels.yaml"), "--repo", git_repo)
    assert result.code == 0, result
    warning = "node_labels of gpu-part are ignored"
    assert warning in result.stdout and "plain" not in result.stdout.split(warning)[1][:80]
    approved = invoke("approve", "--repo", git_repo)
    assert approved.code == 0, approved
    assert warning in approved.stdout + approved.stderr

    # with the Ray backend the labels are used: no warning
    config = git_repo / ".loop-orchestrator" / "config.toml"
    config.parent.mkdir(exist_ok=True)
    config.write_text('[cluster]\nbackend = "ray"\n', encoding="utf-8")
    again = invoke("plan", write_plan(tmp_path, data, "labels2.yaml"), "--repo", git_repo)
    assert again.code == 0, again
    assert "ignored" not in again.stdout
    # and a plan without labels gets none on the local backend either
    config.unlink()
    data = labelled_plan({"gpu-part": {}, "plain": {}})
    plain = invoke("plan", write_plan(tmp_path, data, "labels3.yaml"), "--repo", git_repo)
    assert plain.code == 0 and "ignored" not in plain.stdout, plain


# a real cluster -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def head() -> Iterator[Any]:
    """A local Ray cluster with only a head (no session slot); tests add worker nodes."""
    from ray.cluster_utils import Cluster

    ray = ray_module()
    temp = tempfile.mkdtemp(prefix="lo-r2d-")
    cluster: Any = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "temp_dir": temp, "include_dashboard": False},
    )
    try:
        yield cluster
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def agent_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with the agent CLI (on this process's PATH too, for the local rows)."""
    folder = tmp_path / "agent-bin"
    folder.mkdir()
    program = folder / AGENT
    program.write_text("#!/bin/sh\necho 1.0\n", encoding="utf-8")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


@pytest.fixture
def nodes(head: Any) -> Iterator[list[Any]]:
    """Worker nodes a test adds (append to the list); removed at its end."""
    added: list[Any] = []
    yield added
    for node in added:
        head.remove_node(node)
    ray = ray_module()
    if not ray.is_initialized():
        ray.init(address=head.address, log_to_driver=False)
    wait_for(
        lambda: len([n for n in ray.nodes() if n["Alive"]]) == 1, 60, "removed nodes to be gone"
    )
    ray.shutdown()


def node_env(path: str, pythonpath: str = "") -> dict[str, str]:
    return {"PATH": path, "PYTHONPATH": pythonpath or os.environ.get("PYTHONPATH", str(REPO_ROOT))}


def node_ids(head: Any, added: list[Any]) -> list[str]:
    return [str(n.node_id) for n in added]


def row_of(checks: list[Check], node_id: str) -> Check:
    found = [c for c in checks if c.name.startswith(f"node {node_id[:8]} ")]
    assert len(found) == 1, checks
    return found[0]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_doctor_passes_a_healthy_cluster_and_reports_each_broken_node(
    head: Any,
    nodes: list[Any],
    agent_bin: Path,
    tmp_path: Path,
    git_repo: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base_path = "/usr/local/bin:/usr/bin:/bin"
    good = head.add_node(
        num_cpus=1,
        resources={"lo_session": 2},
        labels={"lo-node": "gpu"},
        env_vars=node_env(f"{agent_bin}:{base_path}"),
    )
    nodes.append(good)
    settings = ray_settings(head.address)
    # lo-orch runs in the user's repository, and Ray puts the driver's working directory
    # first on the workers' sys.path: a repository with a `loop_orchestrator/` of its own
    # must not be what the nodes import
    shadow = tmp_path / "user-repo"
    (shadow / "loop_orchestrator").mkdir(parents=True)
    (shadow / "loop_orchestrator" / "__init__.py").write_text(
        '__version__ = "6.6.6"\n', encoding="utf-8"
    )
    monkeypatch.chdir(shadow)
    healthy = check_cluster(git_repo, settings)
    rows = by_name(healthy)
    assert rows["cluster"].status == "ok", healthy
    assert "2 session slots (lo_session) on 1" in rows["cluster"].detail
    # this test cluster runs without token authentication: a session could join it
    access = rows["cluster access"]
    assert access.status == "warn" and "token authentication is off on node" in access.detail
    assert "RAY_AUTH_MODE=token" in access.hint
    assert all(c.status == "ok" for c in healthy if c is not access), healthy
    good_row = row_of(healthy, good.node_id)
    assert "lo-node=gpu" in good_row.detail and f"lo-orch {__version__}" in good_row.detail
    assert not ray_module().is_initialized()  # the doctor left the cluster it joined

    # through the command too: exit 0, the node rows printed
    config = git_repo / ".loop-orchestrator" / "config.toml"
    config.parent.mkdir()
    config.write_text(
        f'[agent]\nkind = "command"\ncommand = "{AGENT}"\n[sandbox]\nmode = "off"\n'
        f'[cluster]\nbackend = "ray"\naddress = "{head.address}"\n',
        encoding="utf-8",
    )
    ran = invoke("doctor", "--repo", git_repo)
    assert ran.code == 0, ran
    assert f"node {good.node_id[:8]}" in ran.stdout

    # a node whose PATH lacks the agent CLI, and one whose Python imports another lo-orch
    other = tmp_path / "other-lo-orch"
    shutil.copytree(
        REPO_ROOT / "loop_orchestrator",
        other / "loop_orchestrator",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    init = other / "loop_orchestrator" / "__init__.py"
    init.write_text(
        init.read_text(encoding="utf-8").replace(__version__, "0.0.7"), encoding="utf-8"
    )
    no_agent = head.add_node(num_cpus=1, resources={"lo_session": 1}, env_vars=node_env(base_path))
    nodes.append(no_agent)
    old = head.add_node(
        num_cpus=1,
        resources={"lo_session": 1},
        env_vars=node_env(f"{agent_bin}:{base_path}", pythonpath=str(other)),
    )
    nodes.append(old)
    checks = check_cluster(git_repo, settings)
    assert row_of(checks, good.node_id).status == "ok"
    missing = row_of(checks, no_agent.node_id)
    assert missing.status == "fail" and f"{AGENT} (the agent CLI) not on PATH" in missing.detail
    assert "tmux" not in missing.detail  # tmux is there
    assert no_agent.node_id[:8] in missing.hint
    stale = row_of(checks, old.node_id)
    assert stale.status == "fail"
    assert f"lo-orch 0.0.7, this machine has {__version__}" in stale.detail
    assert f"loop-orchestrator[ray]=={__version__}" in stale.hint
    ran = invoke("doctor", "--repo", git_repo)
    assert ran.code == 1 and f"node {no_agent.node_id[:8]}" in ran.stderr, ran


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_doctor_fails_a_cluster_without_slots_and_unplaceable_plan_labels(
    head: Any, nodes: list[Any], agent_bin: Path, tmp_path: Path, git_repo: Path
) -> None:
    settings = ray_settings(head.address)
    checks = check_cluster(git_repo, settings)  # only the head: no slot anywhere
    rows = by_name(checks)
    assert rows["cluster"].status == "fail"
    assert "no node offers a session slot (lo_session)" in rows["cluster"].detail
    assert "ray start --address" in rows["cluster"].hint

    # a plan whose task asks for a label no slot node has
    data = labelled_plan({"train": {"lo-node": "gpu"}, "eu": {"zone": "eu"}})
    assert invoke("plan", write_plan(tmp_path, data, "p.yaml"), "--repo", git_repo).code == 0
    nodes.append(
        head.add_node(
            num_cpus=1,
            resources={"lo_session": 1},
            labels={"zone": "eu"},
            env_vars=node_env(f"{agent_bin}:/usr/bin:/bin"),
        )
    )
    rows = by_name(check_cluster(git_repo, settings))
    assert rows["cluster"].status == "ok"
    assert rows["node labels"].status == "fail"
    assert "train (lo-node=gpu)" in rows["node labels"].detail
    assert "eu (" not in rows["node labels"].detail
