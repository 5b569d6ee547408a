"""The supervisor's launch path with the real Claude Code CLI (offline, never logged in).

Everything is real: tmux on a private socket, a git worktree, Claude Code 2.1.332 in a
throwaway HOME with the plugin loaded by --plugin-dir, its hooks calling `lo-orch hook`.
Not logged in, the session cannot work: the supervisor must deliver the plan prompt
(confirmed by the UserPromptSubmit hook) and then block the task with a clear
"not logged in" message instead of hanging.
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers.agents import agent_cli
from helpers.git import git

from loop_orchestrator.commands.plan import plan_from_file
from loop_orchestrator.config import AgentConfig, AuditorConfig, RunConfig, Settings
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.state import Phase, RunDir, Store
from loop_orchestrator.supervisor.main import Supervisor


def test_supervisor_launches_real_claude_and_reports_not_logged_in(
    git_repo: Path, tmux_socket: str, tmp_path: Path
) -> None:
    binary = agent_cli("claude")
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "goal: Add a greeting\nname: hello\ntasks:\n"
        "  - id: greet\n    objective: Add app/greet.py with greet(name) -> str\n"
        "    owns: [app/greet.py, tests/test_greet.py]\n"
        "    done:\n      - criterion: greet('Ada') == 'Hello, Ada!'\n"
        "        check: python -m pytest -q tests/test_greet.py\n",
        encoding="utf-8",
    )
    # Claude Code keeps a folder per working folder in $TMPDIR/claude-<uid>: here, not in /tmp
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    settings = Settings(
        agent=AgentConfig(
            kind="claude",
            command=str(binary),
            env={"IS_SANDBOX": "1", "TMPDIR": str(tmp)},
            ready_timeout=60,
        ),
        auditor=AuditorConfig(llm="off"),
        run=RunConfig(concurrency=1, stall_minutes=2),
    )
    plan_from_file(git_repo, plan, settings)
    runs.approve_plan(git_repo)

    outcome = Supervisor(git_repo, settings).run()

    assert outcome.state == "blocked"
    status = Store(RunDir(git_repo)).read_status("greet")
    assert status.phase == Phase.BLOCKED
    assert status.error is not None
    assert "not logged in" in status.error.lower()
    assert "/login" in status.error
    assert status.session_id and status.pane_id
    assert status.worktree == str(git_repo / ".worktrees" / "hello" / "greet")
    events = Store(RunDir(git_repo)).read_ledger()
    hooks = [e.get("hook_event") for e in events if e["event"] == "hook"]
    assert "SessionStart" in hooks
    assert "UserPromptSubmit" in hooks  # the plan prompt arrived through bracketed paste
    assert "StopFailure" in hooks
    delivered = [e for e in events if e["event"] == "prompt_delivered"]
    assert [(e["task"], e["phase"]) for e in delivered] == [("greet", "planning")]
    # the main checkout was pre-trusted in the throwaway HOME, nothing else was touched
    config = json.loads((Path.home() / ".claude.json").read_text(encoding="utf-8"))
    assert config["projects"][str(git_repo)]["hasTrustDialogAccepted"] is True
    assert git(git_repo, "status", "--porcelain").strip() == ""
