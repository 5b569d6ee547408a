"""Whole runs with the real Codex CLI (npm ``@openai/codex``), its model played by the
scripted endpoint in the OpenAI Responses API's format (tests/helpers/codex_endpoint.py).

Everything but the model's judgement is Codex's own: its TUI in tmux panes on a private
socket, a throwaway ``CODEX_HOME`` (and HOME), offline (the ``scripted`` model provider is
the endpoint on 127.0.0.1); its ``exec_command`` tool does the work and runs
``lo-orch signal``. The endpoint's request log is what the model saw.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers.agents import (
    agent_cli,
    endpoint_for,
    run_and_merge,
    run_killing_mid_task,
    sessions_by_task,
)
from helpers.codex_endpoint import (
    ResponsesEndpoint,
    codex_call,
    codex_conversation,
)
from helpers.git import git
from helpers.runs import approve, edit_script, ledger, only

from loop_orchestrator.agents.codex import CodexAdapter, find_session
from loop_orchestrator.agents.registry import make_adapter
from loop_orchestrator.config import AgentConfig, AuditorConfig, RunConfig, Settings
from loop_orchestrator.errors import ConfigError
from loop_orchestrator.runstate.state import Phase, RunDir, Store
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.simulator.script import load_script

CODEX_VERSION = "0.171.0"


def settings_for(endpoint: ResponsesEndpoint, demo_files: demo.DemoFiles) -> Settings:
    home = demo_files.root / "home"
    env = {**endpoint.env(home / ".codex"), "HOME": str(home)}
    return Settings(
        agent=AgentConfig(kind="codex", command=str(agent_cli("codex")), env=env, ready_timeout=90),
        auditor=AuditorConfig(llm="off"),
        run=RunConfig(concurrency=2, stall_minutes=5, stagger_seconds=0.1),
    )


def test_a_plan_runs_with_real_codex_cli_to_gate_2_and_merges(demo_files: demo.DemoFiles) -> None:
    """Two tasks in two waves, each a real Codex CLI session, reviewed and merged."""
    only(demo_files, "tokenize", "counts")
    with endpoint_for(ResponsesEndpoint, demo_files) as endpoint:
        settings = settings_for(endpoint, demo_files)
        approve(demo_files, settings)
        review = run_and_merge(demo_files, settings)
    replies = endpoint.logged(kind="reply")
    by_task = sessions_by_task(replies)
    # one Codex session per task, and nobody else asked the model anything
    assert sorted(by_task) == ["counts", "tokenize"]
    assert all(len(s) == 1 for s in by_task.values()), by_task
    assert all(r["user_agent"].startswith(f"codex-tui/{CODEX_VERSION}") for r in replies)
    # the work was done by Codex's own shell tool: files written, signals run
    assert {r["call"] for r in replies if r["call"]} == {"exec_command"}
    signals = [
        r["tool_input"]["command"]
        for r in replies
        if r["tool"] == "Bash" and "signal" in r["tool_input"]["command"]
    ]
    assert signals.count("$LO_ORCH_BIN signal plan_ready") == 2
    assert signals.count("$LO_ORCH_BIN signal impl_done") >= 2
    # counts was reworked once, in the same Codex session (its third prompt)
    counts = {(r["prompt"], r["prompt_kind"], r["round"]) for r in replies if r["task"] == "counts"}
    assert (1, "plan", 0) in counts and (3, "implement", 1) in counts
    assert [e["task"] for e in ledger(demo_files.repo, "rework")] == ["counts"]
    # every prompt was taken when it was sent (none waited for a nudge: a prompt pasted
    # while Codex still starts is lost to its trust dialog)
    assert not ledger(demo_files.repo, "nudged")
    # no Codex process outlived its session (Codex starts a shared app-server daemon
    # unless told not to)
    assert not _processes_mentioning(str(demo_files.root))
    for task in ("tokenize", "counts"):
        status = Store(RunDir(demo_files.repo)).read_status(task)
        assert status.phase == Phase.INTEGRATED
        # cost: Codex records tokens, lo-orch has no price for them: unknown, never $0
        assert status.usage is not None and status.usage["cost_known"] is False, status.usage
        assert status.usage["notes"] == [
            "the agent (kind codex) records tokens lo-orch does not read or price"
        ]
        # the session Codex recorded for the worktree is the one the endpoint served
        found = find_session(demo_files.root / "home" / ".codex", Path(str(status.worktree)))
        assert found is not None and found[0] in by_task[task]
        events = [json.loads(x) for x in found[1].read_text().splitlines()]
        assert any(e.get("payload", {}).get("type") == "token_count" for e in events)
    merged = git(demo_files.repo, "show", f"{review.feature}:textstats/counts.py")
    assert "return ranked[:n]" in merged
    # the user's HOME was not touched
    assert not (Path.home() / ".codex" / "sessions").exists() or not any(
        str(demo_files.root) in p.read_text(errors="replace")
        for p in (Path.home() / ".codex" / "sessions").rglob("*.jsonl")
    )


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
    body = {
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "You are Codex"}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [
                    {
                        "type": "input_text",
                        "text": "<environment_context>\n  <cwd>/w/t</cwd>\n</environment_context>",
                    }
                ],
            },
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "# AGENTS.md instructions for /w/t"}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Phase: planning of task `a`"}],
            },
            {"type": "reasoning", "summary": []},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "I will"}],
            },
            {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "1"},
            {"type": "function_call_output", "call_id": "1", "output": "ok"},
            {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "2"},
            {"type": "function_call_output", "call_id": "2", "output": "ok"},
        ]
    }
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
    _, edit = codex_call(
        ("Edit", {"file_path": str(target), "old_string": "'$HOME'", "new_string": "1"}),
        str(tmp_path),
    )
    assert edit["workdir"] == str(tmp_path)
    subprocess.run(["bash", "-c", edit["cmd"]], check=True)
    assert target.read_text().startswith("x = 1\n")
    # an Edit whose old text is not there fails (the model hears it), nothing changes
    _, bad = codex_call(
        ("Edit", {"file_path": str(target), "old_string": "nowhere", "new_string": "2"}), None
    )
    failed = subprocess.run(["bash", "-c", bad["cmd"]], capture_output=True, text=True, check=False)
    assert failed.returncode != 0 and "old text is not in" in failed.stderr
    assert target.read_text().startswith("x = 1\n")
    _, read = codex_call(("Read", {"file_path": str(target)}), None)
    shown = subprocess.run(["bash", "-c", read["cmd"]], capture_output=True, text=True, check=True)
    assert shown.stdout == target.read_text()


def test_codex_kind_is_selectable_and_refuses_modes_it_cannot_run(tmp_path: Path) -> None:
    settings = Settings(
        agent=AgentConfig(kind="codex", command="codex"),
        auditor=AuditorConfig(llm="off"),
    )
    assert isinstance(make_adapter(settings, tmp_path), CodexAdapter)
    with pytest.raises(ConfigError, match="permission_mode 'default'") as info:
        CodexAdapter(AgentConfig(kind="codex", permission_mode="default"), tmp_path)
    assert "bypassPermissions" in str(info.value.hint)


def test_a_killed_codex_is_resumed_in_its_own_conversation(
    demo_files: demo.DemoFiles,
    tmux_socket: str,
) -> None:
    """Codex dies mid-task: the relaunch is `codex resume <its thread>`, which carries on."""
    only(demo_files, "tokenize")
    edit_script(demo_files, lambda d: d["tokenize"]["implement"][0].insert(1, {"sleep": 8}))
    with endpoint_for(ResponsesEndpoint, demo_files) as endpoint:
        settings = settings_for(endpoint, demo_files)
        approve(demo_files, settings)

        # the Codex processes this test's run started
        outcome, killed_at = run_killing_mid_task(
            endpoint,
            demo_files,
            settings,
            tmux_socket,
            lambda argv, _st: any(a.endswith(b"/codex") for a in argv[:2]),
        )
    assert killed_at, "no Codex process was found below the pane"
    assert outcome.state == "review", outcome.message
    status = Store(RunDir(demo_files.repo)).read_status("tokenize")
    assert status.relaunches == 1 and status.phase == Phase.INTEGRATED
    replies = endpoint.logged(kind="reply", task="tokenize")
    # one Codex thread from start to end: the relaunch resumed it (a fresh start would be
    # a new thread id, and its first request would hold one prompt)
    assert len({r["session"] for r in replies}) == 1, {r["session"] for r in replies}
    resumed = [r for r in replies if r["prompt_kind"] == "implement"]
    assert max(r["prompt"] for r in resumed) >= 3  # the implement prompt came again
    assert [e["event"] for e in ledger(demo_files.repo)].count("session_died") == 1


# pre-trust, the trust dialog and the not-logged-in screen --------------------------------


def test_pretrust_appends_only_what_is_missing_and_keeps_the_users_config(
    tmp_path: Path,
) -> None:
    import tomllib

    from loop_orchestrator.agents.codex import pretrust

    config = tmp_path / "config.toml"
    user = (
        'model = "o3"  # mine\n[projects."/elsewhere"]\ntrust_level = "untrusted"\n'
        '[projects."/my/repo"]\ntrust_level = "untrusted"'
    )  # no final newline
    config.write_text(user, encoding="utf-8")
    config.chmod(0o640)
    odd = tmp_path / 'we"ird \\ repo'
    assert pretrust(config, [Path("/my/repo"), odd]) is True
    text = config.read_text(encoding="utf-8")
    assert text.startswith(user + "\n")  # every byte of the user's file kept
    data = tomllib.loads(text)
    # the user's own decision about /my/repo stands; the new root is trusted
    assert data["projects"]["/my/repo"]["trust_level"] == "untrusted"
    assert data["projects"][str(odd)]["trust_level"] == "trusted"
    assert data["model"] == "o3"
    assert config.stat().st_mode & 0o777 == 0o640
    # a second launch writes nothing
    assert pretrust(config, [odd]) is False
    assert config.read_text(encoding="utf-8") == text


def test_pretrust_refuses_a_broken_config_without_writing(tmp_path: Path) -> None:
    from loop_orchestrator.agents.codex import pretrust
    from loop_orchestrator.errors import AgentError

    config = tmp_path / "config.toml"
    config.write_text("model = \n", encoding="utf-8")
    with pytest.raises(AgentError, match="not valid TOML") as info:
        pretrust(config, [tmp_path])
    assert "pretrust = false" in str(info.value.hint)
    assert config.read_text(encoding="utf-8") == "model = \n"


def _adapter_and_context(repo: Path, env: dict[str, str], **agent: Any) -> tuple[CodexAdapter, Any]:
    from loop_orchestrator.agents.contract import AgentContext

    config = AgentConfig(kind="codex", command=str(agent_cli("codex")), env=env, **agent)
    ctx = AgentContext.create(
        task="alpha",
        run_name="r",
        repo=repo,
        worktree=repo,
        run_dir=repo / ".orchestration",
        brief_path=repo / "brief.md",
        settings=config,
    )
    return CodexAdapter(config, repo), ctx


def test_without_pretrust_the_trust_dialog_is_answered_before_ready(
    git_repo: Path,
    tmux_socket: str,
    tmp_path: Path,
) -> None:
    from loop_orchestrator.agents.codex import READY_RE
    from loop_orchestrator.sessions.tmux import TmuxBackend

    script = tmp_path / "script.yaml"
    script.write_text("default:\n  turns:\n    - [{say: hi}]\n", encoding="utf-8")
    with ResponsesEndpoint(load_script(script, model=True)) as endpoint:
        home = tmp_path / "home"
        env = {**endpoint.env(home / ".codex"), "HOME": str(home)}
        adapter, ctx = _adapter_and_context(git_repo, env, pretrust=False)
        backend = TmuxBackend("t", socket=tmux_socket)
        adapter.prepare(ctx)
        assert "projects" not in (home / ".codex" / "config.toml").read_text()
        pane = backend.launch(adapter.launch_spec(ctx, resume=False))
        seen: list[tuple[str, bool]] = []
        original = adapter.is_ready

        def watching(screen: str) -> bool:
            seen.append((screen, original(screen)))
            return seen[-1][1]

        adapter.is_ready = watching  # type: ignore[method-assign]
        adapter.wait_ready(backend, pane, timeout=60)
    # the composer's footer showed while Codex still started (its trust dialog to come)
    # and did not count as ready
    assert any(READY_RE.search(s) and not ok for s, ok in seen), "no early composer seen"
    assert seen[-1][1]
    assert "Trust this folder?" not in backend.capture(pane, 0)
    # Codex saved the answer itself, for the repository
    assert f'[projects."{git_repo}"]' in (home / ".codex" / "config.toml").read_text()


def test_codex_without_a_login_stops_at_its_sign_in_screen_with_a_clear_error(
    git_repo: Path,
    tmux_socket: str,
    tmp_path: Path,
) -> None:
    from loop_orchestrator.errors import AgentStartError
    from loop_orchestrator.sessions.tmux import TmuxBackend

    home = tmp_path / "home"
    env = {"HOME": str(home), "CODEX_HOME": str(home / ".codex")}
    adapter, ctx = _adapter_and_context(git_repo, env)
    backend = TmuxBackend("t", socket=tmux_socket)
    adapter.prepare(ctx)
    pane = backend.launch(adapter.launch_spec(ctx, resume=False))
    with pytest.raises(AgentStartError, match="Codex CLI is not logged in") as info:
        adapter.wait_ready(backend, pane, timeout=60)
    assert "codex login" in str(info.value.hint)
    assert "Sign in with ChatGPT" in info.value.screen
