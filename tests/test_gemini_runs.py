"""Whole runs with the real Gemini CLI (npm ``@google/gemini-cli``), its model played by the
scripted endpoint in the Gemini API's format (tests/helpers/gemini_endpoint.py).

Gemini CLI runs in tmux panes on a private socket with a throwaway ``GEMINI_CLI_HOME``,
offline (``GOOGLE_GEMINI_BASE_URL`` is the endpoint on 127.0.0.1, API key auth chosen in
its settings); its own tools (write_file, replace, read_file, run_shell_command) do the
work and run ``lo-orch signal``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.agents import (
    agent_cli,
    endpoint_for,
    run_and_merge,
    run_killing_mid_task,
    sessions_by_task,
)
from helpers.gemini_endpoint import (
    GeminiEndpoint,
    gemini_call,
    gemini_conversation,
)
from helpers.git import git
from helpers.runs import approve, edit_script, ledger, only

from loop_orchestrator.agents.contract import AgentContext
from loop_orchestrator.agents.gemini import GeminiAdapter, find_session
from loop_orchestrator.agents.registry import make_adapter
from loop_orchestrator.config import AgentConfig, AuditorConfig, RunConfig, Settings
from loop_orchestrator.errors import AgentStartError, ConfigError
from loop_orchestrator.runstate.state import Phase, RunDir, Store
from loop_orchestrator.sessions.tmux import TmuxBackend
from loop_orchestrator.simulator import demo_flow as demo

GEMINI_VERSION = "0.61.0"


def settings_for(endpoint: GeminiEndpoint, demo_files: demo.DemoFiles) -> Settings:
    env = endpoint.env(demo_files.root / "gemini-home")
    return Settings(
        agent=AgentConfig(
            kind="gemini", command=str(agent_cli("gemini")), env=env, ready_timeout=120
        ),
        auditor=AuditorConfig(llm="off"),
        run=RunConfig(concurrency=2, stall_minutes=5, stagger_seconds=0.1),
    )


def test_a_plan_runs_with_real_gemini_cli_to_gate_2_and_merges(
    demo_files: demo.DemoFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tasks in two waves, each a real Gemini CLI session, reviewed and merged; from a
    shell that says it is a CI job (Gemini CLI would run headless there and exit)."""
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    only(demo_files, "tokenize", "counts")
    with endpoint_for(GeminiEndpoint, demo_files) as endpoint:
        settings = settings_for(endpoint, demo_files)
        approve(demo_files, settings)
        review = run_and_merge(demo_files, settings)
    replies = endpoint.logged(kind="reply")
    by_task = sessions_by_task(replies)
    assert sorted(by_task) == ["counts", "tokenize"]
    assert all(len(s) == 1 for s in by_task.values()), by_task
    assert all(r["user_agent"].startswith(f"GeminiCLI-tui/{GEMINI_VERSION}/") for r in replies)
    # Gemini's own file tools wrote the code; its shell tool ran the signals
    calls = {r["call"] for r in replies if r["call"]}
    assert {"write_file", "run_shell_command"} <= calls, calls
    signals = [
        r["tool_input"]["command"]
        for r in replies
        if r["tool"] == "Bash" and "signal" in r["tool_input"]["command"]
    ]
    assert signals.count("$LO_ORCH_BIN signal plan_ready") == 2
    counts = {(r["prompt"], r["prompt_kind"], r["round"]) for r in replies if r["task"] == "counts"}
    assert (1, "plan", 0) in counts and (3, "implement", 1) in counts
    assert [e["task"] for e in ledger(demo_files.repo, "rework")] == ["counts"]
    assert not ledger(demo_files.repo, "nudged")
    for task in ("tokenize", "counts"):
        status = Store(RunDir(demo_files.repo)).read_status(task)
        assert status.phase == Phase.INTEGRATED
        assert status.usage is not None and status.usage["cost_known"] is False
        # Gemini recorded the chat for the worktree, with token counts per message
        found = find_session(
            demo_files.root / "gemini-home" / ".gemini", Path(str(status.worktree))
        )
        assert found is not None, task
        assert '"tokens"' in found[1].read_text(encoding="utf-8")
    merged = git(demo_files.repo, "show", f"{review.feature}:textstats/counts.py")
    assert "return ranked[:n]" in merged


def test_gemini_conversation_and_calls() -> None:
    body = {
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"text": "<session_context>\nWorkspace Directories:**\n  - /w/t\n- **Dir"},
                    {"text": "Phase: planning of task `a`"},
                ],
            },
            {
                "role": "model",
                "parts": [
                    {"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}}
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "run_shell_command", "response": {"output": "x"}}}
                ],
            },
            {"role": "model", "parts": [{"text": "ok"}]},
        ]
    }
    convo = gemini_conversation(body)
    assert convo.prompts == ["Phase: planning of task `a`"]
    assert convo.replies_since == 2 and convo.cwd == "/w/t"
    # file tools inside the workspace, the shell for a file outside it
    assert gemini_call(("Write", {"file_path": "/w/t/a.py", "content": "x"}), "/w/t")[0] == (
        "write_file"
    )
    name, args = gemini_call(("Write", {"file_path": "/run/plan.md", "content": "x"}), "/w/t")
    assert name == "run_shell_command" and "base64 -d > /run/plan.md" in args["command"]


def test_gemini_kind_is_selectable_and_refuses_modes_it_cannot_run(tmp_path: Path) -> None:
    settings = Settings(
        agent=AgentConfig(kind="gemini", command="gemini"),
        auditor=AuditorConfig(llm="off"),
    )
    assert isinstance(make_adapter(settings, tmp_path), GeminiAdapter)
    with pytest.raises(ConfigError, match="permission_mode 'plan'"):
        GeminiAdapter(AgentConfig(kind="gemini", permission_mode="plan"), tmp_path)


def test_gemini_without_auth_stops_at_its_auth_dialog_with_a_clear_error(
    git_repo: Path,
    tmux_socket: str,
    tmp_path: Path,
) -> None:
    env = {"GEMINI_CLI_HOME": str(tmp_path / "home")}
    config = AgentConfig(kind="gemini", command=str(agent_cli("gemini")), env=env)
    ctx = AgentContext.create(
        task="alpha",
        run_name="r",
        repo=git_repo,
        worktree=git_repo,
        run_dir=git_repo / ".orchestration",
        brief_path=git_repo / "brief.md",
        settings=config,
    )
    adapter = GeminiAdapter(config, git_repo)
    backend = TmuxBackend("t", socket=tmux_socket)
    adapter.prepare(ctx)
    pane = backend.launch(adapter.launch_spec(ctx, resume=False))
    with pytest.raises(AgentStartError, match="Gemini CLI is not logged in") as info:
        adapter.wait_ready(backend, pane, timeout=90)
    assert "authenticate" in str(info.value.hint)
    assert "Use Gemini API Key" in info.value.screen


def test_a_killed_gemini_is_resumed_in_its_own_conversation(
    demo_files: demo.DemoFiles,
    tmux_socket: str,
) -> None:
    """Gemini CLI dies mid-task: the relaunch is `gemini --resume <its session>`."""
    only(demo_files, "tokenize")
    edit_script(demo_files, lambda d: d["tokenize"]["implement"][0].insert(1, {"sleep": 8}))
    with endpoint_for(GeminiEndpoint, demo_files) as endpoint:
        settings = settings_for(endpoint, demo_files)
        settings.run.stall_minutes = 1  # a lost prompt shows as a nudge, soon
        approve(demo_files, settings)

        # the Gemini processes this test's run started
        outcome, killed_at = run_killing_mid_task(
            endpoint,
            demo_files,
            settings,
            tmux_socket,
            lambda argv, _st: any(b"gemini" in a for a in argv[:2]),
        )
    assert killed_at, "no Gemini process was found below the pane"
    assert outcome.state == "review", outcome.message
    status = Store(RunDir(demo_files.repo)).read_status("tokenize")
    assert status.relaunches == 1 and status.phase == Phase.INTEGRATED
    replies = endpoint.logged(kind="reply", task="tokenize")
    # the relaunched Gemini carried the conversation: its requests after the kill hold the
    # plan prompt before the implement prompt sent again (a fresh start's first request
    # holds one prompt). Gemini 0.61.0 keeps a turn only once it ended: the interrupted
    # implement prompt is not in the resumed history, the resent one is its second prompt.
    after = [r for r in replies if r["at"] > killed_at[0]]
    assert after and {r["prompt"] for r in after} == {2}, [r["prompt"] for r in after]
    assert {r["prompt_kind"] for r in after} == {"implement"}
    assert [e["event"] for e in ledger(demo_files.repo)].count("session_died") == 1
    # the prompt sent to the resumed session was taken (not left for a nudge)
    assert not ledger(demo_files.repo, "nudged")
