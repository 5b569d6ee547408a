"""Whole runs with the real Codex CLI (npm ``@openai/codex``), its model played by the
scripted endpoint in the OpenAI Responses API's format (agents/api_endpoints.py).

Everything but the model's judgement is Codex's own: its TUI in tmux panes on a private
socket, a throwaway ``CODEX_HOME`` (and HOME), offline (the ``scripted`` model provider is
the endpoint on 127.0.0.1); its ``exec_command`` tool does the work and runs
``lo-orch signal``. The endpoint's request log is what the model saw.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO_ROOT, git

from loop_orchestrator import core, demo, gate2, runs
from loop_orchestrator.agents.api_endpoints import (
    ResponsesEndpoint,
    codex_call,
    codex_conversation,
)
from loop_orchestrator.agents.base import make_adapter
from loop_orchestrator.agents.codex import CodexAdapter, find_session
from loop_orchestrator.agents.scripted_script import load_script
from loop_orchestrator.config import AgentConfig, AuditorConfig, RunConfig, Settings
from loop_orchestrator.errors import ConfigError
from loop_orchestrator.state import Phase, RunDir, Store
from loop_orchestrator.supervisor import Supervisor

CODEX_VERSION = "0.171.0"


def codex() -> Path:
    explicit = os.environ.get("LO_ORCH_TEST_CODEX")
    found = Path(explicit) if explicit else (
        REPO_ROOT / ".cache" / "codex" / "node_modules" / ".bin" / "codex")
    if not found.exists():
        which = shutil.which("codex")
        if which is None:
            pytest.fail("the Codex CLI is missing: `scripts/bootstrap --agents` installs it")
        found = Path(which)
    return found


@pytest.fixture
def files(tmp_path: Path, tmux_socket: str) -> demo.DemoFiles:
    return demo.prepare_demo(tmp_path)


def only(files: demo.DemoFiles, *tasks: str) -> None:
    plan = yaml.safe_load(files.plan.read_text(encoding="utf-8"))
    plan["tasks"] = [t for t in plan["tasks"] if t["id"] in tasks]
    files.plan.write_text(yaml.safe_dump(plan, sort_keys=False), encoding="utf-8")


@contextlib.contextmanager
def endpoint_for(files: demo.DemoFiles) -> Iterator[ResponsesEndpoint]:
    with ResponsesEndpoint(load_script(files.script, model=True),
                           log_path=files.root / "requests.jsonl") as endpoint:
        yield endpoint


def settings_for(endpoint: ResponsesEndpoint, files: demo.DemoFiles) -> Settings:
    home = files.root / "home"
    env = {**endpoint.env(home / ".codex"), "HOME": str(home)}
    return Settings(
        agent=AgentConfig(kind="codex", command=str(codex()), env=env, ready_timeout=90),
        auditor=AuditorConfig(llm="off"),
        run=RunConfig(concurrency=2, stall_minutes=5, stagger_seconds=0.1),
    )


def ledger(repo: Path, event: str | None = None) -> list[dict[str, Any]]:
    return [e for e in Store(RunDir(repo)).read_ledger()
            if event is None or e["event"] == event]


def test_a_plan_runs_with_real_codex_cli_to_gate_2_and_merges(files: demo.DemoFiles) -> None:
    """Two tasks in two waves, each a real Codex CLI session, reviewed and merged."""
    only(files, "tokenize", "counts")
    with endpoint_for(files) as endpoint:
        settings = settings_for(endpoint, files)
        core.plan_from_file(files.repo, files.plan, settings)
        runs.approve_plan(files.repo)
        outcome = Supervisor(files.repo, settings).run()
        assert outcome.state == "review", outcome.message
        review = gate2.review(files.repo)
        gate2.merge(files.repo, review)
    replies = endpoint.logged(kind="reply")
    by_task: dict[str, set[str]] = {}
    for r in replies:
        by_task.setdefault(r["task"], set()).add(r["session"])
    # one Codex session per task, and nobody else asked the model anything
    assert sorted(by_task) == ["counts", "tokenize"]
    assert all(len(s) == 1 for s in by_task.values()), by_task
    assert all(r["user_agent"].startswith(f"codex-tui/{CODEX_VERSION}") for r in replies)
    # the work was done by Codex's own shell tool: files written, signals run
    assert {r["call"] for r in replies if r["call"]} == {"exec_command"}
    signals = [r["tool_input"]["command"] for r in replies
               if r["tool"] == "Bash" and "signal" in r["tool_input"]["command"]]
    assert signals.count("$LO_ORCH_BIN signal plan_ready") == 2
    assert signals.count("$LO_ORCH_BIN signal impl_done") >= 2
    # counts was reworked once, in the same Codex session (its third prompt)
    counts = {(r["prompt"], r["prompt_kind"], r["round"]) for r in replies
              if r["task"] == "counts"}
    assert (1, "plan", 0) in counts and (3, "implement", 1) in counts
    assert [e["task"] for e in ledger(files.repo, "rework")] == ["counts"]
    # every prompt was taken when it was sent (none waited for a nudge: a prompt pasted
    # while Codex still starts is lost to its trust dialog)
    assert not ledger(files.repo, "nudged")
    # no Codex process outlived its session (Codex starts a shared app-server daemon
    # unless told not to)
    assert not _processes_mentioning(str(files.root))
    for task in ("tokenize", "counts"):
        status = Store(RunDir(files.repo)).read_status(task)
        assert status.phase == Phase.INTEGRATED
        # cost: Codex records tokens, lo-orch has no price for them: unknown, never $0
        assert status.usage is not None and status.usage["cost_known"] is False, status.usage
        # the session Codex recorded for the worktree is the one the endpoint served
        found = find_session(files.root / "home" / ".codex", Path(str(status.worktree)))
        assert found is not None and found[0] in by_task[task]
        events = [json.loads(x) for x in found[1].read_text().splitlines()]
        assert any(e.get("payload", {}).get("type") == "token_count" for e in events)
    merged = git(files.repo, "show", f"{review.feature}:textstats/counts.py")
    assert "return ranked[:n]" in merged
    # the user's HOME was not touched
    assert not (Path.home() / ".codex" / "sessions").exists() or not any(
        str(files.root) in p.read_text(errors="replace")
        for p in (Path.home() / ".codex" / "sessions").rglob("*.jsonl"))


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            with contextlib.suppress(OSError):
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                environ = (proc / "environ").read_bytes().decode(errors="replace")
                if "codex" in cmdline and text in environ + cmdline:
                    found.append(cmdline)
    return found


def test_codex_conversation_counts_replies_and_skips_codex_context() -> None:
    body = {"input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text",
                                                             "text": "You are Codex"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text":
            "<environment_context>\n  <cwd>/w/t</cwd>\n</environment_context>"}]},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "# AGENTS.md instructions for /w/t"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text",
                                                        "text": "Phase: planning of task `a`"}]},
        {"type": "reasoning", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text",
                                                             "text": "I will"}]},
        {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "1"},
        {"type": "function_call_output", "call_id": "1", "output": "ok"},
        {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "2"},
        {"type": "function_call_output", "call_id": "2", "output": "ok"},
    ]}
    convo = codex_conversation(body)
    # Codex's own context is not a prompt; a reply is everything between two inputs
    assert convo.prompts == ["Phase: planning of task `a`"]
    assert convo.replies_since == 2
    assert convo.cwd == "/w/t"


def test_codex_calls_write_edit_and_read_exactly(tmp_path: Path) -> None:
    """The shell commands a Write/Edit/Read becomes do exactly that, quotes and all."""
    import subprocess

    target = tmp_path / "sub dir" / "it's.py"
    content = "x = '$HOME'\nprint(\"`ls`\")\n\u00e9\n"
    _, write = codex_call(("Write", {"file_path": str(target), "content": content}), None)
    subprocess.run(["bash", "-c", write["cmd"]], check=True)
    assert target.read_text() == content
    _, edit = codex_call(("Edit", {"file_path": str(target), "old_string": "'$HOME'",
                                   "new_string": "1"}), str(tmp_path))
    assert edit["workdir"] == str(tmp_path)
    subprocess.run(["bash", "-c", edit["cmd"]], check=True)
    assert target.read_text().startswith("x = 1\n")
    # an Edit whose old text is not there fails (the model hears it), nothing changes
    _, bad = codex_call(("Edit", {"file_path": str(target), "old_string": "nowhere",
                                  "new_string": "2"}), None)
    failed = subprocess.run(["bash", "-c", bad["cmd"]], capture_output=True, text=True,
                            check=False)
    assert failed.returncode != 0 and "old text is not in" in failed.stderr
    assert target.read_text().startswith("x = 1\n")
    _, read = codex_call(("Read", {"file_path": str(target)}), None)
    shown = subprocess.run(["bash", "-c", read["cmd"]], capture_output=True, text=True,
                           check=True)
    assert shown.stdout == target.read_text()


def test_codex_kind_is_selectable_and_refuses_modes_it_cannot_run(tmp_path: Path) -> None:
    settings = Settings(agent=AgentConfig(kind="codex", command=str(codex())),
                        auditor=AuditorConfig(llm="off"))
    assert isinstance(make_adapter(settings, tmp_path), CodexAdapter)
    with pytest.raises(ConfigError, match="permission_mode 'default'") as info:
        CodexAdapter(AgentConfig(kind="codex", permission_mode="default"), tmp_path)
    assert "bypassPermissions" in str(info.value.hint)
