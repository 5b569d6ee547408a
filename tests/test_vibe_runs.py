"""The real Mistral Vibe CLI (PyPI ``mistral-vibe``) as a task's agent, its model played by
the scripted Chat Completions endpoint (``simulator/chat_endpoint.py``).

Vibe runs in tmux panes on a private socket with a throwaway ``VIBE_HOME`` whose
config.toml names the endpoint on 127.0.0.1 as its provider, offline; its ``bash`` tool
does the work and runs ``lo-orch signal``; each prompt is confirmed from its session store.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.agents import agent_cli, endpoint_for, run_killing_mid_task, sessions_by_task
from helpers.git import git
from helpers.runs import approve, edit_script, ledger, only

from loop_orchestrator.agents import vibe
from loop_orchestrator.config import AgentConfig, AuditorConfig, RunConfig, Settings
from loop_orchestrator.runstate.state import Phase, RunDir, Store
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.simulator.chat_endpoint import ChatEndpoint
from loop_orchestrator.workspace import integration


def settings_for(endpoint: ChatEndpoint, files: demo.DemoFiles) -> Settings:
    env = endpoint.vibe_env(files.root / "vibe-home")
    return Settings(
        agent=AgentConfig(kind="vibe", command=str(agent_cli("vibe")), env=env, ready_timeout=90),
        auditor=AuditorConfig(llm="off"),
        run=RunConfig(concurrency=2, stall_minutes=1, stagger_seconds=0.1),
    )


@pytest.mark.slow
def test_a_task_runs_with_real_vibe_resumed_after_a_kill_and_merges(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    """A task in a real Mistral Vibe session whose prompts its session store confirmed;
    Vibe is killed mid-task and relaunched with ``--resume`` into its own conversation;
    its tokens are read from its store; the work is reviewed and merged."""
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
            lambda argv, _st: any(b"vibe-rs" in a for a in argv[:1]),
        )
    assert killed_at, "no Vibe process was found below the pane"
    assert outcome.state == "review", outcome.message
    review = integration.review(demo_files.repo)
    integration.merge(demo_files.repo, review)
    replies = endpoint.logged(kind="reply")
    print(replies)
    assert sorted(sessions_by_task(replies)) == ["tokenize"]
    assert {r["call"] for r in replies if r["call"]} == {"bash"}
    assert {(r["prompt"], r["prompt_kind"]) for r in replies} >= {(1, "plan"), (2, "implement")}
    after = [r for r in replies if r["at"] > killed_at[0]]
    assert after and min(r["prompt"] for r in after) >= 2, [r["prompt"] for r in after]
    assert not ledger(demo_files.repo, "nudged")
    status = Store(RunDir(demo_files.repo)).read_status("tokenize")
    assert status.phase == Phase.INTEGRATED and status.relaunches == 1
    store = vibe.store_dir({"VIBE_HOME": str(demo_files.root / "vibe-home")})
    sessions = vibe.sessions_for(store, Path(str(status.worktree)))
    print(sessions, status.usage)
    assert len(sessions) == 1
    assert status.usage is not None and status.usage["cost_known"] is False
    merged = git(demo_files.repo, "show", f"{review.feature}:textstats/tokenize.py")
    assert "def tokenize" in merged
