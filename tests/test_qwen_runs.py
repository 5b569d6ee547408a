"""The real Qwen Code CLI (npm ``@qwen-code/qwen-code``) as a task's agent, its model played
by the scripted Chat Completions endpoint (``simulator/chat_endpoint.py``).

Qwen Code runs in tmux panes on a private socket with a throwaway ``QWEN_HOME``, offline
(``OPENAI_BASE_URL`` is the endpoint on 127.0.0.1); its shell tool does the work and runs
``lo-orch signal``; lo-orch's hooks, which it runs from the settings file lo-orch gives it,
confirm each prompt.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.agents import agent_cli, endpoint_for, run_killing_mid_task, sessions_by_task
from helpers.git import git
from helpers.runs import approve, edit_script, ledger, only

from loop_orchestrator.agents.contract import AgentContext
from loop_orchestrator.agents.qwen import (
    SETTINGS_ENV,
    QwenAdapter,
    chat_errors,
    chat_usage,
    find_chat,
    hook_settings,
    write_settings,
)
from loop_orchestrator.agents.registry import make_adapter
from loop_orchestrator.config import AgentConfig, AuditorConfig, RunConfig, Settings
from loop_orchestrator.errors import AgentError, AgentStartError, ConfigError, LoOrchError
from loop_orchestrator.runstate.state import Phase, RunDir, Store
from loop_orchestrator.sessions.tmux import TmuxBackend
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.simulator.chat_endpoint import ChatEndpoint
from loop_orchestrator.workspace import integration

QWEN_VERSION = "0.15.10"


def settings_for(endpoint: ChatEndpoint, files: demo.DemoFiles) -> Settings:
    env = endpoint.qwen_env(files.root / "qwen-home")
    return Settings(
        agent=AgentConfig(kind="qwen", command=str(agent_cli("qwen")), env=env, ready_timeout=90),
        auditor=AuditorConfig(llm="off"),
        run=RunConfig(concurrency=2, stall_minutes=1, stagger_seconds=0.1),
    )


@pytest.mark.slow
def test_a_task_runs_with_real_qwen_code_resumed_after_a_kill_and_merges(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    """A task in a real Qwen Code session whose prompts its UserPromptSubmit hook
    confirmed; Qwen is killed mid-task and relaunched with ``--resume`` into its own
    conversation; its tokens are read from its chat file; the work is reviewed and merged."""
    only(demo_files, "tokenize")
    edit_script(demo_files, lambda d: d["tokenize"]["implement"][0].insert(1, {"sleep": 3}))
    with endpoint_for(ChatEndpoint, demo_files) as endpoint:
        settings = settings_for(endpoint, demo_files)
        approve(demo_files, settings)
        outcome, killed_at = run_killing_mid_task(
            endpoint,
            demo_files,
            settings,
            tmux_socket,
            lambda argv, _st: any(b"qwen" in a for a in argv[:2]),
            first=True,
        )
    assert killed_at, "no Qwen Code process was found below the pane"
    assert outcome.state == "review", outcome.message
    review = integration.review(demo_files.repo)
    integration.merge(demo_files.repo, review)
    replies = endpoint.logged(kind="reply")
    assert all(r["user_agent"].startswith(f"QwenCode/{QWEN_VERSION} ") for r in replies)
    assert sorted(sessions_by_task(replies)) == ["tokenize"]
    # its own shell tool did the work and ran the signals
    assert {r["call"] for r in replies if r["call"]} == {"run_shell_command"}
    assert {(r["prompt"], r["prompt_kind"]) for r in replies} >= {(1, "plan"), (2, "implement")}
    # the relaunched Qwen carried its conversation: after the kill its requests hold the
    # plan prompt before the implement prompt (a fresh start would hold one prompt)
    after = [r for r in replies if r["at"] > killed_at[0]]
    assert after and min(r["prompt"] for r in after) >= 2, [r["prompt"] for r in after]
    assert not ledger(demo_files.repo, "nudged")
    status = Store(RunDir(demo_files.repo)).read_status("tokenize")
    assert status.phase == Phase.INTEGRATED and status.relaunches == 1
    # every delivery confirmed by the hook of the session lo-orch launched
    hooks = ledger(demo_files.repo, "hook")
    submits = [h for h in hooks if h["hook_event"] == "UserPromptSubmit"]
    assert submits and all(h.get("session_id") == status.session_id for h in submits)
    # its empty submits (a tool's result sent on) were seen and confirmed nothing
    assert any(h.get("empty_prompt") for h in submits)
    assert status.prompt_submitted_at is not None
    chat = find_chat(demo_files.root / "qwen-home", str(status.session_id))
    assert chat is not None
    tokens = chat_usage(chat)
    assert status.usage is not None and status.usage["cost_known"] is False
    assert status.usage["output_tokens"] == tokens["output_tokens"] > 0
    merged = git(demo_files.repo, "show", f"{review.feature}:textstats/tokenize.py")
    assert "def tokenize" in merged


def test_qwen_kind_is_selectable_and_refuses_modes_it_cannot_run(tmp_path: Path) -> None:
    settings = Settings(agent=AgentConfig(kind="qwen"), auditor=AuditorConfig(llm="off"))
    assert isinstance(make_adapter(settings, tmp_path), QwenAdapter)
    with pytest.raises(ConfigError, match="permission_mode 'plan'"):
        QwenAdapter(AgentConfig(kind="qwen", permission_mode="plan"), tmp_path)


def _ctx(root: Path, config: AgentConfig, session_id: str | None) -> AgentContext:
    return AgentContext.create(
        task="api",
        run_name="r",
        repo=root,
        worktree=root / "wt",
        run_dir=root / ".orchestration",
        brief_path=root / "b.md",
        settings=config,
        session_id=session_id,
    )


def test_qwen_launch_resumes_only_a_recorded_session_and_names_its_settings(
    tmp_path: Path,
) -> None:
    home = tmp_path / "qh"
    config = AgentConfig(kind="qwen", command="/bin/true", env={"QWEN_HOME": str(home)}, model="m1")
    adapter = QwenAdapter(config, tmp_path)
    sid = "0b5e6c2a-8a59-4c1e-9a39-2f4f1f1f0a11"
    ctx = _ctx(tmp_path, config, sid)
    adapter.prepare(ctx)
    spec = adapter.launch_spec(ctx, resume=True)
    # nothing recorded yet: the resume starts that same session afresh
    assert spec.argv[-2:] == ["--session-id", sid]
    assert spec.argv[1:4] == ["--approval-mode=yolo", "--model", "m1"]
    assert spec.env[SETTINGS_ENV] == str(tmp_path / ".orchestration" / "agents/qwen-settings.json")
    chat = home / "projects" / "-x-wt" / "chats" / f"{sid}.jsonl"
    chat.parent.mkdir(parents=True)
    chat.write_text("{}\n", encoding="utf-8")
    assert adapter.launch_spec(ctx, resume=True).argv[-2:] == ["--resume", sid]
    assert adapter.launch_spec(ctx, resume=False).argv[-2:] == ["--session-id", sid]
    # a session id that is not a UUID (written by someone else) is refused
    bad = _ctx(tmp_path, config, "../../etc")
    with pytest.raises(AgentError, match="not a session id"):
        adapter.launch_spec(bad, resume=True)
    assert find_chat(home, "../*") is None


def test_qwen_settings_add_the_hooks_and_keep_the_users_own(tmp_path: Path) -> None:
    own = tmp_path / "system.json"
    own.write_text(
        json.dumps(
            {
                "disableAllHooks": True,
                "general": {"enableAutoUpdate": True, "vimMode": True},
                "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "mine"}]}]},
            }
        ),
        encoding="utf-8",
    )
    target = write_settings(tmp_path / "run" / "qwen.json", {SETTINGS_ENV: str(own)})
    data = json.loads(target.read_text(encoding="utf-8"))
    # hooks cannot be switched off for lo-orch's sessions, nor can it update itself
    assert "disableAllHooks" not in data
    assert data["general"] == {"enableAutoUpdate": False, "vimMode": True}
    stop = [h["command"] for e in data["hooks"]["Stop"] for h in e["hooks"]]
    assert stop[0] == "mine" and stop[1].endswith('lo-hook" Stop')
    for event in ("SessionStart", "UserPromptSubmit", "PreToolUse", "SessionEnd"):
        assert data["hooks"][event][0]["hooks"][0]["command"].endswith(f" {event}")
    # written again: the hook is not added twice
    again = hook_settings(Path("/p/lo-hook"), hook_settings(Path("/p/lo-hook")))
    assert len(again["hooks"]["Stop"]) == 1
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(AgentError, match="cannot be read as JSON"):
        write_settings(tmp_path / "x.json", {SETTINGS_ENV: str(broken)})


def test_qwen_chat_file_gives_tokens_and_api_errors(tmp_path: Path) -> None:
    chat = tmp_path / "c.jsonl"
    lines = [
        {"type": "user", "message": {"role": "user"}},
        {
            "type": "assistant",
            "usageMetadata": {
                "promptTokenCount": 100,
                "candidatesTokenCount": 7,
                "cachedContentTokenCount": 40,
            },
        },
        {
            "type": "system",
            "timestamp": "t1",
            "systemPayload": {
                # as Qwen Code 0.15.10 recorded a scripted 429
                "uiEvent": {
                    "event.name": "qwen-code.api_error",
                    "error_message": "429 scripted rate_limit_error",
                    "error_type": "RateLimitError",
                    "status_code": 429,
                }
            },
        },
        {"type": "assistant", "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 1}},
    ]
    chat.write_text("\n".join(json.dumps(x) for x in lines) + "\n{half a line", encoding="utf-8")
    assert chat_usage(chat) == {
        "input_tokens": 105,
        "output_tokens": 8,
        "cached_tokens": 40,
        "messages": 2,
    }
    assert chat_errors(chat) == [
        {
            "status": 429,
            "type": "RateLimitError",
            "error": "429 scripted rate_limit_error",
            "at": "t1",
        }
    ]


def test_qwen_without_a_login_stops_at_its_auth_dialog_with_a_clear_error(
    git_repo: Path, tmux_socket: str, tmp_path: Path
) -> None:
    config = AgentConfig(
        kind="qwen",
        command=str(agent_cli("qwen")),
        env={"QWEN_HOME": str(tmp_path / "qh"), "OPENAI_API_KEY": ""},
    )
    ctx = AgentContext.create(
        task="alpha",
        run_name="r",
        repo=git_repo,
        worktree=git_repo,
        run_dir=tmp_path / "run",
        brief_path=git_repo / "brief.md",
        settings=config,
    )
    adapter = QwenAdapter(config, git_repo)
    backend = TmuxBackend("t", socket=tmux_socket)
    adapter.prepare(ctx)
    pane = backend.launch(adapter.launch_spec(ctx, resume=False))
    with pytest.raises(AgentStartError, match="Qwen Code is not logged in") as info:
        adapter.wait_ready(backend, pane, timeout=60)
    assert "qwen auth" in str(info.value.hint)


def test_the_qwen_demo_without_qwen_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LoOrchError, match="needs `qwen` on PATH") as info:
        demo.run_demo(agent="qwen", workdir=tmp_path)
    assert "npm install -g @qwen-code/qwen-code" in str(info.value.hint)
    assert list(tmp_path.iterdir()) == []  # nothing half-made
