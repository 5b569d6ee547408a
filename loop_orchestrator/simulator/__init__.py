"""A simulator, shipped on purpose: what ``lo-orch demo`` runs instead of a model.

It stands in for a model's judgement only; tmux, git, the plugin's hooks, verification
and merging stay the real ones. Two ways to use it:

- the scripted agent (``agent.py``): a terminal program that imitates Claude Code's
  surface (trust dialog, prompt box, bracketed paste, the plugin's hooks) and does what
  its YAML script (``script.py``) says, through ``actions.py``, ``keys.py`` and
  ``plugin_hooks.py``;
- the scripted model endpoint (``endpoint.py``): the Anthropic Messages API on 127.0.0.1
  answering the real Claude Code CLI (``lo-orch demo --agent claude``), with the replies
  ``replies.py`` chooses from the same script and ``serving.py`` sends.

``demo_flow.py`` is ``lo-orch demo`` itself. The tests use the simulator too; test
doubles only the tests need (the scripted endpoints for Codex CLI and Gemini CLI) live
under ``tests/helpers/``, not here.
"""
