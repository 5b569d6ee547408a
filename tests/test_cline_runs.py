"""The real Cline CLI (npm ``cline``) as a task's agent, its model played by the scripted
Chat Completions endpoint (``simulator/chat_endpoint.py``) as its ``openai-compatible``
provider.

Cline runs in tmux panes on a private socket with a throwaway ``CLINE_DIR``, offline; its
``run_commands`` tool does the work and runs ``lo-orch signal``; its hook files, in the
config folder lo-orch lays out, confirm each prompt (TaskStart, TaskResume).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers.agents import agent_cli, endpoint_for, run_killing_mid_task, sessions_by_task
from helpers.git import git
from helpers.runs import approve, edit_script, ledger, only

from loop_orchestrator.agents.cline import (
    HOOKS,
    ClineAdapter,
    session_record,
    session_usage,
    write_config,
)
from loop_orchestrator.agents.contract import AgentContext
from loop_orchestrator.agents.registry import make_adapter
from loop_orchestrator.config import AgentConfig, AuditorConfig, RunConfig, Settings
from loop_orchestrator.errors import AgentStartError, ConfigError, LoOrchError
from loop_orchestrator.readiness import check_cline_login
from loop_orchestrator.runstate.state import Phase, RunDir, Store
from loop_orchestrator.sessions import hooks
from loop_orchestrator.sessions.tmux import TmuxBackend
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.simulator.chat_endpoint import ChatEndpoint, shell_call
from loop_orchestrator.workspace import integration

CLINE_VERSION = "3.0.65"


def settings_for(endpoint: ChatEndpoint, files: demo.DemoFiles) -> Settings:
    env = endpoint.cline_env(files.root / "cline-home")
    return Settings(
        agent=AgentConfig(kind="cline", command=str(agent_cli("cline")), env=env, ready_timeout=90),
        auditor=AuditorConfig(llm="off"),
        run=RunConfig(concurrency=2, stall_minutes=1, stagger_seconds=0.1),
    )


@pytest.mark.slow
def test_a_task_runs_with_real_cline_resumed_after_a_kill_and_merges(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    """A task in a real Cline session whose prompts its TaskStart/TaskResume hooks
    confirmed; Cline is killed mid-task and relaunched with ``--id`` into its own session;
    its tokens are read from its session file; the work is reviewed and merged."""
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
            lambda argv, _st: any(a.endswith(b"/cline") for a in argv[:1]),
            first=True,
        )
    assert killed_at, "no Cline process was found below the pane"
    assert outcome.state == "review", outcome.message
    review = integration.review(demo_files.repo)
    integration.merge(demo_files.repo, review)
    replies = endpoint.logged(kind="reply")
    assert all(r["user_agent"].startswith("ai-sdk/openai-compatible/") for r in replies)
    worktree = Path(str(Store(RunDir(demo_files.repo)).read_status("tokenize").worktree))
    # the endpoint knew the session by the folder its system prompt names
    assert sessions_by_task(replies) == {"tokenize": {str(worktree)}}
    assert {r["call"] for r in replies if r["call"]} == {"run_commands"}
    assert {(r["prompt"], r["prompt_kind"]) for r in replies} >= {(1, "plan"), (2, "implement")}
    # the relaunched Cline carried its conversation: after the kill its requests hold the
    # plan prompt before the implement prompt (a fresh start would hold one prompt)
    after = [r for r in replies if r["at"] > killed_at[0]]
    assert after and min(r["prompt"] for r in after) >= 2, [r["prompt"] for r in after]
    status = Store(RunDir(demo_files.repo)).read_status("tokenize")
    assert status.phase == Phase.INTEGRATED and status.relaunches == 1
    data = Path(settings.agent.env["CLINE_DIR"]) / "data"
    # the task's session is the one Cline named in its first hook, and the relaunch
    # resumed it (one session recorded, not a second one started)
    assert status.session_id and status.session_id.startswith("17")
    record = session_record(data, status.session_id, worktree)
    assert record is not None and len(list((data / "sessions").iterdir())) == 1
    launched = ledger(demo_files.repo, "session_launched")
    assert launched[0]["session_id"] is None  # none was chosen for it
    # every delivery confirmed by a hook of that session: TaskStart, and TaskResume after
    # the relaunch
    submits = [h for h in ledger(demo_files.repo, "hook") if h["hook_event"] == "UserPromptSubmit"]
    assert len(submits) >= 2 and {h.get("session_id") for h in submits} == {status.session_id}
    assert status.prompt_submitted_at is not None
    assert {h["hook_event"] for h in ledger(demo_files.repo, "hook")} >= {"Stop", "PreToolUse"}
    # its first start showed the ClinePass notice, which lo-orch closed on the way
    notices = json.loads((data / "settings" / "cli-notices.json").read_text(encoding="utf-8"))
    assert notices["shown"].get("cline-cli-cline-pass-intro") is True
    tokens = session_usage(record)
    assert status.usage is not None and status.usage["cost_known"] is False
    assert status.usage["output_tokens"] == tokens["output_tokens"] > 0
    merged = git(demo_files.repo, "show", f"{review.feature}:textstats/tokenize.py")
    assert "def tokenize" in merged
    # no background hub was left behind by the sessions
    hubs = [
        p
        for p in Path("/proc").iterdir()
        if p.name.isdigit()
        and b"--cline-hub-daemon" in _cmdline(p)
        and str(data).encode() in _environ(p)
    ]
    assert hubs == []


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def _environ(proc: Path) -> bytes:
    try:
        return (proc / "environ").read_bytes()
    except OSError:
        return b""


def test_cline_kind_is_selectable_and_refuses_modes_it_cannot_run(tmp_path: Path) -> None:
    settings = Settings(agent=AgentConfig(kind="cline"), auditor=AuditorConfig(llm="off"))
    assert isinstance(make_adapter(settings, tmp_path), ClineAdapter)
    with pytest.raises(ConfigError, match="permission_mode 'plan'"):
        ClineAdapter(AgentConfig(kind="cline", permission_mode="plan"), tmp_path)


def _ctx(root: Path, config: AgentConfig) -> AgentContext:
    return AgentContext.create(
        task="api",
        run_name="r",
        repo=root,
        worktree=root / "wt",
        run_dir=root / ".orchestration",
        brief_path=root / "b.md",
        settings=config,
    )


def _session(data: Path, sid: str, cwd: Path, started: str, **usage: int) -> None:
    folder = data / "sessions" / sid
    folder.mkdir(parents=True)
    record = {"session_id": sid, "cwd": str(cwd), "started_at": started}
    record["metadata"] = {"usage": usage}  # type: ignore[assignment]
    (folder / f"{sid}.json").write_text(json.dumps(record), encoding="utf-8")


def test_cline_launch_resumes_the_session_its_hooks_named_when_it_is_the_worktrees(
    tmp_path: Path,
) -> None:
    home = tmp_path / "cl"
    config = AgentConfig(kind="cline", command="/bin/true", env={"CLINE_DIR": str(home)}, model="m")
    adapter = ClineAdapter(config, tmp_path)
    assert adapter.reports_session_id  # the supervisor chooses none
    ctx = _ctx(tmp_path, config)
    adapter.prepare(ctx)
    spec = adapter.launch_spec(ctx, resume=True)
    ours = str(tmp_path / ".orchestration" / "agents" / "cline")
    assert spec.argv[1:] == [
        "--config",
        ours,
        "--data-dir",
        str(home / "data"),
        "--auto-approve",
        "true",
        "--model",
        "m",
    ]  # no session yet: a fresh start
    assert spec.env["CLINE_NO_AUTO_UPDATE"] == "1"
    data = home / "data"
    _session(data, "1796156065352_mine", tmp_path / "wt", "2026-12-01T20:14:25.365Z")
    # a newer record naming this worktree, written by someone else: never resumed
    _session(data, "1796156099999_later", tmp_path / "wt", "2026-12-01T20:15:00.000Z")
    _session(data, "1796156199999_other", tmp_path / "elsewhere", "2026-12-01T20:16:00.000Z")
    ctx.session_id = "1796156065352_mine"
    assert adapter.launch_spec(ctx, resume=True).argv[-2:] == ["--id", "1796156065352_mine"]
    assert "--id" not in adapter.launch_spec(ctx, resume=False).argv
    # an id whose record names another folder, or that is a path, starts afresh
    for sid in ("1796156199999_other", "../1796156065352_mine", "nothing-recorded"):
        ctx.session_id = sid
        assert "--id" not in adapter.launch_spec(ctx, resume=True).argv, sid
    assert session_record(data, "..", tmp_path / "wt") is None


def test_cline_session_record_gives_its_tokens(tmp_path: Path) -> None:
    data = tmp_path / "data"
    wt = tmp_path / "wt"
    _session(data, "1_a", wt, "1", inputTokens=100, outputTokens=7, cacheReadTokens=40)
    record = session_record(data, "1_a", wt)
    assert record is not None
    assert session_usage(record) == {
        "input_tokens": 100,
        "output_tokens": 7,
        "cache_read": 40,
        "cache_write": 0,
    }
    # figures that are not counts are not taken
    odd = {"metadata": {"usage": {"inputTokens": "9", "outputTokens": -3, "cacheWriteTokens": 2}}}
    assert session_usage(odd) == {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read": 0,
        "cache_write": 2,
    }


def test_cline_config_links_the_users_own_folder_and_hooks_beside_lo_orchs(
    tmp_path: Path,
) -> None:
    user = tmp_path / "user"
    (user / "rules").mkdir(parents=True)
    (user / "data").mkdir()
    (user / "hooks").mkdir()
    (user / "hooks" / "TaskStart").write_text("#!/bin/sh\necho mine\n", encoding="utf-8")
    # one named as lo-orch's own is left out: lo-orch's runs
    (user / "hooks" / "TaskComplete.sh").write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    target = write_config(tmp_path / "ours", user, Path("/opt/lo 'orch/lo-hook"))
    assert (target / "rules").readlink() == user / "rules"
    assert not (target / "data").exists()
    assert (target / "hooks" / "TaskStart").readlink() == user / "hooks" / "TaskStart"
    for name, event in HOOKS.items():
        hook = target / "hooks" / f"{name}.sh"
        assert not hook.is_symlink() and os.access(hook, os.X_OK)
        text = hook.read_text(encoding="utf-8")
        assert text.startswith("#!/bin/sh\n")
        assert text.endswith(f"exec '/opt/lo '\\''orch/lo-hook' {event}\n")
    # laid out again (a relaunch): the same folder, a link that went stale is renewed
    (target / "rules").unlink()
    (target / "rules").symlink_to(tmp_path / "gone")
    write_config(target, user, Path("/opt/lo 'orch/lo-hook"))
    assert (target / "rules").readlink() == user / "rules"


def _payload(hook_name: str, **extra: object) -> dict[str, object]:
    """A Cline 3.0.65 hook payload as its TUI sent it (trimmed)."""
    return {
        "clineVersion": "",
        "timestamp": "2026-12-01T20:14:36.049Z",
        "taskId": "conv_1796156075977_qo7p9qq",
        "sessionContext": {"rootSessionId": "1796156065352_1wg8v"},
        "workspaceRoots": ["/r/.worktrees/demo/api"],
        "userId": "unknown",
        "agent_id": "agent_1",
        "parent_agent_id": None,
        "hookName": hook_name,
        **extra,
    }


def test_cline_payloads_read_as_claude_codes() -> None:
    start = hooks.from_cline("UserPromptSubmit", _payload("agent_start", taskStart={}))
    assert start == {"session_id": "1796156065352_1wg8v", "cwd": "/r/.worktrees/demo/api"}
    end = hooks.from_cline(
        "Stop", _payload("agent_end", turn={"outputText": "Done.", "status": "completed"})
    )
    assert end["stop_hook_active"] is True and end["last_assistant_message"] == "Done."
    tool = hooks.from_cline(
        "PreToolUse",
        _payload("tool_call", tool_call={"id": "c1", "name": "run_commands", "input": {"x": 1}}),
    )
    assert (tool["tool_name"], tool["tool_input"], tool["tool_use_id"]) == (
        "run_commands",
        {"x": 1},
        "c1",
    )
    # its run_commands list reads as one command text, one a line
    listed = {"id": "c2", "name": "run_commands", "input": {"commands": ["pytest -q", "ls"]}}
    tool = hooks.from_cline("PreToolUse", _payload("tool_call", tool_call=listed))
    assert tool["tool_input"] == {"command": "pytest -q\nls"}
    assert hooks.tool_summary(tool["tool_input"]) == "pytest -q ls"

    def failure(message: str) -> object:
        error = {"name": "Error", "message": message}
        return hooks.from_cline("StopFailure", _payload("agent_error", error=error))["error"]

    assert failure("scripted rate_limit_error") == "rate_limit"  # as 3.0.65 gave up on 429s
    assert failure("You exceeded your current quota") == "rate_limit"
    assert failure("503 Service Unavailable") == "server_error"
    assert failure("model not found") == "unknown"
    # a payload that is not Cline's is left alone by run_hook (Claude Code's has no hookName)
    assert hooks.run_hook("Stop", json.dumps({"cwd": "/nowhere"}), {}) == hooks.QUIET


def test_the_endpoint_calls_clines_run_commands_with_a_list() -> None:
    offered = [
        {
            "type": "function",
            "function": {
                "name": "run_commands",
                "parameters": {
                    "type": "object",
                    "properties": {"commands": {"type": "array", "items": {"type": "string"}}},
                    "required": ["commands"],
                },
            },
        }
    ]
    call = shell_call(("Bash", {"command": "echo hi"}), offered)
    assert call == ("run_commands", {"commands": ["echo hi"]})


def test_cline_doctor_login_row_names_the_provider_or_says_what_to_run(tmp_path: Path) -> None:
    env = {"CLINE_DIR": str(tmp_path / "c")}
    settings = Settings(agent=AgentConfig(kind="cline", env=env), auditor=AuditorConfig(llm="off"))
    missing = check_cline_login(settings, {})
    assert missing.status == "warn" and "cline auth" in str(missing.hint)
    stored = tmp_path / "c" / "data" / "settings" / "providers.json"
    stored.parent.mkdir(parents=True)
    stored.write_text(
        json.dumps(
            {
                "lastUsedProvider": "openai-compatible",
                "providers": {
                    "openai-compatible": {
                        "settings": {"apiKey": "k", "model": "m", "baseUrl": "http://h/v1"}
                    }
                },
            }
        ),
        encoding="utf-8",
    )
    found = check_cline_login(settings, {})
    assert found.status == "ok" and "'openai-compatible' at http://h/v1" in found.detail


def test_cline_without_a_provider_stops_at_its_onboarding_with_a_clear_error(
    git_repo: Path, tmux_socket: str, tmp_path: Path
) -> None:
    config = AgentConfig(
        kind="cline",
        command=str(agent_cli("cline")),
        # (its own TMPDIR: Cline's terminal UI unpacks its native libraries there)
        env={
            "CLINE_DIR": str(tmp_path / "cl"),
            "XDG_DATA_HOME": str(tmp_path / "xdg"),
            "TMPDIR": str(tmp_path),
        },
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
    adapter = ClineAdapter(config, git_repo)
    backend = TmuxBackend("t", socket=tmux_socket)
    adapter.prepare(ctx)
    pane = backend.launch(adapter.launch_spec(ctx, resume=False))
    with pytest.raises(AgentStartError, match="no model provider configured") as info:
        adapter.wait_ready(backend, pane, timeout=60)
    assert "cline auth" in str(info.value.hint)


def test_a_cline_task_error_after_its_429_retries_reaches_lo_orch_as_a_rate_limit(
    tmp_path: Path,
) -> None:
    """The hook file for TaskError hands Cline's payload on as StopFailure; with no
    supervisor listening it is left for the next one, read in Claude Code's terms."""
    run_dir = tmp_path / ".orchestration"
    (run_dir / "status").mkdir(parents=True)
    (run_dir / "status" / "api.json").write_text("{}", encoding="utf-8")
    env = {"LO_ORCH_TASK": "api", "LO_ORCH_RUN_DIR": str(run_dir)}
    error = {"name": "Error", "message": "scripted rate_limit_error", "stack": "..."}
    raw = json.dumps(_payload("agent_error", iteration=1, error=error))
    assert hooks.run_hook("StopFailure", raw, env) == hooks.QUIET
    (left,) = (run_dir / "inbox" / "api").iterdir()
    message = json.loads(left.read_text(encoding="utf-8"))
    assert message["event"] == "StopFailure"
    assert message["payload"]["error"] == "rate_limit"
    assert message["payload"]["session_id"] == "1796156065352_1wg8v"
    assert message["payload"]["last_assistant_message"] == "scripted rate_limit_error"


def test_the_cline_demo_without_cline_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LoOrchError, match="needs `cline` on PATH") as info:
        demo.run_demo(agent="cline", workdir=tmp_path)
    assert "npm install -g cline" in str(info.value.hint)
    assert list(tmp_path.iterdir()) == []  # nothing half-made
