"""The supervisor end to end: real tmux (private socket), real git, the scripted agent.

The demo project (examples/demo: four tasks in three waves, `counts` reworked once) is the
fixture; scripts are varied per test to make sessions misbehave.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from helpers.cli import INTERRUPTIBLE
from helpers.git import git
from helpers.runs import approve, edit_script, ledger, only
from helpers.wait import wait_for

from loop_orchestrator.commands.plan import plan_from_file
from loop_orchestrator.git import checkouts as tempcheckout
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.state import Phase, RunDir, RunPhase, Store
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.simulator.agent import READY_RE, record_dir_for
from loop_orchestrator.supervisor.main import Supervisor
from loop_orchestrator.workspace import integration

TASKS = ("tokenize", "slug", "counts", "report")


def phases(repo: Path) -> dict[str, Phase]:
    return {s.task: s.phase for s in Store(RunDir(repo)).list_statuses()}


def merges_per_task(repo: Path, branch: str) -> Counter[str]:
    """Staging commits per task: one each, single-parent (rejected rounds stay behind)."""
    assert git(repo, "log", "--merges", "--format=%s", branch) == ""
    subjects = git(repo, "log", "--first-parent", "--format=%s", branch).splitlines()
    counts: Counter[str] = Counter()
    for subject in subjects:
        for task in TASKS:
            if f"task {task}:" in subject or f"task {task} " in subject:
                counts[task] += 1
    return counts


def tmux_has_session(socket: str, name: str) -> bool:
    result = subprocess.run(
        ["tmux", "-L", socket, "has-session", "-t", f"={name}"], capture_output=True, check=False
    )
    return result.returncode == 0


def test_four_tasks_run_gate2_and_merge(demo_files: demo.DemoFiles, tmux_socket: str) -> None:
    repo = demo_files.repo
    settings = demo.demo_settings(demo_files.script)
    approve(demo_files, settings)
    messages: list[str] = []

    outcome = Supervisor(repo, settings, progress=messages.append).run()

    assert outcome.state == "review", outcome.message
    assert set(phases(repo).values()) == {Phase.INTEGRATED}
    state = Store(RunDir(repo)).read_run()
    assert state.phase == RunPhase.AWAITING_MERGE_REVIEW
    assert state.integration is not None
    assert state.integration["passed"] is True
    assert state.integration["exit_code"] == 0
    events = ledger(repo)
    integrated = Counter(e["task"] for e in events if e["event"] == "task_integrated")
    assert integrated == dict.fromkeys(TASKS, 1)
    # counts failed its done-check once and was reworked with a review
    reworks = [e for e in events if e["event"] == "rework"]
    assert [(e["task"], e["round"]) for e in reworks] == [("counts", 1)]
    review = Path(reworks[0]["review"]).read_text(encoding="utf-8")
    assert "done.failed" in review
    # dependents started only after their producers were integrated
    order = [e["task"] for e in events if e["event"] == "task_integrated"]
    released = {e["task"]: i for i, e in enumerate(events) if e["event"] == "task_released"}
    done_at = {e["task"]: i for i, e in enumerate(events) if e["event"] == "task_integrated"}
    assert released["counts"] > done_at["tokenize"]
    assert released["report"] > max(done_at["counts"], done_at["slug"])
    assert order.index("report") == 3
    # lo-orch's own moves of staging (four merges, watched all along) are no alarm
    alarms = ("refs_repaired", "refs_tampered", "task_start_lost")
    assert not [e for e in events if e["event"] in alarms]
    assert git(repo, "for-each-ref", "refs/lo-orch/quarantine/").strip() == ""

    # dependents' briefs carry their producers' exact signatures, read from staging
    briefs = RunDir(repo).briefs_dir
    counts_brief = (briefs / "counts.md").read_text(encoding="utf-8")
    assert "def tokenize(text: str) -> list[str]:" in counts_brief
    assert "textstats/tokenize.py" in counts_brief
    report_brief = (briefs / "report.md").read_text(encoding="utf-8")
    assert "def top_words(text: str, n: int) -> list[tuple[str, int]]:" in report_brief
    assert "def slugify(text: str, max_length: int = 40) -> str:" in report_brief
    assert "def tokenize" not in report_brief  # report consumes no tokenize

    review_obj = integration.review(repo)
    assert "textstats/report.py" in review_obj.stat
    integration.merge(repo, review_obj)

    feature = git(repo, "rev-parse", "feat/demo").strip()
    assert feature == review_obj.commit  # exactly the reviewed commit, no new merge commit
    assert merges_per_task(repo, "feat/demo") == dict.fromkeys(TASKS, 1)
    counts_py = git(repo, "show", "feat/demo:textstats/counts.py")
    assert "return ranked[:n]" in counts_py
    with tempcheckout.temp_checkout(repo, "feat/demo") as tree:
        tests = subprocess.run(
            [sys.executable, "-m", "unittest", "discover", "-s", "tests", "-t", "."],
            cwd=tree,
            capture_output=True,
            text=True,
            check=False,
        )
    assert tests.returncode == 0, tests.stderr
    assert "Ran 18 tests" in tests.stderr
    # the main checkout is still on main: the merged code is on the feature branch only
    assert not (repo / "textstats" / "report.py").exists()
    # nothing of the run is left behind
    assert not tmux_has_session(tmux_socket, "lo-demo")
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(repo, "branch", "--list", "lo/demo/*").strip() == ""
    assert Store(RunDir(repo)).read_run().phase == RunPhase.MERGED
    assert git(repo, "status", "--porcelain").strip() == ""


def _write_config(files: demo.DemoFiles, **run: Any) -> None:
    folder = files.repo / ".loop-orchestrator"
    folder.mkdir(exist_ok=True)
    run_lines = "".join(f"{k} = {json.dumps(v)}\n" for k, v in run.items())
    (folder / "config.toml").write_text(
        f'[agent]\nkind = "scripted"\nscript = "{files.script}"\nready_timeout = 20\n'
        f'[auditor]\nllm = "off"\n[run]\nstagger_seconds = 0.1\n{run_lines}',
        encoding="utf-8",
    )


def _run_cmd(repo: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "loop_orchestrator", "run", "--repo", str(repo), *extra]


def test_sigkill_at_random_moments_then_resume(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    repo = demo_files.repo
    _write_config(demo_files)
    settings = demo.demo_settings(demo_files.script)
    approve(demo_files, settings)
    rng = random.Random(20261129)
    store = Store(RunDir(repo))
    kills = 0
    for _ in range(12):
        proc = subprocess.Popen(
            _run_cmd(repo), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        time.sleep(rng.uniform(0.4, 2.5))
        if proc.poll() is not None:
            break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
        if store.read_run().phase == RunPhase.AWAITING_MERGE_REVIEW:
            break
    final = subprocess.run(_run_cmd(repo), capture_output=True, text=True, timeout=240, check=False)
    assert final.returncode == 0, final.stderr
    assert kills >= 3  # the run really was interrupted several times
    assert store.read_run().phase == RunPhase.AWAITING_MERGE_REVIEW
    assert set(phases(repo).values()) == {Phase.INTEGRATED}
    # each task merged into staging exactly once, in spite of the restarts
    assert merges_per_task(repo, "lo/demo/staging") == dict.fromkeys(TASKS, 1)
    launched = Counter(e["task"] for e in ledger(repo) if e["event"] == "session_launched")
    assert all(n <= 1 for n in launched.values()), launched
    # a move killed half-recorded is lo-orch's own on resume, never a repair
    alarms = ("refs_repaired", "refs_tampered", "task_start_lost")
    assert not [e for e in ledger(repo) if e["event"] in alarms]
    # no orphan pane: every integrated task's pane is gone
    panes = subprocess.run(
        ["tmux", "-L", tmux_socket, "list-panes", "-s", "-t", "=lo-demo", "-F", "#{@lo_task}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    assert [p for p in panes if p] == []
    review = integration.review(repo)
    integration.merge(repo, review)
    assert "return ranked[:n]" in git(repo, "show", "feat/demo:textstats/counts.py")
    for task in TASKS:
        assert git(repo, "ls-tree", "--name-only", "feat/demo", f"textstats/{task}.py").strip()


def test_a_dirty_checkout_is_refused_and_the_suggested_flag_works(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    """A user with an uncommitted edit runs `lo-orch run`: refused, with a hint naming a
    flag that exists; following it runs to Gate 2 and leaves the edit byte-identical.
    (One task: its worktree, its verification and its merge into staging are each place a
    run could reach the main checkout; more tasks repeat them.)"""
    repo = demo_files.repo
    only(demo_files, "tokenize")
    _write_config(demo_files)
    approve(demo_files, demo.demo_settings(demo_files.script))
    notes = repo / "NOTES.md"
    notes.write_bytes(b"my uncommitted thoughts\n\x00binary-ish tail")
    before = notes.read_bytes()
    refused = subprocess.run(
        _run_cmd(repo), capture_output=True, text=True, timeout=120, check=False
    )
    assert refused.returncode == 1
    assert "uncommitted changes" in refused.stderr and "--allow-dirty" in refused.stderr
    flag = re.search(r"pass (--[a-z-]+)", refused.stderr)
    assert flag is not None
    allowed = subprocess.run(
        _run_cmd(repo, flag.group(1)), capture_output=True, text=True, timeout=240, check=False
    )
    assert allowed.returncode == 0, allowed.stderr
    assert Store(RunDir(repo)).read_run().phase == RunPhase.AWAITING_MERGE_REVIEW
    assert notes.read_bytes() == before
    assert "NOTES.md" not in git(repo, "ls-tree", "-r", "--name-only", "lo/demo/staging")


def test_second_supervisor_is_refused_naming_the_holder(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    repo = demo_files.repo
    edit_script(demo_files, lambda d: d["tokenize"].update(plan=["hang"]))
    _write_config(demo_files)
    approve(demo_files, demo.demo_settings(demo_files.script))
    # a person's Ctrl-C reaches a supervisor started from their terminal: so does this one
    first = subprocess.Popen(
        [*INTERRUPTIBLE, "run", "--repo", str(repo)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        info = repo / ".orchestration" / "supervisor.json"
        wait_for(info.exists, 20, "the first supervisor to take the lock")
        second = subprocess.run(
            _run_cmd(repo), capture_output=True, text=True, timeout=60, check=False
        )
        assert second.returncode == 1
        assert second.stderr.startswith("Error: another supervisor is running")
        assert f"pid {first.pid}" in second.stderr
    finally:
        first.send_signal(signal.SIGINT)
        # Ctrl-C lets the step in flight finish: seconds
        first.wait(timeout=60)
    assert ledger(repo, "supervisor_interrupted")
    # Ctrl-C stops the supervisor, not the sessions
    assert tmux_has_session(tmux_socket, "lo-demo")


def test_review_then_fix_and_blocked_after_three_rounds(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    repo = demo_files.repo

    def change(d: dict[str, Any]) -> None:
        good_slug_round = d["slug"]["implement"][0]
        # slug: first an assertion-less test, then the real one
        lazy = [
            {
                "write": {
                    "path": "tests/test_slug.py",
                    "content": (
                        "import unittest\n\nfrom textstats.slug import slugify\n\n\n"
                        "class SlugifyTest(unittest.TestCase):\n"
                        "    def test_it_runs(self):\n        slugify('Hello World')\n"
                    ),
                }
            },
            *[
                a
                for a in good_slug_round
                if "write" in a and a["write"]["path"] != "tests/test_slug.py"
            ],
            {"signal": {"phase": "impl_done"}},
        ]
        d["slug"]["implement"] = [lazy, good_slug_round]
        # report (nothing depends on it): a tautological test every time
        bad = [a for a in d["report"]["implement"][0] if "write" in a]
        bad[0] = {
            "write": {
                "path": "tests/test_report.py",
                "content": (
                    "import unittest\n\nfrom textstats.report import render_report\n\n\n"
                    "class ReportTest(unittest.TestCase):\n"
                    "    def test_true(self):\n        render_report('T', 'x')\n"
                    "        self.assertTrue(True)\n"
                ),
            }
        }
        d["report"]["implement"] = [[*bad, {"signal": {"phase": "impl_done"}}]]

    edit_script(demo_files, change)
    settings = demo.demo_settings(demo_files.script)
    approve(demo_files, settings)

    outcome = Supervisor(repo, settings).run()

    assert outcome.state == "blocked"
    # the lazy test was sent back and fixed; the gamed one is blocked; the others finished
    assert phases(repo) == {
        "tokenize": Phase.INTEGRATED,
        "slug": Phase.INTEGRATED,
        "counts": Phase.INTEGRATED,
        "report": Phase.BLOCKED,
    }
    status = Store(RunDir(repo)).read_status("report")
    assert status.rework_count == 3
    assert status.error is not None
    assert "after 3 rework round(s)" in status.error
    assert "tests.tautology" in status.error
    reviews = RunDir(repo).reviews_dir
    assert sorted(p.name for p in reviews.glob("report-r*.md")) == [
        "report-r1.md",
        "report-r2.md",
        "report-r3.md",
    ]
    assert "tests.tautology" in (reviews / "report-r1.md").read_text(encoding="utf-8")
    slug_review = (reviews / "slug-r1.md").read_text(encoding="utf-8")
    assert "tests.no-assertion" in slug_review
    assert "never weaken" in slug_review.lower()
    assert outcome.message.startswith("report: verification failed after 3 rework round(s)")
    # the blocked task's session is left for a person to attach to; status shows it alive
    shown = subprocess.run(
        [sys.executable, "-m", "loop_orchestrator", "status", "--repo", str(repo)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = {line.split()[0]: line.split() for line in shown.splitlines()[2:] if line.strip()}
    assert rows["report"][2] == "blocked"
    assert "alive" in rows["report"]
    # integrated: its pane was closed on purpose, which is not "gone"
    assert "closed" in rows["slug"] and "gone" not in rows["slug"]


def test_dead_session_is_relaunched_once_then_failed(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    repo = demo_files.repo
    edit_script(demo_files, lambda d: d["slug"].update(implement=[[{"exit": 3}]]))
    settings = demo.demo_settings(demo_files.script)
    approve(demo_files, settings)

    outcome = Supervisor(repo, settings).run()

    assert outcome.state == "blocked"
    status = Store(RunDir(repo)).read_status("slug")
    assert status.phase == Phase.FAILED
    assert status.relaunches == 1
    assert status.error is not None
    assert "status 3" in status.error
    events = [e["event"] for e in ledger(repo) if e.get("task") == "slug"]
    assert events.count("session_died") == 1
    assert events.count("task_failed") == 1
    assert phases(repo)["tokenize"] == Phase.INTEGRATED
    assert phases(repo)["counts"] == Phase.INTEGRATED


def test_a_session_gone_while_its_prompt_is_delivered_is_relaunched_not_blocked(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    """The session vanishes (its pane killed, as a lost Ray node's actor goes) while the
    supervisor waits for its implement prompt to be confirmed: relaunched and resumed like
    any dead session, not blocked with a delivery error."""
    repo = demo_files.repo
    only(demo_files, "slug")
    # the agent hangs after its plan, so the implement prompt stays unconfirmed
    edit_script(demo_files, lambda d: d["slug"].update(plan=[*d["slug"]["plan"], "hang"]))
    settings = demo.demo_settings(demo_files.script)
    approve(demo_files, settings)
    status_file = RunDir(repo).status_path("slug")
    killed: list[str] = []

    def kill_while_delivering() -> None:
        # the supervisor is delivering the implement prompt: past the paste's settling
        # (3 s on a screen that does not change) it waits for the prompt's hook, and the
        # pane goes then (a pane gone during a tmux call instead fails that call)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                st = json.loads(status_file.read_text(encoding="utf-8"))
                if str(st.get("delivering") or "").startswith("implementing"):
                    time.sleep(4.5)
                    pane = str(st["pane_id"])
                    subprocess.run(["tmux", "-L", tmux_socket, "kill-pane", "-t", pane], check=True)
                    killed.append(pane)
                    return
            time.sleep(0.05)

    watcher = threading.Thread(target=kill_while_delivering, daemon=True)
    watcher.start()
    Supervisor(repo, settings).run()
    watcher.join(timeout=5)

    assert killed
    events = [e for e in ledger(repo) if e.get("task") == "slug"]
    names = [e["event"] for e in events]
    assert "session_lost_mid_step" in names, names
    assert "task_blocked" not in names, names
    assert names[names.index("session_lost_mid_step") + 1] == "session_died"
    status = Store(RunDir(repo)).read_status("slug")
    assert status.relaunches == 1
    assert status.phase == Phase.INTEGRATED, status.error


def test_run_refuses_a_plan_that_is_not_approved(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    repo = demo_files.repo
    _write_config(demo_files)
    plan_from_file(repo, demo_files.plan, demo.demo_settings(demo_files.script))
    result = subprocess.run(_run_cmd(repo), capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert "has not been approved" in result.stderr
    assert not tmux_has_session(tmux_socket, "lo-demo")
    runs.approve_plan(repo)
    demo_files.plan.write_text(
        demo_files.plan.read_text(encoding="utf-8").replace("concurrency: 4", "concurrency: 3"),
        encoding="utf-8",
    )
    result = subprocess.run(_run_cmd(repo), capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert "edited after `lo-orch plan`" in result.stderr


def test_detached_supervisor_runs_in_a_tmux_window(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    repo = demo_files.repo
    only(demo_files, "tokenize")  # the window and a run from it to Gate 2: one task shows it
    _write_config(demo_files)
    approve(demo_files, demo.demo_settings(demo_files.script))
    result = subprocess.run(
        [sys.executable, "-m", "loop_orchestrator", "run", "--detach", "--repo", str(repo)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "window 'supervisor'" in result.stdout
    windows = subprocess.run(
        ["tmux", "-L", tmux_socket, "list-windows", "-t", "=lo-demo", "-F", "#{window_name}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    assert "supervisor" in windows
    store = Store(RunDir(repo))
    wait_for(
        lambda: store.read_run().phase == RunPhase.AWAITING_MERGE_REVIEW,
        120,
        "the detached supervisor to reach Gate 2",
    )
    assert set(phases(repo).values()) == {Phase.INTEGRATED}


def test_integration_failure_goes_back_to_the_owning_task(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    """slug's done-check runs one test only, so a slug that keeps a trailing dash passes
    verification; the integration command (every test) catches it, and the failure goes
    back to slug, which fixes it in its second round."""
    repo = demo_files.repo
    plan_text = demo_files.plan.read_text(encoding="utf-8")
    demo_files.plan.write_text(
        plan_text.replace(
            "-m unittest -q tests.test_slug",
            "-m unittest -q tests.test_slug.SlugifyTest.test_words_are_joined_with_dashes",
        ),
        encoding="utf-8",
    )

    def buggy_first(d: dict[str, Any]) -> None:
        good = d["slug"]["implement"][0]
        bad = json.loads(json.dumps(good))
        for action in bad:
            if "write" in action and action["write"]["path"] == "textstats/slug.py":
                content = action["write"]["content"]
                assert '.rstrip("-")' in content
                action["write"]["content"] = content.replace('.rstrip("-")', "")
        d["slug"]["implement"] = [bad, good]

    edit_script(demo_files, buggy_first)
    settings = demo.demo_settings(demo_files.script)
    approve(demo_files, settings)

    outcome = Supervisor(repo, settings).run()

    assert outcome.state == "review", outcome.message
    events = ledger(repo)
    names = [e["event"] for e in events]
    assert names.count("integration_failed") == 1
    routed = [e for e in events if e["event"] == "integration_routed"]
    assert [(e["task"], e["round"]) for e in routed] == [("slug", 1)]
    assert "tests/test_slug.py" in routed[0]["files"]
    review = Path(routed[0]["review"]).read_text(encoding="utf-8")
    assert "test_length_is_capped_without_a_trailing_dash" in review
    # slug was merged twice (first with the bug, then the fix), everyone else once
    assert merges_per_task(repo, "lo/demo/staging") == {
        "tokenize": 1,
        "slug": 2,
        "counts": 1,
        "report": 1,
    }
    assert '.rstrip("-")' in git(repo, "show", "lo/demo/staging:textstats/slug.py")
    state = Store(RunDir(repo)).read_run()
    assert state.integration is not None
    assert state.integration["passed"] is True


def test_a_person_retries_a_blocked_task(demo_files: demo.DemoFiles, tmux_socket: str) -> None:
    repo = demo_files.repo
    only(demo_files, "tokenize")  # the other tasks only ran beside it

    def change(d: dict[str, Any]) -> None:
        good = d["tokenize"]["implement"][0]
        bad = [a for a in good if "write" in a]
        bad[0] = {
            "write": {
                "path": "tests/test_tokenize.py",
                "content": (
                    "import unittest\n\nfrom textstats.tokenize import tokenize\n\n\n"
                    "class TokenizeTest(unittest.TestCase):\n"
                    "    def test_runs(self):\n        tokenize('a')\n"
                ),
            }
        }
        bad.append({"signal": {"phase": "impl_done"}})
        d["tokenize"]["implement"] = [bad, bad, good]  # two lazy rounds, then the real one

    edit_script(demo_files, change)
    settings = demo.demo_settings(demo_files.script)
    settings.run.max_rework = 1
    approve(demo_files, settings)
    assert Supervisor(repo, settings).run().state == "blocked"
    assert Store(RunDir(repo)).read_status("tokenize").phase == Phase.BLOCKED

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "loop_orchestrator",
            "retry",
            "tokenize",
            "--repo",
            str(repo),
            "--note",
            "tests need real assertions",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    status = Store(RunDir(repo)).read_status("tokenize")
    assert status.phase == Phase.IMPLEMENTING
    assert status.rework_count == 2
    assert "tests need real assertions" in RunDir(repo).review_path("tokenize", 2).read_text(
        encoding="utf-8"
    )
    again = subprocess.run(
        [sys.executable, "-m", "loop_orchestrator", "retry", "tokenize", "--repo", str(repo)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert again.returncode == 1
    assert "is implementing; only a blocked or failed task" in again.stderr

    outcome = Supervisor(repo, settings).run()

    assert outcome.state == "review", outcome.message
    assert set(phases(repo).values()) == {Phase.INTEGRATED}
    assert [e["event"] for e in ledger(repo)].count("task_retried") == 1


def test_continue_without_blocked_tasks_reviews_and_merges_the_rest(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    repo = demo_files.repo
    edit_script(demo_files, lambda d: d["slug"].update(implement=[[{"exit": 3}]]))
    settings = demo.demo_settings(demo_files.script)
    approve(demo_files, settings)
    assert Supervisor(repo, settings).run().state == "blocked"

    outcome = Supervisor(repo, settings, continue_blocked=True).run()

    assert outcome.state == "review", outcome.message
    state = Store(RunDir(repo)).read_run()
    assert state.skipped_tasks == ["report", "slug"]  # slug failed, report waits on it
    review = integration.review(repo)
    assert "textstats/counts.py" in review.stat
    assert "textstats/slug.py" not in review.stat
    integration.merge(repo, review)
    files = git(repo, "ls-tree", "-r", "--name-only", "feat/demo").split()
    assert "textstats/tokenize.py" in files and "textstats/counts.py" in files
    assert "textstats/slug.py" not in files and "textstats/report.py" not in files


def test_a_generic_command_agent_without_hooks_runs_the_whole_flow(
    demo_files: demo.DemoFiles, tmux_socket: str, tmp_path: Path
) -> None:
    """`[agent] kind = "command"` (codex, aider...): no hooks, so delivery is confirmed on
    screen and status comes from `lo-orch signal` alone. The scripted program stands in,
    with its hooks switched off (an empty plugin folder)."""
    repo = demo_files.repo
    # two waves (counts consumes tokenize) and a rework round (counts' first fails)
    only(demo_files, "tokenize", "counts")
    no_plugin = tmp_path / "no-plugin"
    no_plugin.mkdir()
    settings = demo.demo_settings(demo_files.script)
    settings.agent.kind = "command"
    settings.agent.command = shlex.join(
        [
            sys.executable,
            "-m",
            "loop_orchestrator.simulator.agent",
            "--script",
            str(demo_files.script),
            "--plugin-dir",
            str(no_plugin),
            "--task",
            "{task}",
        ]
    )
    settings.agent.ready_pattern = READY_RE.pattern
    approve(demo_files, settings)

    outcome = Supervisor(repo, settings).run()

    assert outcome.state == "review", outcome.message
    assert set(phases(repo).values()) == {Phase.INTEGRATED}
    events = ledger(repo)
    assert not [e for e in events if e["event"] == "hook"]  # nothing came through hooks
    assert [e["event"] for e in events].count("prompt_delivered") == 5  # 2 plans, 3 implements


def test_a_person_sends_an_integrated_task_back_after_an_unrouted_failure(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    """The integration command fails in a test nobody owns: the run stops with the output;
    the person names the task to fix with `lo-orch retry`, and the run finishes. (slug
    with tokenize beside it, which stays integrated: counts and report add nothing here.)"""
    repo = demo_files.repo
    only(demo_files, "tokenize", "slug")
    (repo / "tests" / "test_legacy.py").write_text(
        "import unittest\n\nfrom textstats.slug import slugify\n\n\n"
        "class LegacyTest(unittest.TestCase):\n"
        "    def test_capped_slugs_have_no_trailing_dash(self):\n"
        "        self.assertEqual(slugify('hello world', max_length=6), 'hello')\n",
        encoding="utf-8",
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", "a legacy test")

    def trailing_dash_first(d: dict[str, Any]) -> None:
        good = d["slug"]["implement"][0]
        bad = json.loads(json.dumps(good))
        for action in bad:
            if "write" not in action:
                continue
            if action["write"]["path"] == "textstats/slug.py":
                action["write"]["content"] = action["write"]["content"].replace('.rstrip("-")', "")
            if action["write"]["path"] == "tests/test_slug.py":  # no test for the cap
                action["write"]["content"] = action["write"]["content"].replace(
                    "def test_length_is_capped_without_a_trailing_dash", "def _unused_cap_case"
                )
        d["slug"]["implement"] = [bad, good]

    edit_script(demo_files, trailing_dash_first)
    settings = demo.demo_settings(demo_files.script)
    approve(demo_files, settings)

    first = Supervisor(repo, settings).run()

    assert first.state == "integration_failed"
    assert "test_capped_slugs_have_no_trailing_dash" in first.message
    assert not [e for e in ledger(repo) if e["event"] == "integration_routed"]
    retried = subprocess.run(
        [
            sys.executable,
            "-m",
            "loop_orchestrator",
            "retry",
            "slug",
            "--repo",
            str(repo),
            "--note",
            "tests/test_legacy.py: capped slugs must not end with a dash",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert retried.returncode == 0, retried.stderr
    review = RunDir(repo).review_path("slug", 1).read_text(encoding="utf-8")
    assert "capped slugs must not end with a dash" in review

    second = Supervisor(repo, settings).run()

    assert second.state == "review", second.message
    assert merges_per_task(repo, "lo/demo/staging") == {"tokenize": 1, "slug": 2}
    assert '.rstrip("-")' in git(repo, "show", "lo/demo/staging:textstats/slug.py")
    reopened = [
        e
        for e in ledger(repo)
        if e["event"] == "session_launched" and e.get("task") == "slug" and e.get("reopened")
    ]
    assert len(reopened) == 1


def test_a_prompt_that_arrived_just_before_a_crash_is_not_sent_again(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    """The supervisor dies between pasting a prompt and recording it (the status says
    "delivering"). On restart the session's UserPromptSubmit hook decides: submitted after
    the delivery began means it arrived, and it is not sent twice; no such submit means it
    never arrived, and it is sent (after a short wait for a late hook)."""
    repo = demo_files.repo

    def change(d: dict[str, Any]) -> None:  # tokenize keeps implementing: no impl_done
        d["tokenize"]["implement"] = [[{"say": {"text": "still working"}}]]

    edit_script(demo_files, change)
    _write_config(demo_files)
    approve(demo_files, demo.demo_settings(demo_files.script))
    store = Store(RunDir(repo))
    key = "implementing:0"

    def prompts() -> int:  # what the scripted agent received, one file per submitted prompt
        return len(list(record_dir_for(store.dirs.root).glob("tokenize-*.txt")))

    def supervise_until(pred: Callable[[], bool], what: str) -> None:
        proc = subprocess.Popen(
            _run_cmd(repo), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            wait_for(pred, 90, what)
        finally:
            proc.kill()  # SIGKILL: no clean shutdown, like a crash
            proc.wait()

    supervise_until(
        lambda: store.read_status("tokenize").delivered == key,
        "the implement prompt to be delivered",
    )
    # the plan prompt, then the implement prompt (recorded by the agent just after its hook)
    wait_for(lambda: prompts() == 2, 10, "the agent to record both prompts")
    before = prompts()
    submitted = store.read_status("tokenize").prompt_submitted_at
    assert submitted

    # 1. killed after the paste, before the record: the hook fired after the delivery began
    began = datetime.fromisoformat(submitted) - timedelta(seconds=0.5)
    # the crash state is set in the supervisor's record: the status file is only its view
    runs.open_record(repo).update_task(
        "tokenize", delivered=None, delivering=key, delivery_started_at=began.isoformat()
    )
    supervise_until(
        lambda: store.read_status("tokenize").delivered == key,
        "the interrupted delivery to be recognised",
    )
    assert prompts() == before
    recovered = [
        e
        for e in ledger(repo)
        if e["event"] == "prompt_delivered"
        and e.get("task") == "tokenize"
        and "not resent" in str(e.get("message"))
    ]
    assert len(recovered) == 1
    assert store.read_status("tokenize").delivering is None

    # 2. killed before the paste: no submit since the delivery began, so it is sent now
    runs.open_record(repo).update_task(
        "tokenize",
        delivered=None,
        delivering=key,
        delivery_started_at=datetime.now(UTC).isoformat(),
    )
    supervise_until(
        lambda: store.read_status("tokenize").delivered == key, "the prompt to be sent again"
    )
    wait_for(lambda: prompts() == before + 1, 10, "the agent to record the resent prompt")
    time.sleep(0.5)
    assert prompts() == before + 1  # once
    assert store.read_status("tokenize").prompt_submitted_at != submitted


def test_a_prompt_queued_for_a_task_blocked_meanwhile_is_not_sent_nor_blocked_again(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    """A delivery job queued before the session's last hook found the task over its budget
    and blocked it: the job sends nothing and logs no second block (the budget run showed
    two `task_blocked` for one block on a loaded machine)."""
    settings = demo.demo_settings(demo_files.script)
    approve(demo_files, settings)
    sup = Supervisor(demo_files.repo, settings)
    sup.journal.block("tokenize", "over its budget: spent $1 of $0.5")
    before = ledger(demo_files.repo, "task_blocked", "tokenize")
    sup.sessions.deliver("tokenize", "prompt_plan.md.j2")
    assert ledger(demo_files.repo, "task_blocked", "tokenize") == before
    assert len(before) == 1
    st = Store(RunDir(demo_files.repo)).read_status("tokenize")
    assert st.phase == Phase.BLOCKED and st.delivering is None
