"""Whole runs with the real Claude Code CLI, its model played by the scripted endpoint.

Everything but the model's judgement is real: Claude Code 2.1.332 in tmux panes on a
private socket, in a throwaway HOME, offline (``ANTHROPIC_BASE_URL`` is the endpoint on
127.0.0.1, non-essential traffic off); its Write/Edit/Read/Bash tools do the work, its
hooks report to the supervisor, its Stop hook is lo-orch's. The endpoint's request log is
what the model saw, so a test can tell which prompt reached which session.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO_ROOT
from helpers.agents import (
    agent_cli,
    claude_settings,
    endpoint_for,
    run_killing_mid_task,
    sessions_by_task,
)
from helpers.git import git
from helpers.runs import approve, edit_script, ledger, only
from helpers.wait import wait_for

from loop_orchestrator.agents.claude import (
    BYPASS_SETTINGS,
    claude_config_path,
    match_screen,
    pretrust,
)
from loop_orchestrator.permissions import requests as permissions
from loop_orchestrator.runstate.journal import Record
from loop_orchestrator.runstate.state import Phase, RunDir, RunPhase, Store
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.simulator.endpoint import ModelEndpoint
from loop_orchestrator.supervisor.main import Supervisor

TASKS = ("tokenize", "slug", "counts", "report")


def prompts_seen(endpoint: ModelEndpoint) -> dict[str, list[tuple[int, str, int]]]:
    """Per session: the (ordinal, kind, round) of each prompt it received, in order."""
    out: dict[str, list[tuple[int, str, int]]] = {}
    for r in endpoint.logged(kind="reply"):
        key = (r["prompt"], r["prompt_kind"], r["round"])
        seen = out.setdefault(r["session"], [])
        if key not in seen:
            seen.append(key)
    return out


def lo_phase_prompts(seen: list[tuple[int, str, int]]) -> list[tuple[str, int]]:
    return [(kind, rnd) for _, kind, rnd in seen if kind in ("plan", "implement")]


def test_lo_orch_demo_with_real_claude_code(tmux_socket: str, tmp_path: Path) -> None:
    """`lo-orch demo --agent claude`: four real sessions, one reworked, merged."""
    env = {
        **os.environ,
        "TMPDIR": str(tmp_path),
        "PATH": f"{agent_cli('claude').parent}{os.pathsep}{os.environ['PATH']}",
    }
    result = subprocess.run(
        [sys.executable, "-m", "loop_orchestrator", "demo", "--agent", "claude", "--keep"],
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(
        r"Demo finished in [\d.]+s: 4 tasks, 3 waves, 1 rework round\(s\), "
        r"merged into feat/demo\.",
        result.stdout,
    )
    assert "Merged project's tests: Ran 18 tests" in result.stdout
    (root,) = tmp_path.glob("lo-orch-demo-*")
    repo = root / "textstats"
    requests = [json.loads(x) for x in (root / "model-requests.jsonl").read_text().splitlines()]
    replies = [r for r in requests if r["kind"] == "reply"]
    by_task = sessions_by_task(replies)
    # one Claude Code session per task, and nobody else asked the model anything
    assert sorted(by_task) == sorted(TASKS)
    assert all(len(s) == 1 for s in by_task.values()), by_task
    sessions = {t: next(iter(s)) for t, s in by_task.items()}
    for task in TASKS:
        status = Store(RunDir(repo)).read_status(task)
        assert status.session_id == sessions[task]  # the session lo-orch launched
    # the work was done by Claude Code's own tools: Write for files, Bash for signals
    tools = Counter((r["task"], r["tool"]) for r in replies)
    assert all(tools[(t, "Write")] >= 2 for t in TASKS), tools
    signals = [
        r["tool_input"]["command"]
        for r in replies
        if r["tool"] == "Bash" and "signal" in r["tool_input"]["command"]
    ]
    assert signals.count("$LO_ORCH_BIN signal plan_ready") == 4
    assert signals.count("$LO_ORCH_BIN signal impl_done") == 5  # counts twice
    # the rework prompt reached the same session as counts' plan, as its third prompt
    counts = [(r["prompt"], r["prompt_kind"], r["round"]) for r in replies if r["task"] == "counts"]
    assert (3, "implement", 1) in counts and (1, "plan", 0) in counts
    # Claude Code's hooks reported each session to the supervisor
    hooks = Counter((e["task"], e["hook_event"]) for e in ledger(repo, "hook"))
    for task in TASKS:
        for event in ("SessionStart", "UserPromptSubmit", "Stop"):
            assert hooks[(task, event)] >= 1, (task, event, hooks)
    assert [e["task"] for e in ledger(repo, "rework")] == ["counts"]
    # Claude Code's config stayed in the demo folder, the user's HOME was not touched
    assert (root / "claude-config" / ".claude.json").exists()
    assert not (Path.home() / ".claude.json").exists()
    assert not (Path.home() / ".claude").exists()
    assert "return ranked[:n]" in git(repo, "show", "feat/demo:textstats/counts.py")


def test_the_stop_hook_keeps_a_session_working_until_it_signals(
    demo_files: demo.DemoFiles,
) -> None:
    only(demo_files, "tokenize")

    def stop_early(data: dict[str, Any]) -> None:
        # the model thinks it is done before reporting, twice: after planning and after
        # writing the code; each time the Stop hook sends it back and it signals
        data["tokenize"]["plan"] = [
            {"say": "planned"},
            {"stop": "The plan is ready."},
            {"signal": "plan_ready"},
        ]
        rnd = data["tokenize"]["implement"][0]
        data["tokenize"]["implement"] = [[*rnd[:2], {"stop": "All written."}, *rnd[2:]]]

    edit_script(demo_files, stop_early)
    with endpoint_for(ModelEndpoint, demo_files) as endpoint:
        settings = claude_settings(endpoint)
        approve(demo_files, settings)
        outcome = Supervisor(demo_files.repo, settings).run()
    assert outcome.state == "review", outcome.message
    order = [
        f"stop {e['decision']}" if e["event"] == "hook" else f"signal {e['phase']}"
        for e in ledger(demo_files.repo)
        if e["event"] == "signal" or e.get("hook_event") == "Stop"
    ]
    # each early stop was blocked, the session signalled, and then it was let stop
    assert order == [
        "stop block",
        "signal plan_ready",
        "stop allow",
        "stop block",
        "signal impl_done",
        "stop allow",
    ], order
    replies = endpoint.logged(kind="reply", task="tokenize")
    plan = [r for r in replies if r["prompt_kind"] == "plan"]
    # the answer to the Stop hook's reminder was the signal, within the same prompt
    assert [(r["step"], r["tool"]) for r in plan][:2] == [(0, None), (1, "Bash")]
    assert plan[1]["tool_input"]["command"] == "$LO_ORCH_BIN signal plan_ready"
    # and the supervisor heard each signal once, in the right phase
    assert Store(RunDir(demo_files.repo)).read_status("tokenize").phase == Phase.INTEGRATED


def test_a_killed_claude_code_is_resumed_and_carries_on_with_its_conversation(
    demo_files: demo.DemoFiles,
    tmux_socket: str,
) -> None:
    only(demo_files, "tokenize")
    # a pause after the first file is written: the test kills Claude Code there
    edit_script(demo_files, lambda d: d["tokenize"]["implement"][0].insert(1, {"sleep": 8}))
    with endpoint_for(ModelEndpoint, demo_files) as endpoint:
        settings = claude_settings(endpoint)
        approve(demo_files, settings)

        # the Claude Code process of the session this test's run started (not its sandbox)
        outcome, killed_at = run_killing_mid_task(
            endpoint,
            demo_files,
            settings,
            tmux_socket,
            lambda argv, st: (
                bool(st.session_id)
                and str(st.session_id).encode() in argv
                and Path(argv[0].decode()).name != "bwrap"
            ),
            first=True,
        )
    assert killed_at, "the Claude Code process was not found"
    assert outcome.state == "review", outcome.message
    status = Store(RunDir(demo_files.repo)).read_status("tokenize")
    assert status.relaunches == 1 and status.phase == Phase.INTEGRATED
    assert [e["event"] for e in ledger(demo_files.repo, task="tokenize")].count("session_died") == 1
    replies = endpoint.logged(kind="reply", task="tokenize")
    assert {r["session"] for r in replies} == {status.session_id}  # one conversation
    kill_at = next(i for i, r in enumerate(replies) if r["tool"] == "Write")
    after = [r for r in replies if r["at"] > killed_at[0]]
    # the relaunched Claude Code resumed the conversation: its first request carried the
    # history up to the interrupted prompt (a fresh session's first request has one
    # prompt and two messages), and it went on from there to the signal
    assert after and min(r["prompt"] for r in after) >= 2
    assert min(r["messages"] for r in after) >= replies[kill_at]["messages"]
    assert [r["tool"] for r in after][-2:] == ["Bash", None]  # it signalled, then ended


def _user_config(endpoint: ModelEndpoint, demo_files: demo.DemoFiles) -> None:
    """Settings for a `lo-orch run` subprocess, in the throwaway HOME's user config."""
    env = {**endpoint.env(), "IS_SANDBOX": "1"}
    inline = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "loop-orchestrator" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f'[agent]\nkind = "claude"\ncommand = "{agent_cli("claude")}"\nready_timeout = 90\n'
        f"env = {{ {inline} }}\n"
        '[auditor]\nllm = "off"\n[run]\nstagger_seconds = 0.1\n',
        encoding="utf-8",
    )


def test_a_sigkilled_supervisor_resumes_adopting_sessions_and_sends_no_prompt_twice(
    demo_files: demo.DemoFiles,
) -> None:
    # slow sessions: the supervisor is killed while they work, and while signals are sent
    def slow(d: dict[str, Any]) -> None:
        for t in ("tokenize", "slug"):
            d[t]["implement"][0].insert(0, {"sleep": 2})

    edit_script(demo_files, slow)
    with endpoint_for(ModelEndpoint, demo_files) as endpoint:
        _user_config(endpoint, demo_files)
        approve(demo_files, claude_settings(endpoint))
        run = [sys.executable, "-m", "loop_orchestrator", "run", "--repo", str(demo_files.repo)]
        kills = 0
        for wait_until in ("implement", "signal impl_done", "counts"):
            first = subprocess.Popen(run, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

            def reached(rs: list[dict[str, Any]], what: str = wait_until) -> bool:
                if what == "counts":
                    return any(r.get("task") == "counts" for r in rs)
                if what == "implement":
                    return any(r.get("prompt_kind") == "implement" for r in rs)
                return any("impl_done" in str(r.get("tool_input")) for r in rs)

            if endpoint.wait_for(reached, 180) and first.poll() is None:
                first.send_signal(signal.SIGKILL)  # the supervisor this test started
                kills += 1
            first.wait(timeout=30)
        final = subprocess.run(run, capture_output=True, text=True, timeout=400, check=False)
    assert final.returncode == 0, final.stderr[-3000:]
    assert kills >= 2
    store = Store(RunDir(demo_files.repo))
    assert store.read_run().phase == RunPhase.AWAITING_MERGE_REVIEW
    assert {s.phase for s in store.list_statuses()} == {Phase.INTEGRATED}
    launched = Counter(e["task"] for e in ledger(demo_files.repo, "session_launched"))
    assert all(n == 1 for n in launched.values()), launched  # adopted, never relaunched
    # no session received a lo-orch prompt twice (by the model's own account)
    for session, seen in prompts_seen(endpoint).items():
        phase_prompts = lo_phase_prompts(seen)
        assert len(phase_prompts) == len(set(phase_prompts)), (session, seen)
    delivered = Counter(
        (e["task"], e["phase"], e["rework"]) for e in ledger(demo_files.repo, "prompt_delivered")
    )
    assert all(n == 1 for n in delivered.values()), delivered


def test_an_authentication_failure_blocks_the_task_with_the_login_hint(
    demo_files: demo.DemoFiles,
) -> None:
    only(demo_files, "tokenize")
    with endpoint_for(ModelEndpoint, demo_files) as endpoint:
        settings = claude_settings(endpoint, token="expired-token")  # the endpoint answers 401
        approve(demo_files, settings)
        outcome = Supervisor(demo_files.repo, settings).run()
    assert outcome.state == "blocked"
    status = Store(RunDir(demo_files.repo)).read_status("tokenize")
    assert status.phase == Phase.BLOCKED
    assert status.error is not None and "/login" in status.error
    assert "not logged in" in status.error.lower()
    assert endpoint.logged(kind="unauthorised")
    assert not endpoint.logged(kind="reply")
    assert [
        e.get("error") for e in ledger(demo_files.repo, "hook") if e["hook_event"] == "StopFailure"
    ] == ["authentication_failed"]


def test_rate_limits_and_overload_are_neither_a_stall_nor_a_finished_turn(
    demo_files: demo.DemoFiles,
) -> None:
    only(demo_files, "tokenize")
    # a 429 (retry after 1 s) and a 529 before the first file, then 429 again before the
    # signal; Claude Code retries by itself. The stall limit is shorter than the retries.
    edit_script(
        demo_files,
        lambda d: d["tokenize"]["implement"][0].insert(
            0, {"api_error": {"status": 429, "retry_after": 1}}
        ),
    )
    with endpoint_for(ModelEndpoint, demo_files) as endpoint:
        settings = claude_settings(endpoint, stall_minutes=0.05)  # 3 s
        approve(demo_files, settings)
        endpoint.fail(529, times=1, task="tokenize")  # the first turn request of planning
        outcome = Supervisor(demo_files.repo, settings).run()
    assert outcome.state == "review", outcome.message
    errors = [r["status"] for r in endpoint.requests if r["kind"] == "error"]
    assert sorted(errors) == [429, 529]
    events = [e["event"] for e in ledger(demo_files.repo, task="tokenize")]
    assert "nudged" not in events and "task_blocked" not in events
    assert not [e for e in ledger(demo_files.repo, "hook") if e["hook_event"] == "StopFailure"]
    assert Store(RunDir(demo_files.repo)).read_status("tokenize").phase == Phase.INTEGRATED


def test_a_permission_dialog_is_reported_as_waiting_for_a_person(
    demo_files: demo.DemoFiles,
    tmux_socket: str,
) -> None:
    only(demo_files, "tokenize")
    edit_script(
        demo_files,
        lambda d: d["tokenize"].update(
            plan=[{"run": {"argv": ["touch", "PLAN.md"]}}, {"signal": "plan_ready"}],
            implement=[[{"signal": {"phase": "blocked", "note": "seen enough"}}]],
        ),
    )
    with endpoint_for(ModelEndpoint, demo_files) as endpoint:
        settings = claude_settings(endpoint, stall_minutes=0.05, permission_mode="default")
        approve(demo_files, settings)
        sup = Supervisor(demo_files.repo, settings)
        result: list[Any] = []
        runner = threading.Thread(target=lambda: result.append(sup.run()), daemon=True)
        runner.start()
        answered = 0

        def answer_dialog(pane: str) -> bool:
            """Say yes (the preselected option) to a permission dialog on screen, as the
            person at the pane would: only once it is drawn, and until it is gone."""
            screen = subprocess.run(
                ["tmux", "-L", tmux_socket, "capture-pane", "-p", "-t", pane],
                capture_output=True,
                text=True,
                check=False,
            ).stdout
            if "Do you want to proceed?" not in screen:
                return False
            subprocess.run(
                ["tmux", "-L", tmux_socket, "send-keys", "-t", pane, "Enter"], check=False
            )
            time.sleep(1)  # the next dialog, if any, is a new one
            return True

        try:

            def waiting() -> str | None:
                return Record.open(demo_files.repo, "demo").task("tokenize").waiting_for

            wait_for(lambda: bool(waiting()), 120, "a permission request")
            assert waiting() == ("a person: Claude Code asks permission to use Bash: touch PLAN.md")
            time.sleep(6)  # twice the stall limit: no nudge for a task waiting on a person
            assert waiting()
            shown = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "loop_orchestrator",
                    "status",
                    "--json",
                    "--repo",
                    str(demo_files.repo),
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            (task,) = json.loads(shown)["tasks"]
            assert task["waiting_for"] == (
                "a person: Claude Code asks permission to use Bash: touch PLAN.md; answer "
                "it with `lo-orch permit tokenize allow|deny` (or in its pane: "
                "`lo-orch attach tokenize`)"
            )
            events = [e["event"] for e in ledger(demo_files.repo, task="tokenize")]
            assert "nudged" not in events
            assert [e["message"] for e in ledger(demo_files.repo, "waiting_for_person")] == [
                "a person: Claude Code asks permission to use Bash: touch PLAN.md"
            ]
            worktree = Path(str(Record.open(demo_files.repo, "demo").task("tokenize").worktree))
            assert not (worktree / "PLAN.md").exists()

            # the person answers yes (the preselected option) to the dialog in the pane
            def answered_and_moved_on() -> bool:
                nonlocal answered
                st = Record.open(demo_files.repo, "demo").task("tokenize")
                if st.phase != Phase.PLANNING:
                    return True
                if st.pane_id and answer_dialog(st.pane_id):
                    answered += 1
                return False

            wait_for(answered_and_moved_on, 90, "tokenize past planning", interval=0.2)
            assert (worktree / "PLAN.md").exists()
            assert Record.open(demo_files.repo, "demo").task("tokenize").phase != Phase.PLANNING
            assert answered >= 1
            # lo-orch's own signal is allowed by its hook, never waits for a person (its
            # dialog may show for the moment the hook takes)
            assert [
                e["message"].rsplit(": ", 1)[1]
                for e in ledger(demo_files.repo, "waiting_for_person")
            ] == ["touch PLAN.md"]
            # answered in the pane: the pending request is closed, nothing waits any more
            wait_for(lambda: not permissions.pending(demo_files.repo), 30, "the request closed")
            assert [e["task"] for e in ledger(demo_files.repo, "permission_closed")] == ["tokenize"]
        finally:
            # answer whatever else the session asks, so the run can end
            deadline = time.monotonic() + 120
            while runner.is_alive() and time.monotonic() < deadline:
                st = Record.open(demo_files.repo, "demo").task("tokenize")
                if st.pane_id:
                    answer_dialog(st.pane_id)
                runner.join(timeout=0.5)
    assert result and result[0].state == "blocked"
    status = Store(RunDir(demo_files.repo)).read_status("tokenize")
    assert status.note == "seen enough" and status.waiting_for is None


@pytest.mark.parametrize(
    "case", ["root without IS_SANDBOX", "no claude executable", "trust dialog not pre-accepted"]
)
def test_launch_problems_end_in_a_clear_outcome(
    demo_files: demo.DemoFiles,
    case: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    only(demo_files, "tokenize")
    with endpoint_for(ModelEndpoint, demo_files) as endpoint:
        settings = claude_settings(endpoint)
        if case == "root without IS_SANDBOX":
            settings.agent.env.pop("IS_SANDBOX")
            monkeypatch.delenv("IS_SANDBOX", raising=False)
            monkeypatch.setattr(os, "geteuid", lambda: 0)  # root, also where CI is not
        elif case == "no claude executable":
            settings.agent.command = str(demo_files.root / "nowhere" / "claude")
        else:
            # a user who has used Claude Code before, never in this repository
            settings.agent.pretrust = False
            (Path.home() / ".claude.json").write_text('{"hasCompletedOnboarding": true}')
        approve(demo_files, settings)
        outcome = Supervisor(demo_files.repo, settings).run()
    status = Store(RunDir(demo_files.repo)).read_status("tokenize")
    if case == "trust dialog not pre-accepted":
        # lo-orch answered Claude Code's trust dialog on screen ("Yes, I trust this
        # folder", which Claude Code itself then recorded) and the run went through
        assert outcome.state == "review", outcome.message
        assert status.phase == Phase.INTEGRATED
        config = json.loads((Path.home() / ".claude.json").read_text())
        assert config["projects"][str(demo_files.repo)]["hasTrustDialogAccepted"] is True
        return
    assert outcome.state == "blocked"
    assert status.phase == Phase.BLOCKED and status.error
    assert not endpoint.logged(kind="reply")  # no session ever reached the model
    if case == "root without IS_SANDBOX":
        assert "cannot run in bypassPermissions mode as root" in status.error
        assert 'IS_SANDBOX = "1"' in status.error  # the fix, as config to paste
    else:
        assert f"{demo_files.root / 'nowhere' / 'claude'} not found" in status.error
        assert "npm install -g @anthropic-ai/claude-code" in status.error


def _tracked_copy(dest: Path) -> Path:
    """The repository's tracked files (what a user's clone holds), as a plugin source."""
    names = (
        subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, names):
        src = REPO_ROOT / name
        if src.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    return dest


def _say(socket: str, pane: str, text: str, endpoint: ModelEndpoint) -> None:
    """What a person types into the coordinator's pane, then Enter; Enter again if the
    model has not heard the new prompt (an Enter too close to the text can be lost)."""
    before = max([r.get("prompt", 0) for r in endpoint.logged(entry="coordinator")] + [0])
    subprocess.run(["tmux", "-L", socket, "send-keys", "-t", pane, "-l", text], check=True)
    for _ in range(3):
        time.sleep(0.5)
        subprocess.run(["tmux", "-L", socket, "send-keys", "-t", pane, "Enter"], check=True)
        if endpoint.wait_for(
            lambda rs: any(
                r.get("entry") == "coordinator" and r.get("prompt", 0) > before for r in rs
            ),
            15,
        ):
            return
    raise AssertionError(f"the coordinator never heard {text!r}")


def test_a_coordinator_session_follows_the_orchestrate_skill_through_both_gates(
    demo_files: demo.DemoFiles,
    tmux_socket: str,
    tmp_path: Path,
) -> None:
    """The natural-language path: the plugin installed as a user installs it, a Claude
    Code coordinator asked to "implement this with the orchestrator" runs the skill's
    commands, and stops at each gate until the person in its pane says yes."""
    only(demo_files, "tokenize", "slug")
    binary = str(agent_cli("claude"))
    quiet = {**os.environ, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    source = _tracked_copy(tmp_path / "plugin-source")
    for argv in (
        ["plugin", "marketplace", "add", str(source)],
        ["plugin", "install", "loop-orchestrator@loop-orchestrator"],
    ):
        done = subprocess.run(
            [binary, *argv], capture_output=True, text=True, env=quiet, timeout=120, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "lo-orch").write_text(f'#!/bin/sh\nexec {sys.executable} -m loop_orchestrator "$@"\n')
    (shim / "lo-orch").chmod(0o755)
    plan_text = demo_files.plan.read_text(encoding="utf-8")
    poll = (
        "for i in $(seq 300); do lo-orch status --json | grep -q awaiting_merge_review "
        "&& exit 0; sleep 1; done; exit 1"
    )
    # as the skill says: the run object names the base commit and the staging branch
    diffstat = (
        "git diff --stat $(lo-orch status --json | python3 -c 'import json, sys; "
        'r = json.load(sys.stdin)["run"]; print(r["base_sha"], r["staging_branch"])\')'
    )

    def bash(command: str) -> dict[str, Any]:
        return {"tool": {"name": "Bash", "input": {"command": command, "timeout": 400000}}}

    def add_coordinator(data: dict[str, Any]) -> None:
        data["coordinator"] = {
            "match": "with the orchestrator",
            "turns": [
                [
                    {
                        "tool": {
                            "name": "Skill",
                            "input": {"skill": "loop-orchestrator:orchestrate"},
                        }
                    },
                    bash("lo-orch doctor"),
                    {"write": {"path": ".orchestration/plan.yaml", "content": plan_text}},
                    bash("lo-orch plan .orchestration/plan.yaml"),
                    {"stop": "I split it into 2 tasks in 1 wave. Proceed?"},
                ],
                [
                    bash("lo-orch approve"),
                    bash("lo-orch run --detach"),
                    bash(poll),
                    bash("lo-orch status --json"),
                    bash(diffstat),
                    {"stop": "Both tasks are verified and integrated. Merge into feat/demo?"},
                ],
                [bash("lo-orch merge --yes"), {"stop": "Merged into feat/demo."}],
            ],
        }

    edit_script(demo_files, add_coordinator)
    with endpoint_for(ModelEndpoint, demo_files) as endpoint:
        _user_config(endpoint, demo_files)  # the task sessions: real Claude Code as well
        pretrust(claude_config_path(), [demo_files.repo])
        env = {
            **endpoint.env(),
            "IS_SANDBOX": "1",
            "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}",
        }
        command = shlex.join(
            [
                "env",
                *(f"{k}={v}" for k, v in env.items()),
                binary,
                "--permission-mode",
                "bypassPermissions",
                "--settings",
                BYPASS_SETTINGS,
            ]
        )
        subprocess.run(
            [
                "tmux",
                "-L",
                tmux_socket,
                "new-session",
                "-d",
                "-s",
                "coordinator",
                "-x",
                "200",
                "-y",
                "50",
                "-c",
                str(demo_files.repo),
                command,
            ],
            check=True,
        )
        pane = "=coordinator:"

        def screen() -> str:
            return subprocess.run(
                ["tmux", "-L", tmux_socket, "capture-pane", "-p", "-t", pane],
                capture_output=True,
                text=True,
                check=False,
            ).stdout

        wait_for(lambda: match_screen(screen(), ("ready",)) is not None, 60, "Claude Code")
        _say(tmux_socket, pane, "Implement plan.yaml with the orchestrator, please.", endpoint)

        def said(start: str) -> Callable[[list[dict[str, Any]]], bool]:
            return lambda rs: any(str(r.get("text", "")).startswith(start) for r in rs)

        assert endpoint.wait_for(said("I split it"), 120), screen()
        mine = endpoint.logged(entry="coordinator", kind="reply")
        # the plugin's skill was loaded by Claude Code itself, then each command ran
        assert mine[1]["result"] == "Launching skill: loop-orchestrator:orchestrate"
        assert [r["result_error"] for r in mine[2:5]] == [False, False, False], mine
        assert "Gate 1" in mine[4]["result"] or "wave" in mine[4]["result"].lower()
        store = Store(RunDir(demo_files.repo))
        assert store.read_run().phase == RunPhase.AWAITING_PLAN_APPROVAL
        assert store.read_run().approved_plan_sha256 is None  # waiting for the person
        time.sleep(2)
        assert not (demo_files.repo / ".worktrees").exists()

        _say(tmux_socket, pane, "yes", endpoint)
        assert endpoint.wait_for(said("Both tasks"), 400), screen()
        assert store.read_run().phase == RunPhase.AWAITING_MERGE_REVIEW
        status = endpoint.logged(entry="coordinator", kind="reply")[-2]
        assert "awaiting_merge_review" in status["result"]
        time.sleep(2)
        # Gate 2 is the person's: nothing has landed on the feature branch
        assert git(demo_files.repo, "branch", "--list", "feat/demo").strip() == ""
        reviewed = git(demo_files.repo, "rev-parse", "lo/demo/staging").strip()
        shown = endpoint.logged(entry="coordinator", kind="reply")[-1]["result"]
        assert "textstats/slug.py" in shown and "textstats/tokenize.py" in shown

        _say(tmux_socket, pane, "yes", endpoint)
        assert endpoint.wait_for(said("Merged into"), 120), screen()
        merged = endpoint.logged(entry="coordinator", kind="reply")[-1]
        assert merged["result_error"] is False, merged["result"]
    assert git(demo_files.repo, "rev-parse", "feat/demo").strip() == reviewed
    assert git(demo_files.repo, "status", "--porcelain").strip() == ""
    tasks = {r["task"] for r in endpoint.logged(kind="reply") if r["task"]}
    assert tasks == {"tokenize", "slug"}  # the sessions the supervisor started


def test_claude_codes_temporary_files_stay_in_the_endpoints_folder(
    demo_files: demo.DemoFiles, tmux_socket: str, tmp_path: Path
) -> None:
    """Claude Code keeps a folder per working folder and its sockets in $TMPDIR and never
    removes them (``/tmp/claude-<uid>/``, ``/tmp/cc-socks/``: 44 folders a test run were
    left): a session on the endpoint keeps them in the endpoint's folder, gone with it."""
    home = tmp_path / "home"
    home.mkdir()
    folder = demo_files.repo.resolve()
    trusted = {str(folder): {"hasTrustDialogAccepted": True}}
    config = {"hasCompletedOnboarding": True, "projects": trusted}
    (home / ".claude.json").write_text(json.dumps(config), encoding="utf-8")
    with endpoint_for(ModelEndpoint, demo_files) as endpoint:
        env = {**endpoint.env(), "HOME": str(home), "IS_SANDBOX": "1"}
        tmp = Path(env["TMPDIR"])
        assert tmp.is_dir()
        claude = [str(agent_cli("claude")), "--permission-mode", "bypassPermissions"]
        claude += ["--settings", '{"skipDangerousModePermissionPrompt": true}']
        command = shlex.join(["env", *(f"{k}={v}" for k, v in env.items()), *claude])
        session = ["new-session", "-d", "-s", "t", "-x", "120", "-y", "30", "-c", str(folder)]
        subprocess.run(["tmux", "-L", tmux_socket, *session, command], check=True)
        wait_for(lambda: (tmp / f"claude-{os.getuid()}").is_dir(), 60, "Claude Code's folder")
        subprocess.run(["tmux", "-L", tmux_socket, "kill-server"], check=False)
    assert not tmp.exists()
