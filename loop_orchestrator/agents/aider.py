"""aider (PyPI ``aider-chat``) as a task's agent (``[agent] kind = "aider"``).

aider has no tools and no hooks: the model edits files in the text of its answer (lo-orch
runs it with the SEARCH/REPLACE edit format, ``--edit-format diff``, the one in which it
also suggests shell commands) and aider runs the shell commands it suggests, which is how
a session runs ``lo-orch signal``. Facts (aider 0.86.2 in tmux with a throwaway ``HOME``,
offline against ``simulator.chat_endpoint.ChatEndpoint``; docs/agents.md):

- ``--yes-always`` says yes to every question **except** "Run shell command?" (asked with
  ``explicit_yes_required``, which ``--yes-always`` answers no): a session could never
  signal. lo-orch starts aider through a small launcher (``LAUNCHER``, written to the run
  folder, run by aider's own Python) that lets ``--yes-always`` answer yes there too, as
  the unattended modes of the other CLIs run their shell tools;
- it writes its chat history (``#### `` lines: each prompt as aider read it; ``> Tokens:``
  lines: each answer's tokens; a 429 or 5xx it retried is not written) and its input
  history, by default in the git root: lo-orch names them in the worktree
  (``history_paths``) and keeps them, and the repo map's tags cache, out of git through
  ``info/exclude`` (``EXCLUDES``), so they are never part of the task's work;
- a prompt is confirmed by its ``####`` lines in the chat history (``prompt_check``); a
  relaunch resumes with ``--restore-chat-history`` (the prompts and answers, not the files
  it had added: it adds them again when an edit names them);
- it would commit every edit (``--auto-commits``, and a dirty tree at start): lo-orch runs
  it with ``--no-auto-commits --no-dirty-commits``, so the work stays in the worktree
  where lo-orch commits and verifies it as every other agent's (a user's
  ``--auto-commits`` in ``[agent] args`` commits on the task's branch, which lo-orch
  verifies as well);
- with no model and no key it offers an OpenRouter login in a browser, which
  ``--yes-always`` would accept: lo-orch stops at that screen (``AIDER_SCREENS``);
- without a git identity it writes "Your Name" into the repository's config at start (a
  read-only file in the sandbox: it crashes): lo-orch gives its process one through
  ``GIT_CONFIG_*`` (``identity_env``); aider's commits, when a user turns them on, are
  authored so;
- updates, analytics, release notes, URL detection (it would fetch URLs named in a prompt)
  and notifications are off.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from loop_orchestrator.agents.contract import AgentContext, UnattendedAdapter, launch_spec_for
from loop_orchestrator.agents.dialogs import wait_screen_idle
from loop_orchestrator.config import AgentConfig
from loop_orchestrator.errors import AgentError, ConfigError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.sessions.backend import LaunchSpec, SessionBackend
from loop_orchestrator.workspace.worktrees import ensure_excludes

UNATTENDED = [
    "--yes-always",
    "--no-auto-commits",
    "--no-dirty-commits",
    "--no-gitignore",
    "--no-check-update",
    "--no-show-release-notes",
    "--no-analytics",
    "--no-detect-urls",
    "--no-notifications",
    "--no-browser",
]
#: the edit formats whose coder runs shell commands (aider's EditBlockCoder family)
SHELL_FORMATS = ("diff", "diff-fenced", "editor-diff", "editor-diff-fenced")
#: the options lo-orch sets and ``[agent] args`` must not take back
_REFUSED = {
    "--no-suggest-shell-commands": "the session signals lo-orch through a shell command",
    "--no-yes-always": "the session runs unattended",
    "--chat-history-file": "lo-orch confirms each prompt from the chat history it names",
    "--input-history-file": "lo-orch names the input history in the worktree",
}
CHAT_HISTORY = ".aider.chat.history.md"
INPUT_HISTORY = ".aider.input.history"
#: aider's files in a worktree, kept out of the task's commits (``.git/info/exclude``)
EXCLUDES = (
    f"/{CHAT_HISTORY}",
    f"/{INPUT_HISTORY}",
    "/.aider.llm.history",
    "/.aider.tags.cache.v*/",
)
LAUNCHER_NAME = "aider-yes.py"
#: runs aider with ``--yes-always`` also answering yes to "Run shell command?"
LAUNCHER = '''\
"""lo-orch's launcher of aider: --yes-always also runs the shell commands the model
suggests (aider asks those with explicit_yes_required, which --yes-always answers no)."""
import sys

from aider import io

_ask = io.InputOutput.confirm_ask


def confirm_ask(self, question, default="y", subject=None, explicit_yes_required=False,
                group=None, allow_never=False):
    if self.yes is True:
        explicit_yes_required = False
    return _ask(self, question, default, subject, explicit_yes_required, group, allow_never)


io.InputOutput.confirm_ask = confirm_ask

from aider.main import main  # noqa: E402

sys.exit(main())
'''
#: aider's banner, drawn once it has started
BANNER_RE = re.compile(r"Aider v\d")
#: a screen whose last line is not the input line (a turn's spinner, the model's words,
#: a command's output): busy
_NEVER = re.compile(r"(?!)")
AIDER_SCREENS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (
        re.compile(r"No LLM model was specified and no API keys were provided|Login to OpenRouter"),
        "aider has no model and no API key",
        "Set [agent] model (an aider model name, e.g. openai/gpt-4o) and its key in [agent] "
        "env (OPENAI_API_KEY, with AIDER_OPENAI_API_BASE for a compatible server), then "
        "`lo-orch run` again.",
    ),
)
_TOKENS_RE = re.compile(r"^> Tokens: (.*)$", re.MULTILINE)
_COUNT_RE = re.compile(r"([\d.]+)(k?) (sent|received|cache write|cache hit)")
_COST_RE = re.compile(r"Cost: \$([\d.]+) message")


def history_paths(worktree: Path) -> tuple[Path, Path]:
    """The chat history and the input history of the session in ``worktree``."""
    return worktree / CHAT_HISTORY, worktree / INPUT_HISTORY


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def history_prompts(text: str) -> list[str]:
    """The prompts a chat history records, as aider read them (each a run of ``#### ``
    lines; aider ends every line but the last with two spaces)."""
    prompts: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("#### ") or line == "####":
            current = [] if current is None else current
            current.append(line[5:].removesuffix("  "))
            continue
        if current is not None:
            prompts.append("\n".join(current))
            current = None
    if current is not None:
        prompts.append("\n".join(current))
    return prompts


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def arrivals(text: str, prompt: str) -> int:
    """How many times the chat history ``text`` records ``prompt``."""
    return sum(1 for p in history_prompts(text) if _same(p, prompt))


def _count(number: str, k: str) -> int:
    return round(float(number) * (1000 if k else 1))


def history_usage(text: str) -> dict[str, Any]:
    """The tokens (and aider's own cost figure, when it knew the model's prices) of every
    answer a chat history records (aider rounds above 1000: ``2.5k``)."""
    totals: dict[str, Any] = {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_write_tokens": 0,
        "cached_tokens": 0,
        "messages": 0,
        "cost_usd": None,
    }
    keys = {
        "sent": "input_tokens",
        "received": "output_tokens",
        "cache write": "cache_write_tokens",
        "cache hit": "cached_tokens",
    }
    for line in _TOKENS_RE.findall(text):
        totals["messages"] += 1
        for number, k, what in _COUNT_RE.findall(line):
            totals[keys[what]] += _count(number, k)
        cost = _COST_RE.search(line)
        if cost:
            totals["cost_usd"] = (totals["cost_usd"] or 0.0) + float(cost.group(1))
    return totals


def option_value(args: Sequence[str], name: str) -> str | None:
    """The value ``args`` give option ``name`` (``--name V`` or ``--name=V``; the last)."""
    found = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(name + "="):
            found = arg.split("=", 1)[1]
    return found


def checked_args(args: Sequence[str]) -> list[str]:
    """``[agent] args`` for aider, with ``--edit-format diff`` unless they choose a format
    that has shell commands; a ``ConfigError`` for one that takes lo-orch's settings back."""
    for arg in args:
        name = arg.split("=", 1)[0]
        if name in _REFUSED:
            msg = f"[agent] args has {name}, which lo-orch cannot run aider with"
            raise ConfigError(msg, hint=f"Remove it: {_REFUSED[name]}.")
    chosen = option_value(args, "--edit-format") or option_value(args, "--chat-mode")
    if chosen is None:
        return [*args, "--edit-format", "diff"]
    if chosen not in SHELL_FORMATS:
        msg = f"[agent] args chooses aider's edit format {chosen!r}, which runs no shell commands"
        raise ConfigError(
            msg,
            hint=f"Use one of {', '.join(SHELL_FORMATS)} (the session signals lo-orch through "
            "a shell command), or leave --edit-format out (diff).",
        )
    return list(args)


def aider_python(program: str) -> str:
    """The Python aider is installed in: its script's ``#!`` line."""
    try:
        with Path(program).open("rb") as fh:
            first = fh.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        first = ""
    python = first[2:].strip().split()[0] if first.startswith("#!") and first[2:].strip() else ""
    if not python or "python" not in Path(python).name or not Path(python).exists():
        msg = f"{program} is not aider's Python script (its first line: {first[:80]!r})"
        raise AgentError(
            msg,
            hint="Set [agent] command to the `aider` of its install (pip, pipx or uv tool "
            "install aider-chat), not to a wrapper.",
        )
    return python


#: the identity aider's git sees (``identity_env``)
IDENTITY = ("aider (lo-orch)", "aider@lo-orch.invalid")


def identity_env(env: Mapping[str, str]) -> dict[str, str]:
    """A git identity for aider's process (``GIT_CONFIG_*``), unless ``env`` already gives
    git config that way: without one aider writes "Your Name" into the repository's own
    config at start, which the sandbox keeps read-only (aider then crashes)."""
    if env.get("GIT_CONFIG_COUNT"):
        return {}
    return {
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "user.name",
        "GIT_CONFIG_VALUE_0": IDENTITY[0],
        "GIT_CONFIG_KEY_1": "user.email",
        "GIT_CONFIG_VALUE_1": IDENTITY[1],
    }


def add_excludes(worktree: Path, lines: Sequence[str] = EXCLUDES) -> None:
    """Keep aider's files out of git: ``lines`` in the repository's ``info/exclude``."""
    ensure_excludes(worktree, tuple(lines))


class AiderAdapter(UnattendedAdapter):
    """aider's terminal chat in a tmux pane, unattended, its chat history read."""

    name = "aider"
    label = "aider"
    program = "aider"
    install = "pipx install aider-chat"
    bypass = "aider then runs with --yes-always, shell commands included"
    fatal_screens = AIDER_SCREENS
    ready_stable = 1.0
    uses_hooks = False
    bracketed_paste = True

    def __init__(self, settings: AgentConfig, repo: Path) -> None:
        super().__init__(settings, repo)
        self.args = checked_args(list(self.settings.args))

    def launcher_path(self, ctx: AgentContext) -> Path:
        return ctx.run_dir / "agents" / LAUNCHER_NAME

    def _resolved(self, env: Mapping[str, str]) -> list[str]:
        argv = self._command(env)
        exe = argv[0]
        found = exe if "/" in exe else shutil.which(exe, path=env.get("PATH")) or exe
        return [aider_python(found), *argv[1:]]

    def prepare(self, ctx: AgentContext) -> None:
        """Refuse early when aider (or its Python) is missing; write the launcher; keep
        aider's files in the worktree out of git."""
        env = {**os.environ, **ctx.env}
        self._resolved(env)
        target = self.launcher_path(ctx)
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(target, LAUNCHER)
        if ctx.worktree.exists():
            add_excludes(ctx.worktree)

    def launch_spec(self, ctx: AgentContext, *, resume: bool) -> LaunchSpec:
        """``<aider's python> <launcher> --yes-always ... [--model M] --chat-history-file
        <worktree>/... [--restore-chat-history]``: a resume restores the chat the history
        holds, when it holds one."""
        env = {**os.environ, **ctx.env}
        python, *rest = self._resolved(env)
        chat, inputs = history_paths(ctx.worktree)
        argv = [python, str(self.launcher_path(ctx)), *rest, *UNATTENDED, *self.args]
        if self.settings.model:
            argv += ["--model", self.settings.model]
        argv += ["--chat-history-file", str(chat), "--input-history-file", str(inputs)]
        if resume and history_prompts(_read(chat)):
            argv.append("--restore-chat-history")
        return launch_spec_for(ctx, argv, {**identity_env(env), **ctx.env})

    def is_ready(self, screen: str) -> bool:
        return bool(BANNER_RE.search(screen)) and _at_input(screen)

    def wait_idle(self, backend: SessionBackend, pane_id: str, *, timeout: float) -> None:
        """Wait until aider is back at its input line (a paste during a turn would be read
        as an answer to a question it asks, or lost)."""
        wait_screen_idle(backend, pane_id, ready=_LAST_INPUT_RE, busy=_NEVER, timeout=timeout)

    def prompt_check(self, worktree: Path, text: str) -> Callable[[], bool]:
        """For ``Deliverer.deliver(confirmed=...)``: true once the chat history records
        ``text`` once more than it did when this was called (before the paste)."""
        chat = history_paths(worktree)[0]
        before = arrivals(_read(chat), text)

        def confirmed() -> bool:
            return arrivals(_read(chat), text) > before

        return confirmed


#: the input line (``>``; ``diff>`` and the like name a mode) as the screen's last line
_LAST_INPUT_RE = re.compile(r"(?:\A|\n)(?:[\w-]+)?>(?: [^\n]*)?\s*\Z")


def _at_input(screen: str) -> bool:
    return bool(_LAST_INPUT_RE.search(screen))
