"""Permission requests with the real Claude Code CLI in a non-bypass mode.

Claude Code 2.1.332 in a tmux pane on a private socket, its model played by the scripted
endpoint: a Bash call asks, lo-orch's PermissionRequest hook hands the request to the
supervisor, and `lo-orch permit` (a real process) or a config rule answers it. Nobody
presses a key in the pane.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.agents import claude_settings, endpoint_for
from helpers.runs import approve, edit_script, ledger, lo, only, received, recorder
from helpers.wait import wait_for

from loop_orchestrator.config import NotifyConfig, PermissionsConfig
from loop_orchestrator.permissions import requests as permissions
from loop_orchestrator.runstate.journal import Record
from loop_orchestrator.runstate.state import Phase, RunDir, Store
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.simulator.endpoint import ModelEndpoint
from loop_orchestrator.supervisor.main import Supervisor

pytestmark = pytest.mark.slow


def screen(socket: str, pane: str) -> str:
    return subprocess.run(
        ["tmux", "-L", socket, "capture-pane", "-p", "-t", pane],
        capture_output=True,
        text=True,
        check=False,
    ).stdout


def touch_then_signal(demo_files: demo.DemoFiles) -> None:
    only(demo_files, "tokenize")
    edit_script(
        demo_files,
        lambda d: d["tokenize"].update(
            plan=[{"run": {"argv": ["touch", "PLAN.md"]}}, {"signal": "plan_ready"}],
            implement=[[{"signal": {"phase": "blocked", "note": "seen enough"}}]],
        ),
    )


def run_in_thread(sup: Supervisor) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []
    runner = threading.Thread(target=lambda: result.append(sup.run()), daemon=True)
    runner.start()
    return runner, result


@pytest.mark.parametrize("decision", ["allow", "deny"])
def test_lo_orch_permit_answers_a_bash_request_of_the_real_cli(
    demo_files: demo.DemoFiles,
    tmux_socket: str,
    decision: str,
    tmp_path: Path,
) -> None:
    touch_then_signal(demo_files)
    with endpoint_for(ModelEndpoint, demo_files) as endpoint:
        settings = claude_settings(endpoint, stall_minutes=0.05, permission_mode="default")
        command, out = recorder(tmp_path)
        settings.notify = NotifyConfig(command=command, desktop=False)
        approve(demo_files, settings)
        sup = Supervisor(demo_files.repo, settings)
        runner, result = run_in_thread(sup)
        try:
            wait_for(
                lambda: bool(permissions.pending(demo_files.repo)), 120, "a permission request"
            )
            (req,) = permissions.pending(demo_files.repo)
            st = Record.open(demo_files.repo, "demo").task("tokenize")
            assert (req.task, req.tool, req.command) == ("tokenize", "Bash", "touch PLAN.md")
            assert req.cwd == st.worktree
            worktree = Path(str(st.worktree))
            assert not (worktree / "PLAN.md").exists()
            # Claude Code shows its dialog while the hook waits (docs/permissions.md)
            assert st.pane_id
            wait_for(
                lambda: permissions.dialog_on_screen(screen(tmux_socket, str(st.pane_id))),
                30,
                "the dialog on screen",
            )
            # twice the stall limit: a task waiting for a person is not nudged
            time.sleep(6)  # (a wait for nothing to happen)
            assert ledger(demo_files.repo, "nudged") == []
            assert permissions.pending(demo_files.repo) == [req]
            started = time.monotonic()
            done = lo(demo_files.repo, "permit", "tokenize", decision)
            assert done.returncode == 0, done.stderr
            if decision == "allow":
                wait_for(lambda: (worktree / "PLAN.md").exists(), 30, "the command to run")
                # measured: the person's answer to the tool's run, `lo-orch permit` included
                print(f"permit -> the command ran: {time.monotonic() - started:.2f} s")
            assert f"tokenize: {decision} Bash: touch PLAN.md ({req.id})" in done.stdout
            runner.join(timeout=180)
        finally:
            sup_alive = runner.is_alive()
        assert not sup_alive, "the run did not end"
    assert result and result[0].state == "blocked", result
    assert (worktree / "PLAN.md").exists() == (decision == "allow")
    status = Store(RunDir(demo_files.repo)).read_status("tokenize")
    # the signals went through without a person: lo-orch's own commands are allowed by rule
    assert status.note == "seen enough"
    by_rule = [e for e in ledger(demo_files.repo, "permission_answered") if e.get("by") == "rule"]
    assert {e["rule"] for e in by_rule} == {"lo-orch signal"}
    assert len(by_rule) >= 2
    assert [e["request"] for e in ledger(demo_files.repo, "permission_requested")] == [req.id]
    assert permissions.pending(demo_files.repo) == []
    # what the model got back: the tool's output, or lo-orch's refusal
    results = json.dumps(endpoint.requests)
    if decision == "deny":
        assert "a person denied this (lo-orch permit)" in results
    assert status.phase == Phase.BLOCKED
    # the person was told once, with what to run
    asked = [e for e in received(out) if e["event"] == "permission_request"]
    assert [(e["task"], e["message"]) for e in asked] == [
        (
            "tokenize",
            "asks to use Bash: touch PLAN.md; answer with `lo-orch permit tokenize allow|deny`",
        )
    ]


@pytest.mark.parametrize("rule", ["allow", "deny"])
def test_a_config_rule_answers_a_matching_request_alone(
    demo_files: demo.DemoFiles,
    tmux_socket: str,
    rule: str,
) -> None:
    touch_then_signal(demo_files)
    with endpoint_for(ModelEndpoint, demo_files) as endpoint:
        settings = claude_settings(endpoint, stall_minutes=5, permission_mode="default")
        settings.permissions = PermissionsConfig(**{rule: ["Bash(touch *)"]})
        approve(demo_files, settings)
        outcome = Supervisor(demo_files.repo, settings).run()
    assert outcome.state == "blocked", outcome.message
    worktree = Path(str(Record.open(demo_files.repo, "demo").task("tokenize").worktree))
    assert (worktree / "PLAN.md").exists() == (rule == "allow")
    answered = ledger(demo_files.repo, "permission_answered")
    assert [(e["rule"], e["decision"]) for e in answered if e["message"] == "touch PLAN.md"] == [
        ("Bash(touch *)", rule)
    ]
    assert ledger(demo_files.repo, "permission_requested") == []  # nobody was asked
    assert ledger(demo_files.repo, "waiting_for_person") == []
    if rule == "deny":
        assert "denied by the rule Bash(touch *)" in json.dumps(endpoint.requests)
