"""The real multi-node Ray cluster the cluster tests share (``ray.cluster_utils.Cluster``):
a head without session slots and three worker nodes with ``lo_session`` slots, each with
its own working root (``LO_ORCH_NODE_ROOT``) and an audit log of every path the session
actors open or run a command in, with token authentication on. A test module uses it as its
module fixture (``ray_env = ray_cluster.ray_env``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers.git import git
from helpers.wait import wait_for
from loop_orchestrator.cluster.connect import connect
from loop_orchestrator.config import ClusterConfig, Settings
from loop_orchestrator.simulator import demo_flow as demo

#: the cluster's address (for helpers that join again)
ray_address: list[str] = []
#: a script step that holds a session until the test releases it (``RayEnv.release``): it
#: waits for a file in the node's checkout, and removes it again
HELD = "while [ ! -e .lo-test-release ]; do sleep 0.2; done; rm -f .lo-test-release"


@dataclass
class RayEnv:
    cluster: Any
    nodes: list[Any]
    base: Path
    audit: Path
    env: dict[str, str]

    def settings(self, script: Path, **cluster: Any) -> Settings:
        settings = demo.demo_settings(script)
        return settings.model_copy(
            update={
                "cluster": ClusterConfig(backend="ray", address=self.cluster.address, **cluster)
            }
        )

    def write_config(
        self, files: demo.DemoFiles, run: str, agent_env: dict[str, str] | None = None
    ) -> None:
        """``settings`` as the repository's config, for `lo-orch run` (``run``: the lines
        of its ``[run]`` section besides the stagger; ``agent_env``: ``[agent] env``)."""
        folder = files.repo / ".loop-orchestrator"
        folder.mkdir(exist_ok=True)
        env = ", ".join(f'{k} = "{v}"' for k, v in (agent_env or {}).items())
        (folder / "config.toml").write_text(
            f'[agent]\nkind = "scripted"\nscript = "{files.script}"\nready_timeout = 20\n'
            f"env = {{{env}}}\n"
            f'[auditor]\nllm = "off"\n[run]\nstagger_seconds = 0.1\n{run}\n'
            f'[cluster]\nbackend = "ray"\naddress = "{self.cluster.address}"\n',
            encoding="utf-8",
        )

    def release(self, run: str, task: str) -> None:
        """Let the held step (``HELD``) of ``task``'s session on its node go on."""
        (checkout,) = self.base.glob(f"n*/*/{run}-*/{task}-g*/repo/.worktrees/*/{task}")
        (checkout / ".lo-test-release").write_text("", encoding="utf-8")

    def add_node(self, root: str, **options: Any) -> Any:
        """A node with two session slots and a working root of its own (``root``)."""
        node = self.cluster.add_node(
            num_cpus=1,
            resources={"lo_session": 2},
            env_vars={**self.env, "LO_ORCH_NODE_ROOT": str(self.base / root)},
            **options,
        )
        self.nodes.append(node)
        return node


@pytest.fixture(scope="module")
def ray_env() -> Iterator[RayEnv]:
    import ray
    from ray.cluster_utils import Cluster

    base = Path(tempfile.mkdtemp(prefix="lr-", dir="/tmp"))  # Ray's socket paths stay short
    home = base / "home"
    (home / "tmux").mkdir(parents=True)
    audit = base / "audit.log"
    # token authentication on, as Ray 2.61 makes it for every cluster: the token where
    # `ray get-auth-token --generate` puts it (~/.ray) and in a file the nodes are told of
    token = base / "ray-token"
    token.write_text(os.urandom(16).hex(), encoding="utf-8")
    (home / ".ray").mkdir()
    shutil.copy(token, home / ".ray" / "auth_token")
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    saved = {k: os.environ.get(k) for k in auth}
    os.environ.update(auth)  # this process joins too (the supervisor under test)
    reread_ray_config()
    env = {
        **auth,
        "HOME": str(home),
        "TMUX_TMPDIR": str(home / "tmux"),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "LO_ORCH_LOG_DIR": str(home / "logs"),
        "LO_ORCH_NODE_AUDIT": str(audit),
        # the nodes' scripted agents' transcripts, removed with the cluster's folder
        "LO_ORCH_SCRIPTED_TRANSCRIPTS": str(base / "transcripts"),
    }
    # Ray notes the head's address in its default temp folder whatever temp_dir says, and
    # fails when no earlier Ray start made that folder (a fresh machine's first Ray test)
    Path(tempfile.gettempdir(), "ray").mkdir(exist_ok=True)
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
    # the test joins as lo-orch does (its namespace), to see the sessions' actors
    ray_address[:] = [cluster.address]
    connect(ClusterConfig(backend="ray", address=cluster.address))
    try:
        yield RayEnv(cluster, nodes, base, audit, env)
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        reread_ray_config()
        # the nodes' tmux servers this module's sessions started (their sockets are in its
        # own TMUX_TMPDIR): with the actors gone, their reapers end each; a leftover is
        # ended here and fails the module
        with contextlib.suppress(AssertionError):
            wait_for(lambda: not node_tmux_servers(home / "tmux"), 20, "reapers", interval=0.5)
        left = node_tmux_servers(home / "tmux")
        for name in left:
            subprocess.run(
                ["tmux", "-L", name, "kill-server"],
                env={**os.environ, "TMUX_TMPDIR": str(home / "tmux")},
                capture_output=True,
                check=False,
            )
        shutil.rmtree(base, ignore_errors=True)
    assert not left, f"tmux servers outlived their sessions' actors: {left}"


def reread_ray_config() -> None:
    """Make this process's Ray read RAY_AUTH_MODE again (it keeps what it read first; Ray
    itself does this when it turns token authentication on)."""
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()  # and the token it loaded


def node_tmux_servers(tmux_tmpdir: Path, fragment: str = "") -> list[str]:
    """Names of the live tmux servers (``-L``) with sockets in ``tmux_tmpdir``."""
    names = []
    for sock in (tmux_tmpdir / f"tmux-{os.getuid()}").glob(f"*{fragment}*"):
        alive = subprocess.run(
            ["tmux", "-L", sock.name, "list-sessions"],
            env={**os.environ, "TMUX_TMPDIR": str(tmux_tmpdir)},
            capture_output=True,
            check=False,
        )
        if alive.returncode == 0:
            names.append(sock.name)
    return names


def staging_merges(repo: Path, run: str, task: str) -> int:
    subjects = git(repo, "log", "--first-parent", "--format=%s", f"lo/{run}/staging").splitlines()
    return sum(1 for s in subjects if f"task {task}:" in s or f"task {task} " in s)


def edit_demo(files: demo.DemoFiles, change: Any) -> None:
    plan = yaml.safe_load(files.plan.read_text(encoding="utf-8"))
    script = yaml.safe_load(files.script.read_text(encoding="utf-8"))
    change(plan, script)
    files.plan.write_text(yaml.safe_dump(plan, sort_keys=False), encoding="utf-8")
    files.script.write_text(yaml.safe_dump(script, sort_keys=False), encoding="utf-8")


def run_actors(run: str) -> list[str]:
    import ray

    if not ray.is_initialized():  # a supervisor that ended left the cluster
        connect(ClusterConfig(backend="ray", address=ray_address[0]))
    # the sessions' namespace, whatever namespace this process joined last (a supervisor
    # run in this process, or a test's own connection, may have left it in another)
    namespace = ClusterConfig().namespace
    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == namespace and a["name"].startswith(f"lo-{run}-")
    ]


def supervise_in_background(repo: Path, settings: Settings) -> tuple[threading.Thread, list[Any]]:
    """A supervisor of ``repo`` running on a thread (a test removes nodes meanwhile); the
    list gets its outcome."""
    from loop_orchestrator.supervisor.main import Supervisor

    outcome: list[Any] = []
    thread = threading.Thread(
        target=lambda: outcome.append(Supervisor(repo, settings).run()), daemon=True
    )
    thread.start()
    return thread, outcome
