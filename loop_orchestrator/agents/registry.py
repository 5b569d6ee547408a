"""The adapter of a run's ``[agent] kind``: ``make_adapter``, the one place one is built."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from loop_orchestrator.agents.aider import AiderAdapter
from loop_orchestrator.agents.claude import ClaudeAdapter
from loop_orchestrator.agents.cline import ClineAdapter
from loop_orchestrator.agents.codex import CodexAdapter
from loop_orchestrator.agents.command import CommandAdapter
from loop_orchestrator.agents.contract import AgentAdapter
from loop_orchestrator.agents.gemini import GeminiAdapter
from loop_orchestrator.agents.opencode import OpencodeAdapter
from loop_orchestrator.agents.qwen import QwenAdapter
from loop_orchestrator.agents.scripted import ScriptedAdapter
from loop_orchestrator.agents.vibe import VibeAdapter
from loop_orchestrator.config import AgentConfig, Settings
from loop_orchestrator.errors import ConfigError
from loop_orchestrator.sessions import sandbox

#: ``[agent] kind`` -> its adapter class
ADAPTERS: dict[str, Callable[[AgentConfig, Path], AgentAdapter]] = {
    "claude": ClaudeAdapter,
    "codex": CodexAdapter,
    "gemini": GeminiAdapter,
    "qwen": QwenAdapter,
    "cline": ClineAdapter,
    "vibe": VibeAdapter,
    "aider": AiderAdapter,
    "opencode": OpencodeAdapter,
    "command": CommandAdapter,
    "scripted": ScriptedAdapter,
}


def make_adapter(settings: Settings, repo: Path) -> AgentAdapter:
    """The adapter for ``[agent] kind``.

    Fails here, before any session starts, when ``[sandbox] mode = "bwrap"`` cannot be met.
    """
    sandbox.require(settings)
    kind = settings.agent.kind
    adapter = ADAPTERS.get(kind)
    if adapter is None:
        msg = f"unknown agent kind {kind!r}"
        raise ConfigError(msg, hint=f"Set [agent] kind to one of: {', '.join(ADAPTERS)}.")
    return adapter(settings.agent, repo)
