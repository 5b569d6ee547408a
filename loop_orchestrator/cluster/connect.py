"""Joining the Ray cluster of ``[cluster]``: one place that imports Ray and turns its
failures into errors that say what to do."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import socket
from pathlib import Path
from types import ModuleType
from typing import Any

from loop_orchestrator.config import ClusterConfig
from loop_orchestrator.errors import ClusterError

log = logging.getLogger(__name__)

INSTALL_HINT = "Install the Ray extra: pip install 'loop-orchestrator[ray]'"
TOKEN_HINT = (
    "Set RAY_AUTH_MODE=token in lo-orch's environment and give it the cluster's token: "
    "the file ~/.ray/auth_token (copy it from the head, where `ray get-auth-token` prints "
    "it), a file named by RAY_AUTH_TOKEN_PATH, or RAY_AUTH_TOKEN."
)


def ray_module() -> Any:
    """The ``ray`` module, or a ClusterError that says how to install it."""
    try:
        module: ModuleType = importlib.import_module("ray")
    except ImportError as exc:
        msg = f'[cluster] backend = "ray" needs Ray, which is not installed ({exc})'
        raise ClusterError(msg, hint=INSTALL_HINT) from exc
    return module


def connect(cluster: ClusterConfig) -> Any:
    """Join the cluster ``cluster.address`` names, in the run's namespace (once per process);
    returns the ``ray`` module. A second call with the same settings reuses the connection.
    """
    ray = ray_module()
    if ray.is_initialized():
        return ray
    address = cluster.address.strip() or "auto"
    _reachable(address)
    try:
        _admitted(ray, address)
        # Ray puts the driver's working directory first on every worker's sys.path (Ray
        # 2.60 worker.py, "Also add the current directory"), and lo-orch runs in the user's
        # repository: joined from there, node code would import the user's modules (a
        # `ray.py` or `loop_orchestrator/` in the repository) instead of its own.
        with contextlib.chdir(_driver_dir()):
            ray.init(
                address=address,
                namespace=cluster.namespace,
                log_to_driver=False,
                logging_level=logging.WARNING,
                configure_logging=False,
            )
    except ray.exceptions.AuthenticationError as exc:
        msg = (
            f"token authentication is on (RAY_AUTH_MODE=token) and no token for the Ray "
            f"cluster at {address} was found"
        )
        raise ClusterError(msg, hint=TOKEN_HINT) from exc
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = address if address != "auto" else "auto (a cluster started on this machine)"
        msg = f"cannot reach the Ray cluster at {where}: {exc}"
        hint = (
            "Start one (`ray start --head --resources '{\"lo_session\": 4}'`) or set "
            "[cluster] address to the head's address; `ray status` shows what is running. "
            "A cluster with token authentication that refused this machine's token looks "
            f"the same: {TOKEN_HINT}"
        )
        raise ClusterError(msg, hint=hint) from exc
    return ray


def _admitted(ray: Any, address: str) -> None:
    """Fail at once when the cluster at a head's address (``host:port``) refuses this
    process's token, or token authentication is on and no token is found: ``ray.init``
    would retry for about 20 s before saying so. One handshake with the head's GCS, as
    ``ray.init`` makes first; any other failure is left to ``ray.init``. (A ``ray://``
    address reaches Ray Client's server, which is not asked.)"""
    if address == "auto" or address.startswith("ray://"):
        return
    from ray._private.authentication import authentication_token_setup as auth

    try:
        # a missing token: Ray's own check (the handshake itself aborts the process then)
        auth.ensure_token_if_auth_enabled(None, create_token_if_missing=False)
    except ray.exceptions.AuthenticationError as exc:
        msg = (
            f"token authentication is on (RAY_AUTH_MODE=token) and no token for the Ray "
            f"cluster at {address} was found"
        )
        raise ClusterError(msg, hint=TOKEN_HINT) from exc
    try:
        ray._raylet.GcsClient(address=address)  # no public API asks the head alone
    except ray.exceptions.AuthenticationError as exc:
        raise ClusterError(_refused(address), hint=TOKEN_HINT) from exc
    except Exception as exc:  # ray.init says what else is wrong, in its own words
        log.debug("the head's handshake failed", extra={"error": str(exc)})


def _refused(address: str) -> str:
    """What a refused handshake means, by what this process has set."""
    mode = os.environ.get("RAY_AUTH_MODE", "").strip()
    if mode != "token":
        shown = f"RAY_AUTH_MODE={mode}" if mode else "RAY_AUTH_MODE is not set"
        return (
            f"the Ray cluster at {address} needs token authentication, and {shown} in "
            "lo-orch's environment"
        )
    return (
        f"the Ray cluster at {address} refused this machine's token (RAY_AUTH_MODE=token): "
        "it is not the cluster's"
    )


def _driver_dir() -> Path:
    """An empty folder of lo-orch's own to join the cluster from."""
    cache = os.environ.get("XDG_CACHE_HOME", "").strip()
    folder = (Path(cache) if cache else Path.home() / ".cache") / "lo-orch" / "ray-driver"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast on an address nobody answers at (Ray itself retries for minutes)."""
    if address == "auto":
        return
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not host:
        msg = f"[cluster] address {address!r} is not host:port, ray://host:port or auto"
        raise ClusterError(msg, hint='e.g. address = "ray://head.example:10001"')
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        msg = f"cannot reach the Ray cluster at {address}: {exc}"
        hint = "Check that its head runs there (`ray status --address HOST:PORT` on the head)."
        raise ClusterError(msg, hint=hint) from exc


def disconnect() -> None:
    """Leave the cluster (detached session actors keep running)."""
    ray = ray_module()
    if ray.is_initialized():
        ray.shutdown()


def node_root(configured: str, node_id: str) -> Path:
    """Where a node keeps its checkouts: ``LO_ORCH_NODE_ROOT`` in the node's environment,
    else ``[cluster] node_root``, else ``~/.cache/lo-orch/nodes``; one folder per Ray node,
    so nodes sharing a machine (or a home directory) never share a checkout."""
    base = os.environ.get("LO_ORCH_NODE_ROOT", "").strip() or configured.strip()
    root = Path(base).expanduser() if base else Path.home() / ".cache" / "lo-orch" / "nodes"
    return root / node_id[:16]


#: environment variables of a Ray process that carry (or locate) the cluster's credentials
#: or address; a session must not inherit them
RAY_ENV_PREFIXES = ("RAY_",)


def ray_env_names(env: dict[str, str] | None = None) -> list[str]:
    """The Ray variables of ``env`` (this process's environment by default)."""
    env = dict(os.environ) if env is None else env
    return sorted(k for k in env if k.startswith(RAY_ENV_PREFIXES))


def ray_secret_paths() -> list[Path]:
    """What on this node would let a process join the cluster: the token file (``RAY_AUTH
    _TOKEN_PATH``, else ``~/.ray``, where Ray keeps ``auth_token``) and this node's Ray
    folder (its sockets, logs and session files). Called in a Ray worker (the actor)."""
    paths = [Path.home() / ".ray"]
    token_path = os.environ.get("RAY_AUTH_TOKEN_PATH", "").strip()
    if token_path:
        paths.append(Path(token_path).expanduser())
    with contextlib.suppress(Exception):
        ray = ray_module()
        node = ray._private.worker.global_worker.node  # no public API names this folder
        paths.append(Path(node.get_session_dir_path()).parent)
    return paths
