"""The real opencode CLI (npm ``opencode-ai``) as a task's agent, its model played by the
scripted Chat Completions endpoint (``simulator/chat_endpoint.py``).

opencode runs in tmux panes on a private socket with throwaway XDG folders, offline (its
provider is the endpoint on 127.0.0.1); its bash tool does the work and runs
``lo-orch signal``; lo-orch's plugin, which it loads from the config lo-orch gives it,
confirms each prompt.
"""

from __future__ import annotations

import pytest
from helpers.agents import agent_cli, endpoint_for, run_killing_mid_task, sessions_by_task
from helpers.git import git
from helpers.runs import approve, edit_script, ledger, only

from loop_orchestrator.agents.opencode import db_usage, find_session, task_db
from loop_orchestrator.config import AgentConfig, AuditorConfig, RunConfig, Settings
from loop_orchestrator.runstate.state import Phase, RunDir, Store
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.simulator.chat_endpoint import ChatEndpoint
from loop_orchestrator.workspace import integration

OPENCODE_VERSION = "1.18.33"


@pytest.mark.slow
def test_a_task_runs_with_real_opencode_resumed_after_a_kill_and_merges(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    """A task in a real opencode session whose prompts lo-orch's plugin confirmed
    (chat.message); opencode is killed mid-task and relaunched with ``--session`` into its
    own conversation; its tokens are read from the task's database; reviewed and merged."""
    only(demo_files, "tokenize")
    edit_script(demo_files, lambda d: d["tokenize"]["implement"][0].insert(1, {"sleep": 3}))
    with endpoint_for(ChatEndpoint, demo_files) as endpoint:
        env = endpoint.opencode_env(demo_files.root / "oc-home")
        settings = Settings(
            agent=AgentConfig(
                kind="opencode", command=str(agent_cli("opencode")), env=env, ready_timeout=150
            ),
            auditor=AuditorConfig(llm="off"),
            run=RunConfig(concurrency=2, stall_minutes=1, stagger_seconds=0.1),
        )
        approve(demo_files, settings)
        outcome, killed_at = run_killing_mid_task(
            endpoint,
            demo_files,
            settings,
            tmux_socket,
            lambda argv, _st: any(a.endswith(b"opencode") for a in argv[:1]),
            first=True,
        )
    assert killed_at, "no opencode process was found below the pane"
    assert outcome.state == "review", outcome.message
    review = integration.review(demo_files.repo)
    integration.merge(demo_files.repo, review)
    replies = endpoint.logged(kind="reply")
    assert all(r["user_agent"].startswith(f"opencode/{OPENCODE_VERSION} ") for r in replies)
    # one opencode session (named in its x-session-affinity header), kept across the kill
    assert list(sessions_by_task(replies)) == ["tokenize"]
    (session,) = sessions_by_task(replies)["tokenize"]
    assert session.startswith("ses_")
    # its own bash tool did the work and ran the signals
    assert {r["call"] for r in replies if r["call"]} == {"bash"}
    assert {(r["prompt"], r["prompt_kind"]) for r in replies} >= {(1, "plan"), (2, "implement")}
    # the relaunched opencode carried its conversation: after the kill its requests hold
    # the plan prompt before the implement prompt (a fresh start would hold one prompt)
    after = [r for r in replies if r["at"] > killed_at[0]]
    assert after and min(r["prompt"] for r in after) >= 2, [r["prompt"] for r in after]
    assert not ledger(demo_files.repo, "nudged")
    status = Store(RunDir(demo_files.repo)).read_status("tokenize")
    assert status.phase == Phase.INTEGRATED and status.relaunches == 1
    # every prompt confirmed by the plugin in the session lo-orch launched, none twice
    hooks = ledger(demo_files.repo, "hook")
    submits = [h for h in hooks if h["hook_event"] == "UserPromptSubmit"]
    assert submits and all(h.get("session_id") == session for h in submits)
    assert all(h.get("attested", True) for h in submits)
    assert {h["hook_event"] for h in hooks} >= {"SessionStart", "PreToolUse", "Stop"}
    db = task_db(env, str(status.session_id))
    assert find_session(db) == session
    tokens = db_usage(db)
    assert status.usage is not None and status.usage["cost_known"] is False
    assert status.usage["output_tokens"] == tokens["output_tokens"] > 0
    merged = git(demo_files.repo, "show", f"{review.feature}:textstats/tokenize.py")
    assert "def tokenize" in merged
