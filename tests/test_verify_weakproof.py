"""When a weak test blocks (verify.weakproof), pure: the parent's failure read by its kind,
the surviving value-changing mutants, and the finding's message. The runs behind them are
in test_verify_mutants.py (real repositories, real pytest)."""

from __future__ import annotations

import pytest

from loop_orchestrator.verify import disputes
from loop_orchestrator.verify.junit import Case, Outcome, failed_by
from loop_orchestrator.verify.models import Finding, Severity, warning
from loop_orchestrator.verify.mutants import Mutant, Result
from loop_orchestrator.verify.testquality import FileChange, TestRef, WeakTest, check_tests
from loop_orchestrator.verify.weakproof import (
    WEAK_ASSERTIONS,
    WeakProof,
    added_names,
    escalate,
    not_red,
    parent_result,
)

REF = TestRef("tests/test_m.py", "test_new", "python", True)
OTHER = TestRef("tests/test_o.py", "test_old", "python", False)
ADDED = frozenset({"newf", "extra", "scale"})


def _case(
    outcome: Outcome, message: str = "", text: str = "", name: str = "test_new", cls: str = ""
) -> Case:
    return Case(cls if cls else "tests.test_m", name, outcome, message, text)


@pytest.mark.parametrize(
    ("outcome", "message", "kind"),
    [
        ("passed", "", "passed"),
        ("skipped", "skipped", "skipped"),
        ("failed", "assert 3 == 4", "check"),
        ("failed", "Failed: DID NOT RAISE <class 'Exception'>", "check"),
        # only that a name the change adds is not there yet
        ("failed", "AttributeError: module 'm' has no attribute 'newf'", "missing"),
        ("failed", "AttributeError: 'Bits' object has no attribute 'newf'", "missing"),
        ("failed", "NameError: name 'newf' is not defined", "missing"),
        ("failed", "TypeError: f() got an unexpected keyword argument 'extra'", "missing"),
        ("failed", "TypeError: scale() takes 1 positional argument but 2 were given", "missing"),
        ("error", "ImportError: cannot import name 'newf' from 'm'", "missing"),
        ("failed", "ModuleNotFoundError: No module named 'm.new'", "missing"),
        # the parent's own code raised: a crash the change fixes is red
        ("failed", "AttributeError: 'NoneType' object has no attribute 'strip'", "raised"),
        ("failed", "TypeError: f() got an unexpected keyword argument 'other'", "raised"),
        ("failed", "ValueError: invalid literal for int()", "raised"),
        ("failed", "ZeroDivisionError: division by zero", "raised"),
    ],
)
def test_the_parents_failure_is_read_by_its_kind(outcome: Outcome, message: str, kind: str) -> None:
    assert parent_result(_case(outcome, message), ADDED).kind == kind


def test_not_red_at_the_parent_for_each_test_and_each_of_its_rows() -> None:
    missing = _case("failed", "AttributeError: module 'm' has no attribute 'newf'")
    why = not_red(REF, [missing], ADDED)
    assert why is not None and "has no attribute 'newf'" in why and "name is new" in why
    passes = not_red(REF, [_case("passed")], ADDED)
    assert passes is not None and "passes at the parent" in passes
    # a collection error of its module is the test's own result
    collected = Case("", "tests.test_m", "error", "collection failure",
                     "E   ImportError: cannot import name 'newf' from 'm'")  # fmt: skip
    collection = not_red(REF, [collected], ADDED)
    assert collection is not None and "(ImportError: cannot import name 'newf'" in collection
    # red: one row failing on its check, or the parent's code raising, is enough
    rows = [
        _case("passed", name="test_new[a]"),
        _case("failed", "assert 1 == 2", name="test_new[b]"),
    ]
    assert not_red(REF, rows, ADDED) is None
    assert (
        not_red(REF, [missing, _case("failed", "KeyError: 'x'", name="test_new[1]")], ADDED) is None
    )
    # nothing known: skipped, or not in the report
    assert not_red(REF, [_case("skipped", "skipped")], ADDED) is None
    assert not_red(REF, [_case("passed", name="test_old")], ADDED) is None
    # a test of a base class, judged where its subclass runs it
    sub = TestRef("tests/test_m.py", "TestSub::test_new", "python", True)
    inherited = _case("failed", "NameError: name 'newf' is not defined", cls="tests.test_m.TestSub")
    assert not_red(REF, [inherited], ADDED, (sub,)) is not None


def _weak(ref: TestRef = REF, line: int = 5) -> tuple[Finding, WeakTest]:
    source = f"from m import newf\n\n\ndef {ref.name}():\n    assert newf(2) is not None\n"
    found = check_tests([FileChange(ref.path, "A", None, source, set(range(1, 6)))])
    (finding,) = [f for f in found.findings if f.check == WEAK_ASSERTIONS]
    assert finding.line == line and found.weak[0].line == line
    return finding, found.weak[0]


def _survivor(kind: str = "return", outcome: str = "survived") -> Result:
    before, after = ("return total", "return <another value>") if kind == "return" else ("<", "<=")
    return Result(Mutant("m.py", 7, 7, kind, before, after, ""), outcome)  # type: ignore[arg-type]


def test_a_weak_test_that_fails_at_the_parent_only_for_a_missing_name_blocks() -> None:
    finding, test = _weak()
    parent = [_case("failed", "AttributeError: module 'm' has no attribute 'newf'")]
    (out,) = escalate([finding], WeakProof([test], parent, added=ADDED))
    assert out.severity is Severity.BLOCKING and out.check == WEAK_ASSERTIONS
    # the review names the weak check, what to compare instead, and the parent's error
    assert "`newf(2) is not None`: compare it with the expected value" in out.message
    assert "has no attribute 'newf'" in out.message
    assert disputes.disputable([out]) == [WEAK_ASSERTIONS]  # a heuristic, disputable
    # the same test red on its check at the parent, with no mutant surviving: a warning
    red = [_case("failed", "assert None is not None")]
    assert escalate([finding], WeakProof([test], red, added=ADDED)) == [finding]
    # a crash the change fixes (the parent's code raised), every mutant killed: a warning
    crash = [_case("failed", "IndexError: list index out of range")]
    killed = [_survivor("return", "killed"), _survivor("compare", "timeout")]
    assert escalate([finding], WeakProof([test], crash, mutants=killed, added=ADDED)) == [finding]


def test_a_surviving_mutant_that_changes_a_value_makes_a_weak_test_block() -> None:
    finding, test = _weak()
    red = [_case("failed", "assert None is not None")]  # red at the parent on its check
    (out,) = escalate([finding], WeakProof([test], red, mutants=[_survivor("compare")]))
    assert out.blocking
    assert "`m.py:7`: `<` → `<=`" in out.message and "wrong result" in out.message
    # a removed statement is more often equivalent; killed and unexecuted mutants prove
    # nothing against the test
    quiet = [_survivor("remove"), _survivor("return", "killed"), _survivor("const", "not-executed")]
    assert escalate([finding], WeakProof([test], red, mutants=quiet)) == [finding]


def test_only_the_test_the_evidence_is_about_blocks() -> None:
    weak_new, new = _weak(REF)
    weak_old, old = _weak(OTHER)
    parent = [
        _case("failed", "NameError: name 'newf' is not defined"),
        _case("failed", "assert None is not None", name="test_old", cls="tests.test_o"),
    ]
    other = warning("no error case", "tests.no-error-case")
    out = escalate([weak_new, weak_old, other], WeakProof([new, old], parent, added=ADDED))
    assert [f.severity for f in out] == [Severity.BLOCKING, Severity.WARNING, Severity.WARNING]
    assert out[1:] == [weak_old, other]


def test_js_weak_tests_are_not_judged_by_python_runs() -> None:
    finding, test = _weak()
    js = WeakTest(TestRef(REF.path, REF.qualname, "js", True), test.line, test.checks)
    proof = WeakProof([js], [_case("passed")], mutants=[_survivor()], added=ADDED)
    assert escalate([finding], proof) == [finding]


def test_the_names_a_change_adds() -> None:
    old = "def f(x):\n    return x\n\ndef scale(x):\n    return x\n\ndef gone():\n    pass\n"
    new = (
        "from .impl import newf as newf\n\n"
        "def f(x, extra=1):\n    return x\n\n"
        "def scale(x, by):\n    return x * by\n\n"
        "class Bits:\n    def __init__(self):\n        self.width = 3\n"
    )
    names = added_names(
        [
            FileChange("m.py", "M", old, new, {1}),
            FileChange("tests/test_m.py", "A", None, "def test_helper_in_tests():\n    pass\n"),
        ]
    )
    # new names (the class brings its method and parameter too), and the functions whose
    # parameters change; not what the parent has alone (gone) nor the tests' names
    assert names == {"newf", "f", "extra", "scale", "by", "Bits", "__init__", "self", "width"}


def _killed(failed_by: str, kind: str = "compare", outcome: str = "killed") -> Result:
    return Result(Mutant("m.py", 7, 7, kind, "==", "!=", ""), outcome, 0.1, failed_by)  # type: ignore[arg-type]


def test_how_a_run_failed_is_read_from_its_report() -> None:
    assert failed_by([_case("passed"), _case("failed", "assert 1 == 2")]) == "check"
    assert failed_by([_case("failed", "Failed: DID NOT RAISE <class 'Exception'>")]) == "check"
    assert failed_by([_case("error", "AssertionError: bad fixture")]) == "check"
    assert failed_by([_case("failed", "ValueError: bad escape")]) == "raised"
    assert failed_by([_case("error", "collection failure", "E   SyntaxError: bad")]) == "raised"
    # a check beside a crash: a check failed
    assert failed_by([_case("failed", "KeyError: 'x'"), _case("failed", "assert 0")]) == "check"
    assert failed_by([_case("passed")]) == "" and failed_by([]) == ""


def test_a_weak_test_whose_checks_never_fail_only_the_code_raising_blocks() -> None:
    finding, test = _weak()
    # at the parent the code raises (red, but not by a check), and every mutant the tests
    # kill stops them with an exception or a hang: the checks never told right from wrong
    crash = [_case("failed", "ValueError: invalid escape '\\x'")]
    killed = [_killed("raised"), _killed("raised", "const"), _killed("", "return", "timeout")]
    proof = WeakProof([test], crash, mutants=killed, added=ADDED, tests=[REF])
    (out,) = escalate([finding], proof)
    assert out.blocking and "no check of the task's tests was seen failing" in out.message
    assert "(ValueError: invalid escape" in out.message and "crashes" in out.message
    assert disputes.disputable([out]) == [WEAK_ASSERTIONS]


@pytest.mark.parametrize(
    "change",
    [
        # one mutant killed by a failed check: the weak checks do tell a wrong result
        {"mutants": [_killed("raised"), _killed("check")]},
        # how one was killed is not known (no report): not evidence
        {"mutants": [_killed("raised"), _killed("")]},
        # no mutant killed at all (none ran in the budget): nothing shown
        {"mutants": [_killed("", outcome="not-run")]},
        # a strong test of the task may be what the mutants stop on
        {"tests": [REF, OTHER]},
        # the task's tests are not known
        {"tests": []},
        # at the parent a row of the test fails on its check
        {
            "parent": [
                _case("failed", "ValueError: x"),
                _case("failed", "assert 1", name="test_new[b]"),
            ]
        },
        # at the parent another test of the task fails on its check
        {
            "parent": [
                _case("failed", "ValueError: x"),
                _case("failed", "assert 1 == 2", name="test_old", cls="tests.test_o"),
            ],
            "weak": "both",
        },
        # the red run did not complete
        {"parent": None},
    ],
)
def test_a_weak_test_that_a_check_or_unknown_evidence_may_back_stays_a_warning(
    change: dict[str, object],
) -> None:
    finding, test = _weak()
    _, old = _weak(OTHER)
    weak = [test, old] if change.get("weak") == "both" else [test]
    proof = WeakProof(
        weak,
        change.get("parent", [_case("failed", "ValueError: invalid escape")]),  # type: ignore[arg-type]
        mutants=change.get("mutants", [_killed("raised")]),  # type: ignore[arg-type]
        added=ADDED,
        tests=change.get("tests", [REF, OTHER] if len(weak) == 2 else [REF]),  # type: ignore[arg-type]
    )
    assert escalate([finding], proof) == [finding]


def _escalated(body: str, unittest: bool = False) -> list[Finding]:
    """The weak findings of one new test with ``body``, escalated on no run at all."""
    if unittest:
        source = (
            "import unittest\nfrom m import parse, rows\n\n\nclass TestM(unittest.TestCase):\n"
            "    def test_new(self):\n" + "".join(f"        {ln}\n" for ln in body.splitlines())
        )
    else:
        source = "from m import parse, rows\n\n\ndef test_new(tmp_path):\n" + "".join(
            f"    {ln}\n" for ln in body.splitlines()
        )
    found = check_tests([FileChange(REF.path, "A", None, source, set(range(1, 40)))])
    weak = [f for f in found.findings if f.check == WEAK_ASSERTIONS]
    assert len(weak) == 1, found.findings
    return [f for f in escalate(weak, WeakProof(found.weak)) if f.check == WEAK_ASSERTIONS]


@pytest.mark.parametrize(
    ("body", "unittest"),
    [
        ("assert list(rows(tmp_path)) is not None", False),  # the weakened boltons test
        # forms the rule was not written on
        ("tail = list(rows(tmp_path))\nassert tail is not None and isinstance(tail, list)", False),
        ("assert isinstance(len(parse('a')), int)", False),
        ("assert repr(parse('a')) != None", False),
        ("assert len(rows(tmp_path)) >= 0", False),
        ("self.assertIsInstance(sorted(rows(1)), list)", True),
        ("self.assertIsNotNone(len(rows(1)))\nself.assertGreaterEqual(len(rows(2)), 0)", True),
        ("self.assertIsInstance(str(parse('a')), (str, bytes))", True),
    ],
)
def test_a_weak_test_none_of_whose_checks_can_fail_blocks_on_its_source(
    body: str, unittest: bool
) -> None:
    (out,) = _escalated(body, unittest)
    assert out.blocking and "none of its checks can fail" in out.message
    assert "without raising" in out.message
    assert disputes.disputable([out]) == [WEAK_ASSERTIONS]


@pytest.mark.parametrize(
    "body",
    [
        # the project's own result: it may be None, or of another type
        "assert parse('a') is not None",
        "assert isinstance(parse('a'), int)",
        # truthiness, a length bound a length may miss: an empty result fails them
        "tail = list(rows(tmp_path))\nassert tail",
        "assert len(rows(tmp_path)) > 0",
        # one check that can fail beside ones that cannot
        "tail = list(rows(tmp_path))\nassert tail is not None\nassert tail",
        # a name bound to something else too, a loop variable, a parameter
        "tail = list(rows(1))\ntail = parse('a')\nassert tail is not None",
        "for tail in list(rows(1)):\n    assert tail is not None",
        "assert tmp_path is not None",
        # a type the built-in call never returns
        "assert isinstance(list(rows(1)), tuple)",
    ],
)
def test_a_weak_test_with_a_check_that_can_fail_stays_a_warning(body: str) -> None:
    (out,) = _escalated(body)
    assert not out.blocking, out.message
