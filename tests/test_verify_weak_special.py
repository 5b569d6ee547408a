"""Weak assertions (tests.weak-assertions) and special-cased inputs (stubs.special-cased):
honest changes pass, gamed ones are caught, on real git repositories and on source text.

The project is a small duration parser; the honest commit is what a maintainer would write,
each gamed commit weakens its tests or special-cases the tests' inputs.
"""

from __future__ import annotations

import textwrap
import tracemalloc
from pathlib import Path

import pytest
from helpers.git import commit

from loop_orchestrator.plan.model import DoneCheck, Task
from loop_orchestrator.runstate.state import RunDir
from loop_orchestrator.verify import write_review
from loop_orchestrator.verify.disputes import disputable, hold
from loop_orchestrator.verify.models import Finding, Verdict
from loop_orchestrator.verify.pytests import Expectation
from loop_orchestrator.verify.stubs import check_stubs
from loop_orchestrator.verify.testquality import FileChange, check_tests
from loop_orchestrator.verify.verdict import deterministic_findings


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


BASE_SOURCE = dedent("""
    def parse_duration(text):
        return int(text)
""")
HONEST_SOURCE = dedent("""
    import re

    _UNITS = {"s": 1, "m": 60, "h": 3600}
    _PART = re.compile(r"(\\d+)([smh])")


    def parse_duration(text):
        text = text.strip()
        if not text:
            raise ValueError("empty duration")
        total, pos = 0, 0
        for m in _PART.finditer(text):
            if m.start() != pos:
                raise ValueError(f"bad duration: {text!r}")
            total += int(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if pos != len(text):
            raise ValueError(f"bad duration: {text!r}")
        return total


    def split_units(text):
        return [m.group(0) for m in _PART.finditer(text)]


    def is_duration(text):
        return bool(text) and _PART.fullmatch(text) is not None
""")
HONEST_TESTS = dedent("""
    import pytest

    from app.duration import is_duration, parse_duration, split_units


    def test_minutes_and_seconds():
        assert parse_duration("1m30s") == 90


    @pytest.mark.parametrize(("text", "seconds"), [("45s", 45), ("1h1m1s", 3661)])
    def test_table(text, seconds):
        assert parse_duration(text) == seconds


    def test_units():
        parts = split_units("1h2m")
        assert len(parts) == 2
        assert parts == ["1h", "2m"]


    def test_rejects_garbage():
        with pytest.raises(ValueError, match="bad duration"):
            parse_duration("1x")


    def test_is_duration():
        assert is_duration("5m")
        assert not is_duration("")
""")
TASK = Task(
    id="dur",
    title="Durations",
    objective="Parse durations like 1h30m",
    owns=["app/duration.py", "tests/test_duration.py"],
    done=[DoneCheck(criterion="durations parse", check="true")],
)


def findings_at(repo: Path, base: str, files: dict[str, str]) -> list[Finding]:
    head = commit(repo, files)
    found, _report, _files, _texts = deterministic_findings(repo, TASK, base, head)
    return found


def of(found: list[Finding], check: str) -> list[Finding]:
    return [f for f in found if f.check == check]


@pytest.fixture
def project(git_repo: Path) -> tuple[Path, str]:
    return git_repo, commit(git_repo, {"app/duration.py": BASE_SOURCE}, "base")


def test_honest_commit_has_neither_finding(project: tuple[Path, str]) -> None:
    repo, base = project
    found = findings_at(
        repo, base, {"app/duration.py": HONEST_SOURCE, "tests/test_duration.py": HONEST_TESTS}
    )
    assert of(found, "tests.weak-assertions") == []
    assert of(found, "stubs.special-cased") == []
    assert [f for f in found if f.blocking] == []


def test_weakened_tests_are_named_with_line_and_what_to_compare(
    project: tuple[Path, str],
) -> None:
    repo, base = project
    weakened = HONEST_TESTS.replace(
        'assert parse_duration("1m30s") == 90', 'assert parse_duration("1m30s") is not None'
    ).replace(
        "    assert parse_duration(text) == seconds",
        "    result = parse_duration(text)\n    assert isinstance(result, int)",
    )
    found = findings_at(
        repo, base, {"app/duration.py": HONEST_SOURCE, "tests/test_duration.py": weakened}
    )
    weak = {f.message.split(" makes ")[0]: f for f in of(found, "tests.weak-assertions")}
    assert sorted(weak) == ["test test_minutes_and_seconds", "test test_table"]
    first = weak["test test_minutes_and_seconds"]
    assert first.severity.value == "warning" and first.line == 7
    assert "line 7 asserts `parse_duration('1m30s') is not None`" in first.message
    assert "compare it with the expected value" in first.message
    assert "parse_duration(), which this change modifies (app/duration.py)" in first.message
    table = weak["test test_table"]
    assert "asserts `isinstance(result, int)`" in table.message
    assert "not only its type" in table.message


@pytest.mark.parametrize(
    ("body", "shown"),
    [
        ('    assert parse_duration("2h") is not None\n', "is not None"),
        ('    assert parse_duration("2h") != None\n', "!= None"),
        ('    assert isinstance(parse_duration("2h"), int)\n', "isinstance"),
        ('    assert parse_duration("2h")\n', "parse_duration('2h')"),
        ('    r = parse_duration("2h")\n    assert r\n', "asserts `r`"),
        ('    assert bool(parse_duration("2h")) is True\n', "bool("),
        ('    assert str(parse_duration("2h"))\n', "str("),
        ('    assert len(split_units("1h2m")) > 0\n', "> 0"),
        ('    assert len(split_units("1h2m")) >= 1\n', ">= 1"),
        ('    assert len(split_units("1h2m")) != 0\n', "!= 0"),
        ('    assert len(split_units("1h2m"))\n', "len("),
        ("    assert hasattr(parse_duration, '__call__')\n", "hasattr"),
        ("    assert callable(parse_duration)\n", "callable"),
        ('    assert type(parse_duration("2h")) is int\n', "type("),
        ('    assert type(parse_duration("2h")) == int\n', "type("),
        ('    assert parse_duration("2h").__class__ is int\n', "__class__"),
        (
            '    with pytest.raises(Exception):\n        parse_duration("1x")\n',
            "raises(Exception)",
        ),
        (
            '    with pytest.raises(BaseException):\n        parse_duration("1x")\n',
            "raises(BaseException)",
        ),
        (
            '    with pytest.raises((Exception, BaseException)):\n        parse_duration("x")\n',
            "raises(",
        ),
        ('    with pytest.warns(Warning):\n        parse_duration("1x")\n', "warns(Warning)"),
        (
            '    r = parse_duration("2h")\n    assert r is not None and isinstance(r, int)\n',
            "and",
        ),
        # forms found by gaming the check with kinds it was not written for
        ('    assert parse_duration("2h") == parse_duration("2h")\n', "not with itself"),
        ('    r = parse_duration("2h")\n    assert (r is not None) is True\n', "is True"),
        (
            '    with pytest.raises(Exception, match=".*"):\n        parse_duration("1x")\n',
            "raises(Exception",
        ),
        # a length bound every length meets, and a name bound to a bound result
        ('    assert len(split_units("1h2m")) >= 0\n', ">= 0"),
        ('    assert len(split_units("1h2m")) > -1\n', "> -1"),
        ('    assert -1 < len(split_units("1h2m"))\n', "-1 <"),
        ('    out = split_units("1h2m")\n    result = out\n    assert result\n', "`result`"),
        # the truth of an item or a slice of a result: any non-empty value passes
        ('    units = split_units("1h2m")\n    assert units[0]\n', "`units[0]`"),
        ('    assert split_units("1h2m")[-1]\n', "[-1]`"),
        ('    units = split_units("1h2m")\n    assert units[1:]\n', "`units[1:]`"),
        ('    grid = split_units("1h2m")\n    assert grid[0][1]\n', "`grid[0][1]`"),
    ],
)
def test_each_weak_kind_is_flagged(body: str, shown: str) -> None:
    source = (
        "import pytest\nfrom app.duration import parse_duration, split_units\n\n"
        "def test_it():\n" + body
    )
    found = of(check_tests([new_file("tests/test_d.py", source)]).findings, "tests.weak-assertions")
    assert len(found) == 1, found
    first = 4 + body.count("\n") - body.startswith("    with")  # the last line, or `with`
    assert found[0].line == first and shown in found[0].message


@pytest.mark.parametrize(
    "body",
    [
        "self.assertIsNotNone(parse_duration('2h'))",
        "self.assertIsInstance(parse_duration('2h'), int)",
        "self.assertTrue(parse_duration('2h'))",
        "self.assertTrue(len(split_units('1h')) > 0)",
        "self.assertGreater(len(split_units('1h')), 0)",
        "self.assertNotEqual(parse_duration('2h'), None)",
        "self.assertRaises(Exception, parse_duration, '1x')",
        "self.assertIs(type(parse_duration('2h')), int)",
        "self.assertTrue(split_units('1h')[0])",
    ],
)
def test_unittest_weak_kinds_are_flagged(body: str) -> None:
    source = (
        "import unittest\nfrom app.duration import parse_duration, split_units\n\n"
        "class TestD(unittest.TestCase):\n    def test_it(self):\n        " + body + "\n"
    )
    found = of(check_tests([new_file("tests/test_d.py", source)]).findings, "tests.weak-assertions")
    assert [f.line for f in found] == [6], found
    assert "TestD::test_it" in found[0].message


@pytest.mark.parametrize(
    "body",
    [
        # a weak check beside a strong one: the strong one decides
        '    r = parse_duration("2h")\n    assert r is not None\n    assert r == 7200\n',
        '    assert isinstance(parse_duration("2h"), int)\n    assert parse_duration("1s") == 1\n',
        # an exact exception type, or a broad one with a message match
        '    with pytest.raises(ValueError):\n        parse_duration("1x")\n',
        '    with pytest.raises(Exception, match="bad duration"):\n        parse_duration("x")\n',
        '    with pytest.raises(Exception) as e:\n        parse_duration("x")\n'
        '    assert "bad" in str(e.value)\n',
        '    with pytest.warns(DeprecationWarning):\n        parse_duration("1x")\n',
        # a predicate's truth is its answer
        '    assert is_duration("5m")\n',
        '    ok = is_duration("5m")\n    assert ok\n',
        '    assert not parse_duration("0s")\n',
        '    assert len(split_units("1h2m")) == 2\n',
        '    assert len(split_units("1h2m")) >= 2\n',
        '    assert len(split_units("1h2m")) > 1\n',
        '    assert "1h" in split_units("1h2m")\n',
        '    assert parse_duration("2h") > 3600\n',
        # a field named by its key may be a flag; an item of a literal or of a fixture is
        # the test's own data
        '    report = split_units("1h2m")\n    assert report["valid"]\n',
        '    flags = [is_duration("5m")]\n    assert flags[0]\n',
        '    assert [is_duration(s) for s in ("5m", "1h")][1]\n',
        '    assert is_duration("5m")[0]\n',
    ],
)
def test_honest_checks_are_not_weak(body: str) -> None:
    source = (
        "import pytest\nfrom app.duration import is_duration, parse_duration, split_units\n\n"
        "def test_it():\n" + body
    )
    found = of(check_tests([new_file("tests/test_d.py", source)]).findings, "tests.weak-assertions")
    assert found == []


def test_assertions_in_helpers_the_test_calls_count() -> None:
    source = dedent("""
        from app.duration import parse_duration

        def check_parsed(value):
            assert value is not None

        def expect_seconds(value, seconds):
            assert value == seconds

        class TestD:
            def _looks_parsed(self, value):
                assert isinstance(value, int)

            def test_weak_through_helpers(self):
                check_parsed(parse_duration("2h"))
                self._looks_parsed(parse_duration("2h"))

            def test_strong_through_a_helper(self):
                check_parsed(parse_duration("2h"))
                expect_seconds(parse_duration("2h"), 7200)
    """)
    found = of(check_tests([new_file("tests/test_d.py", source)]).findings, "tests.weak-assertions")
    assert len(found) == 1
    assert "TestD::test_weak_through_helpers" in found[0].message
    assert "line 4 asserts `value is not None`" in found[0].message
    assert "line 11 asserts `isinstance(value, int)`" in found[0].message


def test_untouched_weak_test_is_not_blamed() -> None:
    old = "from app import f\n\ndef test_old():\n    assert f(1) is not None\n"
    new = old + "\ndef test_new():\n    assert f(2) == 4\n"
    f = FileChange("tests/test_f.py", "M", old, new, {5, 6, 7})
    assert of(check_tests([f]).findings, "tests.weak-assertions") == []


JS_WEAK = [
    "expect(parseDuration('2h')).toBeDefined();",
    "expect(parseDuration('2h')).toBeTruthy();",
    "expect(parseDuration('2h')).not.toBeUndefined();",
    "expect(parseDuration('2h')).not.toBeNull();",
    "assert.ok(parseDuration('2h'));",
    "assert(parseDuration('2h'));",
    "expect(parseDuration('2h')).to.exist;",
    "expect(() => parseDuration('1x')).toThrow();",
    "expect(() => parseDuration('1x')).to.throw();",
    "expect(splitUnits('1h2m').length).toBeGreaterThan(0);",
    "assert.ok(parseDuration('2h') !== undefined);",
    "expect(typeof parseDuration('2h')).toBe('number');",
    "expect(parseDuration('2h')).not.toBe(undefined);",
    "expect(parseDuration('2h')).toEqual(expect.anything());",
]


@pytest.mark.parametrize("line", JS_WEAK)
def test_js_weak_kinds_are_flagged(line: str) -> None:
    source = (
        "const { parseDuration, splitUnits } = require('../src/duration');\n\n"
        f"test('parses hours', () => {{\n  {line}\n}});\n"
    )
    found = of(
        check_tests([new_file("tests/duration.test.js", source)]).findings,
        "tests.weak-assertions",
    )
    assert [f.line for f in found] == [4], found
    assert "'parses hours'" in found[0].message


@pytest.mark.parametrize(
    "lines",
    [
        "expect(parseDuration('2h')).toBeDefined();\n  expect(parseDuration('2h')).toBe(7200);",
        "expect(() => parseDuration('1x')).toThrow(RangeError);",
        "expect(() => parseDuration('1x')).toThrow('bad duration');",
        "assert.ok(parseDuration('2h') === 7200);",
        "assert.strictEqual(parseDuration('2h'), 7200);",
        "expect(isDuration('5m')).toBeTruthy();\n  expect(isDuration('x')).toBe(false);",
        "expect(splitUnits('1h2m')).toEqual(['1h', '2m']);",
        "assert.ok(isDuration('5m'));",
    ],
)
def test_js_strong_checks_are_not_weak(lines: str) -> None:
    source = f"test('parses', () => {{\n  {lines}\n}});\n"
    found = of(
        check_tests([new_file("tests/duration.test.js", source)]).findings,
        "tests.weak-assertions",
    )
    assert found == []


def test_js_weak_check_on_a_changed_function_says_so() -> None:
    tests = "test('parses', () => {\n  expect(parseDuration('2h')).toBeDefined();\n});\n"
    code = "export function parseDuration(text) {\n  return 7200;\n}\n"
    report = check_tests(
        [new_file("tests/duration.test.js", tests), new_file("src/duration.js", code)]
    )
    (found,) = of(report.findings, "tests.weak-assertions")
    assert "parseDuration(), which this change modifies (src/duration.js)" in found.message


# special-cased inputs ----------------------------------------------------------------------

SPECIAL_TESTS = dedent("""
    import pytest

    from app.geometry import area, days_in_month, fact, fib, scale, to_bytes


    def test_area():
        assert area(3, 4) == 12
        assert area(5, 6) == 30


    @pytest.mark.parametrize(("n", "expected"), [(0, 1), (4, 24), (6, 720)])
    def test_fact(n, expected):
        assert fact(n) == expected


    def test_fib():
        assert fib(0) == 0
        assert fib(1) == 1
        assert fib(10) == 55


    def test_days():
        assert days_in_month(2) == 28
        assert days_in_month(4) == 30
        assert days_in_month(6) == 30
        assert days_in_month(1) == 31


    def test_to_bytes():
        assert to_bytes(2, unit="kb") == 2048
        assert to_bytes(1, "mb") == 1048576


    def test_scale():
        assert scale(2, factor=3) == 6
""")
HONEST_GEOMETRY = dedent("""
    _FACTORS = {"b": 1, "kb": 1024, "mb": 1024 * 1024}


    def area(w, h):
        if w == 0 or h == 0:
            return 0
        return w * h


    def fact(n):
        if n == 0:
            return 1
        return n * fact(n - 1)


    def fib(n):
        if n == 0:
            return 0
        if n == 1:
            return 1
        return fib(n - 1) + fib(n - 2)


    def days_in_month(month):
        if month == 2:
            return 28
        if month in (4, 6, 9, 11):
            return 30
        return 31


    def to_bytes(n, unit="b"):
        return n * _FACTORS[unit]


    def scale(x, factor=1):
        if factor == 1:
            return x
        return x * factor
""")


def special(source: str, tests: str = SPECIAL_TESTS) -> list[Finding]:
    exps = check_tests([new_file("tests/test_geometry.py", tests)]).expectations
    return of(check_stubs([new_file("app/geometry.py", source)], exps), "stubs.special-cased")


def test_honest_base_cases_and_tables_are_not_special_cases() -> None:
    assert special(HONEST_GEOMETRY) == []


def test_parametrize_rows_and_keywords_are_expectations() -> None:
    exps = check_tests([new_file("tests/test_geometry.py", SPECIAL_TESTS)]).expectations
    fact_rows = sorted(
        (e.args, e.expected, e.test) for e in exps if e.func == "fact" and e.args is not None
    )
    assert fact_rows == [((0,), 1, "test_fact"), ((4,), 24, "test_fact"), ((6,), 720, "test_fact")]
    assert (
        Expectation(
            "to_bytes", (2,), 2048, "tests/test_geometry.py", 30, (("unit", "kb"),), "test_to_bytes"
        )
        in exps
    )


REPR_INSTEAD = dedent("""
    _CASES = {"(3, 4)": 12, "(5, 6)": 30}


    def area(w, h):
        return _CASES[repr((w, h))]
""")
REPR_IN_FRONT = dedent("""
    _CASES = {"(3, 4)": 12, "(5, 6)": 30}


    def area(w, h):
        key = repr((w, h))
        if key in _CASES:
            return _CASES[key]
        return w + h
""")
CHAINED_IFS = dedent("""
    def fact(n):
        if n == 4:
            return 24
        if n == 6:
            return 720
        if n == 0:
            return 1
        return n
""")
CHAINED_IN_FRONT = dedent("""
    def fact(n):
        if n == 4:
            return 24
        elif n == 6:
            return 720
        result = 1
        for k in range(2, n):
            result *= k
        return result
""")


def test_dict_keyed_by_repr_of_the_arguments_instead_of_the_code() -> None:
    (found,) = special(REPR_INSTEAD)
    assert found.severity.value == "blocking" and found.line == 5
    assert "area() special-cases" in found.message
    assert "repr((w, h)) == '(3, 4)'" in found.message
    assert "test test_area (tests/test_geometry.py:7)" in found.message
    assert "`area(3, 4) == 12`" in found.message


def test_dict_keyed_by_repr_in_front_of_the_code() -> None:
    # the key goes through a local variable: still the arguments' repr
    found = special(REPR_IN_FRONT.replace("return _CASES[key]", "return _CASES[repr((w, h))]"))
    assert [f.line for f in found] == [7]


def test_chained_ifs_instead_of_and_in_front_of_the_code() -> None:
    (instead,) = special(CHAINED_IFS)
    assert instead.line == 2 and "`n == 4`" in instead.message
    assert "`fact(4) == 24`" in instead.message and "1 more of the tests' cases" in instead.message
    (front,) = special(CHAINED_IN_FRONT)
    assert front.line == 2


@pytest.mark.parametrize(
    "source",
    [
        # several parameters compared at once
        "def area(w, h):\n    if w == 3 and h == 4:\n        return 12\n    return w * h\n",
        "def area(w, h):\n    if (w, h) == (3, 4):\n        return 12\n    return w * h\n",
        # set membership of the tuple of arguments
        "def area(w, h):\n    if (w, h) in {(3, 4)}:\n        return 12\n    return w * h\n",
        # an f-string key
        "def area(w, h):\n    return {'3x4': 12, '5x6': 30}.get(f'{w}x{h}', w * h)\n",
        # a conditional expression
        "def area(w, h):\n    return 12 if repr((w, h)) == '(3, 4)' else w * h\n",
        # a match statement over the arguments
        "def area(w, h):\n    match (w, h):\n        case (3, 4):\n            return 12\n"
        "        case (5, 6):\n            return 30\n    return w * h\n",
        # the whole function is the test's case (the real code removed)
        "def area(w, h):\n    if w == 3:\n        return 12\n    return 0\n",
        # tables built by dict(...), kept in a default argument, or keyed by hash()
        "_T = dict([((3, 4), 12), ((5, 6), 30)])\n\ndef area(w, h):\n"
        "    return _T.get((w, h), w * h)\n",
        "def area(w, h, _c={(3, 4): 12, (5, 6): 30}):\n    return _c.get((w, h), w * h)\n",
        "def area(w, h):\n    if hash((w, h)) == hash((3, 4)):\n        return 12\n"
        "    return w * h\n",
        # keyword arguments of the test
        "def scale(x, factor=1):\n    if (x, factor) == (2, 3):\n        return 6\n    return x\n",
    ],
)
def test_other_special_case_forms_are_caught(source: str) -> None:
    assert len(special(source)) == 1


def test_a_table_with_cases_no_test_uses_is_an_enumeration() -> None:
    # days_in_month as a dict: the tests check three of twelve months
    source = (
        "_DAYS = {1: 31, 2: 28, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, "
        "10: 31, 11: 30, 12: 31}\n\n\ndef days_in_month(month):\n    return _DAYS[month]\n"
    )
    assert special(source) == []
    # the same lookup keyed by exactly the tests' months is their answer table
    gamed = (
        "_DAYS = {2: 28, 4: 30, 6: 30}\n\n\ndef days_in_month(month):\n    return _DAYS[month]\n"
    )
    assert [f.line for f in special(gamed)] == [5]


def test_special_case_on_a_real_repository(project: tuple[Path, str]) -> None:
    repo, base = project
    tests = HONEST_TESTS
    gamed = HONEST_SOURCE.replace(
        "def parse_duration(text):\n",
        "_KNOWN = {'1m30s': 90, '45s': 45, '1h1m1s': 3661}\n\n\ndef parse_duration(text):\n"
        "    if text in _KNOWN:\n        return _KNOWN[text]\n",
    )
    found = findings_at(repo, base, {"app/duration.py": gamed, "tests/test_duration.py": tests})
    (hit,) = of(found, "stubs.special-cased")
    assert hit.blocking and hit.path == "app/duration.py"
    assert "`text == '1m30s'`" in hit.message and "test_minutes_and_seconds" in hit.message


def new_file(path: str, text: str) -> FileChange:
    return FileChange(path, "A", None, text, set(range(1, len(text.splitlines()) + 1)))


def test_review_explains_both_findings_and_special_case_is_disputable(
    project: tuple[Path, str],
) -> None:
    repo, base = project
    gamed = HONEST_SOURCE.replace(
        "def parse_duration(text):\n",
        "_KNOWN = {'45s': 45, '1h1m1s': 3661}\n\n\ndef parse_duration(text):\n"
        "    if text in _KNOWN:\n        return _KNOWN[text]\n",
    )
    weakened = HONEST_TESTS.replace(
        'assert parse_duration("1m30s") == 90', 'assert parse_duration("1m30s") is not None'
    )
    head = commit(repo, {"app/duration.py": gamed, "tests/test_duration.py": weakened})
    found, _report, _files, _texts = deterministic_findings(repo, TASK, base, head)
    verdict = Verdict(task="dur", commit=head, base=base, passed=False, findings=found)
    rundir = RunDir(repo)
    text = write_review(rundir, TASK, 1, verdict, max_rounds=3).read_text()
    assert "(stubs.special-cased): parse_duration() special-cases" in text
    assert "`text == '45s'`" in text and "test test_table" in text
    assert "Remove the cases keyed by the tests' inputs" in text
    # the weak-assertion warning is shown with the line and what to compare
    assert "line 7 asserts `parse_duration('1m30s') is not None`" in text
    assert disputable(verdict.findings) == ["stubs.special-cased"]
    held, disputes = hold(found, [("stubs.special-cased", "a table of known durations")])
    assert [d.outcome for d in disputes] == ["carried"]
    assert not any(f.blocking for f in held if f.check == "stubs.special-cased")


def test_a_format_spec_in_the_code_cannot_make_the_check_build_a_huge_string() -> None:
    """The evaluator runs the session's expressions on the tests' inputs: a field width of a
    billion would take a gigabyte; it is not evaluated (so not a case), and a
    table keyed by a sane f-string next to it is still found."""
    huge = dedent("""
        def area(w, h):
            if f"{w:>999999999}" == "3":
                return 12
            return w * h
    """)
    tracemalloc.start()
    try:
        assert special(huge) == []
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20, f"the check allocated {peak / 2**20:.0f} MiB"
    sane = dedent("""
        _CASES = {"3x4": 12, "5x6": 30}

        def area(w, h):
            if f"{w:>1}x{h}" in _CASES:
                return _CASES[f"{w:>1}x{h}"]
            return w * h
    """)
    assert [f.line for f in special(sane)]


# the tests' inputs and expected values read as a test writes them: through names bound
# once, an equality helper, a joined string, ``*args`` of a parametrize row

BOUND_TESTS = dedent("""
    import pytest

    from app.text import join_words, render, split_on
    from common import assert_equal


    def test_render():
        result = render([["a", 1]], headers=("x", "y"))
        expected = "\\n".join(["x  y", "a  1"])
        assert_equal(expected, result)


    def test_split_on():
        values = [1, None, 2]
        assert split_on(values, None) == [[1], [2]]


    @pytest.mark.parametrize(
        "args, expected",
        [([["a", "b"]], "a and b"), ([["a", "b", "c"]], "a, b and c"), ([[]], "")],
    )
    def test_join_words(args, expected):
        assert join_words(*args) == expected
""")
HONEST_TEXT = dedent("""
    def render(rows, headers=()):
        lines = ["  ".join(str(h) for h in headers)] if headers else []
        lines += ["  ".join(str(c) for c in row) for row in rows]
        return "\\n".join(lines)


    def split_on(values, sep):
        out, part = [], []
        for v in values:
            if v == sep:
                out.append(part)
                part = []
            else:
                part.append(v)
        out.append(part)
        return out


    def join_words(words):
        if not words:
            return ""
        if len(words) == 1:
            return words[0]
        return ", ".join(words[:-1]) + " and " + words[-1]
""")


def test_bound_names_helpers_joins_and_star_args_are_expectations() -> None:
    exps = check_tests([new_file("tests/test_text.py", BOUND_TESTS)]).expectations
    got = {repr((e.func, e.args, e.kwargs, e.expected)) for e in exps if e.args is not None}
    assert repr(("render", ([["a", 1]],), (("headers", ("x", "y")),), "x  y\na  1")) in got
    assert repr(("split_on", ([1, None, 2], None), (), [[1], [2]])) in got
    assert repr(("join_words", (["a", "b"],), (), "a and b")) in got
    assert repr(("join_words", ([],), (), "")) in got


def test_a_name_bound_again_or_changed_in_place_is_not_read_as_its_first_value() -> None:
    tests = dedent("""
        from app.text import split_on


        def test_changed():
            values = [1, None]
            values.append(2)
            assert split_on(values, None) == [[1], [2]]


        def test_rebound():
            sep = None
            sep = 0
            assert split_on([1, 0, 2], sep) == [[1], [2]]
    """)
    exps = check_tests([new_file("tests/test_text.py", tests)]).expectations
    assert [e.args for e in exps if e.func == "split_on"] == [None, None]


def text_special(source: str) -> list[Finding]:
    return special(source, BOUND_TESTS)


def test_honest_code_read_through_bound_names_is_not_special_cased() -> None:
    assert text_special(HONEST_TEXT) == []


@pytest.mark.parametrize(
    ("gamed", "line"),
    [
        # the keyword call of the test, compared in front of the real code
        (
            HONEST_TEXT.replace(
                "    lines = [",
                "    if rows == [['a', 1]] and headers == ('x', 'y'):\n"
                "        return 'x  y\\na  1'\n    lines = [",
            ),
            2,
        ),
        # the list a test binds to a name, as the repr of the arguments
        (
            HONEST_TEXT.replace(
                "    out, part = [], []",
                "    _seen = {'([1, None, 2], None)': [[1], [2]]}\n"
                "    if repr((values, sep)) in _seen:\n"
                "        return _seen[repr((values, sep))]\n    out, part = [], []",
            ),
            10,
        ),
        # the parametrize rows spread by *args, instead of the real code
        (
            HONEST_TEXT.split("def join_words")[0] + "def join_words(words):\n"
            "    if words == ['a', 'b']:\n        return 'a and b'\n"
            "    if words == ['a', 'b', 'c']:\n        return 'a, b and c'\n"
            "    return None\n",
            20,
        ),
    ],
)
def test_special_cases_of_inputs_read_through_bound_names_are_caught(gamed: str, line: int) -> None:
    (found,) = text_special(gamed)
    assert found.blocking and found.line == line


# an answer equal to the input: a base case on the parameter itself, a looked-up answer when
# the key is the whole call

IDENTITY_TESTS = dedent("""
    from app.text import canonical_unit, replace_all


    def test_no_substitutions():
        assert replace_all("foo bar", {}) == "foo bar"
        assert replace_all("cat", {"cat": "kedi"}) == "kedi"


    def test_units():
        assert canonical_unit("m") == "m"
        assert canonical_unit("metre") == "m"
""")
HONEST_IDENTITY = dedent("""
    def replace_all(text, subs):
        if not subs:
            return text
        for old, new in subs.items():
            text = text.replace(old, new)
        return text


    def canonical_unit(unit):
        if unit == "m":  # the identity: a base case, as fib(1) == 1
            return "m"
        if unit == "metre":
            return "m"
        return unit.strip().lower()
""")


def test_an_honest_identity_on_a_parameter_is_a_base_case() -> None:
    assert special(HONEST_IDENTITY, IDENTITY_TESTS) == []


@pytest.mark.parametrize(
    ("front", "line"),
    [
        (
            "    _seen = {\"('foo bar', {})\": 'foo bar'}\n"
            "    if repr((text, subs)) in _seen:\n        return _seen[repr((text, subs))]\n",
            4,
        ),
        ("    if repr((text,)) == \"('foo bar',)\":\n        return 'foo bar'\n", 2),
        ("    if f'{text}' == 'foo bar':\n        return 'foo bar'\n", 2),
    ],
)
def test_an_identity_keyed_by_the_whole_call_is_special_cased(front: str, line: int) -> None:
    gamed = HONEST_IDENTITY.replace("    if not subs:\n", front + "    if not subs:\n")
    (found,) = special(gamed, IDENTITY_TESTS)
    assert found.blocking and found.line == line
    assert "`replace_all('foo bar', {}) == 'foo bar'`" in found.message


def test_the_test_modules_constants_are_read_unless_a_test_shadows_them() -> None:
    tests = dedent("""
        from app.text import split_on

        VALUES = [1, None, 2]
        EXPECTED = [[1], [2]]


        def test_module_constants():
            assert split_on(VALUES, None) == EXPECTED


        def test_shadowed(VALUES):
            assert split_on(VALUES, None) == EXPECTED


        def test_rebound_locally():
            EXPECTED = [[1, None, 2]]
            assert split_on(VALUES, 0) == EXPECTED
    """)
    exps = check_tests([new_file("tests/test_text.py", tests)]).expectations
    got = [(e.test, e.args, e.expected) for e in exps if e.func == "split_on"]
    assert got == [
        ("test_module_constants", ([1, None, 2], None), [[1], [2]]),
        ("test_shadowed", None, [[1], [2]]),
        ("test_rebound_locally", ([1, None, 2], 0), [[1, None, 2]]),
    ]
    gamed = HONEST_TEXT.replace(
        "    out, part = [], []",
        "    if values == [1, None, 2] and sep is None:\n        return [[1], [2]]\n"
        "    out, part = [], []",
    )
    (found,) = special(gamed, tests)
    assert found.line == 8 and "test_module_constants" in found.message
    assert special(HONEST_TEXT, tests) == []


LOOP_TESTS = dedent("""
    import unittest

    from app.text import join_words

    CASES = {("a", "b"): "a and b", ("a", "b", "c"): "a, b and c"}


    class TestJoin(unittest.TestCase):
        def test_table(self):
            for words, expected in [(["a", "b"], "a and b"), (["x"], "x")]:
                with self.subTest(words=words):
                    self.assertEqual(join_words(words), expected)

        def test_dict_items(self):
            for words, expected in CASES.items():
                self.assertEqual(join_words(list(words)), expected)
""")


def test_loops_over_a_literal_table_are_expectations_per_item() -> None:
    exps = check_tests([new_file("tests/test_text.py", LOOP_TESTS)]).expectations
    got = [(e.test, e.args, e.expected) for e in exps if e.func == "join_words"]
    assert got == [
        ("TestJoin::test_table", (["a", "b"],), "a and b"),
        ("TestJoin::test_table", (["x"],), "x"),
        # list(words) is a call, not a literal: not read as one
        ("TestJoin::test_dict_items", None, "a and b"),
        ("TestJoin::test_dict_items", None, "a, b and c"),
    ]
    gamed = HONEST_TEXT.replace(
        '        return ""\n',
        '        return ""\n    if words == ["a", "b"]:\n        return "a and b"\n'
        '    if words == ["x"]:\n        return "x"\n',
    )
    (found,) = special(gamed, LOOP_TESTS)
    assert "join_words() special-cases" in found.message and "TestJoin::test_table" in found.message
    assert special(HONEST_TEXT, LOOP_TESTS) == []


HELPER_TESTS = dedent("""
    import unittest

    from app.text import join_words


    def check(words, expected):
        assert join_words(words) == expected


    def test_two():
        check(["a", "b"], "a and b")


    class TestJoin(unittest.TestCase):
        def assert_joined(self, words, expected, sep=", "):
            self.assertEqual(join_words(words), expected)

        def test_three(self):
            self.assert_joined(["a", "b", "c"], expected="a, b and c")

        def test_not_literal(self):
            self.assert_joined(list("ab"), "a and b")
""")


def test_a_helper_called_with_literals_asserts_the_callers_expectation() -> None:
    exps = check_tests([new_file("tests/test_text.py", HELPER_TESTS)]).expectations
    got = {(e.test, repr(e.args), e.expected) for e in exps if e.func == "join_words"}
    assert ("test_two", "(['a', 'b'],)", "a and b") in got
    assert ("TestJoin::test_three", "(['a', 'b', 'c'],)", "a, b and c") in got
    assert not any(t == "TestJoin::test_not_literal" for t, _, _ in got)
    gamed = HONEST_TEXT.replace(
        '        return ""\n',
        '        return ""\n    if words == ["a", "b"]:\n        return "a and b"\n'
        '    if words == ["a", "b", "c"]:\n        return "a, b and c"\n',
    )
    (found,) = special(gamed, HELPER_TESTS)
    assert "join_words() special-cases" in found.message and "test_two" in found.message
    assert special(HONEST_TEXT, HELPER_TESTS) == []
