"""Disputes end to end: the supervisor, real tmux (private socket), real git and
the scripted agent, on the demo project.

The `report` task writes an honest-looking test the heuristics cannot judge (a report
compared with itself: "rendering is deterministic") and is sent back for tests.tautology.
Its session then tries what a gaming agent would — a dispute with no reason, a dispute of
a hard finding, a dispute of a finding that was not raised, the same dispute over and over
— and finally disputes the finding with a reason. Without an auditor the finding is carried
to Gate 2, where `lo-orch merge` shows it under "For you to judge"; with an auditor that
rejects it, disputing again every round ends blocked, not accepted.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers.runs import edit_script

from loop_orchestrator.commands.plan import plan_from_file
from loop_orchestrator.config import Settings
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.state import Phase, RunDir, Store
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.simulator.agent import record_dir_for
from loop_orchestrator.supervisor.main import Supervisor

#: the real tests of the demo's report task plus one the tautology check blocks
SELF_COMPARED = (
    "\n    def test_rendering_is_deterministic(self):\n"
    "        report = render_report('T', 'x y')\n"
    "        self.assertEqual(report, report)\n"
)
REASON = "compares two renderings of one input: rendering must be deterministic"


def _report_round(d: dict[str, Any]) -> list[dict[str, Any]]:
    """The demo's honest report round, with the self-comparison added to its test, and
    without its signal (each test appends its own)."""
    actions = [a for a in d["report"]["implement"][0] if "write" in a]
    for a in actions:
        if a["write"]["path"] == "tests/test_report.py":
            a["write"]["content"] = a["write"]["content"].rstrip("\n") + "\n" + SELF_COMPARED
    assert any("test_rendering_is_deterministic" in a["write"]["content"] for a in actions)
    return actions


def _attempt(out: Path, *args: str) -> dict[str, Any]:
    """A `run` action: `lo-orch signal ARGS` from the session, its output and exit status
    appended to ``out`` (outside the worktree, so nothing of it is committed)."""
    line = " ".join(shlex.quote(a) for a in args)
    script = (
        f'echo "== {line}" >> {shlex.quote(str(out))}; '
        f"$LO_ORCH_BIN signal {line} >> {shlex.quote(str(out))} 2>&1; "
        f'echo "exit=$?" >> {shlex.quote(str(out))}'
    )
    return {"run": {"argv": ["sh", "-c", script], "check": False}}


def _start(files: demo.DemoFiles, settings: Settings) -> None:
    plan_from_file(files.repo, files.plan, settings)
    runs.approve_plan(files.repo)


def _disputes(repo: Path, task: str) -> list[tuple[str, str, str]]:
    return [
        (e["check"], e["outcome"], e.get("note") or "")
        for e in Store(RunDir(repo)).read_ledger()
        if e["event"] == "dispute" and e["task"] == task
    ]


def _prompts(repo: Path, task: str) -> list[str]:
    received = record_dir_for(RunDir(repo).root)
    files = sorted(received.glob(f"{task}-*.txt"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    return [p.read_text(encoding="utf-8") for p in files]


def test_a_disputed_heuristic_is_carried_to_gate_2_and_gaming_disputes_are_refused(
    tmp_path: Path, tmux_socket: str
) -> None:
    files = demo.prepare_demo(tmp_path / "demo")
    repo = files.repo
    out = tmp_path / "attempts.txt"

    def change(d: dict[str, Any]) -> None:
        first = _report_round(d)
        d["report"]["implement"] = [
            # round 0: the test as written, sent back for tests.tautology
            [*first, {"signal": "impl_done"}],
            # round 1: the refused attempts (nothing reaches the supervisor), then a
            # dispute of a finding the review does not have: moot, the tautology blocks
            [
                _attempt(out, "impl_done", "--dispute", "tests.tautology", "--note", " "),
                _attempt(out, "impl_done", "--dispute", "tests.tautology"),
                _attempt(out, "impl_done", "--dispute", "scope.unowned", "--note", REASON),
                _attempt(out, "impl_done", "--dispute", "done.failed", "--note", REASON),
                _attempt(out, "impl_done", "--dispute", "Tests.Tautology!", "--note", REASON),
                {
                    "signal": {
                        "phase": "impl_done",
                        "dispute": ["tests.no-assertion"],
                        "note": REASON,
                    }
                },
            ],
            # round 2: a plain impl_done: last round's dispute is not carried over
            [{"signal": "impl_done"}],
            # round 3: the dispute, with its reason
            [{"signal": {"phase": "impl_done", "dispute": ["tests.tautology"], "note": REASON}}],
        ]

    edit_script(files, change)
    settings = demo.demo_settings(files.script)
    settings.run.max_rework = 3
    _start(files, settings)

    outcome = Supervisor(repo, settings).run()

    assert outcome.state == "review", outcome.message
    store = Store(RunDir(repo))
    assert store.read_status("report").phase == Phase.INTEGRATED
    assert store.read_status("report").rework_count == 3
    # each refused attempt failed in the session, saying why, and changed nothing
    attempts = out.read_text(encoding="utf-8").split("== ")[1:]
    assert len(attempts) == 5
    assert all(a.rstrip().endswith("exit=2") for a in attempts), attempts
    assert "a dispute needs a reason" in attempts[0]
    assert "a dispute needs a reason" in attempts[1]
    assert "scope.unowned is a hard finding" in attempts[2]
    assert "done.failed is a hard finding" in attempts[3]
    assert "is not a finding id" in attempts[4]
    # the ledger has every dispute that reached the supervisor, with its outcome
    assert _disputes(repo, "report") == [
        ("tests.no-assertion", "moot", REASON),
        ("tests.tautology", "carried", REASON),
    ]
    signals = [
        e
        for e in store.read_ledger()
        if e["event"] == "signal" and e["task"] == "report" and e["phase"] == "impl_done"
    ]
    assert [e.get("disputes") for e in signals] == [
        None,
        ["tests.no-assertion"],
        None,
        ["tests.tautology"],
    ]
    # the review of each round sent back still blocks on the tautology, and says which
    # findings are disputable and how; so do the rework prompts the session received
    reviews = RunDir(repo).reviews_dir
    for n in (1, 2, 3):
        review = (reviews / f"report-r{n}.md").read_text(encoding="utf-8")
        assert "tests.tautology" in review and "Disputable here: `tests.tautology`." in review
    assert "moot" in (reviews / "report-r2.md").read_text(encoding="utf-8")
    rework = [p for p in _prompts(repo, "report") if "verification round" in p]
    assert len(rework) == 3
    assert all(
        "--dispute tests.tautology" in p and "Disputable: tests.tautology" in p for p in rework
    )
    assert "your dispute of tests.no-assertion: moot" in rework[1]
    # Gate 2: the carried finding is there for the person, with the session's reason
    merged = subprocess.run(
        [sys.executable, "-m", "loop_orchestrator", "merge", "--yes", "--repo", str(repo)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert merged.returncode == 0, merged.stderr
    judge = merged.stdout.split("For you to judge")[1]
    assert f'report: finding tests.tautology disputed by the session (carried): "{REASON}"' in judge
    assert "report: tests.tautology at tests/test_report.py" in judge


def test_disputing_a_rejected_finding_again_and_again_ends_blocked(
    tmp_path: Path, tmux_socket: str
) -> None:
    files = demo.prepare_demo(tmp_path / "demo")
    repo = files.repo
    # an auditor (a command) that rejects every dispute and passes everything else
    auditor = tmp_path / "auditor.py"
    auditor.write_text(
        "import json, sys\n"
        "data = json.load(sys.stdin)\n"
        "if any(f.get('dispute') for f in data['findings']):\n"
        "    print('VERDICT: FAIL')\n"
        "    print('REASONS: the report compared with itself cannot fail')\n"
        "else:\n"
        "    print('VERDICT: PASS')\n"
        "    print('REASONS: fine')\n",
        encoding="utf-8",
    )

    def change(d: dict[str, Any]) -> None:
        dispute = {"signal": {"phase": "impl_done", "dispute": ["tests.tautology"], "note": REASON}}
        d["report"]["implement"] = [[*_report_round(d), dispute], [dispute]]

    edit_script(files, change)
    settings = demo.demo_settings(files.script)
    settings.auditor.llm = f"{shlex.quote(sys.executable)} {shlex.quote(str(auditor))}"
    settings.run.max_rework = 2
    _start(files, settings)

    outcome = Supervisor(repo, settings).run()

    assert outcome.state == "blocked", outcome.message
    status = Store(RunDir(repo)).read_status("report")
    assert status.phase == Phase.BLOCKED
    assert "tests.tautology" in (status.error or "")
    # rejected every time, three rounds spent; the same dispute of the same commit is
    # settled as it was (the auditor is not asked again for what it already judged)
    assert _disputes(repo, "report") == [("tests.tautology", "rejected", REASON)] * 3
    assert [e["reused"] for e in Store(RunDir(repo)).read_ledger() if e["event"] == "dispute"] == [
        False,
        True,
        True,
    ]
    reviews = RunDir(repo).reviews_dir
    for n in (1, 2):
        review = (reviews / f"report-r{n}.md").read_text(encoding="utf-8")
        assert "rejected" in review and "cannot fail" in review
    rework = [p for p in _prompts(repo, "report") if "verification round" in p]
    assert len(rework) == 2
    assert all("your dispute of tests.tautology: rejected" in p for p in rework)
    # the other tasks went through the same auditor and were integrated
    others = {s.task: s.phase for s in Store(RunDir(repo)).list_statuses() if s.task != "report"}
    assert set(others.values()) == {Phase.INTEGRATED}
