"""``run_backend``: the one place a run's session backend is built."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loop_orchestrator.config import ClusterConfig
from loop_orchestrator.runstate.state import RunPhase, RunState
from loop_orchestrator.sessions.backend import SessionBackend, run_owner, run_socket
from loop_orchestrator.sessions.tmux import TmuxBackend

if TYPE_CHECKING:
    from loop_orchestrator.cluster.ray_backend import RayBackend


def run_backend(run: RunState, cluster: ClusterConfig | None = None) -> SessionBackend:
    """The session backend of a run, on the run's own tmux server.

    A run that recorded ``cluster`` in run.json has its sessions on that Ray cluster, from
    any terminal; ``cluster`` (the settings) chooses only for a run that has not started
    yet (a run begun on tmux stays there).
    """
    recorded = run.cluster
    if isinstance(recorded, dict) and recorded.get("backend") == "ray":
        return _ray_backend(run, recorded)
    fresh = run.phase == RunPhase.AWAITING_PLAN_APPROVAL
    if recorded is None and cluster is not None and cluster.backend == "ray" and fresh:
        return _ray_backend(run, cluster)
    return TmuxBackend(run.name, socket=run_socket(run), owner=run_owner(run), repo=run.repo)


def _ray_backend(run: RunState, cluster: ClusterConfig | dict[str, Any]) -> RayBackend:
    """A Ray backend on ``cluster``: the settings, or what run.json recorded of them."""
    # deferred: the Ray backend and the node code it ships cost every command that builds
    # a backend (`lo-orch status`, attach, the dashboard) 0.15 s; only a cluster run needs it
    from loop_orchestrator.cluster.ray_backend import RayBackend, cluster_settings

    settings = cluster if isinstance(cluster, ClusterConfig) else cluster_settings(cluster)
    return RayBackend(run, settings)
