"""Test-quality checks on source strings: honest changes pass, gamed changes are caught.

Each corpus case is (base text or None, commit text); every line of the commit text that
is not in the base counts as added, like a real diff would say.
"""

from __future__ import annotations

import difflib
import textwrap

import pytest

from loop_orchestrator.verify.testquality import FileChange, TestReport, check_tests


def change(path: str, old: str | None, new: str | None) -> FileChange:
    old_t = textwrap.dedent(old) if old is not None else None
    new_t = textwrap.dedent(new) if new is not None else None
    matcher = difflib.SequenceMatcher(
        a=(old_t or "").splitlines(), b=(new_t or "").splitlines(), autojunk=False
    )
    added = {
        j + 1
        for tag, _i1, _i2, j1, j2 in matcher.get_opcodes()
        if tag in ("insert", "replace")
        for j in range(j1, j2)
    }
    status = "A" if old is None else "D" if new is None else "M"
    return FileChange(path=path, status=status, old=old_t, new=new_t, added=added)


def run(path: str, old: str | None, new: str | None) -> TestReport:
    return check_tests([change(path, old, new)])


def checks(report: TestReport, severity: str | None = None) -> list[str]:
    return sorted(
        f.check for f in report.findings if severity is None or f.severity.value == severity
    )


HONEST_PY = """
import pytest
from app.calc import add, parse

def test_add_small_numbers():
    assert add(2, 3) == 5
    assert add(-1, 1) == 0

def test_parse_rejects_garbage():
    with pytest.raises(ValueError, match="not a number"):
        parse("abc")

def test_parse_empty_string_is_zero():
    assert parse("") == 0

class TestParse:
    def test_spaces(self):
        assert parse(" 7 ") == 7
"""


def test_honest_new_python_module_has_no_findings() -> None:
    report = run("tests/test_calc.py", None, HONEST_PY)
    assert report.findings == []
    assert {t.qualname for t in report.new_tests} == {
        "test_add_small_numbers",
        "test_parse_rejects_garbage",
        "test_parse_empty_string_is_zero",
        "TestParse::test_spaces",
    }
    assert all(t.language == "python" for t in report.touched)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("    result = add(1, 2)\n", "tests.no-assertion"),
        ("    assert True\n", "tests.tautology"),
        ("    assert 1\n", "tests.tautology"),
        ("    x = add(1, 2)\n    assert x == x\n", "tests.tautology"),
        ("    assert 3 == 3\n", "tests.tautology"),
        ("    assert (add(1, 2) == 4, 'msg')\n", "tests.tautology"),
        ("    assert add(1, 2) == 3 or True\n", "tests.tautology"),
        ("    return\n    assert add(1, 2) == 3\n", "tests.early-exit"),
        ("    if False:\n        assert add(1, 2) == 3\n", "tests.dead-code"),
        (
            "    try:\n        assert add(1, 2) == 4\n    except AssertionError:\n        pass\n",
            "tests.swallowed-assertion",
        ),
        (
            "    try:\n        assert add(1, 2) == 4\n    except Exception:\n        pass\n",
            "tests.swallowed-assertion",
        ),
        ("    import pytest\n    pytest.skip('later')\n    assert add(1, 2) == 3\n", "tests.skip"),
    ],
)
def test_gamed_python_test_bodies_are_blocking(body: str, expected: str) -> None:
    source = "from app.calc import add\n\ndef test_add():\n" + body
    report = run("tests/test_calc.py", None, source)
    assert expected in checks(report, "blocking"), report.findings


@pytest.mark.parametrize(
    "decorator",
    [
        "@pytest.mark.skip(reason='flaky')",
        "@pytest.mark.skipif(True, reason='x')",
        "@pytest.mark.xfail",
        "@unittest.skip('x')",
        "@skip('x')",
    ],
)
def test_added_skip_decorators_are_caught(decorator: str) -> None:
    base = (
        "import pytest\nimport unittest\nfrom unittest import skip\n\n"
        "def test_a():\n    assert 1 + 1 == 2\n"
    )
    new = base.replace("def test_a", f"{decorator}\ndef test_a")
    report = run("tests/test_a.py", base, new)
    blocking = [f for f in report.findings if f.check == "tests.skip"]
    assert len(blocking) == 1
    assert blocking[0].line == 5


def test_importorskip_and_skiptest_and_module_pytestmark_are_caught() -> None:
    new = textwrap.dedent("""
        import pytest
        import unittest
        pytestmark = pytest.mark.skip(reason="all")
        np = pytest.importorskip("numpy")

        class TestX(unittest.TestCase):
            def test_a(self):
                self.skipTest("later")
                self.assertEqual(1 + 1, 2)
    """)
    report = run("tests/test_x.py", None, new)
    lines = sorted(f.line or 0 for f in report.findings if f.check == "tests.skip")
    assert lines == [4, 5, 9]


def test_pre_existing_skip_is_not_blamed_on_the_task() -> None:
    base = "import pytest\n\n@pytest.mark.skip\ndef test_old():\n    assert 1 + 1 == 2\n"
    new = base + "\ndef test_new():\n    assert 2 + 2 == 4\n"
    report = run("tests/test_a.py", base, new)
    assert "tests.skip" not in checks(report)


def test_unittest_assertions_count_and_tautologies_are_caught() -> None:
    honest = """
        import unittest
        from app import f

        class TestF(unittest.TestCase):
            def test_value(self):
                self.assertEqual(f(2), 4)

            def test_error(self):
                with self.assertRaises(ValueError):
                    f(-1)
    """
    assert checks(run("tests/test_f.py", None, honest), "blocking") == []
    gamed = honest.replace("self.assertEqual(f(2), 4)", "self.assertTrue(True)")
    report = run("tests/test_f.py", None, gamed)
    assert checks(report, "blocking") == ["tests.tautology"]


def test_mock_assert_called_counts_as_an_assertion() -> None:
    source = """
        from unittest import mock

        def test_notifies():
            sender = mock.Mock()
            sender.send("x")
            sender.send.assert_called_once_with("x")
    """
    assert "tests.no-assertion" not in checks(run("tests/test_n.py", None, source))


def test_conditional_return_is_a_warning_not_blocking() -> None:
    source = """
        import os
        def test_a():
            if os.environ.get("X"):
                return
            assert 1 + 1 == 2
    """
    report = run("tests/test_a.py", None, source)
    exits = [f for f in report.findings if f.check == "tests.early-exit"]
    assert [f.severity.value for f in exits] == ["warning"]


def test_broad_raises_is_a_warning_and_match_makes_it_specific() -> None:
    source = """
        import pytest
        from app import f
        def test_a():
            with pytest.raises(Exception):
                f(None)
        def test_b():
            with pytest.raises(Exception, match="bad input"):
                f(None)
    """
    report = run("tests/test_a.py", None, source)
    broad = [f for f in report.findings if f.check == "tests.broad-raises"]
    assert [(f.line, f.severity.value) for f in broad] == [(5, "warning")]


BASE_PY = """
from app import f

def test_one():
    assert f(1) == 2
    assert f(2) == 4

def test_two():
    assert f(0) == 0
"""


def test_deleted_test_is_blocking() -> None:
    new = BASE_PY.split("def test_two")[0]
    report = run("tests/test_f.py", BASE_PY, new)
    deleted = [f for f in report.findings if f.check == "tests.deleted"]
    assert len(deleted) == 1
    assert "test_two" in deleted[0].message
    assert deleted[0].blocking


def test_deleted_test_file_is_blocking_for_each_test() -> None:
    report = run("tests/test_f.py", BASE_PY, None)
    assert checks(report) == ["tests.deleted", "tests.deleted"]


def test_renamed_and_weakened_test_counts_as_deleted() -> None:
    new = BASE_PY.replace(
        "def test_two():\n    assert f(0) == 0",
        "def test_two_renamed():\n    assert f(0) is not None",
    )
    report = run("tests/test_f.py", BASE_PY, new)
    assert "tests.deleted" in checks(report, "blocking")


def test_rename_with_identical_body_is_only_a_warning() -> None:
    new = BASE_PY.replace("def test_two():", "def test_zero_maps_to_zero():")
    report = run("tests/test_f.py", BASE_PY, new)
    assert checks(report) == ["tests.renamed"]
    assert report.findings[0].severity.value == "warning"


def test_fewer_assertions_than_at_base_is_blocking() -> None:
    new = BASE_PY.replace("    assert f(2) == 4\n", "")
    report = run("tests/test_f.py", BASE_PY, new)
    assert checks(report) == ["tests.fewer-assertions"]
    assert "1 assertion(s), 2 at the base" in report.findings[0].message


def test_file_rename_hiding_a_deletion_is_caught() -> None:
    """--no-renames: a moved file is a D and an A; tests moved intact are fine."""
    moved = [
        change("tests/test_f.py", BASE_PY, None),
        change("tests/unit/test_f.py", None, BASE_PY),
    ]
    report = check_tests(moved)
    assert [f for f in report.findings if f.blocking] == []
    hidden = [
        change("tests/test_f.py", BASE_PY, None),
        change("tests/unit/test_f.py", None, BASE_PY.split("def test_two")[0]),
    ]
    report = check_tests(hidden)
    assert "tests.deleted" in checks(report, "blocking")


def test_duplicate_name_shadowing_an_old_test_is_blocking() -> None:
    new = BASE_PY + "\ndef test_one():\n    assert True is not False\n"
    report = run("tests/test_f.py", BASE_PY, new)
    found = checks(report, "blocking")
    assert "tests.duplicate-name" in found
    assert "tests.fewer-assertions" in found


def test_untouched_bad_old_test_is_not_judged() -> None:
    base = "def test_old():\n    pass\n"
    new = base + "\ndef test_new():\n    assert 2 * 2 == 4 or False\n"
    report = run("tests/test_a.py", base, new)
    assert "tests.no-assertion" not in checks(report)
    assert [t.qualname for t in report.touched] == ["test_new"]


def test_new_module_without_error_or_boundary_case_warns() -> None:
    source = """
        from app import f
        def test_two():
            assert f(2) == 4
    """
    report = run("tests/test_f.py", None, source)
    assert checks(report, "warning") == ["tests.no-boundary-case", "tests.no-error-case"]
    assert checks(report, "blocking") == []


@pytest.mark.parametrize(
    "line",
    [
        "assert f(0) == 0",
        "assert f(-3) == 9",
        "assert f([]) == []",
        "assert f(None) is None",
        "assert f(sys.maxsize) > 0",
    ],
)
def test_boundary_values_satisfy_the_heuristic(line: str) -> None:
    source = f"import sys\nfrom app import f\n\ndef test_value():\n    {line}\n"
    assert "tests.no-boundary-case" not in checks(run("tests/test_f.py", None, source))


def test_boundary_by_name_satisfies_the_heuristic_but_admin_does_not() -> None:
    named = "from app import f\n\ndef test_limit_reached():\n    assert f(5) == 25\n"
    assert "tests.no-boundary-case" not in checks(run("tests/test_f.py", None, named))
    admin = "from app import f\n\ndef test_admin_user():\n    assert f(5) == 25\n"
    assert "tests.no-boundary-case" in checks(run("tests/test_f.py", None, admin))


def test_unparsable_test_module_is_blocking() -> None:
    report = run("tests/test_f.py", None, "def test_a(:\n    assert 1\n")
    assert checks(report) == ["tests.unparsable"]


def test_non_test_files_are_ignored() -> None:
    assert run("app/calc.py", None, "def test_helper():\n    pass\n").findings == []


def test_expectations_are_collected_for_the_stub_check() -> None:
    source = """
        import unittest
        from app import area
        def test_area():
            assert area(3, 4) == 12
        class T(unittest.TestCase):
            def test_b(self):
                self.assertEqual(7, area(7, 1))
    """
    report = run("tests/test_area.py", None, source)
    got = {(e.func, e.args, e.expected) for e in report.expectations}
    assert got == {("area", (3, 4), 12), ("area", (7, 1), 7)}


# JavaScript / TypeScript --------------------------------------------------------------

HONEST_JS = """
import { add, parse } from '../src/calc';

describe('calc', () => {
  it('adds small numbers', () => {
    expect(add(2, 3)).toBe(5);
  });
  it('rejects garbage', () => {
    expect(() => parse('abc')).toThrow('not a number');
  });
  test('empty input is zero', () => {
    expect(parse('')).toBe(0);
  });
});
"""


def test_honest_new_js_module_has_no_findings() -> None:
    report = run("src/calc.test.ts", None, HONEST_JS)
    assert report.findings == []
    assert {t.qualname for t in report.new_tests} == {
        "calc > adds small numbers",
        "calc > rejects garbage",
        "calc > empty input is zero",
    }


@pytest.mark.parametrize(
    ("swap", "expected"),
    [
        ("expect(add(2, 3)).toBe(5);", "tests.no-assertion"),
        ("expect(true).toBe(true);", "tests.tautology"),
        ("const r = add(2, 3); expect(r).toBe(r);", "tests.tautology"),
        ("return; expect(add(2, 3)).toBe(5);", "tests.early-exit"),
        ("try { expect(add(2, 3)).toBe(6); } catch (e) { }", "tests.swallowed-assertion"),
    ],
)
def test_gamed_js_bodies_are_blocking(swap: str, expected: str) -> None:
    body = "add(2, 3);" if expected == "tests.no-assertion" else swap
    source = HONEST_JS.replace("expect(add(2, 3)).toBe(5);", body)
    report = run("src/calc.test.ts", None, source)
    assert expected in checks(report, "blocking"), report.findings


@pytest.mark.parametrize(
    ("old", "new", "line"),
    [
        ("  it(", "  it.skip(", 2),
        ("  it(", "  test.only(", 2),
        ("describe(", "describe.skip(", 1),
        ("  it(", "  xit(", 2),
        ("  it(", "  it.todo(", 2),
        ("  it(", "  fit(", 2),
        ("describe(", "describe.only(", 1),
    ],
)
def test_js_skip_and_only_are_blocking(old: str, new: str, line: int) -> None:
    base = "describe('s', () => {\n  it('a', () => {\n    expect(1 + 1).toBe(2);\n  });\n});\n"
    report = run("src/a.test.js", base, base.replace(old, new, 1))
    assert [(f.check, f.line) for f in report.findings if f.blocking] == [("tests.skip", line)]


def test_js_text_inside_strings_and_comments_is_not_a_test() -> None:
    source = """
        // it.skip('commented out', () => {})
        const doc = "test.only( is not code";
        it('real', () => { expect(f(0)).toBe(0); expect(() => f(-1)).toThrow(RangeError); });
    """
    report = run("a.spec.js", None, source)
    assert report.findings == []
    assert [t.qualname for t in report.touched] == ["real"]


def test_js_deleted_and_weakened_tests_are_caught() -> None:
    base = (
        "describe('s', () => {\n"
        "  it('a', () => { expect(f(1)).toBe(1); expect(f(2)).toBe(4); });\n"
        "  it('b', () => { expect(f(3)).toBe(9); });\n"
        "});\n"
    )
    new = "describe('s', () => {\n  it('a', () => { expect(f(1)).toBe(1); });\n});\n"
    report = run("a.test.js", base, new)
    assert checks(report) == ["tests.deleted", "tests.fewer-assertions"]


def test_js_broad_to_throw_is_a_warning() -> None:
    source = "it('x', () => { expect(() => f(0)).toThrow(); });\n"
    report = run("a.test.ts", None, source)
    assert ("tests.broad-raises", "warning") in [
        (f.check, f.severity.value) for f in report.findings
    ]
