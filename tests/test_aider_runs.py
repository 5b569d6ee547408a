"""The real aider CLI (PyPI ``aider-chat``) as a task's agent, its model played by the
scripted Chat Completions endpoint (``simulator/chat_endpoint.py``, aider's SEARCH/REPLACE
answers: ``simulator/aider_replies.py``).

aider runs in a tmux pane on a private socket with a throwaway ``HOME``, offline (its base
URL is the endpoint on 127.0.0.1); it applies the edits in the model's text and runs the
shell commands the model suggests, ``lo-orch signal`` among them; its chat history, which
lo-orch names in the worktree, confirms each prompt.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.agents import agent_cli, endpoint_for, kill_in_pane
from helpers.git import git
from helpers.runs import approve, edit_script, ledger, only

from loop_orchestrator.agents.aider import history_paths, history_prompts, history_usage
from loop_orchestrator.config import AgentConfig, AuditorConfig, RunConfig, Settings
from loop_orchestrator.runstate.journal import Record
from loop_orchestrator.runstate.state import Phase, RunDir, Store
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.simulator.chat_endpoint import ChatEndpoint
from loop_orchestrator.supervisor.main import Supervisor
from loop_orchestrator.workspace import integration

MODULE = "textstats/tokenize.py"
OLD_DOC = '"""Split text into lower-case words."""\n'
NEW_DOC = '"""Split text into lower-case words (an edit aider applied itself)."""\n'


@pytest.mark.slow
def test_a_task_runs_with_real_aider_resumed_after_a_kill_and_merges(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    """A task in a real aider session: its prompts confirmed by its chat history, its
    edits applied by aider (a SEARCH/REPLACE block) and its signals run as the shell
    commands the model suggested; aider is killed mid-task and relaunched with
    ``--restore-chat-history`` into its conversation; its tokens are read from the
    history; the work (never committed by aider) is verified and merged."""
    only(demo_files, "tokenize")

    def change(script: dict[str, Any]) -> None:
        # the plan's answer writes the module (a shell command); the implement answer
        # edits it with a SEARCH/REPLACE block aider applies itself, then the rest
        task = script["tokenize"]
        steps = task["implement"][0]
        module = next(s for s in steps if s.get("write", {}).get("path") == MODULE)
        steps.remove(module)
        task["plan"].insert(1, module)
        steps.insert(0, {"sleep": 4})
        steps.insert(1, {"patch": {"path": MODULE, "old": OLD_DOC, "new": NEW_DOC}})

    edit_script(demo_files, change)
    killed: list[float] = []
    with endpoint_for(ChatEndpoint, demo_files) as endpoint:
        settings = Settings(
            agent=AgentConfig(
                kind="aider",
                command=str(agent_cli("aider")),
                env=endpoint.aider_env(demo_files.root / "aider-home"),
                ready_timeout=90,
            ),
            auditor=AuditorConfig(llm="off"),
            run=RunConfig(concurrency=2, stall_minutes=1, stagger_seconds=0.1),
        )
        approve(demo_files, settings)

        def kill_mid_task() -> None:
            # once aider has read the implement prompt, while the model's answer waits
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                st = Record.open(demo_files.repo, "demo").task("tokenize")
                if st.worktree and st.phase == Phase.IMPLEMENTING:
                    chat = history_paths(Path(st.worktree))[0]
                    text = chat.read_text(encoding="utf-8") if chat.exists() else ""
                    if len(history_prompts(text)) >= 2:
                        pids = kill_in_pane(
                            tmux_socket,
                            str(st.pane_id),
                            lambda argv: any(b"aider-yes.py" in a for a in argv[:2]),
                            first=True,
                        )
                        killed.extend(time.time() for _ in pids)
                        return
                time.sleep(0.2)

        killer = threading.Thread(target=kill_mid_task)
        killer.start()
        outcome = Supervisor(demo_files.repo, settings).run()
        killer.join(timeout=5)
    assert killed, "no aider process was found below the pane"
    assert outcome.state == "review", outcome.message
    status = Store(RunDir(demo_files.repo)).read_status("tokenize")
    assert status.relaunches == 1
    replies = endpoint.logged(kind="reply")
    assert all(r["user_agent"].startswith("OpenAI/Python") for r in replies)
    assert {r["task"] for r in replies} == {"tokenize"}
    # the signals went as shell commands aider ran (nothing else could have run them)
    commands = [c for r in replies for c in r.get("commands") or []]
    assert any("signal plan_ready" in c for c in commands)
    assert any("signal impl_done" in c for c in commands)
    # the relaunched aider restored its conversation: the answer after the kill saw the
    # plan prompt and the interrupted implement prompt before the one sent again
    after = [r for r in replies if r["at"] > killed[0]]
    assert after and after[-1]["prompt"] >= 3, [r["prompt"] for r in after]
    assert len({r["session"] for r in replies}) == 1
    assert not ledger(demo_files.repo, "nudged")
    worktree = Path(str(status.worktree))
    history = history_paths(worktree)[0].read_text(encoding="utf-8")
    assert len(history_prompts(history)) >= 3
    # tokens from the history, cost unknown
    tokens = history_usage(history)
    assert status.usage is not None and status.usage["cost_known"] is False
    assert status.usage["output_tokens"] == tokens["output_tokens"] > 0
    review = integration.review(demo_files.repo)
    integration.merge(demo_files.repo, review)
    merged = git(demo_files.repo, "show", f"{review.feature}:textstats/tokenize.py")
    assert "def tokenize" in merged
    # the SEARCH/REPLACE block aider applied itself
    assert merged.startswith(NEW_DOC)
    # aider's files never reached the task's commits, and aider committed nothing itself
    assert ".aider" not in review.stat + review.diff
    authors = git(demo_files.repo, "log", "--format=%an", review.feature)
    assert "(aider)" not in authors
