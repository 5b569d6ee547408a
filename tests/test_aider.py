"""The aider preset's decisions and readings (``agents/aider.py``) and the scripted
endpoint's aider answers (``simulator/aider_replies.py``), in milliseconds; the whole run
with the real aider CLI is tests/test_aider_runs.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from helpers.agents import bare_context

from loop_orchestrator.agents.aider import (
    LAUNCHER_NAME,
    AiderAdapter,
    aider_python,
    arrivals,
    checked_args,
    history_paths,
    history_prompts,
    history_usage,
    identity_env,
)
from loop_orchestrator.agents.contract import ConfirmsFromStore
from loop_orchestrator.agents.registry import make_adapter
from loop_orchestrator.config import AgentConfig, AuditorConfig, Settings
from loop_orchestrator.errors import AgentError, ConfigError
from loop_orchestrator.readiness import check_aider_key
from loop_orchestrator.simulator.aider_replies import (
    aider_conversation,
    aider_session,
    combined,
    is_aider,
    shell_commands,
)
from loop_orchestrator.simulator.chat_endpoint import as_shell
from loop_orchestrator.simulator.replies import Fault, Step

# as aider 0.86.2 wrote it (a two-line prompt, an answer; the last line with a cost)
HISTORY = """
# aider chat started at 2026-12-01 20:14:33

> Aider v0.86.2~

#### Task `tokenize`: plan it.~
#### When done, run: $LO_ORCH_BIN signal plan_ready

Planning.

> Tokens: 597 sent, 3 received.~

#### Task `tokenize`: implement it.

> Tokens: 2.9k sent, 1.0k cache hit, 1.1k received. Cost: $0.0123 message, $0.0200 session.~
""".replace("~", "  ")  # aider ends these lines with two spaces


def fake_aider(tmp_path: Path) -> Path:
    """A program whose first line names a Python, as a pip-installed ``aider`` does."""
    python = tmp_path / "venv" / "bin" / "python3"
    python.parent.mkdir(parents=True)
    python.symlink_to(os.path.realpath("/usr/bin/python3"))
    program = python.parent / "aider"
    program.write_text(f"#!{python}\nprint('aider')\n", encoding="utf-8")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program


def test_history_gives_prompts_arrivals_and_tokens() -> None:
    prompts = history_prompts(HISTORY)
    assert prompts == [
        "Task `tokenize`: plan it.\nWhen done, run: $LO_ORCH_BIN signal plan_ready",
        "Task `tokenize`: implement it.",
    ]
    # the prompt as lo-orch pasted it, whatever aider did to its line ends
    assert (
        arrivals(
            HISTORY, "Task `tokenize`: plan it.\n  When done, run: $LO_ORCH_BIN signal plan_ready"
        )
        == 1
    )
    assert arrivals(HISTORY, "Task `tokenize`: plan") == 0
    usage = history_usage(HISTORY)
    assert usage == {
        "input_tokens": 597 + 2900,
        "output_tokens": 3 + 1100,
        "cache_write_tokens": 0,
        "cached_tokens": 1000,
        "messages": 2,
        "cost_usd": pytest.approx(0.0123),
    }
    assert history_usage("")["messages"] == 0 and history_usage("")["cost_usd"] is None


def test_delivery_is_confirmed_only_by_a_new_record_of_that_prompt(tmp_path: Path) -> None:
    config = AgentConfig(kind="aider", command=str(fake_aider(tmp_path)))
    adapter = AiderAdapter(config, tmp_path)
    worktree = tmp_path / "wt"
    worktree.mkdir()
    chat = history_paths(worktree)[0]
    chat.write_text(HISTORY, encoding="utf-8")
    assert isinstance(adapter, ConfirmsFromStore)
    check = adapter.prompt_check(worktree, "Task `tokenize`: implement it.")
    assert not check()
    # another prompt recorded, or the screen alone: not this one
    with chat.open("a", encoding="utf-8") as fh:
        fh.write("\n#### Task `slug`: implement it.\n")
    assert not check()
    with chat.open("a", encoding="utf-8") as fh:
        fh.write("\n#### Task `tokenize`: implement it.\n")
    assert check()
    # a history emptied meanwhile (by the session) confirms nothing
    chat.write_text("", encoding="utf-8")
    assert not check()


def test_args_keep_shell_commands_and_lo_orchs_history(tmp_path: Path) -> None:
    assert checked_args([]) == ["--edit-format", "diff"]
    assert checked_args(["--edit-format=diff-fenced"]) == ["--edit-format=diff-fenced"]
    # a format without shell commands could never signal
    with pytest.raises(ConfigError, match="'whole', which runs no shell commands"):
        checked_args(["--edit-format", "whole"])
    with pytest.raises(ConfigError, match="udiff"):
        checked_args(["--chat-mode", "udiff"])
    for taken_back in ("--no-suggest-shell-commands", "--chat-history-file=/x", "--no-yes-always"):
        with pytest.raises(ConfigError, match="cannot run aider with"):
            checked_args([taken_back])
    with pytest.raises(ConfigError, match="permission_mode 'default'"):
        AiderAdapter(AgentConfig(kind="aider", permission_mode="default"), tmp_path)
    settings = Settings(agent=AgentConfig(kind="aider"), auditor=AuditorConfig(llm="off"))
    assert isinstance(make_adapter(settings, tmp_path), AiderAdapter)


def test_launch_runs_aiders_python_with_the_launcher_and_resumes_a_recorded_chat(
    git_repo: Path, tmp_path: Path
) -> None:
    program = fake_aider(tmp_path)
    config = AgentConfig(
        kind="aider", command=str(program), model="openai/m", args=["--map-tokens", "0"]
    )
    ctx = bare_context(tmp_path, Settings(agent=config, auditor=AuditorConfig(llm="off")))
    ctx.worktree, ctx.sandbox = git_repo, None  # the argv itself, not its sandbox
    adapter = AiderAdapter(config, git_repo)
    adapter.prepare(ctx)
    launcher = ctx.run_dir / "agents" / LAUNCHER_NAME
    assert "explicit_yes_required = False" in launcher.read_text(encoding="utf-8")
    spec = adapter.launch_spec(ctx, resume=True)
    assert spec.argv[:2] == [str(program.parent / "python3"), str(launcher)]
    argv = spec.argv[2:]
    for flag in ("--yes-always", "--no-auto-commits", "--no-check-update", "--no-analytics"):
        assert flag in argv
    assert argv[argv.index("--edit-format") + 1] == "diff"
    assert argv[argv.index("--model") + 1] == "openai/m"
    assert argv[argv.index("--chat-history-file") + 1] == str(history_paths(git_repo)[0])
    # aider would write an identity into the repository's config without one of its own
    assert spec.env["GIT_CONFIG_KEY_0"] == "user.name" and spec.env["GIT_CONFIG_COUNT"] == "2"
    assert identity_env({"GIT_CONFIG_COUNT": "1"}) == {}
    # nothing recorded yet: a resume starts afresh
    assert "--restore-chat-history" not in argv
    history_paths(git_repo)[0].write_text(HISTORY, encoding="utf-8")
    assert "--restore-chat-history" in adapter.launch_spec(ctx, resume=True).argv
    assert "--restore-chat-history" not in adapter.launch_spec(ctx, resume=False).argv
    # its files in the worktree are never part of the task's work
    (git_repo / ".aider.tags.cache.v4").mkdir()
    (git_repo / ".aider.tags.cache.v4" / "cache.db").write_text("x", encoding="utf-8")
    (git_repo / ".aider.input.history").write_text("x", encoding="utf-8")
    from helpers.git import git

    assert git(git_repo, "status", "--porcelain") == ""


def test_a_program_that_is_not_aiders_script_is_refused(tmp_path: Path) -> None:
    wrapper = tmp_path / "aider"
    wrapper.write_text('#!/bin/sh\nexec aider "$@"\n', encoding="utf-8")
    with pytest.raises(AgentError, match="not aider's Python script"):
        aider_python(str(wrapper))
    with pytest.raises(AgentError, match="not aider's Python script"):
        aider_python(str(tmp_path / "missing"))


def test_the_key_row_says_whether_aider_can_reach_a_model() -> None:
    def row(env: dict[str, str], model: str = "") -> Any:
        config = AgentConfig(kind="aider", model=model or None, env=env)
        return check_aider_key(Settings(agent=config, auditor=AuditorConfig(llm="off")), {})

    missing = row({})
    assert missing.status == "warn" and "OpenRouter" in missing.detail
    found = row({"OPENAI_API_KEY": "k", "AIDER_OPENAI_API_BASE": "http://h/v1"}, "openai/x")
    assert found.status == "ok" and "openai/x" in found.detail and "http://h/v1" in found.detail


def _body(*messages: tuple[str, str]) -> dict[str, Any]:
    system = "Act as an expert software developer.\n... *SEARCH/REPLACE block* ...\n"
    return {
        "messages": [
            {"role": "system", "content": system},
            *({"role": r, "content": c} for r, c in messages),
        ]
    }


EXAMPLES = (
    ("user", "Change get_factorial() to use math.factorial"),
    ("assistant", "To make this change ..."),
    ("user", "I switched to a new code base. Please don't consider the above files."),
    ("assistant", "Ok."),
)


def test_aiders_own_messages_are_not_prompts_and_a_restored_chat_is_the_same_session() -> None:
    first = "Task `tokenize`: plan it.\nRun the checks."
    body = _body(
        *EXAMPLES,
        ("user", "Here are summaries of some files present in my git repository.\n..."),
        ("assistant", "Ok, I won't try and edit those files without asking first."),
        ("user", "I am not sharing any files that you can edit yet."),
        ("assistant", "Ok."),
        ("user", first + "\n\n# *SEARCH/REPLACE block* Rules:\nEvery block ..."),
    )
    assert is_aider(body) and not is_aider({**body, "tools": [{"type": "function"}]})
    convo = aider_conversation(body)
    assert convo.prompts == [first] and convo.replies_since == 0 and convo.cwd is None
    later = _body(
        *EXAMPLES,
        ("user", "Task `tokenize`: plan it.  \nRun the checks."),  # as restored
        ("assistant", "Planning."),
        ("user", "Output from sh -c '$LO_ORCH_BIN signal plan_ready'\n"),
        ("assistant", "Ok"),
        ("user", "Task `tokenize`: implement it."),
        ("assistant", "answer"),
        ("user", "I added these files to the chat: textstats/a.py\nLet me know ..."),
    )
    again = aider_conversation(later)
    assert again.prompts == [
        "Task `tokenize`: plan it.  \nRun the checks.",
        "Task `tokenize`: implement it.",
    ]
    # files added after an answer named them: the same prompt asked again, not a new one
    assert again.replies_since == 0
    assert aider_session(convo) == aider_session(again)
    reflected = _body(
        *EXAMPLES,
        ("user", first),
        ("assistant", "x"),
        ("user", "# 1 SEARCH/REPLACE block failed to match!\n..."),
    )
    assert aider_conversation(reflected).replies_since == 1


def test_one_answer_carries_a_prompts_steps_in_the_order_aider_applies_them() -> None:
    edit = ("Edit", {"file_path": "a.py", "old_string": "x = 1\n", "new_string": "x = 2\n"})
    late = ("Edit", {"file_path": "b.py", "old_string": "y = 1\n", "new_string": "y = 2\n"})
    steps = [
        Step("planning", None, 1.0, [Fault.error(429)]),
        Step("", edit),
        Step("", ("Write", {"file_path": "b.py", "content": "y = 1\n"})),
        Step("", late),
        Step("", ("Bash", {"command": "python3 -c 'print(1)\nprint(2)'"})),
        Step("", ("Bash", {"command": "$LO_ORCH_BIN signal impl_done"})),
        Step("Done."),
    ]
    answer = combined(steps, as_shell)
    assert (
        answer.tool is None and answer.delay == 1.0 and [f.status for f in answer.faults] == [429]
    )
    text = answer.text
    assert text.startswith("planning")
    # the edit before any command is aider's own; the one after the Write a command
    assert "a.py\n```\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n```" in text
    assert "b.py\n```\n<<<<<<< SEARCH" not in text
    commands = shell_commands(text)
    assert len(commands) == 4 and all("\n" not in c for c in commands)
    assert commands[-1].endswith("signal impl_done'")
    assert "base64 -d" in commands[2]  # the two-line command as one line


def test_no_model_and_no_key_ends_the_start_before_its_browser_login(tmp_path: Path) -> None:
    """aider 0.86.2 says this, then offers an OpenRouter login in a browser, which
    ``--yes-always`` would accept: the start ends at that screen with a clear error."""
    adapter = AiderAdapter(AgentConfig(kind="aider", command=str(fake_aider(tmp_path))), tmp_path)
    screen = (
        "Aider v0.86.2\nNo LLM model was specified and no API keys were provided.\n"
        "OpenRouter provides free and paid access to many LLMs.\n"
    )
    (pattern, what, hint), *_ = adapter.fatal_screens
    assert pattern.search(screen) and what == "aider has no model and no API key"
    assert "[agent] model" in hint
    # its banner and input line alone are ready; a question or a turn is not
    assert adapter.is_ready("Aider v0.86.2\nModel: openai/x with diff edit format\n\n> \n\n")
    assert not adapter.is_ready("Aider v0.86.2\n> hi\nRun shell command? (Y)es/(N)o [Yes]: ")
    assert not adapter.is_ready("> hi\n")
