"""How well lo-orch supports each agent kind: one table for `lo-orch doctor` and the README.

``SUPPORT[kind] -> Support(name, status, resume, cost, verified)``; ``support_lines()``
renders it. Keep it honest: what a test against the real CLI shows, nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Support:
    name: str
    #: where lo-orch learns what the session does
    status: str
    resume: str
    cost: str
    #: what the tests run it against
    verified: str


SUPPORT: dict[str, Support] = {
    "claude": Support(
        "Claude Code",
        "hooks (SessionStart, UserPromptSubmit, Stop, ...) and lo-orch signal",
        "--resume <the session id lo-orch chose>",
        "from its transcript, priced ([prices] for other models)",
        "Claude Code 2.1.332, whole runs on the scripted Messages API endpoint",
    ),
    "codex": Support(
        "Codex CLI",
        "lo-orch signal and the pane (Codex hooks not used)",
        "codex resume <its thread id, found by worktree in $CODEX_HOME/sessions>",
        "unknown (tokens are in its rollout file; not priced)",
        "Codex CLI 0.171.0, whole runs on the scripted Responses API endpoint",
    ),
    "gemini": Support(
        "Gemini CLI",
        "lo-orch signal and the pane (Gemini hooks not used)",
        "--resume <its session id, found by worktree in ~/.gemini/tmp>",
        "unknown (tokens are in its chat file; not priced)",
        "Gemini CLI 0.61.0, whole runs on the scripted Gemini API endpoint",
    ),
    "qwen": Support(
        "Qwen Code",
        "hooks (SessionStart, UserPromptSubmit, Stop, ...) and lo-orch signal",
        "--resume <the session id lo-orch chose>",
        "tokens from its chat file (not priced: cost unknown)",
        "Qwen Code 0.15.10, a whole run on the scripted Chat Completions endpoint",
    ),
    "cline": Support(
        "Cline CLI",
        "hooks (TaskStart, TaskComplete, TaskError, tool use) and lo-orch signal",
        "--id <the session id its hooks reported, while its record names the worktree>",
        "tokens from its session file (not priced: cost unknown)",
        "Cline CLI 3.0.65, a whole run on the scripted Chat Completions endpoint",
    ),
    "vibe": Support(
        "Mistral Vibe",
        "lo-orch signal and the pane; prompts confirmed from its session store",
        "--resume <its session id, found by worktree in $VIBE_HOME/logs/session>",
        "tokens from its session store (not priced: cost unknown)",
        "Mistral Vibe 3.0.2, a whole run on the scripted Chat Completions endpoint",
    ),
    "aider": Support(
        "aider",
        "its chat history (each prompt as it read it) and lo-orch signal (its shell commands)",
        "--restore-chat-history (the history in the worktree)",
        "tokens from its chat history (not priced: cost unknown)",
        "aider 0.86.2, a whole run on the scripted Chat Completions endpoint",
    ),
    "opencode": Support(
        "opencode",
        "its events through lo-orch's plugin (prompt, tool use, idle, retry, error) and "
        "lo-orch signal",
        "--session <its session, from the task's own database>",
        "tokens from its database (not priced: cost unknown)",
        "opencode 1.18.33, a whole run on the scripted Chat Completions endpoint",
    ),
    "command": Support(
        "any CLI ([agent] command)",
        "lo-orch signal and the pane",
        "none: started afresh",
        "unknown",
        "test programs in tmux",
    ),
    "scripted": Support(
        "scripted agent (tests, demo)", "hooks, as Claude Code's", "yes", "unknown", "built in"
    ),
}


def support_lines() -> list[str]:
    """One line per kind: name, status source, resume, cost."""
    return [
        f"{kind}: {s.name}; status: {s.status}; resume: {s.resume}; cost: {s.cost}"
        for kind, s in SUPPORT.items()
    ]


#: agent kinds with a preset (their own program is run while ``[agent] command`` is left at
#: its default, ``claude``), and the npm package that installs it
PRESET_PACKAGES: dict[str, str] = {
    "codex": "@openai/codex",
    "gemini": "@google/gemini-cli",
    "qwen": "@qwen-code/qwen-code",
    "cline": "cline",
    "opencode": "opencode-ai",
}
#: agent kinds with a preset whose CLI is a PyPI package, that package and the tool
#: its makers install it with
PYPI_PACKAGES: dict[str, str] = {"vibe": "mistral-vibe", "aider": "aider-chat"}
PYPI_INSTALLERS: dict[str, str] = {"vibe": "uv tool install", "aider": "pipx install"}
#: the npm package of Claude Code
CLAUDE_PACKAGE = "@anthropic-ai/claude-code"


def has_preset(kind: str) -> bool:
    """Whether ``kind`` runs a program of its own while ``[agent] command`` is left at its
    default."""
    return kind in PRESET_PACKAGES or kind in PYPI_PACKAGES


def install_command(kind: str) -> str:
    """The command that installs the agent CLI of ``[agent] kind``."""
    if kind in PYPI_PACKAGES:
        return f"{PYPI_INSTALLERS[kind]} {PYPI_PACKAGES[kind]}"
    return f"npm install -g {npm_package(kind)}"


def npm_package(kind: str) -> str:
    """The npm package that installs the agent CLI of ``[agent] kind`` (Claude Code's for
    a kind without a preset)."""
    return PRESET_PACKAGES.get(kind, CLAUDE_PACKAGE)
