"""Red-green made exact, and the heuristics reading code as it runs.

Each false finding replayed on honest upstream commits, as a minimal re-typed pattern (not
the projects' code), with the gamed variant that must still be caught: a test red wherever
it is defined (a base class, a mixin, a parametrize row), parametrize rows and table rows
as tests added, an assertion made in a helper the test calls, a conditional skip that did
not fire where the checks run, and a deleted test of behaviour the same change removes,
disputed and judged on the diff.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest
from helpers.git import commit
from helpers.verify import PY, off

from loop_orchestrator import pyast
from loop_orchestrator.plan.model import DoneCheck, Task
from loop_orchestrator.runstate.state import RunDir
from loop_orchestrator.verify import disputes, verify_task
from loop_orchestrator.verify.models import Severity, Verdict
from loop_orchestrator.verify.testquality import FileChange, TestReport, check_tests
from loop_orchestrator.verify.verdict import deterministic_findings


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def task(*owns: str) -> Task:
    return Task(
        id="t",
        objective="the change",
        owns=["app/**", "tests/**", *owns],
        done=[DoneCheck(criterion="tests pass", check=f"{PY} -m pytest -q tests")],
    )


def verify(
    repo: Path, base: str, head: str, claims: Sequence[tuple[str, str]] = (), owns: str = ""
) -> Verdict:
    the_task = task(owns) if owns else task()
    return verify_task(
        repo, RunDir(repo), the_task, base, head, brief="b", settings=off(), claims=claims
    )


def checks(verdict: Verdict, prefix: str = "") -> list[tuple[str, str]]:
    return sorted(
        (f.check, f.severity.value) for f in verdict.findings if f.check.startswith(prefix)
    )


# a test is red wherever it is defined ---------------------------------------------------

PARSE_BASE = dedent("""
    def parse_py(text):
        return int(text)


    def parse_fast(text):
        if text.startswith("-"):
            return int(text[1:])
        return int(text)
""")
PARSE_FIXED = PARSE_BASE.replace("return int(text[1:])", "return -int(text[1:])")
#: the pure-Python parser was right already; the subclass runs the same tests on the fast one
SHARED_BASE = dedent("""
    import unittest

    from app.parse import parse_fast, parse_py


    class TestPyParse(unittest.TestCase):
        parse = staticmethod(parse_py)

        def test_digits(self):
            self.assertEqual(self.parse("12"), 12)


    class TestFastParse(TestPyParse):
        parse = staticmethod(parse_fast)
""")
NEGATIVE_TEST = (
    '        self.assertEqual(self.parse("12"), 12)\n\n'
    "    def test_negative(self):\n"
    '        self.assertEqual(self.parse("-3"), -3)\n'
)
#: the same test, but one that passes at the parent wherever it runs
ZERO_TEST = (
    '        self.assertEqual(self.parse("12"), 12)\n\n'
    "    def test_zero(self):\n"
    '        self.assertEqual(self.parse("0"), 0)\n'
)


def with_test(module: str, test: str) -> str:
    return module.replace('        self.assertEqual(self.parse("12"), 12)\n', test)


@pytest.mark.slow
def test_a_test_of_a_shared_base_class_that_fails_at_the_parent_in_a_subclass_is_red(
    git_repo: Path,
) -> None:
    base = commit(git_repo, {"app/parse.py": PARSE_BASE, "tests/test_parse.py": SHARED_BASE})
    head = commit(
        git_repo,
        {"app/parse.py": PARSE_FIXED, "tests/test_parse.py": with_test(SHARED_BASE, NEGATIVE_TEST)},
    )
    verdict = verify(git_repo, base, head)
    # at the parent TestPyParse::test_negative passes, TestFastParse::test_negative fails:
    # the report names the subclass, and that is where the test is red
    assert checks(verdict) == [], [f.render() for f in verdict.findings]
    red = next(r for r in verdict.checks if r.name == "red")
    assert red.exit_code == 1


@pytest.mark.slow
def test_a_shared_base_test_that_passes_at_the_parent_everywhere_is_not_red(
    git_repo: Path,
) -> None:
    base = commit(git_repo, {"app/parse.py": PARSE_BASE, "tests/test_parse.py": SHARED_BASE})
    head = commit(
        git_repo,
        {"app/parse.py": PARSE_FIXED, "tests/test_parse.py": with_test(SHARED_BASE, ZERO_TEST)},
    )
    # the new test never takes the changed branch (a negative number): it proves nothing
    # of the change at the parent, and its run executes none of the changed lines
    assert checks(verify(git_repo, base, head)) == [
        ("redgreen.not-red", "warning"),
        ("tests.mutants-unexecuted", "warning"),
    ]


MIXIN_BASE = dedent("""
    import unittest

    from app.parse import parse_fast, parse_py


    class ParserChecks:
        def test_digits(self):
            self.assertEqual(self.parse("12"), 12)


    class TestPy(ParserChecks, unittest.TestCase):
        parse = staticmethod(parse_py)


    class TestFast(ParserChecks, unittest.TestCase):
        parse = staticmethod(parse_fast)
""")


@pytest.mark.slow
@pytest.mark.parametrize(("test", "expected"), [(NEGATIVE_TEST, []), (ZERO_TEST, ["not-red"])])
def test_a_mixin_test_is_judged_red_or_not_by_the_subclasses_that_run_it(
    git_repo: Path, test: str, expected: list[str]
) -> None:
    base = commit(git_repo, {"app/parse.py": PARSE_BASE, "tests/test_parse.py": MIXIN_BASE})
    head = commit(
        git_repo,
        {"app/parse.py": PARSE_FIXED, "tests/test_parse.py": with_test(MIXIN_BASE, test)},
    )
    verdict = verify(git_repo, base, head)
    # a mixin's test was never run at the parent: red-green said nothing either way
    assert "red" in [r.name for r in verdict.checks]
    assert [c.split(".")[1] for c, _ in checks(verdict, "redgreen.")] == expected


# parametrize rows and table rows are tests added ----------------------------------------

DOUBLE_BASE = "def double(x):\n    if x > 5:\n        return x + x + 1\n    return x + x\n"
DOUBLE_FIXED = "def double(x):\n    return 2 * x\n"
ROWS_BASE = dedent("""
    import pytest

    from app.calc import double


    @pytest.mark.parametrize(
        ("x", "expected"),
        [
            (1, 2),
            (2, 4),
        ],
    )
    def test_double(x, expected):
        assert double(x) == expected
""")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("row", "expected"),
    [
        # honest: the row the fix needs, red at the parent
        ("(6, 12)", []),
        # a row that passes at the parent shows nothing about the change
        ("(3, 6)", [("redgreen.not-red", "warning")]),
    ],
)
def test_added_parametrize_rows_are_tests_added_and_judged_red_or_not(
    git_repo: Path, row: str, expected: list[tuple[str, str]]
) -> None:
    base = commit(git_repo, {"app/calc.py": DOUBLE_BASE, "tests/test_calc.py": ROWS_BASE})
    rows = ROWS_BASE.replace("        (2, 4),\n", f"        (2, 4),\n        {row},\n")
    head = commit(git_repo, {"app/calc.py": DOUBLE_FIXED, "tests/test_calc.py": rows})
    verdict = verify(git_repo, base, head)
    assert checks(verdict) == expected, [f.render() for f in verdict.findings]
    assert "red" in [r.name for r in verdict.checks]


TABLE_BASE = dedent("""
    import unittest

    import pytest

    from app.calc import double

    CASES = [
        (1, 2),
        (2, 4),
    ]


    @pytest.mark.parametrize(("x", "expected"), CASES)
    def test_double(x, expected):
        assert double(x) == expected


    class TestDouble(unittest.TestCase):
        ROWS = [
            (1, 2),
        ]

        def test_rows(self):
            for x, expected in self.ROWS:
                with self.subTest(x=x):
                    self.assertEqual(double(x), expected)
""")


@pytest.mark.parametrize(
    ("old", "new", "touched"),
    [
        ("    (2, 4),\n]", "    (2, 4),\n    (6, 12),\n]", ["test_double"]),
        (
            "        (1, 2),\n    ]",
            "        (1, 2),\n        (6, 12),\n    ]",
            ["TestDouble::test_rows"],
        ),
    ],
)
def test_rows_added_to_a_table_a_test_reads_are_tests_added(
    git_repo: Path, old: str, new: str, touched: list[str]
) -> None:
    base = commit(git_repo, {"app/calc.py": DOUBLE_BASE, "tests/test_calc.py": TABLE_BASE})
    assert old in TABLE_BASE
    head = commit(
        git_repo,
        {"app/calc.py": DOUBLE_FIXED, "tests/test_calc.py": TABLE_BASE.replace(old, new)},
    )
    findings, report, _, _ = deterministic_findings(git_repo, task(), base, head)
    assert [t.qualname for t in report.touched] == touched
    assert "tests.none-added" not in [f.check for f in findings]


def test_a_change_with_no_test_row_added_still_has_no_tests(git_repo: Path) -> None:
    base = commit(git_repo, {"app/calc.py": DOUBLE_BASE, "tests/test_calc.py": TABLE_BASE})
    # an edit beside the table (a comment) is no row
    edited = TABLE_BASE.replace("CASES = [", "# the cases\nCASES = [")
    head = commit(git_repo, {"app/calc.py": DOUBLE_FIXED, "tests/test_calc.py": edited})
    findings, report, _, _ = deterministic_findings(git_repo, task(), base, head)
    assert report.touched == []
    assert ("tests.none-added", Severity.WARNING) in [(f.check, f.severity) for f in findings]


FIXTURE_CONFTEST = dedent("""
    import pytest


    @pytest.fixture(params=[1, 2])
    def value(request):
        return request.param


    @pytest.fixture
    def pair(value):
        return value, value + value
""")
FIXTURE_TESTS = dedent("""
    from app.calc import double


    def test_double(pair):
        value, expected = pair
        assert double(value) == expected


    def test_unrelated():
        assert double(0) == 0
""")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("params", "expected"),
    [
        # honest: the fixture gains the case the fix needs, red at the parent
        ("[1, 2, 6]", []),
        # a case that passes at the parent: the users' tests show nothing about the change
        ("[1, 2, 3]", [("redgreen.not-red", "warning")]),
    ],
)
def test_a_changed_conftest_fixture_makes_its_users_the_changed_tests(
    git_repo: Path, params: str, expected: list[tuple[str, str]]
) -> None:
    base = commit(
        git_repo,
        {
            "app/calc.py": DOUBLE_BASE,
            "tests/conftest.py": FIXTURE_CONFTEST,
            "tests/test_calc.py": FIXTURE_TESTS,
        },
    )
    conftest = FIXTURE_CONFTEST.replace("[1, 2]", params)
    head = commit(git_repo, {"app/calc.py": DOUBLE_FIXED, "tests/conftest.py": conftest})
    owned = "tests/conftest.py"  # a conftest is test configuration: the plan names it
    findings, report, _, _ = deterministic_findings(git_repo, task(owned), base, head)
    # test_double uses `pair`, which uses the changed `value`; test_unrelated uses neither
    assert [t.qualname for t in report.fixture_users] == ["test_double"]
    assert "tests.none-added" not in [f.check for f in findings]
    verdict = verify(git_repo, base, head, owns=owned)
    assert checks(verdict, "redgreen.") + checks(verdict, "tests.") == expected, [
        f.render() for f in verdict.findings
    ]
    red = next(r for r in verdict.checks if r.name == "red")
    assert red.exit_code == (1 if not expected else 0)


# an assertion made in a helper the test calls is the test's ------------------------------


def added(path: str, new: str) -> TestReport:
    lines = set(range(1, new.count("\n") + 2))
    return check_tests([FileChange(path=path, status="A", old=None, new=new, added=lines)])


HELPERS = dedent("""
    import unittest

    from app.parse import parse


    def expect_number(text, value):
        assert parse(text) == value


    def run_case(text, value):
        expect_number(text, value)


    class ParseChecks(unittest.TestCase):
        def check_parse(self, text, value):
            self.assertEqual(parse(text), value)


    class TestParse(ParseChecks):
        def test_via_method(self):
            self.check_parse("12", 12)

        def test_via_module_helper(self):
            run_case("7", 7)

        def test_via_super(self):
            super().check_parse("3", 3)
""")


def test_an_assertion_in_a_helper_of_the_file_counts_as_the_tests() -> None:
    report = added("tests/test_parse.py", HELPERS)
    assert [f.check for f in report.findings if f.check == "tests.no-assertion"] == []
    assert sorted(t.qualname for t in report.touched) == [
        "TestParse::test_via_method",
        "TestParse::test_via_module_helper",
        "TestParse::test_via_super",
    ]


def test_a_helper_that_asserts_nothing_is_still_no_assertion() -> None:
    gamed = HELPERS.replace(
        "        self.assertEqual(parse(text), value)", "        parse(text)"
    ).replace("    assert parse(text) == value", "    return parse(text)")
    report = added("tests/test_parse.py", gamed + "\n\ndef loop():\n    loop()\n")
    flagged = sorted(
        (f.line, f.severity.value) for f in report.findings if f.check == "tests.no-assertion"
    )
    # every test: the helpers they call check nothing (and a helper calling itself ends)
    assert [sev for _, sev in flagged] == ["blocking"] * 3


def test_a_helper_that_only_a_deeper_chain_reaches_is_not_counted() -> None:
    # four calls deep: past the bound, the chain is not read (a test is not credited with
    # whatever some distant function asserts)
    chain = dedent("""
        from app.parse import parse


        def h4(v):
            assert parse(v)


        def h3(v):
            h4(v)


        def h2(v):
            h3(v)


        def h1(v):
            h2(v)


        def test_deep():
            h1("1")


        def test_near():
            h3("1")
    """)
    report = added("tests/test_chain.py", chain)
    flagged = [f.message for f in report.findings if f.check == "tests.no-assertion"]
    assert len(flagged) == 1 and "test_deep" in flagged[0]


# a conditional skip that did not fire is not a skip ---------------------------------------

ADD_BASE = "def add(a, b):\n    return a - b\n"
ADD_FIXED = "def add(a, b):\n    return a + b\n"
ADD_TESTS = dedent("""
    import sys
    import unittest

    import pytest

    from app.calc import add


    class TestAdd(unittest.TestCase):
        def test_small(self):
            self.assertEqual(add(2, 3), 5)

        def test_text(self):
            self.assertEqual(add("a", "b"), "ab")
""")


def skip_before(test: str, marker: str, module: str = ADD_TESTS) -> str:
    return module.replace(f"    def {test}(self):", f"    {marker}\n    def {test}(self):")


@pytest.mark.slow
def test_a_skip_whose_condition_is_false_where_the_checks_run_is_not_a_skip(
    git_repo: Path,
) -> None:
    base = commit(git_repo, {"app/calc.py": ADD_BASE, "tests/test_calc.py": ADD_TESTS})
    tests = skip_before("test_text", '@unittest.skipIf(sys.version_info[0] < 3, "bytes on 2")')
    guarded = tests.replace(
        "        self.assertEqual(add(2, 3), 5)",
        '        if sys.version_info < (3,):\n            self.skipTest("py2")\n'
        "        self.assertEqual(add(2, 3), 5)",
    )
    head = commit(git_repo, {"app/calc.py": ADD_FIXED, "tests/test_calc.py": guarded})
    verdict = verify(git_repo, base, head)
    assert verdict.passed, [f.render() for f in verdict.blocking]
    skips = [f for f in verdict.findings if f.check == "tests.skip"]
    assert [f.severity for f in skips] == [Severity.WARNING, Severity.WARNING]
    assert "TestAdd::test_text ran there" in skips[1].message or any(
        "TestAdd::test_text ran there" in f.message for f in skips
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "marker",
    [
        '@unittest.skipIf(True, "later")',
        '@unittest.skipIf(sys.platform != "win32", "windows only")',
        '@pytest.mark.skipif(sys.platform != "win32", reason="windows only")',
        '@unittest.skipUnless(sys.platform == "win32", "windows only")',
    ],
)
def test_a_skip_that_skipped_or_always_skips_still_blocks(git_repo: Path, marker: str) -> None:
    base = commit(git_repo, {"app/calc.py": ADD_BASE, "tests/test_calc.py": ADD_TESTS})
    head = commit(
        git_repo, {"app/calc.py": ADD_FIXED, "tests/test_calc.py": skip_before("test_text", marker)}
    )
    verdict = verify(git_repo, base, head)
    assert not verdict.passed
    assert ("tests.skip", "blocking") in checks(verdict)


@pytest.mark.slow
def test_a_guarded_skip_test_that_fired_still_blocks(git_repo: Path) -> None:
    base = commit(git_repo, {"app/calc.py": ADD_BASE, "tests/test_calc.py": ADD_TESTS})
    guarded = ADD_TESTS.replace(
        '        self.assertEqual(add("a", "b"), "ab")',
        '        if sys.platform != "win32":\n            self.skipTest("windows only")\n'
        '        self.assertEqual(add("a", "b"), "ab")',
    )
    head = commit(git_repo, {"app/calc.py": ADD_FIXED, "tests/test_calc.py": guarded})
    assert ("tests.skip", "blocking") in checks(verify(git_repo, base, head))


# a deleted test of behaviour the change removes: disputed, judged on the diff -------------

SLUG_BASE = dedent("""
    def slugify(text, keep_case=False):
        out = text.strip().replace(" ", "-")
        return out if keep_case else out.lower()
""")
SLUG_REVERTED = dedent("""
    def slugify(text):
        return text.strip().replace(" ", "-").lower()
""")
SLUG_TESTS = dedent("""
    from app.text import slugify


    def test_lower():
        assert slugify(" Hello World ") == "hello-world"


    def test_keep_case():
        assert slugify("Hello World", keep_case=True) == "Hello-World"


    def test_keep_case_strips():
        assert slugify(" A B ", keep_case=True) == "A-B"
""")
REVERT_NOTE = "the task reverts keep_case; its two tests go with it"


def drop(module: str, *tests: str) -> str:
    parts = module.split("\n\n\n")
    return "\n\n\n".join(p for p in parts if not any(f"def {t}(" in p for t in tests))


@pytest.fixture
def slugs(git_repo: Path) -> tuple[Path, str]:
    return git_repo, commit(git_repo, {"app/text.py": SLUG_BASE, "tests/test_text.py": SLUG_TESTS})


@pytest.mark.slow
def test_tests_of_a_reverted_behaviour_may_be_disputed_and_the_diff_bears_it_out(
    slugs: tuple[Path, str],
) -> None:
    repo, base = slugs
    head = commit(
        repo,
        {
            "app/text.py": SLUG_REVERTED,
            "tests/test_text.py": drop(SLUG_TESTS, "test_keep_case", "test_keep_case_strips"),
        },
    )
    plain = verify(repo, base, head)
    deleted = [f for f in plain.blocking if f.check == "tests.deleted"]
    assert len(deleted) == 2
    # the finding says what the diff removes, and offers the dispute
    assert all(f.grounds and "slugify(keep_case)" in f.grounds for f in deleted), deleted
    assert "tests.deleted" in disputes.disputable(plain.findings)
    verdict = verify(repo, base, head, claims=[("tests.deleted", REVERT_NOTE)])
    assert verdict.passed, [f.render() for f in verdict.blocking]
    [d] = verdict.disputes
    assert (d.check, d.outcome) == ("tests.deleted", "carried")
    assert [f.severity for f in verdict.findings if f.check == "tests.deleted"] == [
        Severity.WARNING
    ] * 2


@pytest.mark.slow
@pytest.mark.parametrize(
    ("code", "gone"),
    [
        # the behaviour the deleted test checked is still there
        (SLUG_BASE, ("test_lower",)),
        # the change reverts keep_case, but the deleted test checked lower-casing, which stays
        (SLUG_REVERTED, ("test_lower", "test_keep_case", "test_keep_case_strips")),
    ],
)
def test_a_dispute_of_a_deleted_test_whose_behaviour_still_exists_is_refused(
    slugs: tuple[Path, str], code: str, gone: tuple[str, ...]
) -> None:
    repo, base = slugs
    head = commit(repo, {"app/text.py": code, "tests/test_text.py": drop(SLUG_TESTS, *gone)})
    verdict = verify(repo, base, head, claims=[("tests.deleted", REVERT_NOTE)])
    assert not verdict.passed
    [d] = verdict.disputes
    assert d.outcome == "refused" and "test_lower" in d.reason, d
    lower = next(f for f in verdict.findings if "test_lower" in f.message)
    assert lower.blocking and lower.check == "tests.deleted" and lower.grounds is None
    if len(gone) == 1:
        # nothing grounds a dispute: the review does not offer one
        assert "tests.deleted" not in disputes.disputable(verdict.findings)


def test_which_skips_are_conditional_and_which_tests_they_govern() -> None:
    from loop_orchestrator.verify.pyevasions import conditional_skips

    source = dedent("""
        import sys
        import unittest

        import pytest


        @pytest.mark.skipif("sys.platform == 'win32'")
        def test_a():
            assert sys


        @unittest.skipIf("always", "a non-empty string is true")
        def test_b():
            assert sys


        @unittest.skipIf(True, "always")
        def test_c():
            assert sys


        @unittest.skipIf(sys.version_info[0] < 3, "py2")
        class TestX(unittest.TestCase):
            def test_d(self):
                assert sys

            def test_e(self):
                if sys.platform == "win32":
                    self.skipTest("windows")
                self.skipTest("always")
    """)
    found = conditional_skips(pyast.parse(source))
    assert found == {7: ["test_a"], 22: ["TestX::test_d", "TestX::test_e"], 29: ["TestX::test_e"]}
