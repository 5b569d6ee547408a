"""Agent adapters: how one kind of coding agent is launched, made ready and prompted.

Kinds (``[agent] kind``): ``claude`` (agents/claude.py), ``codex``, ``gemini``, ``command``
(any CLI, agents/command.py) and ``scripted`` (the simulator's imitation of Claude Code,
simulator/agent.py). The shared interface is in agents/contract.py; get an adapter with
``registry.make_adapter(settings, repo)``.
"""
