"""Agent adapters: how one kind of coding agent is launched, made ready and prompted.

Kinds (``[agent] kind``): ``claude`` (agents/claude.py), ``command`` (any CLI,
agents/command.py) and ``scripted`` (a built-in imitation of Claude Code for tests and the
demo, simulator/agent.py). The shared interface is in agents/base.py; get an adapter with
``make_adapter(settings, repo)``.
"""

from __future__ import annotations

from loop_orchestrator.agents.contract import (
    AgentAdapter,
    AgentContext,
    agent_env,
    lo_orch_bin,
    make_adapter,
)

__all__ = [
    "AgentAdapter",
    "AgentContext",
    "agent_env",
    "lo_orch_bin",
    "make_adapter",
]
