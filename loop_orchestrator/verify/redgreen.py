"""Red-green evidence for the Python tests a task added or changed.

Red: the task's test files, copied alone onto a clean checkout of the base, must fail on
an assertion (``assert``, ``self.assert*``, ``pytest.fail``/``DID NOT RAISE``). A test that
cannot even be imported there (ImportError, a collection error) is not red: it proves the
file is new, not that the test checks the new behaviour.

Green: the same test files at the commit pass (the run's JUnit report joins the
done-checks' reports as proof that the new tests ran; see ``donechecks.new_test_findings``).

A test is red wherever it runs: one written in a base class (or a mixin) is judged by the
results of every subclass that runs it (``TestReport.runs_as``), and a parametrized test by
all of its rows.

Outcomes at the base that are not red are *warnings*, not blocking: when the new test
imports a module the task creates, red cannot be shown at all ("the module under test does
not exist at base"), and a refactoring task may honestly add tests that already pass. The
auditor sees these warnings and judges whether the tests prove the change.

The runner is the plan's own pytest command (the part of a pytest done-check up to
``pytest``, e.g. ``.venv/bin/pytest`` or ``uv run pytest``); without one, red-green is not
run and a warning says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loop_orchestrator.verify import junit
from loop_orchestrator.verify.checkout import check_env, clean_checkout
from loop_orchestrator.verify.donechecks import pinned, pytest_index, run_one, with_junit
from loop_orchestrator.verify.models import CheckRun, Finding, warning
from loop_orchestrator.verify.testquality import ConditionalSkip, TestRef

_NO_MODULE = re.compile(r"No module named '([\w.]+)'")
_NO_NAME = re.compile(r"cannot import name '(\w+)' from '([\w.]+)'")


@dataclass
class RedGreen:
    runs: list[CheckRun] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


def pytest_prefix(argvs: Sequence[Sequence[str]]) -> list[str] | None:
    """The pytest runner of the first pytest done-check (``argv`` up to ``pytest``)."""
    for argv in argvs:
        i = pytest_index(argv)
        if i is not None:
            return list(argv[: i + 1])
    return None


def run_green(
    prefix: Sequence[str],
    modules: Sequence[str],
    tree: Path,
    evidence: Path,
    *,
    timeout: float,
    memory: int | None = None,
) -> CheckRun:
    junit_path = evidence / "green.junit.xml"
    argv = with_junit(pinned([*prefix, *modules], tree), junit_path)
    return run_one(
        "green",
        argv,
        tree,
        evidence,
        env=check_env(tree),
        timeout=timeout,
        criterion="the task's new and changed tests pass at the commit",
        junit_path=junit_path,
        memory=memory,
    )


def run_red(
    repo: Path,
    base: str,
    prefix: Sequence[str],
    modules: Sequence[str],
    test_files: Mapping[str, str],
    evidence: Path,
    *,
    timeout: float,
    memory: int | None = None,
) -> CheckRun:
    """The test files of the commit, alone on the base tree."""
    junit_path = evidence / "red.junit.xml"
    with clean_checkout(repo, base) as tree:
        for rel, text in test_files.items():
            target = tree / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        argv = with_junit(
            pinned([*prefix, "--continue-on-collection-errors", *modules], tree), junit_path
        )
        return run_one(
            "red",
            argv,
            tree,
            evidence,
            env=check_env(tree),
            timeout=timeout,
            criterion="the task's new and changed tests fail at the base",
            cwd_kind="base",
            junit_path=junit_path,
            memory=memory,
        )


RunsAs = Mapping[tuple[str, str], Sequence[TestRef]]


def _also(ref: TestRef, runs_as: RunsAs) -> Sequence[TestRef]:
    return runs_as.get((ref.path, ref.qualname), ())


def judge_red(
    run: CheckRun,
    refs: Sequence[TestRef],
    module_created: Callable[[str], bool],
    runs_as: RunsAs | None = None,
) -> list[Finding]:
    """Warnings when the base run does not show the tests failing on an assertion."""
    runs_as = runs_as or {}
    if run.error or run.timed_out:
        why = run.error or "it timed out"
        return [
            warning(
                f"red could not be shown: the test run at the base did not complete ({why}).",
                "redgreen.not-run",
            )
        ]
    cases = junit.parse(Path(run.junit_path)) if run.junit_path else []
    per_ref = {ref: junit.results_for(cases, ref, _also(ref, runs_as)) for ref in refs}
    if any(c.is_assertion_failure for hits in per_ref.values() for c in hits):
        return []
    if refs and all(hits and all(c.outcome == "passed" for c in hits) for hits in per_ref.values()):
        names = ", ".join(r.qualname for r in refs[:5])
        return [
            warning(
                f"the new/changed tests ({names}) already pass at the base, without the task's "
                "change: they do not show that the change is needed or works.",
                "redgreen.not-red",
                refs[0].path,
                fix="Add a test that fails without your change (and passes with it).",
            )
        ]
    problems = [
        c
        for c in cases
        if c.outcome == "error" or (c.outcome == "failed" and not c.is_assertion_failure)
    ]
    text = "\n".join(f"{c.message}\n{c.text}" for c in problems)
    m = _NO_NAME.search(text)
    if m and module_created(f"{m.group(2)}.{m.group(1)}"):
        return [
            warning(
                f"red could not be shown (the module under test does not exist at base: "
                f"{m.group(2)}.{m.group(1)}).",
                "redgreen.unprovable",
                refs[0].path if refs else None,
            )
        ]
    if m:
        return [
            warning(
                f"red could not be shown: {m.group(1)} does not exist in {m.group(2)} at the "
                "base, so the tests stop at their import instead of failing on an assertion.",
                "redgreen.unprovable",
                refs[0].path if refs else None,
            )
        ]
    m = _NO_MODULE.search(text)
    if m:
        module = m.group(1)
        what = (
            "the module under test does not exist at base"
            if module_created(module)
            else f"module {module} cannot be imported at the base"
        )
        return [
            warning(
                f"red could not be shown ({what}: {module}).",
                "redgreen.unprovable",
                refs[0].path if refs else None,
            )
        ]
    first = problems[0] if problems else None
    detail = (
        f"{first.exception_type or first.outcome}: {first.message[:160]}"
        if first
        else "the tests were not in the report"
    )
    return [
        warning(
            f"red could not be shown: at the base the tests stop with {detail}, not on a "
            "failing assertion.",
            "redgreen.unprovable",
            refs[0].path if refs else None,
        )
    ]


def all_passed(
    refs: Sequence[TestRef], runs: Sequence[CheckRun], runs_as: RunsAs | None = None
) -> bool:
    """Whether every test in ``refs`` passed (and none skipped) in the runs' JUnit reports."""
    cases = [c for r in runs if r.junit_path for c in junit.parse(Path(r.junit_path))]
    for ref in refs:
        hits = junit.results_for(cases, ref, _also(ref, runs_as or {}))
        if not hits or any(c.outcome != "passed" for c in hits):
            return False
    return True


def red_green(
    repo: Path,
    base: str,
    commit_tree: Path,
    *,
    prefix: Sequence[str] | None,
    touched: Sequence[TestRef],
    test_files: Mapping[str, str],
    evidence: Path,
    timeout: float,
    module_created: Callable[[str], bool],
    done_runs: Sequence[CheckRun] = (),
    runs_as: RunsAs | None = None,
    memory: int | None = None,
) -> RedGreen:
    """Run green at the commit and red at the base for the task's Python tests.

    ``touched`` may hold the tests of mixins too: with ``runs_as`` they are judged by the
    subclasses that run them. Green is skipped when the done-checks' reports already show
    every one of these tests passing (the same proof, one pytest run less).
    """
    runs_as = runs_as or {}
    refs = [t for t in touched if t.language == "python"]
    result = RedGreen()
    if not refs:
        return result
    if prefix is None:
        result.findings.append(
            warning(
                "red-green not checked: no done-check runs pytest, so lo-orch does not know how "
                "to run this project's tests.",
                "redgreen.not-run",
                fix="(For the plan's author) add a pytest done-check to the task.",
            )
        )
        return result
    modules = sorted({r.path for r in refs} | {a.path for r in refs for a in _also(r, runs_as)})
    if not all_passed(refs, done_runs, runs_as):
        result.runs.append(
            run_green(prefix, modules, commit_tree, evidence, timeout=timeout, memory=memory)
        )
    red = run_red(repo, base, prefix, modules, test_files, evidence, timeout=timeout, memory=memory)
    result.runs.append(red)
    result.findings += judge_red(red, refs, module_created, runs_as)
    return result


def judge_skips(
    findings: Sequence[Finding],
    skips: Sequence[ConditionalSkip],
    runs: Sequence[CheckRun],
    runs_as: RunsAs | None = None,
) -> list[Finding]:
    """A conditional skip the checks' reports show did not fire is not a skip.

    ``@skipIf(sys.version_info[0] < 3, ...)`` on the interpreter that runs the checks: each
    test it governs ran there (passed or failed, in a report of ``runs``, the runs at the
    commit), so its ``tests.skip`` finding becomes a warning. A skip that fired (the
    report says skipped), a test no report shows, and a skip with a constant condition
    (never in ``skips``) keep blocking.
    """
    cases = [c for r in runs if r.junit_path for c in junit.parse(Path(r.junit_path))]
    ran: dict[tuple[str, int], str] = {}
    for skip in skips:
        outcomes = [
            [c.outcome for c in junit.results_for(cases, t, _also(t, runs_as or {}))]
            for t in skip.tests
        ]
        if skip.tests and all(o and "skipped" not in o for o in outcomes):
            names = ", ".join(t.qualname for t in skip.tests[:3])
            ran[(skip.path, skip.line)] = names
    out: list[Finding] = []
    for f in findings:
        governed = ran.get((f.path or "", f.line or 0))
        if not (f.check == "tests.skip" and f.blocking and governed):
            out.append(f)
            continue
        out.append(
            warning(
                f"{f.message.split(':')[0]} under a condition that does not hold where the "
                f"checks run: {governed} ran there (the checks' report shows it passed or "
                "failed, not skipped). Elsewhere it may be skipped.",
                "tests.skip",
                f.path,
                f.line,
                fix="Make sure the condition names only environments the task does not target.",
            )
        )
    return out
