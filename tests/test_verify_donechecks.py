"""Done-checks and red-green runs: argument lists without a shell, clean checkouts,
timeouts, evidence on disk, JUnit proof that new tests ran."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
from helpers.git import git
from helpers.wait import wait_for

from loop_orchestrator.verify import junit
from loop_orchestrator.verify.checkout import check_env, clean_checkout
from loop_orchestrator.verify.donechecks import (
    DoneSpec,
    check_findings,
    is_pytest,
    new_test_findings,
    run_done_checks,
    with_junit,
    write_summary,
)
from loop_orchestrator.verify.models import CheckRun
from loop_orchestrator.verify.redgreen import judge_red, pytest_prefix
from loop_orchestrator.verify.testquality import TestRef

PY = sys.executable


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def worktrees(repo: Path) -> list[str]:
    return [
        line
        for line in git(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]


def test_checks_run_without_a_shell(git_repo: Path, tmp_path: Path) -> None:
    evidence = tmp_path / "ev"
    specs = [
        DoneSpec("echo does not chain", ["echo", "hi", "&&", "false"]),
        DoneSpec("no substitution", ["echo", "$(touch pwned)", "`id`"]),
        DoneSpec("the plan said sh -c literally", ["sh", "-c", "exit 3"]),
        DoneSpec("prose only", None),
    ]
    with clean_checkout(git_repo, head(git_repo)) as tree:
        runs = run_done_checks(specs, tree, evidence, env=check_env(tree), timeout=30)
        assert not (tree / "pwned").exists()
    assert [r.name for r in runs] == ["check-1", "check-2", "check-3"]
    assert Path(runs[0].stdout_path or "").read_text() == "hi && false\n"
    assert Path(runs[1].stdout_path or "").read_text() == "$(touch pwned) `id`\n"
    assert [r.exit_code for r in runs] == [0, 0, 3]
    findings = check_findings(runs, 30)
    assert [(f.check, f.severity.value) for f in findings] == [("done.failed", "blocking")]
    assert "exit code 3" in findings[0].message


def test_clean_checkout_ignores_untracked_files_and_is_removed(
    git_repo: Path, tmp_path: Path
) -> None:
    (git_repo / "app" / "scratch.py").write_text("X = 1\n", encoding="utf-8")  # never committed
    before = worktrees(git_repo)
    with clean_checkout(git_repo, head(git_repo)) as tree:
        assert (tree / "README.md").exists()
        assert not (tree / "app" / "scratch.py").exists()
        runs = run_done_checks(
            [DoneSpec("import works", [PY, "-c", "import app.scratch"])],
            tree,
            tmp_path / "ev",
            env=check_env(tree),
            timeout=30,
        )
        # a checkout of lo-orch's private object view, not a worktree of the user's repo
        assert worktrees(git_repo) == before
        assert git(tree, "rev-parse", "HEAD").strip() == head(git_repo)
    assert runs[0].exit_code == 1
    assert "No module named 'app.scratch'" in Path(runs[0].stderr_path or "").read_text()
    assert worktrees(git_repo) == before
    assert not tree.exists()


def test_timeout_and_missing_program_are_blocking(git_repo: Path, tmp_path: Path) -> None:
    specs = [
        DoneSpec("hangs", [PY, "-c", "import time; time.sleep(30)"]),
        DoneSpec("missing", ["definitely-not-a-program-xyz", "--version"]),
    ]
    with clean_checkout(git_repo, head(git_repo)) as tree:
        runs = run_done_checks(specs, tree, tmp_path / "ev", env=check_env(tree), timeout=0.2)
    assert runs[0].timed_out and runs[0].exit_code is None
    assert runs[1].error is not None and not runs[1].timed_out
    assert [f.check for f in check_findings(runs, 1)] == ["done.timeout", "done.error"]


def test_a_timed_out_check_leaves_no_process_behind(git_repo: Path, tmp_path: Path) -> None:
    """A done-check that starts a server (a child that outlives it) and then hangs: at its
    timeout the whole process group goes, the server too, not only the program started."""
    pidfile = tmp_path / "server.pid"
    script = (
        "import subprocess, sys, time\n"
        "server = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(server.pid))\n"
        "time.sleep(300)\n"
    )
    with clean_checkout(git_repo, head(git_repo)) as tree:
        runs = run_done_checks(
            [DoneSpec("serves", [PY, "-c", script])],
            tree,
            tmp_path / "ev",
            env=check_env(tree),
            timeout=2,
        )
    assert runs[0].timed_out
    server = int(pidfile.read_text())
    try:
        wait_for(lambda: gone(server), 5, "the check's server to end with its timeout")
    finally:
        if Path(f"/proc/{server}").exists():
            os.kill(server, signal.SIGKILL)  # the process this test's check started


def gone(pid: int) -> bool:
    """``pid`` has ended (a zombie: killed, not yet reaped by its also killed parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_check_that_takes_too_much_memory_fails_alone(git_repo: Path, tmp_path: Path) -> None:
    """Each process of a check (the program and what it starts) gets the data memory bound:
    past it, its allocation fails and the check fails, instead of the out-of-memory killer
    choosing among the supervisor, the sessions and the person's programs. Under the bound
    the same check passes."""
    hog = "x = bytearray({n} * 2**20); print('allocated')"
    child = f"import subprocess, sys; sys.exit(subprocess.call([sys.executable, '-c', {hog!r}]))"
    specs = [
        DoneSpec("hog", [PY, "-c", hog.format(n=512)]),
        DoneSpec("child hog", [PY, "-c", child.format(n=512)]),
        DoneSpec("modest", [PY, "-c", hog.format(n=32)]),
    ]
    with clean_checkout(git_repo, head(git_repo)) as tree:
        runs = run_done_checks(
            specs, tree, tmp_path / "ev", env=check_env(tree), timeout=30, memory=256 * 2**20
        )
        unbounded = run_done_checks(
            specs[:1], tree, tmp_path / "ev2", env=check_env(tree), timeout=30
        )
    assert [r.exit_code for r in runs] == [1, 1, 0]
    assert "MemoryError" in (tmp_path / "ev" / "check-1.stderr.txt").read_text()
    assert "MemoryError" in (tmp_path / "ev" / "check-2.stderr.txt").read_text()
    assert [f.check for f in check_findings(runs, 30)] == ["done.failed", "done.failed"]
    assert unbounded[0].exit_code == 0


def test_evidence_files_and_summary(git_repo: Path, tmp_path: Path) -> None:
    evidence = tmp_path / "ev"
    with clean_checkout(git_repo, head(git_repo)) as tree:
        runs = run_done_checks(
            [
                DoneSpec(
                    "prints", [PY, "-c", "import sys; print('out'); print('err', file=sys.stderr)"]
                )
            ],
            tree,
            evidence,
            env=check_env(tree),
            timeout=30,
        )
    path = write_summary(evidence, runs, task="t")
    doc = json.loads(path.read_text())
    run = doc["runs"][0]
    assert run["exit_code"] == 0 and run["duration"] >= 0 and run["criterion"] == "prints"
    assert (evidence / "check-1.stdout.txt").read_text() == "out\n"
    assert (evidence / "check-1.stderr.txt").read_text() == "err\n"


def test_pytest_detection_and_arguments() -> None:
    assert is_pytest(["pytest", "-q"])
    assert is_pytest([".venv/bin/pytest"])
    assert is_pytest(["python", "-m", "pytest", "tests"])
    assert is_pytest(["uv", "run", "pytest"])
    assert not is_pytest(["npm", "test"])
    assert not is_pytest(["python", "-m", "unittest"])
    assert pytest_prefix([["npm", "test"], ["uv", "run", "pytest", "-q", "tests/x.py"]]) == [
        "uv",
        "run",
        "pytest",
    ]
    assert pytest_prefix([["python", "-m", "pytest", "-x"]]) == ["python", "-m", "pytest"]
    assert with_junit(["pytest"], Path("/e/j.xml"))[1:] == [
        "--junitxml=/e/j.xml",
        "-p",
        "no:cacheprovider",
    ]


def _repo_with_tests(repo: Path, test_source: str) -> str:
    (repo / "tests").mkdir(exist_ok=True)
    (repo / "tests" / "test_calc.py").write_text(test_source, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", "tests")
    return head(repo)


def _run_pytest_check(repo: Path, commit: str, evidence: Path) -> list[CheckRun]:
    with clean_checkout(repo, commit) as tree:
        runs = run_done_checks(
            [DoneSpec("tests pass", [PY, "-m", "pytest", "-q", "tests"])],
            tree,
            evidence,
            env=check_env(tree),
            timeout=60,
        )
        assert not (tree / ".pytest_cache").exists()  # -p no:cacheprovider
    return runs


@pytest.mark.slow
def test_new_tests_must_be_in_the_junit_report_and_pass(git_repo: Path, tmp_path: Path) -> None:
    source = (
        "import pytest\n\n"
        "def test_real():\n    assert 2 + 2 == 4\n\n"
        "def test_dynamic_skip():\n"
        "    getattr(pytest, 'sk' + 'ip')('hidden')\n    assert 1 + 1 == 2\n\n"
        "def test_hidden():\n    assert 3 + 3 == 6\n\n"
        "test_hidden.__test__ = False\n"
    )
    commit = _repo_with_tests(git_repo, source)
    runs = _run_pytest_check(git_repo, commit, tmp_path / "ev")
    assert runs[0].exit_code == 0 and runs[0].junit_path
    refs = [
        TestRef("tests/test_calc.py", name, "python", True)
        for name in ("test_real", "test_dynamic_skip", "test_hidden")
    ]
    found = {(f.check, f.message.split(" ")[2]) for f in new_test_findings(refs, runs)}
    assert found == {
        ("done.new-test-skipped", "tests/test_calc.py::test_dynamic_skip"),
        ("done.new-test-missing", "tests/test_calc.py::test_hidden"),
    }


def _junit(tmp_path: Path, body: str) -> CheckRun:
    path = tmp_path / "red.junit.xml"
    path.write_text(
        f'<?xml version="1.0"?><testsuites><testsuite>{body}</testsuite></testsuites>',
        encoding="utf-8",
    )
    return CheckRun(name="red", argv=["pytest"], cwd_kind="base", exit_code=1, junit_path=str(path))


REF = TestRef("tests/test_calc.py", "TestAdd::test_add", "python", True)


def test_red_on_an_assertion_failure_is_accepted(tmp_path: Path) -> None:
    run = _junit(
        tmp_path,
        '<testcase classname="tests.test_calc.TestAdd" name="test_add">'
        '<failure message="assert -1 == 5">...</failure></testcase>',
    )
    assert judge_red(run, [REF], lambda m: False) == []


def test_passing_at_base_is_not_red(tmp_path: Path) -> None:
    run = _junit(tmp_path, '<testcase classname="tests.test_calc.TestAdd" name="test_add"/>')
    findings = judge_red(run, [REF], lambda m: False)
    assert [(f.check, f.severity.value) for f in findings] == [("redgreen.not-red", "warning")]


def test_missing_module_at_base_is_not_red_but_only_a_warning(tmp_path: Path) -> None:
    run = _junit(
        tmp_path,
        '<testcase classname="" name="tests.test_calc">'
        '<error message="collection failure">ImportError while importing\n'
        "E   ModuleNotFoundError: No module named 'app.calc'</error></testcase>",
    )
    findings = judge_red(run, [REF], lambda m: m == "app.calc")
    assert [(f.check, f.severity.value) for f in findings] == [("redgreen.unprovable", "warning")]
    assert "the module under test does not exist at base" in findings[0].message


def test_attribute_error_at_base_is_not_red(tmp_path: Path) -> None:
    run = _junit(
        tmp_path,
        '<testcase classname="tests.test_calc.TestAdd" name="test_add">'
        '<failure message="AttributeError: module has no attribute add">'
        "</failure></testcase>",
    )
    findings = judge_red(run, [REF], lambda m: False)
    assert [f.check for f in findings] == ["redgreen.unprovable"]
    assert "AttributeError" in findings[0].message


def test_junit_matching_handles_rootdir_relative_classnames() -> None:
    case = junit.Case("test_calc.TestAdd", "test_add[0-0]", "passed")
    assert junit.matches(case, REF)
    assert not junit.matches(junit.Case("other.TestAdd", "test_add", "passed"), REF)
    assert not junit.matches(junit.Case("tests.test_calc.TestAdd", "test_added", "passed"), REF)
