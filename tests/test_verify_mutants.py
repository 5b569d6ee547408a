"""The mutation check: mutants of the changed lines (pure), their judgement, the escalation
of weak assertions, and runs against real tests in clean checkouts of real repositories."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from helpers.git import commit, git
from helpers.verify import PY, off

from loop_orchestrator.plan.model import DoneCheck, Task
from loop_orchestrator.runstate.state import RunDir
from loop_orchestrator.verify import disputes, verify_task, write_review
from loop_orchestrator.verify.checkout import clean_checkout
from loop_orchestrator.verify.models import CheckId, Finding, Severity, blocking, warning
from loop_orchestrator.verify.mutants import (
    FEW_KILLED,
    NOT_RUN,
    SURVIVE,
    UNEXECUTED,
    Mutant,
    Result,
    executed,
    judge,
    mutants_of,
    select,
)
from loop_orchestrator.verify.mutation import MutationRun, mutation_check
from loop_orchestrator.verify.verdict import deterministic_findings
from loop_orchestrator.verify.weakproof import WEAK_ASSERTIONS, escalate

# -- mutants (pure) ----------------------------------------------------------------------

SOURCE = '''"""Module docstring: never mutated."""


def f(a: int, b: int = 3) -> int:
    """Docstring."""
    if a < b and not a:
        return a + b
    while a >= 0:
        a -= 1
    log("done")  # a comment that must stay
    return a * 2


def g(xs):
    return [x for x in xs if x == "k"] or True
'''


def _described(ms: list[Mutant]) -> set[tuple[int, str, str, str]]:
    return {(m.line, m.kind, m.before, m.after) for m in ms}


def test_every_operator_on_the_changed_lines_only() -> None:
    ms = mutants_of("pkg/mod.py", SOURCE, range(1, 30))
    got = _described(ms)
    assert {
        (6, "compare", "<", "<="),
        (6, "bool", "and", "or"),
        (6, "negate", "a < b and not a", "not (a < b and not a)"),
        (6, "negate", "not a", "a"),
        (7, "arith", "+", "-"),
        (8, "compare", ">=", ">"),
        (8, "const", "0", "1"),
        (9, "arith", "-=", "+="),
        (9, "remove", "a -= 1", "pass"),
        (10, "remove", 'log("done")', "pass"),
        (10, "const", '"done"', "''"),
        (11, "arith", "*", "/"),
        (11, "const", "2", "3"),
        (15, "compare", "==", "!="),
        (15, "negate", 'x == "k"', 'not (x == "k")'),
        (15, "bool", "or", "and"),
        (15, "const", "True", "False"),
    } <= got
    assert any(m.kind == "return" and m.line == 7 for m in ms)
    # docstrings, annotations and default values' annotations are never mutated
    assert not any(m.line in (1, 5) for m in ms)
    assert not any(m.line == 4 and m.kind == "const" and m.before == "int" for m in ms)
    for m in ms:
        ast.parse(m.source)  # every mutant is valid Python
        assert len(m.source.splitlines()) == len(SOURCE.splitlines())  # lines stay in place
        assert "# a comment that must stay" in m.source
        # exactly one line differs, the mutant's
        diff = [
            n
            for n, (a, b) in enumerate(
                zip(SOURCE.splitlines(), m.source.splitlines(), strict=True), 1
            )
            if a != b
        ]
        assert diff == [m.line], m.describe()
    # only lines the task changed
    only = mutants_of("pkg/mod.py", SOURCE, [9])
    assert {m.line for m in only} == {9}
    assert _described(only) == {
        (9, "arith", "-=", "+="),
        (9, "remove", "a -= 1", "pass"),
        (9, "const", "1", "2"),
    }
    assert mutants_of("pkg/mod.py", SOURCE, []) == []
    assert mutants_of("pkg/mod.py", "def broken(:\n", [1]) == []


def test_a_multi_line_expression_keeps_later_lines_in_place() -> None:
    source = "def h(a, b):\n    if (a <\n            b):  # c\n        return 1\n    return 2\n"
    ms = mutants_of("m.py", source, [2])
    assert ("compare", "<", "<=") in {(m.kind, m.before, m.after) for m in ms}
    for m in ms:
        lines = m.source.splitlines()
        assert len(lines) == 5 and lines[3:] == ["        return 1", "    return 2"]


def test_return_becomes_another_value_of_its_type() -> None:
    # `return None` would be killed by `assert f() is not None`; another value of the same
    # type survives such a test and fails every test of the value
    source = (
        "def n():\n    return 41\n\n"
        "def s():\n    return 'abc'\n\n"
        "def xs():\n    return [1, 2]\n\n"
        "def obj():\n    return object()\n\n"
        "def zero():\n    return 1 - 1\n\n"
        "def empty():\n    return str()\n"
    )
    names = {2: "n", 5: "s", 8: "xs", 11: "obj", 14: "zero", 17: "empty"}
    ms = [m for m in mutants_of("m.py", source, list(names)) if m.kind == "return"]
    assert len(ms) == 6
    results = []
    for m in ms:
        space: dict[str, object] = {}
        exec(compile(m.source, "m.py", "exec"), space)  # the mutant's own code, in memory
        results.append(space[names[m.line]]())  # type: ignore[operator]
    assert results == [0, "", [], None, 1, "x"]


def _m(path: str, line: int, n: int) -> Mutant:
    return Mutant(path, line, line, "const", str(n), str(n + 1), f"# {path} {line} {n}\n")


def test_selection_is_bounded_spread_over_lines_and_deterministic() -> None:
    candidates = [_m(p, line, n) for p in ("a.py", "b.py") for line in (3, 1) for n in range(5)]
    chosen = select(candidates, 6)
    assert len(chosen) == 6
    # first one mutant of every line (file, line order), then the second of each
    assert [(m.path, m.line, m.before) for m in chosen] == [
        ("a.py", 1, "0"),
        ("a.py", 3, "0"),
        ("b.py", 1, "0"),
        ("b.py", 3, "0"),
        ("a.py", 1, "1"),
        ("a.py", 3, "1"),
    ]
    assert select(list(reversed(candidates)), 6) != []  # any order in, a bounded choice out
    assert select(candidates, 6) == chosen
    assert select(candidates, 100) == sorted(
        candidates, key=lambda m: (int(m.before), m.path, m.line)
    )
    assert select(candidates, 0) == []


def test_executed_means_a_line_of_the_node_ran() -> None:
    m = Mutant("a.py", 4, 6, "compare", "<", "<=", "")
    assert executed(m, {("a.py", 5)})
    assert not executed(m, {("a.py", 3), ("a.py", 7), ("b.py", 5)})


def _r(outcome: str, line: int = 1) -> Result:
    return Result(Mutant("app/x.py", line, line, "compare", "<", "<=", ""), outcome)  # type: ignore[arg-type]


def test_judge_blocks_when_no_executed_mutant_is_killed() -> None:
    found = judge([_r("survived", 3), _r("survived", 7), _r("not-executed", 9)], seconds=60)
    assert [(f.check, f.severity) for f in found] == [(SURVIVE, Severity.BLOCKING)]
    assert found[0].location == "app/x.py:3"
    assert "`app/x.py:3`: `<` → `<=`" in found[0].message
    assert "`app/x.py:7`" in found[0].message and "app/x.py:9" not in found[0].message
    assert "boundary" in found[0].message  # what a test should check to kill it
    # the finding is a heuristic: the session may dispute it (an equivalent mutant)
    assert disputes.disputable(found) == [SURVIVE]


def test_judge_counts_a_hang_as_killed_and_warns_on_few_kills() -> None:
    assert judge([_r("timeout"), _r("survived")], seconds=60) == []
    few = judge([_r("killed"), *[_r("survived", n) for n in range(2, 6)]], seconds=60)
    assert [(f.check, f.severity) for f in few] == [(FEW_KILLED, Severity.WARNING)]
    assert "kill only 1 of the 5" in few[0].message
    # a third or more killed: no finding; fewer than three that ran: no "few" warning
    assert judge([_r("killed"), _r("survived"), _r("survived")], seconds=60) == []
    assert judge([_r("killed"), _r("survived")], seconds=60) == []
    # mutants of lines no test runs do not count either way
    assert judge([_r("killed"), _r("not-executed"), _r("not-executed")], seconds=60) == []
    # ... but tests that run none of the changed lines are worth a warning
    unexecuted = judge([_r("not-executed", 4), _r("not-executed", 2)], seconds=60)
    assert [(f.check, f.severity, f.location) for f in unexecuted] == [
        (UNEXECUTED, Severity.WARNING, "app/x.py:2")
    ]
    assert "(app/x.py:2, app/x.py:4)" in unexecuted[0].message
    not_run = judge([_r("not-run"), _r("not-executed")], seconds=60)
    assert [(f.check, f.severity) for f in not_run] == [(NOT_RUN, Severity.WARNING)]
    # not-run mutants are never counted as survivors
    assert judge([_r("killed"), _r("not-run"), _r("not-run"), _r("not-run")], seconds=60) == []


# -- escalation of weak assertions (pure) ------------------------------------------------


def _weak() -> Finding:
    return warning("test_f only checks `is not None`.", WEAK_ASSERTIONS, "tests/test_f.py", 3)


def test_weak_assertions_alone_stay_a_warning() -> None:
    other = warning("no error case", "tests.no-error-case")
    assert escalate([_weak(), other]) == [_weak(), other]


@pytest.mark.parametrize(
    ("evidence", "reason"),
    [
        ("redgreen.not-red", "pass at the parent"),
        (SURVIVE, "mutants of the change survive"),
        (FEW_KILLED, "mutants of the change survive"),
    ],
)
def test_weak_assertions_block_with_evidence_that_the_tests_do_not_check_the_change(
    evidence: CheckId, reason: str
) -> None:
    other = warning("no error case", "tests.no-error-case")
    proof = (blocking if evidence == SURVIVE else warning)("...", evidence)
    out = escalate([_weak(), other, proof])
    assert out[1:] == [other, proof]  # nothing else changes
    weak = out[0]
    assert weak.blocking and weak.check == WEAK_ASSERTIONS and weak.location == "tests/test_f.py:3"
    assert weak.message.startswith("test_f only checks") and reason in weak.message
    assert disputes.disputable(out)[0] == WEAK_ASSERTIONS  # a heuristic, disputable


def test_escalation_needs_the_weak_finding_itself() -> None:
    found = [warning("...", "redgreen.not-red"), blocking("...", SURVIVE)]
    assert escalate(found) == found


# -- runs on real repositories -----------------------------------------------------------

CLAMP_BASE = "def clamp(x, lo, hi):\n    return x\n"
CLAMP = """def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x
"""
HONEST = """from app.clamp import clamp


def test_clamp():
    assert clamp(-1, 0, 10) == 0
    assert clamp(0, 0, 10) == 0
    assert clamp(11, 0, 10) == 10
    assert clamp(10, 0, 10) == 10
    assert clamp(5, 0, 10) == 5
"""
NOT_NONE = """from app.clamp import clamp


def test_clamp():
    assert clamp(5, 0, 10) is not None
"""
PYTEST = [sys.executable, "-m", "pytest"]


def _task(owns: list[str]) -> Task:
    return Task(
        id="clamp",
        title="Clamp",
        objective="Add clamp",
        owns=owns,
        done=[DoneCheck(criterion="tests pass", check=f"{PY} -m pytest -q tests")],
    )


#: the step's budget in these tests: what they check is not the budget, and on a loaded
#: 2-core machine one mutant's pytest run can take half a minute
BUDGET = 900.0


def _mutate(
    repo: Path, base: str, head: str, *, max_mutants: int = 25, seconds: float = BUDGET
) -> MutationRun:
    task = _task(["app/**", "tests/**"])
    _, report, files, _ = deterministic_findings(repo, task, base, head)
    with clean_checkout(repo, head) as tree:
        run = mutation_check(
            tree,
            files,
            prefix=PYTEST,
            touched=report.touched,
            evidence=repo.parent / "evidence",
            max_mutants=max_mutants,
            seconds=seconds,
        )
        assert git(tree, "status", "--porcelain") == ""  # the checkout is never mutated
    return run


@pytest.mark.slow
def test_honest_tests_kill_mutants_and_nothing_blocks(git_repo: Path) -> None:
    base = commit(git_repo, {"app/__init__.py": "", "app/clamp.py": CLAMP_BASE}, "base")
    head = commit(git_repo, {"app/clamp.py": CLAMP, "tests/test_clamp.py": HONEST})
    run = _mutate(git_repo, base, head, max_mutants=6)
    outcomes = [r.outcome for r in run.results]
    assert run.findings == [], [f.render() for f in run.findings]
    assert len([o for o in outcomes if o != "not-executed"]) == 6
    # `x < lo` -> `x <= lo` (and `>`) are equivalent for clamp: at x == lo both give lo
    assert outcomes.count("killed") >= 4, [(r.mutant.describe(), r.outcome) for r in run.results]
    # each killed on a failed check (`assert clamp(...) == ...`), as its report says
    assert {r.failed_by for r in run.results if r.outcome == "killed"} == {"check"}
    assert (git_repo.parent / "evidence" / "mutants.json").is_file()


@pytest.mark.slow
def test_a_test_that_asserts_nothing_meaningful_is_blocked_with_the_survivors(
    git_repo: Path,
) -> None:
    base = commit(git_repo, {"app/__init__.py": "", "app/clamp.py": CLAMP_BASE}, "base")
    head = commit(git_repo, {"app/clamp.py": CLAMP, "tests/test_clamp.py": NOT_NONE})
    task = _task(["app/**", "tests/**"])
    settings = off(mutants=6)
    settings.verify.mutants_seconds = BUDGET
    rundir = RunDir(git_repo)
    verdict = verify_task(git_repo, rundir, task, base, head, brief="b", settings=settings)
    assert not verdict.passed
    survive = [f for f in verdict.blocking if f.check == SURVIVE]
    assert len(survive) == 1, [f.render() for f in verdict.findings]
    finding = survive[0]
    assert "`app/clamp.py:2`: `<` → `<=`" in finding.message
    assert "`app/clamp.py:4`: `>` → `>=`" in finding.message
    assert "kill none of the 4 mutant(s)" in finding.message
    assert "app/clamp.py:3" not in finding.message  # `return lo` never ran: not counted
    assert "app/clamp.py:6" not in finding.message  # `return x` is not a changed line
    assert str(Path(verdict.evidence_dir or "") / "mutants.json") in verdict.evidence
    # deliverable for the session: which mutant survived and what a test should check
    review = write_review(rundir, task, 1, verdict).read_text(encoding="utf-8")
    assert "tests.mutants-survive" in review
    assert "`app/clamp.py:2`: `<` → `<=`; a test should check a case at the boundary" in review
    assert "tests.mutants-survive" in review.split("Disputable here:")[1]


#: a session's test that switches the line tracer off, so that every mutant would look
#: "not executed" (a warning) instead of surviving (blocking): at import, or by putting a
#: tracer of its own in place inside the test
TRACER_OFF = {
    "at-import": "import sys\n\nsys.settrace(None)\n" + NOT_NONE,
    "own-tracer": NOT_NONE.replace(
        "def test_clamp():\n",
        "def test_clamp():\n    import sys\n\n    sys.settrace(lambda *a: None)\n",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("how", sorted(TRACER_OFF))
def test_tests_that_switch_the_tracer_off_do_not_hide_surviving_mutants(
    git_repo: Path, how: str
) -> None:
    base = commit(git_repo, {"app/__init__.py": "", "app/clamp.py": CLAMP_BASE}, "base")
    head = commit(git_repo, {"app/clamp.py": CLAMP, "tests/test_clamp.py": TRACER_OFF[how]})
    run = _mutate(git_repo, base, head, max_mutants=4)
    outcomes = [r.outcome for r in run.results]
    assert "not-executed" not in outcomes, outcomes  # the tracer's word was not taken
    assert [f.check for f in run.findings if f.blocking] == [SURVIVE], [
        f.render() for f in run.findings
    ]


HANG_BASE = """def countdown(n):
    steps = 0
    while n > 0:
        n -= 2
        steps += 1
    return steps
"""
HANG_TESTS = """from app.count import countdown


def test_countdown():
    assert countdown(3) == 3
    assert countdown(0) == 0
"""


@pytest.mark.slow
def test_a_mutant_that_hangs_counts_as_killed_within_its_timeout(git_repo: Path) -> None:
    base = commit(git_repo, {"app/__init__.py": "", "app/count.py": HANG_BASE}, "base")
    head = commit(
        git_repo,
        {"app/count.py": HANG_BASE.replace("n -= 2", "n -= 1"), "tests/test_count.py": HANG_TESTS},
    )
    run = _mutate(git_repo, base, head)
    by = {(r.mutant.kind, r.mutant.after): r for r in run.results}
    assert set(by) == {("arith", "+="), ("remove", "pass"), ("const", "2")}
    # `n += 1` and `pass` never end: past their timeout they count as killed
    assert by["arith", "+="].outcome == "timeout"
    assert by["remove", "pass"].outcome == "timeout"
    assert by["const", "2"].outcome == "killed" and by["const", "2"].failed_by == "check"
    assert by["arith", "+="].failed_by == ""  # a hang: no report says how
    assert run.findings == []
    assert run.seconds < BUDGET


@pytest.mark.slow
def test_the_bound_on_mutants_is_respected(git_repo: Path) -> None:
    base = commit(git_repo, {"app/__init__.py": "", "app/clamp.py": CLAMP_BASE}, "base")
    head = commit(git_repo, {"app/clamp.py": CLAMP, "tests/test_clamp.py": HONEST})
    task = _task(["app/**", "tests/**"])
    _, _, files, _ = deterministic_findings(git_repo, task, base, head)
    source = next(f for f in files if f.path == "app/clamp.py")
    candidates = mutants_of("app/clamp.py", source.new or "", source.added)
    assert len(candidates) > 3
    run = _mutate(git_repo, base, head, max_mutants=3)
    ran = [r.mutant for r in run.results if r.outcome != "not-executed"]
    assert ran == select(candidates, 3)  # at most three, the deterministic choice
    assert len({m.line for m in ran}) == 3  # spread over three lines


REFACTOR_BASE = """def total(xs):
    s = 0
    for x in xs:
        s = s + x
    return s
"""
REFACTOR_TESTS = """from app.total import total


def test_total():
    assert total([1, 2, 3]) == 6
    assert total([]) == 0
"""


@pytest.mark.slow
def test_an_honest_refactor_whose_tests_pass_at_the_parent_is_not_blocked(
    git_repo: Path,
) -> None:
    base = commit(git_repo, {"app/__init__.py": "", "app/total.py": REFACTOR_BASE}, "base")
    head = commit(
        git_repo,
        {
            "app/total.py": "def total(xs):\n    return sum(xs)\n",
            "tests/test_total.py": REFACTOR_TESTS,
        },
    )
    settings = off(mutants=None)
    settings.verify.mutants_seconds = BUDGET
    task = _task(["app/**", "tests/**"])
    verdict = verify_task(
        git_repo, RunDir(git_repo), task, base, head, brief="b", settings=settings
    )
    assert verdict.passed, [f.render() for f in verdict.blocking]
    assert "redgreen.not-red" in {f.check for f in verdict.warnings}
    assert not any(f.check.startswith("tests.mutants") for f in verdict.findings)


TYPES_ONLY = """from app.clamp import clamp


def test_clamp():
    assert type(clamp(-1, 0, 10)) is int
    assert isinstance(clamp(11, 0, 10), int)
"""
HELPER_TAUTOLOGY = """from app.clamp import clamp


def same(a, b):
    assert a == b


def test_clamp():
    for x in (-1, 5, 11):
        value = clamp(x, 0, 10)
        same(value, value)
"""


@pytest.mark.slow
@pytest.mark.parametrize("tests", [TYPES_ONLY, HELPER_TAUTOLOGY], ids=["types", "tautology"])
def test_gaming_the_check_was_not_written_for_is_caught(git_repo: Path, tests: str) -> None:
    base = commit(git_repo, {"app/__init__.py": "", "app/clamp.py": CLAMP_BASE}, "base")
    head = commit(git_repo, {"app/clamp.py": CLAMP, "tests/test_clamp.py": tests})
    run = _mutate(git_repo, base, head, max_mutants=5)
    assert [(f.check, f.severity) for f in run.findings] == [(SURVIVE, Severity.BLOCKING)]
    assert all(r.outcome in ("survived", "not-executed") for r in run.results)


# -- weak tests of a new function: blocking on their own evidence (verify.weakproof) ------

TOP_BASE = "def first(xs):\n    return xs[0]\n"
TOP = TOP_BASE + "\n\ndef top(xs, n):\n    return sorted(xs, reverse=True)[:n]\n"
#: a gamed form the rule was not written on: a truthiness check through a second name (the
#: `return []` mutant dies, `reverse=False` survives); the test module imports the new
#: function, so at the parent it stops at its import (a collection error)
WEAK_NEW = """from app.top import top


def test_top():
    out = top([3, 1, 2], 2)
    result = out
    assert result
"""


@pytest.mark.slow
def test_a_weak_test_of_a_new_function_blocks_with_the_parents_error_and_the_survivor(
    git_repo: Path,
) -> None:
    base = commit(git_repo, {"app/__init__.py": "", "app/top.py": TOP_BASE}, "base")
    head = commit(git_repo, {"app/top.py": TOP, "tests/test_top.py": WEAK_NEW})
    settings = off()
    settings.verify.mutants_seconds = BUDGET
    task = _task(["app/**", "tests/**"])
    rundir = RunDir(git_repo)
    verdict = verify_task(git_repo, rundir, task, base, head, brief="b", settings=settings)
    assert not verdict.passed
    (weak,) = [f for f in verdict.findings if f.check == WEAK_ASSERTIONS]
    assert weak.blocking, weak.render()
    assert "asserts `result`" in weak.message
    # at the parent the test stops at `from app.top import top`: no check of it ran
    assert "(ImportError: cannot import name 'top' from 'app.top')" in weak.message
    assert "name is new" in weak.message
    assert "`app/top.py:6`: `True` → `False`" in weak.message  # the surviving mutant
    # the old evidence alone would not have blocked: one of the two mutants was killed
    assert not any(f.check.startswith("tests.mutants") and f.blocking for f in verdict.findings)
    review = write_review(rundir, task, 1, verdict).read_text(encoding="utf-8")
    assert "tests.weak-assertions" in review.split("Disputable here:")[1]
