"""Honest status and messages (items 6-9), each reproduced on a real repository
with a private tmux server, and each piece of advice followed by running the command it
names: it must work.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.git import git
from helpers.runs import approve, edit_script, ledger, lo, lo_orch, user_snapshot
from helpers.wait import wait_for

from loop_orchestrator.runstate.state import RunDir, Store
from loop_orchestrator.simulator import demo_flow as demo

TASK = "tokenize"  # the one task of the one_task fixture


def suggested(text: str) -> str:
    """The first `lo-orch ...` command a message suggests, without the backquotes."""
    found = re.search(r"`(lo-orch [^`]+)`", text)
    assert found is not None, text
    return found.group(1)


def follow(repo: Path, advice: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run a suggested `lo-orch ...` command as the user would (here, in the repo)."""
    return lo_orch(repo, *advice.split()[1:], timeout=timeout)


def test_status_tells_whether_a_supervisor_runs_and_what_tasks_wait_for(
    one_task: demo.DemoFiles,
) -> None:
    repo = one_task.repo
    edit_script(
        one_task, lambda d: d[TASK].update(plan=[{"sleep": 6}, {"signal": {"phase": "plan_ready"}}])
    )
    approve(one_task)
    sup = subprocess.Popen(
        [sys.executable, "-m", "loop_orchestrator", "run", "--repo", str(repo)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: ledger(repo, "prompt_delivered") != [], 60, "the plan prompt")
        doc = json.loads(lo(repo, "status", "--json").stdout)
        assert doc["run"]["supervisor"] == {"alive": True, "pid": sup.pid}
        assert doc["tasks"][0]["waiting_for"] == "the agent"
        text = lo(repo, "status").stdout
        assert f"running (supervisor pid {sup.pid})" in text
        assert "UserPromptSubmit" not in text and "SessionStart" not in text
    finally:
        os.kill(sup.pid, signal.SIGKILL)
        sup.wait()
    # the killed supervisor's last word is still on disk; the status does not believe it
    assert (RunDir(repo).root / "supervisor.json").exists()
    assert Store.for_repo(repo).read_run().phase.value == "running"
    shown = lo(repo, "status")
    assert "no supervisor is running" in shown.stdout and "running (" not in shown.stdout
    doc = json.loads(lo(repo, "status", "--json").stdout)
    assert doc["run"]["supervisor"] == {"alive": False, "pid": None}
    assert "none runs" in doc["tasks"][0]["waiting_for"]
    advice = suggested(shown.stdout.splitlines()[0])
    assert advice == "lo-orch run"

    resumed = follow(repo, advice)

    assert resumed.returncode == 0, resumed.stderr
    doc = json.loads(lo(repo, "status", "--json").stdout)
    assert doc["tasks"][0]["waiting_for"] == "a person: Gate 2, `lo-orch merge`"
    table = lo(repo, "status").stdout
    row = next(ln for ln in table.splitlines() if ln.startswith(TASK))
    assert "closed (done)" in row and "gone" not in row


def test_status_ages_count_from_the_phase_change_and_notes_fit_the_width(
    one_task: demo.DemoFiles,
) -> None:
    repo = one_task.repo
    long_note = "the session needs a decision about " + "a very long subject " * 20
    edit_script(
        one_task,
        lambda d: d[TASK].update(plan=[{"signal": {"phase": "blocked", "note": long_note}}]),
    )
    approve(one_task)
    assert lo(repo, "run").returncode == 1
    time.sleep(2.2)
    # a later hook line changes updated_at, not the phase: the age must not restart
    from loop_orchestrator.runstate.journal import Record

    Record.open(repo, "demo").update_task(TASK, last_event="Stop")
    out = subprocess.run(
        [sys.executable, "-m", "loop_orchestrator", "status", "--repo", str(repo)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "150"},
    )
    row = next(ln for ln in out.stdout.splitlines() if ln.startswith(TASK))
    age = re.search(rf"^{TASK}\s+\d+\s+blocked\s+(\d+)s\s", row)
    assert age is not None and int(age.group(1)) >= 2, row
    assert "finished a turn" in row and "Stop" not in row
    assert len(row) <= 150 and row.endswith("…")
    assert "`lo-orch retry tokenize`" in row
    # `--json` keeps the whole note
    doc = json.loads(lo(repo, "status", "--json").stdout)
    assert doc["tasks"][0]["error"] == long_note.strip() or long_note.strip() in json.dumps(doc)


def _run_to_gate2(files: demo.DemoFiles) -> None:
    approve(files)
    done = lo(files.repo, "run")
    assert done.returncode == 0, done.stderr


def test_merge_twice_says_it_is_merged_and_the_next_step_works(
    one_task: demo.DemoFiles,
) -> None:
    repo = one_task.repo
    _run_to_gate2(one_task)
    assert lo(repo, "merge", "--yes").returncode == 0
    again = lo(repo, "merge", "--yes")
    assert again.returncode == 1
    assert "already merged" in again.stderr
    assert "lo-orch run" not in again.stderr
    assert "a name of its own" in again.stderr
    advice = suggested(again.stderr.split("A new run", 1)[1])
    assert advice == "lo-orch plan FILE"
    text = one_task.plan.read_text(encoding="utf-8")
    one_task.plan.write_text(text.replace("name: demo", "name: demo-two"), encoding="utf-8")

    planned = follow(repo, advice.replace("FILE", str(one_task.plan)))

    assert planned.returncode == 0, planned.stderr
    assert "replaces the previous" in planned.stdout


def test_merge_lists_the_dirty_worktree_it_kept_and_the_advice_removes_it(
    one_task: demo.DemoFiles,
) -> None:
    repo = one_task.repo
    _run_to_gate2(one_task)
    wt = repo / ".worktrees" / "demo" / TASK
    scratch = wt / "scratch.txt"
    scratch.write_bytes(b"the user's experiment\n")
    before = user_snapshot(repo)

    merged = lo(repo, "merge", "--yes")

    assert merged.returncode == 0, merged.stderr
    assert "cleaned up" not in merged.stdout
    assert f"kept, with changes of yours (yours until you say otherwise): {TASK}" in (merged.stdout)
    assert scratch.read_bytes() == b"the user's experiment\n"
    assert user_snapshot(repo) == before
    # the advice: save the changes, then the clean-up it names
    git(wt, "stash", "-u")
    advice = suggested(merged.stdout.split("then", 1)[1])
    assert advice == "lo-orch cleanup"
    cleaned = follow(repo, advice)
    assert cleaned.returncode == 0, cleaned.stderr
    assert not wt.exists()
    assert "the user's experiment" in git(repo, "stash", "show", "-p", "--include-untracked")


@pytest.mark.slow
def test_a_repository_without_commits_is_told_to_commit_first(tmp_path: Path) -> None:
    repo = tmp_path / "fresh"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "app.py").write_text("print('hi')\n", encoding="utf-8")
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "goal: a greeting\nname: hello\ntasks:\n  - id: greet\n    title: Greet\n"
        "    objective: greet\n    owns: [app.py]\n    done:\n      - criterion: runs\n"
        "        check: python3 app.py\n",
        encoding="utf-8",
    )
    refused = lo(repo, "plan", str(plan))
    assert refused.returncode == 1
    assert "has no commits yet" in refused.stderr
    assert "unknown revision" not in refused.stderr
    assert not (repo / ".orchestration").exists()  # nothing was written
    command = re.search(r"`(git add -A && git commit [^`]+)`", refused.stderr)
    assert command is not None
    subprocess.run(["sh", "-c", command.group(1)], cwd=repo, check=True, capture_output=True)
    assert lo(repo, "plan", str(plan)).returncode == 0


@pytest.mark.slow
def test_a_bare_repository_is_named_as_such_and_the_clone_advice_works(
    git_repo: Path,
    tmp_path: Path,
) -> None:
    bare = tmp_path / "project.git"
    git(tmp_path, "clone", "-q", "--bare", str(git_repo), str(bare))
    refused = subprocess.run(
        [sys.executable, "-m", "loop_orchestrator", "status"],
        cwd=bare,
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode == 1
    assert "is a bare repository" in refused.stderr
    assert "not inside a git repository" not in refused.stderr
    clone = re.search(r"`git clone (\S+) <folder>`", refused.stderr)
    assert clone is not None
    checkout = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", clone.group(1), str(checkout))
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "goal: docs\nname: docs\ntasks:\n  - id: readme\n    title: Readme\n"
        "    objective: docs\n    owns: [README.md]\n    done:\n      - criterion: it exists\n"
        "        check: test -f README.md\n",
        encoding="utf-8",
    )
    assert lo(checkout, "plan", str(plan)).returncode == 0


@pytest.mark.slow
def test_hints_name_scripts_lo_orch_when_lo_orch_is_not_on_path(
    git_repo: Path,
    tmp_path: Path,
) -> None:
    """Started through `scripts/lo-orch` (which sets LO_ORCH_PROG to how it was called) with
    no `lo-orch` on PATH, every hint names that path, and it runs."""
    wrapper = tmp_path / "scripts" / "lo-orch"
    wrapper.parent.mkdir()
    wrapper.write_text(
        f'#!/bin/sh\nexport LO_ORCH_PROG="$0"\nexec {sys.executable} -m loop_orchestrator "$@"\n',
        encoding="utf-8",
    )
    wrapper.chmod(0o755)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent.parent / 'nobin'}:/usr/bin:/bin"}
    out = subprocess.run(
        [str(wrapper), "status"], cwd=git_repo, capture_output=True, text=True, env=env, check=False
    )
    assert out.returncode == 1
    assert f"`{wrapper} plan FILE`" in out.stderr and "`lo-orch plan" not in out.stderr
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "goal: docs\nname: docs\ntasks:\n  - id: readme\n    title: Readme\n"
        "    objective: docs\n    owns: [README.md]\n    done:\n      - criterion: it exists\n"
        "        check: test -f README.md\n",
        encoding="utf-8",
    )
    hint = re.search(r"`([^`]+ plan) FILE`", out.stderr)
    assert hint is not None
    ran = subprocess.run(
        ["sh", "-c", f"{hint.group(1)} {plan}"],
        cwd=git_repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert f"`{wrapper} approve`" in ran.stdout


def test_scripts_lo_orch_says_what_it_sets_up_on_first_run(tmp_path: Path) -> None:
    """The first run of `scripts/lo-orch` announces the environment it creates and reports
    how long that took (a stand-in bootstrap keeps this test off the network)."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    source = (Path(__file__).resolve().parent.parent / "scripts" / "lo-orch").read_text()
    (root / "scripts" / "lo-orch").write_text(source, encoding="utf-8")
    (root / "pyproject.toml").write_text("", encoding="utf-8")
    (root / "scripts" / "bootstrap").write_text(
        '#!/bin/sh\nset -e\ncd "$(dirname "$0")/.."\nmkdir -p .venv/bin\n'
        "if [ ! -f .venv/.lo-orch-installed ]; then sleep 1; fi\n"
        "printf '#!/bin/sh\\necho \"ran with LO_ORCH_PROG=$LO_ORCH_PROG\"\\n' > .venv/bin/lo-orch\n"
        "chmod +x .venv/bin/lo-orch\ntouch .venv/.lo-orch-installed\n",
        encoding="utf-8",
    )
    for name in ("lo-orch", "bootstrap"):
        (root / "scripts" / name).chmod(0o755)
    first = subprocess.run(
        ["scripts/lo-orch", "status"], cwd=root, capture_output=True, text=True, check=False
    )
    assert first.returncode == 0, first.stderr
    assert "first run: setting up" in first.stderr and ".venv" in first.stderr
    assert re.search(r"set up in \d+ s", first.stderr)
    assert "ran with LO_ORCH_PROG=scripts/lo-orch" in first.stdout
    second = subprocess.run(
        ["scripts/lo-orch", "status"], cwd=root, capture_output=True, text=True, check=False
    )
    assert second.returncode == 0 and second.stderr == ""


@pytest.fixture
def no_socket_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LO_ORCH_TMUX_SOCKET", raising=False)


def test_a_run_gets_its_own_tmux_server_and_later_commands_ignore_tmux_env(
    tmp_path: Path,
    tmux_socket: str,
    no_socket_env: None,
) -> None:
    """No socket configured: the run's sessions live on a server of its own, recorded in the
    run; `cleanup` typed in a pane of another server ($TMUX) still reaches it."""
    files = demo.prepare_demo(tmp_path)
    import yaml

    plan = yaml.safe_load(files.plan.read_text(encoding="utf-8"))
    plan["tasks"] = [t for t in plan["tasks"] if t["id"] == TASK]
    files.plan.write_text(yaml.safe_dump(plan, sort_keys=False), encoding="utf-8")
    edit_script(
        files,
        lambda d: d[TASK].update(plan=[{"signal": {"phase": "blocked", "note": "stop here"}}]),
    )
    folder = files.repo / ".loop-orchestrator"
    folder.mkdir()
    (folder / "config.toml").write_text(
        f'[agent]\nkind = "scripted"\nscript = "{files.script}"\nready_timeout = 20\n'
        '[auditor]\nllm = "off"\n[workspace]\nallow_dirty = true\n',
        encoding="utf-8",
    )
    approve(files)
    # another tmux server, as the one a user's terminal runs in
    subprocess.run(["tmux", "-L", tmux_socket, "new-session", "-d", "-s", "lo-demo"], check=True)
    other = subprocess.run(
        ["tmux", "-L", tmux_socket, "display-message", "-p", "#{socket_path},#{pid},0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    run_socket = None
    try:
        assert lo(files.repo, "run").returncode == 1  # blocked, sessions left running
        run_socket = Store.for_repo(files.repo).read_run().tmux_socket
        assert run_socket and run_socket.startswith("lo-demo-") and run_socket != tmux_socket
        has = ["tmux", "-L", run_socket, "has-session", "-t", "=lo-demo"]
        assert subprocess.run(has, capture_output=True, check=False).returncode == 0
        env = {**os.environ, "TMUX": other, "TMUX_PANE": "%0"}
        cleaned = subprocess.run(
            [sys.executable, "-m", "loop_orchestrator", "cleanup", "--repo", str(files.repo)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert cleaned.returncode == 0, cleaned.stderr
        assert "session killed: yes" in cleaned.stdout
        assert subprocess.run(has, capture_output=True, check=False).returncode != 0
        # the other server's session of the same name is untouched
        assert (
            subprocess.run(
                ["tmux", "-L", tmux_socket, "has-session", "-t", "=lo-demo"],
                capture_output=True,
                check=False,
            ).returncode
            == 0
        )
    finally:
        if run_socket:
            subprocess.run(
                ["tmux", "-L", run_socket, "kill-server"], capture_output=True, check=False
            )
