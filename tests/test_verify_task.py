"""verify_task end to end on real repositories; reviews, rework prompts, routing; the
`lo-orch audit` command."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.git import commit, git
from helpers.verify import BASE_CALC, FIXED_CALC, HONEST_TESTS, PY, calc_task, off

from loop_orchestrator.cli.main import run_cli
from loop_orchestrator.config import Settings
from loop_orchestrator.plan.model import DoneCheck, Task
from loop_orchestrator.runstate.state import RunDir
from loop_orchestrator.verify import (
    load_verdict,
    rework_prompt,
    route_integration_failure,
    verify_task,
    write_review,
)


@pytest.fixture
def project(git_repo: Path) -> tuple[Path, str]:
    base = commit(git_repo, {"app/calc.py": BASE_CALC}, "base")
    return git_repo, base


@pytest.mark.slow
def test_honest_task_passes_with_red_green_evidence(
    project: tuple[Path, str], tmp_path: Path
) -> None:
    repo, base = project
    head = commit(repo, {"app/calc.py": FIXED_CALC, "tests/test_calc.py": HONEST_TESTS})
    rundir = RunDir(repo)
    verdict = verify_task(
        repo,
        rundir,
        calc_task(),
        base,
        head,
        brief="Fix add.",
        settings=_auditor(tmp_path, "VERDICT: PASS"),
    )
    assert verdict.findings == [], [f.render() for f in verdict.findings]
    assert verdict.passed and verdict.commit == head and verdict.base == base
    # green is proven by check-1's report (every new test passed there): no extra run
    assert [r.name for r in verdict.checks] == ["check-1", "red"]
    assert [r.exit_code for r in verdict.checks] == [0, 1]  # red: fails at the base
    assert verdict.auditor is not None and verdict.auditor.status == "pass"
    evidence = Path(verdict.evidence_dir or "")
    assert evidence == rundir.task_evidence_dir("calc") / head[:12]
    assert (evidence / "check-1.junit.xml").exists()
    assert "assert -1 == 5" in (evidence / "red.junit.xml").read_text()
    assert all(Path(p).exists() for p in verdict.evidence)
    # the verdict is bound to the commit
    assert load_verdict(rundir, "calc", head) == verdict
    assert load_verdict(rundir, "calc", base) is None
    assert "PASSED" in verdict.summary()


@pytest.mark.slow
def test_gamed_task_is_caught(project: tuple[Path, str]) -> None:
    repo, base = project
    gamed_tests = (
        "from app import calc\n\n"
        "def test_add():\n    assert calc.add(2, 3) == 5\n\n"
        "def test_parse():\n    calc.parse('7')\n\n"
        "def test_more():\n    assert True\n"
    )
    head = commit(
        repo,
        {
            "app/calc.py": "def add(a, b):\n    return 5\n\n\ndef parse(text):\n    pass\n",
            "tests/test_calc.py": gamed_tests,
            "README.md": "# sample\nedited outside owns\n",
        },
    )
    verdict = verify_task(repo, RunDir(repo), calc_task(), base, head, brief="b", settings=off())
    assert not verdict.passed
    blocking = {(f.check, f.path) for f in verdict.blocking}
    assert {
        ("scope.unowned", "README.md"),
        ("tests.no-assertion", "tests/test_calc.py"),
        ("tests.tautology", "tests/test_calc.py"),
        ("stubs.hardcoded-return", "app/calc.py"),
        ("stubs.empty-body", "app/calc.py"),
    } <= blocking
    assert verdict.auditor is not None and verdict.auditor.status == "skipped"
    assert "FAILED" in verdict.summary() and "scope.unowned" in verdict.summary()


@pytest.mark.slow
def test_new_test_missing_at_base_is_a_warning_not_red(git_repo: Path) -> None:
    base = git(git_repo, "rev-parse", "HEAD").strip()
    tests = HONEST_TESTS.replace("from app import calc", "from app import calc  # new module")
    head = commit(git_repo, {"app/calc.py": FIXED_CALC, "tests/test_calc.py": tests})
    verdict = verify_task(
        git_repo, RunDir(git_repo), calc_task(), base, head, brief="b", settings=off()
    )
    assert verdict.passed
    assert [(f.check, f.severity.value) for f in verdict.findings] == [
        ("redgreen.unprovable", "warning")
    ]
    assert "the module under test does not exist at base" in verdict.findings[0].message


@pytest.mark.slow
def test_failing_done_check_blocks_with_its_output(project: tuple[Path, str]) -> None:
    repo, base = project
    broken = FIXED_CALC.replace("return a + b", "return a + b + 1")
    head = commit(repo, {"app/calc.py": broken, "tests/test_calc.py": HONEST_TESTS})
    verdict = verify_task(repo, RunDir(repo), calc_task(), base, head, brief="b", settings=off())
    checks = {f.check for f in verdict.blocking}
    assert {"done.failed", "done.new-test-failed"} <= checks
    failed = next(f for f in verdict.blocking if f.check == "done.failed")
    assert "exit code 1" in failed.message and "assert 6 == 5" in failed.message


def _auditor(tmp_path: Path, verdict_line: str) -> Settings:
    script = tmp_path / "auditor.py"
    script.write_text(
        "import sys, json\njson.load(sys.stdin)\n"
        f"print({verdict_line!r})\nprint('REASONS: judged')\n",
        encoding="utf-8",
    )
    s = off()  # (the auditor is set below)
    s.auditor.llm = f"{PY} {shlex.quote(str(script))}"
    return s


@pytest.mark.slow
def test_auditor_fail_fails_a_task_with_clean_deterministic_checks(
    project: tuple[Path, str], tmp_path: Path
) -> None:
    repo, base = project
    head = commit(repo, {"app/calc.py": FIXED_CALC, "tests/test_calc.py": HONEST_TESTS})
    verdict = verify_task(
        repo,
        RunDir(repo),
        calc_task(),
        base,
        head,
        brief="b",
        settings=_auditor(tmp_path, "VERDICT: FAIL"),
    )
    assert verdict.blocking == []
    assert not verdict.passed
    assert verdict.auditor is not None and verdict.auditor.mode == "command"
    assert verdict.auditor.status == "fail" and verdict.auditor.reasons == ["judged"]
    assert "auditor FAIL: judged" in verdict.summary()


@pytest.mark.slow
def test_review_and_rework_prompt(project: tuple[Path, str]) -> None:
    repo, base = project
    head = commit(
        repo,
        {
            "app/calc.py": "def add(a, b):\n    return 5\n",
            "tests/test_calc.py": "from app import calc\n\n"
            "def test_add():\n    assert calc.add(2, 3) == 5\n",
        },
    )
    rundir = RunDir(repo)
    task = calc_task()
    verdict = verify_task(repo, rundir, task, base, head, brief="b", settings=off())
    path = write_review(rundir, task, 2, verdict, max_rounds=3)
    assert path == rundir.review_path("calc", 2)
    text = path.read_text()
    assert "round 2 of 3" in text and head in text
    assert "`app/calc.py:2`" in text and "stubs.hardcoded-return" in text
    assert "Never weaken, skip or delete tests" in text
    assert str(rundir.task_evidence_dir("calc") / head[:12]) in text
    prompt = rework_prompt(path, task_id="calc", round_no=2, max_rounds=3, verdict=verdict)
    assert str(path) in prompt and "round 2 of 3" in prompt
    assert "app/calc.py:2" in prompt and "Never weaken" in prompt


def test_route_integration_failure() -> None:
    tasks = [
        Task(id="models", objective="o", owns=["app/models.py", "tests/test_models.py"], done=[]),
        Task(
            id="service",
            objective="o",
            owns=["app/service.py", "app/models.py"],
            depends_on=["models"],
            done=[],
        ),
        Task(id="web", objective="o", owns=["web/**"], done=[]),
    ]
    routed = route_integration_failure(
        ["tests/test_models.py", "app/models.py", "web/app.js", "setup.py"], tasks
    )
    assert routed == {
        "models": ["tests/test_models.py"],
        "service": ["app/models.py"],
        "web": ["web/app.js"],
        None: ["setup.py"],
    }


# lo-orch audit ------------------------------------------------------------------------


def _cli(*args: str | Path) -> tuple[int, str, str]:
    runner = CliRunner()
    with runner.isolation() as (out, err, _):
        code = run_cli([str(a) for a in args])
        return code, out.getvalue().decode(), err.getvalue().decode()


def _plan_run(repo: Path, tmp_path: Path) -> None:
    plan = {
        "goal": "Fix the calculator",
        "name": "calc-run",
        "tasks": [
            {
                "id": "calc",
                "objective": "Fix add",
                "owns": ["app/calc.py", "tests/test_calc.py"],
                "done": [
                    {"criterion": "tests pass", "check": f"{PY} -m pytest -q tests/test_calc.py"}
                ],
            }
        ],
    }
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan), encoding="utf-8")
    assert _cli("plan", plan_file, "--repo", repo)[0] == 0
    assert _cli("approve", "--repo", repo)[0] == 0


@pytest.mark.slow
def test_audit_command(project: tuple[Path, str], tmp_path: Path) -> None:
    repo, _base = project
    _plan_run(repo, tmp_path)
    code, _out, err = _cli("audit", "calc", "--repo", repo)
    assert code == 1 and "no commit yet" in err

    git(repo, "checkout", "-q", "-b", "lo/calc-run/calc")
    head = commit(repo, {"app/calc.py": FIXED_CALC, "tests/test_calc.py": HONEST_TESTS})
    git(repo, "checkout", "-q", "main")
    code, out, err = _cli("audit", "calc", "--repo", repo, "--no-llm")
    assert code == 0, err
    assert f"task calc @ {head[:12]}: PASSED" in out and "ran check-1" in out

    git(repo, "checkout", "-q", "lo/calc-run/calc")
    bad = commit(repo, {"app/calc.py": "def add(a, b):\n    return 5\n"})
    git(repo, "checkout", "-q", "main")
    code, out, err = _cli("audit", "calc", "--repo", repo, "--no-llm", "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["commit"] == bad and doc["passed"] is False
    assert "stubs.hardcoded-return" in {f["check"] for f in doc["findings"]}
    assert err.startswith("Error: task calc @") and "FAILED" in err

    code, _out, err = _cli("audit", "nope", "--repo", repo)
    assert code == 1 and "no task 'nope'" in err and "Known tasks: calc" in err


def _prose_task() -> Task:
    """A task whose criteria have no command: only the pure checks and the auditor run."""
    return Task(
        id="calc",
        objective="o",
        owns=["app/calc.py", "tests/test_calc.py"],
        done=[DoneCheck(criterion="add works")],
    )


def test_empty_commit_is_blocking(project: tuple[Path, str]) -> None:
    repo, base = project
    verdict = verify_task(repo, RunDir(repo), _prose_task(), base, base, brief="b", settings=off())
    assert [(f.check, f.severity.value) for f in verdict.findings] == [
        ("scope.no-change", "blocking")
    ]
    assert not verdict.passed and verdict.checks == []


def test_code_without_tests_warns(project: tuple[Path, str]) -> None:
    repo, base = project
    head = commit(repo, {"app/calc.py": FIXED_CALC})
    verdict = verify_task(repo, RunDir(repo), _prose_task(), base, head, brief="b", settings=off())
    assert [(f.check, f.severity.value) for f in verdict.findings] == [
        ("tests.none-added", "warning")
    ]
    assert verdict.passed
