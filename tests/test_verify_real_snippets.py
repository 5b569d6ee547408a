"""The heuristics the real-history corpus showed wrong, each with the pattern of
the upstream change that was wrongly blocked, and the gamed change it must still block.

The snippets are minimal re-typed reproductions of the upstream pattern (the commit is
named in each test), not copies of the projects' code.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from loop_orchestrator.verify import classify, secrets
from loop_orchestrator.verify.models import warning
from loop_orchestrator.verify.testquality import FileChange, TestReport, check_tests
from loop_orchestrator.verify.weakproof import escalate


def change(path: str, old: str | None, new: str | None) -> FileChange:
    """A file changed from ``old`` to ``new``; every line of ``new`` that is not in ``old``
    counts as added (enough for these snippets)."""
    old_lines = set((old or "").splitlines())
    added = {
        i
        for i, line in enumerate((new or "").splitlines(), 1)
        if line not in old_lines or old is None
    }
    status = "A" if old is None else "D" if new is None else "M"
    return FileChange(path=path, status=status, old=old, new=new, added=added)


def found(report: TestReport, check: str) -> list[str]:
    """Severities of the findings with id ``check``."""
    return [f.severity.value for f in report.findings if f.check == check]


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


# tests.tautology: boltons 580a9c2d / ec1ff9f6 (a test of _ComplementSet.__ge__/__le__)

COMPLEMENT_TEST = dedent("""
    from app.sets import complement

    def test_complement_ordering():
        cab = complement("ab")
        ca = complement("a")
        assert cab <= ca
        assert not ca <= cab
        assert cab <= cab
        assert cab >= cab
        assert ca >= cab
""")


def test_self_comparison_in_a_test_of_a_class_own_operators_is_a_warning() -> None:
    report = check_tests([change("tests/test_sets.py", None, COMPLEMENT_TEST)])
    assert found(report, "tests.tautology") == ["warning", "warning"]


@pytest.mark.parametrize(
    "body",
    [
        # a lone self-comparison of a project value checks nothing
        "    result = add(1, 2)\n    assert result == result\n",
        # built-in values compare equal to themselves whatever the project does
        "    items = [add(1, 2)]\n    x = [1, 2]\n    assert x == x\n    assert items\n",
        "    assert add(1, 2)\n    n = 3\n    assert n >= n\n",
        # identity cannot be overridden
        "    obj = make()\n    assert obj is obj\n    assert obj != other()\n",
        "    obj = make()\n    self.assertEqual(obj, obj)\n",
    ],
)
def test_gamed_self_comparisons_still_block(body: str) -> None:
    source = "from app import add, make, other\n\ndef test_it():\n" + body
    report = check_tests([change("tests/test_calc.py", None, source)])
    assert "blocking" in found(report, "tests.tautology"), report.findings


# tests.deleted: more-itertools 069b3000 (test_hash folded into test_eq)

NUMERIC_BASE = dedent("""
    from unittest import TestCase

    from app import numeric_range

    class NumericRangeTests(TestCase):
        def test_eq(self):
            for a, b in [((0, 5, 2), (0, 6, 2))]:
                self.assertEqual(numeric_range(*a), numeric_range(*b))

        def test_hash(self):
            for args, expected in [((1.0, 6.0, 1.5), hash((1.0, 5.5, 1.5)))]:
                self.assertEqual(hash(numeric_range(*args)), expected)

        def test_len(self):
            self.assertEqual(len(numeric_range(3)), 3)
""")
NUMERIC_HEAD = dedent("""
    from unittest import TestCase

    from app import numeric_range

    class NumericRangeTests(TestCase):
        def test_eq(self):
            for a, b in [((0, 5, 2), (0, 6, 2)), ((2, 3, 1), (2, 3, 5))]:
                range1, range2 = numeric_range(*a), numeric_range(*b)
                self.assertEqual(range1, range2)
                self.assertEqual(hash(range1), hash(range2))

        def test_len(self):
            self.assertEqual(len(numeric_range(3)), 3)
""")


def test_a_test_whose_checks_moved_into_its_neighbour_is_a_warning() -> None:
    report = check_tests([change("tests/test_more.py", NUMERIC_BASE, NUMERIC_HEAD)])
    assert found(report, "tests.deleted") == ["warning"]
    [f] = [f for f in report.findings if f.check == "tests.deleted"]
    assert "test_eq" in f.message and "hash" in f.message


def test_a_test_deleted_with_nothing_in_its_place_still_blocks() -> None:
    # boltons 967864f8, gamed: test_mode was added (it uses Stats too), the old
    # test_stats_basic deleted; test_mode does not assert what test_stats_basic asserted
    base = dedent("""
        from app.stats import Stats

        def test_stats_basic():
            da = Stats(range(20))
            assert da.mean == 9.5
            assert round(da.std_dev, 2) == 5.77
    """)
    head = dedent("""
        from app.stats import Stats, mode

        def test_mode():
            assert Stats([2, 1, 3, 1]).mode == 1
            assert mode([1, 1, 2]) == 1
    """)
    report = check_tests([change("tests/test_stats.py", base, head)])
    assert found(report, "tests.deleted") == ["blocking"]
    # and the neighbour-test case, without the move: test_hash simply deleted
    no_move = NUMERIC_BASE.replace(
        "    def test_hash(self):\n"
        "        for args, expected in [((1.0, 6.0, 1.5), hash((1.0, 5.5, 1.5)))]:\n"
        "            self.assertEqual(hash(numeric_range(*args)), expected)\n\n",
        "",
    )
    report = check_tests([change("tests/test_more.py", NUMERIC_BASE, no_move)])
    assert found(report, "tests.deleted") == ["blocking"]


def test_a_deleted_test_is_not_taken_as_moved_for_a_class_every_test_uses() -> None:
    # boltons d0a284fc, gamed: test_indexed_set_basic deleted while the commit adds tests
    # that assert on IndexedSet too (so does every test of the module)
    base = dedent("""
        from app import IndexedSet

        def test_indexed_set_basic():
            x = IndexedSet(range(10))
            assert list(x) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
            assert x[-1] == IndexedSet([9])[0]

        def test_indexed_set_rsub():
            assert IndexedSet("abc") - set("b") == IndexedSet("ac")
    """)
    head = dedent("""
        from app import IndexedSet

        def test_indexed_set_rsub():
            assert IndexedSet("abc") - set("b") == IndexedSet("ac")

        def test_iset_scalar_index_bounds():
            x = IndexedSet(range(10))
            assert x[-9] == 1
            assert len(IndexedSet()) == 0
    """)
    report = check_tests([change("tests/test_setutils.py", base, head)])
    assert found(report, "tests.deleted") == ["blocking"]


def test_a_test_renamed_and_extended_is_a_warning() -> None:
    # more-itertools 71b46b06: test_negative became test_invalid_n, one more case
    base = dedent("""
        from unittest import TestCase

        import app as mi

        class WindowedTests(TestCase):
            def test_negative(self):
                with self.assertRaises(ValueError):
                    list(mi.windowed([1, 2, 3, 4, 5], -1))
    """)
    head = dedent("""
        from unittest import TestCase

        import app as mi

        class WindowedTests(TestCase):
            def test_invalid_n(self):
                with self.assertRaises(ValueError):
                    list(mi.windowed([1, 2, 3, 4, 5], 0))  # n is zero
                with self.assertRaises(ValueError):
                    list(mi.windowed([1, 2, 3, 4, 5], -1))  # n is negative
    """)
    report = check_tests([change("tests/test_more.py", base, head)])
    assert found(report, "tests.deleted") == ["warning"]
    # gamed: renamed, and the old case dropped on the way
    gamed = head.replace("-1))  # n is negative", "0))")
    report = check_tests([change("tests/test_more.py", base, gamed)])
    assert found(report, "tests.deleted") == ["blocking"]


PIPE_TESTS_BASE = dedent("""
    from app.functoolz import pipeline, compose

    def test_compose():
        assert compose(str)(1) == "1"

    def test_pipeline():
        assert pipeline(inc, str)(3) == "4"
        assert pipeline()(3) == 3
""")
PIPE_TESTS_HEAD = dedent("""
    from app.functoolz import compose_left, compose

    def test_compose():
        assert compose(str)(1) == "1"

    def test_compose_left():
        for funcs, arg, expected in [((inc, str), 3, "4"), ((), 3, 3), ((str,), 1, "1")]:
            assert compose_left(*funcs)(arg) == expected
""")


def test_a_test_of_code_the_change_renames_is_a_warning() -> None:
    # toolz 1c07bc30: pipeline() renamed compose_left(); test_pipeline goes with it
    code_base = "def compose(*f):\n    return f\n\n\ndef pipeline(*funcs):\n    return funcs\n"
    code_head = code_base.replace("def pipeline(", "def compose_left(")
    report = check_tests(
        [
            change("app/functoolz.py", code_base, code_head),
            change("tests/test_functoolz.py", PIPE_TESTS_BASE, PIPE_TESTS_HEAD),
        ]
    )
    assert found(report, "tests.deleted") == ["warning"]
    # gamed: the function is still there, its test is gone and nothing took its cases
    head = PIPE_TESTS_HEAD.split("def test_compose_left")[0].replace("compose_left, ", "")
    report = check_tests(
        [
            change(
                "app/functoolz.py",
                code_base,
                code_base + "\n\ndef compose_left(*f):\n    return f\n",
            ),
            change("tests/test_functoolz.py", PIPE_TESTS_BASE, head),
        ]
    )
    assert found(report, "tests.deleted") == ["blocking"]


def test_assertions_turned_into_a_parametrized_table_are_a_warning() -> None:
    # toolz 9e97f73f: test_compose's five asserts became one assert over a table
    base = dedent("""
        from app import compose, inc, double

        def test_compose():
            assert compose()(0) == 0
            assert compose(inc)(0) == 1
            assert compose(double, inc)(0) == 2
    """)
    head = dedent("""
        import pytest
        from app import compose, inc, double

        @pytest.mark.parametrize("funcs,arg,expected", [((), 0, 0), ((inc,), 0, 1),
                                                        ((double, inc), 0, 2)])
        def test_compose(funcs, arg, expected):
            assert compose(*funcs)(arg) == expected
    """)
    report = check_tests([change("tests/test_functoolz.py", base, head)])
    assert found(report, "tests.fewer-assertions") == ["warning"]
    # gamed: two of the three asserts just removed
    gamed = base.replace("    assert compose(inc)(0) == 1\n", "").replace(
        "    assert compose(double, inc)(0) == 2\n", ""
    )
    report = check_tests([change("tests/test_functoolz.py", base, gamed)])
    assert found(report, "tests.fewer-assertions") == ["blocking"]


# JS: nanoid (node:assert functions imported by name) and range-parser (mocha test/)

NANOID_TEST = dedent("""
    import { equal, notEqual, throws } from 'node:assert'
    import { test } from 'node:test'

    import { nanoid } from '../index.js'

    test('does not hang on negative size', () => {
      equal(nanoid(-1), '')
    })

    test('throws on too big ID length', () => {
      throws(() => {
        nanoid(2147483648)
      }, /Wrong ID size/)
      notEqual(nanoid(), nanoid())
    })
""")


def test_node_assert_functions_imported_by_name_are_assertions() -> None:
    report = check_tests([change("test/index.test.js", None, NANOID_TEST)])
    assert found(report, "tests.no-assertion") == []
    gamed = NANOID_TEST.replace("  equal(nanoid(-1), '')\n", "  nanoid(-1)\n")
    report = check_tests([change("test/index.test.js", None, gamed)])
    assert found(report, "tests.no-assertion") == ["blocking"]


def test_a_js_test_whose_distinctive_case_moved_is_a_warning_and_a_plain_deletion_blocks() -> None:
    # nanoid 70879692: 'avoids pool break' (the 2147483648 case) folded into a new test
    base = NANOID_TEST.split("test('throws on too big ID length'")[0] + dedent("""
        test('avoids pool break', () => {
          try {
            nanoid(2147483648)
          } catch {}
          let third = nanoid()
          notEqual(third, nanoid())
        })
    """)
    head = NANOID_TEST
    report = check_tests([change("test/index.test.js", base, head)])
    assert found(report, "tests.deleted") == ["warning"]
    # range-parser 2f659319, gamed: a test deleted; its literals (200, parse) are used by
    # every other test, so nothing shows that its check moved
    rp_base = dedent("""
        var assert = require('assert')
        var parse = require('..')

        describe('parseRange(len, str)', function () {
          it('should return -2 for invalid str', function () {
            assert.strictEqual(parse(200, 'malformed'), -2)
          })

          it('should return -1 if all ranges are invalid', function () {
            assert.strictEqual(parse(200, 'bytes=500-20'), -1)
          })
        })
    """)
    rp_head = rp_base.replace(
        "  it('should return -2 for invalid str', function () {\n"
        "    assert.strictEqual(parse(200, 'malformed'), -2)\n  })\n\n",
        "",
    ).replace(
        "-1)\n  })\n", "-1)\n    assert.strictEqual(parse(200, 'bytes=0-1').type, 'bytes')\n  })\n"
    )
    assert "malformed" not in rp_head and "bytes=0-1" in rp_head
    report = check_tests([change("test/range-parser.js", rp_base, rp_head)])
    assert found(report, "tests.deleted") == ["blocking"]


def test_mocha_scripts_in_a_top_level_test_folder_are_test_modules() -> None:
    assert classify.is_js_test_module("test/range-parser.js")
    assert classify.is_js_test_module("tests/parse.mjs")
    assert not classify.is_js_test_module("test/fixtures/big.js")
    assert not classify.is_js_test_module("lib/test.js")


# tests.skip: python-tabulate 032dc0d1 (skip when the optional wcwidth is missing)


def test_a_skip_for_a_missing_optional_dependency_is_a_warning() -> None:
    source = dedent("""
        from pytest import skip
        from app import wrap

        def test_wrap_wide_chars():
            try:
                import wcwidth  # noqa: F401
            except ImportError:
                skip("needs wcwidth")
            assert wrap("ab", 1) == ["a", "b"]
    """)
    report = check_tests([change("tests/test_wrap.py", None, source)])
    assert found(report, "tests.skip") == ["warning"]
    gamed = source.replace(
        """    try:
        import wcwidth  # noqa: F401
    except ImportError:
        skip("needs wcwidth")""",
        '    skip("flaky")',
    )
    report = check_tests([change("tests/test_wrap.py", None, gamed)])
    assert found(report, "tests.skip") == ["blocking"]


# secrets.assignment: python-semver f8a182f5 (a version's prerelease token)


def test_a_word_assigned_to_a_bare_token_is_not_a_credential() -> None:
    line = '    def bump_build(self, token: Optional[str] = "build") -> "Version":'
    assert secrets.check_secrets({"src/semver/version.py": [(338, line)]}) == []
    for gamed in (
        '    token = "a8f5f167f44f4964e6c998dee827110c"',
        '    auth_token = "build1234"',
        '    password = "hunter22"',
    ):
        [f] = secrets.check_secrets({"app/client.py": [(3, gamed)]})
        assert (f.check, f.blocking) == ("secrets.assignment", True), gamed


# tests.deleted, missed by the test finder: cachetools 18e5930c, 57d2e481, 2aeffb04 (the
# tests live in a mixin class that the TestCase subclasses of the module inherit)

MIXIN_BASE = dedent("""
    import unittest

    from app import cached, lru_cache, fifo_cache

    class DecoratorTestMixin:
        def decorator(self, maxsize):
            return self.DECORATOR(maxsize)

        def test_decorator(self):
            f = self.decorator(maxsize=2)(lambda n: n)
            self.assertEqual(f(1), 1)
            self.assertEqual(f.cache_info(), (0, 1, 2, 1))

        def test_decorator_clear(self):
            f = self.decorator(maxsize=2)(lambda n: n)
            f.cache_clear()
            self.assertEqual(f.cache_info(), (0, 0, 2, 0))

    class LRUDecoratorTest(unittest.TestCase, DecoratorTestMixin):
        DECORATOR = staticmethod(lru_cache)

    class FIFODecoratorTest(unittest.TestCase, DecoratorTestMixin):
        DECORATOR = staticmethod(fifo_cache)
""")


MIXIN_TYPED_TEST = """\
    def test_decorator_typed(self):
        f = self.decorator(maxsize=2, typed=True)(lambda n: n)
        self.assertEqual(f(1.0), 1.0)

"""
MIXIN_DECORATOR_TEST = """\
    def test_decorator(self):
        f = self.decorator(maxsize=2)(lambda n: n)
        self.assertEqual(f(1), 1)
        self.assertEqual(f.cache_info(), (0, 1, 2, 1))

"""


def test_a_test_deleted_from_a_mixin_class_blocks() -> None:
    # the honest change adds a test to the mixin; the gamed one also deletes test_decorator
    honest = MIXIN_BASE.replace(
        "    def test_decorator_clear", MIXIN_TYPED_TEST + "    def test_decorator_clear"
    )
    assert MIXIN_DECORATOR_TEST in honest
    report = check_tests([change("tests/test_func.py", MIXIN_BASE, honest)])
    assert found(report, "tests.deleted") == []
    # a mixin's test runs under its subclasses' names: it is judged, but not looked up in
    # a test report under the mixin's name (that would be "did not run" for every one)
    assert report.touched == []
    assert [t.qualname for t in report.inherited] == ["DecoratorTestMixin::test_decorator_typed"]
    gamed = honest.replace(MIXIN_DECORATOR_TEST, "")
    report = check_tests([change("tests/test_func.py", MIXIN_BASE, gamed)])
    [f] = [f for f in report.findings if f.check == "tests.deleted"]
    assert f.blocking and "DecoratorTestMixin::test_decorator " in f.message


def test_a_mixin_test_is_judged_like_any_test() -> None:
    weakened = MIXIN_BASE.replace("        self.assertEqual(f.cache_info(), (0, 1, 2, 1))\n", "")
    assert weakened != MIXIN_BASE
    report = check_tests([change("tests/test_func.py", MIXIN_BASE, weakened)])
    assert found(report, "tests.fewer-assertions") == ["blocking"]
    emptied = MIXIN_BASE.replace(
        "        self.assertEqual(f.cache_info(), (0, 0, 2, 0))\n", "        pass\n"
    )
    assert emptied != MIXIN_BASE
    report = check_tests([change("tests/test_func.py", MIXIN_BASE, emptied)])
    assert found(report, "tests.no-assertion") == ["blocking"]


def test_a_mixin_whose_subclasses_live_elsewhere_is_known_by_its_name() -> None:
    # cachetools keeps CacheTestMixin in one module and its TestCase subclasses in others
    base = dedent("""
        class MethodDecoratorTestMixin:
            def test_decorator(self):
                self.assertEqual(self.cached().get(1), 1)

            def test_decorator_clear(self):
                self.assertEqual(self.cached().get(2), 2)

        class Helper:
            def test_like_but_not_a_test(self):
                assert False
    """)
    head = base.replace(
        "    def test_decorator(self):\n        self.assertEqual(self.cached().get(1), 1)\n\n", ""
    )
    report = check_tests([change("tests/test_method.py", base, head)])
    assert found(report, "tests.deleted") == ["blocking"]
    # a class neither inherited by a test class nor named as a test helper is not a test
    head = base.split("class Helper")[0]
    report = check_tests([change("tests/test_method.py", base, head)])
    assert found(report, "tests.deleted") == []


# tests.deleted, let through as "moved": tabulate 3aa568c6, 5373ebfa, 8014ec66 (every test
# ends in assert_equal(expected, result), so any new test "held every assertion" of any
# deleted one) and cachetools 4d74eb46 (the small numbers every cache test uses)

TABLE_BASE = dedent("""
    from app import render, assert_equal

    ROWS = [["spam", 41.9999], ["eggs", 451]]

    def test_plain():
        "Output: plain with headers"
        expected = "strings   numbers\\nspam      41.9999\\neggs     451"
        result = render(ROWS, ["strings", "numbers"], fmt="plain")
        assert_equal(expected, result)

    def test_simple():
        expected = "--------  --\\nspam      41.9999"
        result = render(ROWS, fmt="simple")
        assert_equal(expected, result)
""")
TABLE_NEW_TEST = dedent("""

    def test_asciidoc_without_trailing_whitespace():
        result = render([["foo"]], ["longheader"], fmt="asciidoc")
        expected = "|====\\n| longheader\\n| foo\\n|===="
        assert_equal(expected, result)
""")


def test_a_deleted_test_is_not_taken_as_moved_by_an_assertion_that_only_looks_alike() -> None:
    head = (
        TABLE_BASE.split("def test_plain")[0]
        + "def test_simple"
        + TABLE_BASE.split("def test_simple")[1]
        + TABLE_NEW_TEST
    )
    assert "def test_plain" not in head
    report = check_tests([change("tests/test_output.py", TABLE_BASE, head)])
    assert found(report, "tests.deleted") == ["blocking"]


def test_a_deleted_test_whose_resolved_assertion_moved_is_a_warning() -> None:
    # the same check, written differently (other local names, other order), in a new test
    head = (
        TABLE_BASE.split("def test_plain")[0]
        + "def test_simple"
        + TABLE_BASE.split("def test_simple")[1]
        + dedent("""

        def test_plain_with_headers():
            got = render(ROWS, ["strings", "numbers"], fmt="plain")
            want = "strings   numbers\\nspam      41.9999\\neggs     451"
            assert_equal(want, got)
            assert_equal("", render([], fmt="plain"))
    """)
        .replace("got", "result")
        .replace("want", "expected")
    )
    report = check_tests([change("tests/test_output.py", TABLE_BASE, head)])
    [f] = [f for f in report.findings if f.check == "tests.deleted"]
    assert not f.blocking and "test_plain_with_headers holds every assertion" in f.message
    # gamed: the new test checks another table with the same names
    gamed = head.replace('got = render(ROWS, ["strings", "numbers"]', "got = render(ROWS")
    gamed = gamed.replace(
        'result = render(ROWS, ["strings", "numbers"], fmt="plain")',
        'result = render(ROWS, fmt="plain")',
    )
    report = check_tests([change("tests/test_output.py", TABLE_BASE, gamed)])
    assert found(report, "tests.deleted") == ["blocking"]


def test_an_assertion_the_other_test_had_already_is_not_a_moved_check() -> None:
    # test_simple asserted the very same thing as test_plain at the base; its being
    # changed by the task does not make it the new home of test_plain's check
    base = TABLE_BASE.replace(
        'result = render(ROWS, fmt="simple")',
        'result = render(ROWS, ["strings", "numbers"], fmt="plain")',
    )
    base = base.replace(
        'expected = "--------  --\\\\nspam      41.9999"',
        'expected = "strings   numbers\\\\nspam      41.9999\\\\neggs     451"',
    )
    head = (
        base.split("def test_plain")[0]
        + "def test_simple"
        + base.split("def test_simple")[1].replace(
            "assert_equal(expected, result)", "assert_equal(expected, result)\n    assert result"
        )
    )
    assert head.count('fmt="plain"') == 1
    report = check_tests([change("tests/test_output.py", base, head)])
    assert found(report, "tests.unparsable") == []
    assert found(report, "tests.deleted") == ["blocking"]


def test_small_numbers_every_cache_test_uses_do_not_name_a_moved_case() -> None:
    base = dedent("""
        import unittest

        from app import RRCache

        class RRCacheTest(unittest.TestCase):
            def test_rr(self):
                cache = RRCache(maxsize=2, choice=min)
                cache[1] = 1
                cache[2] = 2
                cache[3] = 3
                self.assertEqual(2, len(cache))
                self.assertEqual(3, cache[3])
                self.assertNotIn(1, cache)
    """)
    head = base.split("    def test_rr")[0] + (
        "    def test_rr_getsizeof(self):\n"
        "        cache = RRCache(maxsize=3, choice=min, getsizeof=lambda x: x)\n"
        "        cache[1] = 1\n"
        "        cache[2] = 2\n"
        "        self.assertEqual(len(cache), 2)\n"
        "        cache[3] = 3\n"
        "        self.assertEqual(cache[3], 3)\n"
        "        self.assertNotIn(2, cache)\n"
    )
    report = check_tests([change("tests/test_rr.py", base, head)])
    assert [f.check for f in report.findings if f.blocking] == ["tests.deleted"]
    # a case named by a distinctive value that reappears is evidence (a warning)
    base = base.replace("maxsize=2", "maxsize=1024")
    head = head.replace("maxsize=3", "maxsize=1024")
    report = check_tests([change("tests/test_rr.py", base, head)])
    assert found(report, "tests.deleted") == ["warning"]


def test_fewer_assertions_are_excused_only_by_checks_added_elsewhere() -> None:
    # the removed assertion compares two names: it proves nothing about where it went
    base = dedent("""
        from app import render, assert_equal

        def test_plain():
            expected = "a"
            result = render("a")
            assert_equal(expected, result)
            assert_equal(expected.upper(), render("A"))

        def test_other():
            expected = "b"
            result = render("b")
            assert_equal(expected, result)
    """)
    head = base.replace('    assert_equal(expected.upper(), render("A"))\n', "").replace(
        'result = render("b")\n    assert_equal(expected, result)',
        'result = render("b")\n    assert_equal(expected, result)\n    assert result',
    )
    report = check_tests([change("tests/test_output.py", base, head)])
    assert found(report, "tests.fewer-assertions") == ["blocking"]
    moved = head.replace("    assert result\n", '    assert_equal("A", render("A"))\n')
    report = check_tests([change("tests/test_output.py", base, moved)])
    assert found(report, "tests.fewer-assertions") == ["blocking"]  # not the same check
    moved = head.replace("    assert result\n", '    assert_equal("a".upper(), render("A"))\n')
    report = check_tests([change("tests/test_output.py", base, moved)])
    assert found(report, "tests.fewer-assertions") == ["warning"]


def test_a_change_tested_in_a_mixin_has_tests(git_repo: Path) -> None:
    # cachetools adds its tests to the mixins: "changes code but adds no test" is wrong there
    from helpers.git import git

    from loop_orchestrator.plan.model import Task
    from loop_orchestrator.verify.verdict import deterministic_findings

    def commit(files: dict[str, str]) -> str:
        for rel, text in files.items():
            (git_repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (git_repo / rel).write_text(text, encoding="utf-8")
        git(git_repo, "add", "-A")
        git(git_repo, "commit", "-q", "--no-gpg-sign", "-m", "work")
        return git(git_repo, "rev-parse", "HEAD").strip()

    base = commit(
        {"app/__init__.py": "def cached(n):\n    return n\n", "tests/test_func.py": MIXIN_BASE}
    )
    task = Task(id="t", objective="typed caches", owns=["app/**", "tests/**"], done=[])
    code = "def cached(n, typed=False):\n    return n\n"
    head = commit(
        {
            "app/__init__.py": code,
            "tests/test_func.py": MIXIN_BASE.replace(
                "    def test_decorator_clear", MIXIN_TYPED_TEST + "    def test_decorator_clear"
            ),
        }
    )
    findings = deterministic_findings(git_repo, task, base, head)[0]
    assert [f.check for f in findings if f.check.startswith("tests.")] == []
    # and with no test at all, it is still said
    only_code = commit({"tests/test_func.py": MIXIN_BASE})
    findings = deterministic_findings(
        git_repo, task, only_code, commit({"app/__init__.py": code + "\n\nY = 2\n"})
    )[0]
    assert "tests.none-added" in [f.check for f in findings]


# tests.no-assertion: overrides d18bdb8e (a hand-written assertRaises: try, raise, except)

EXPECTS_RAISE = dedent("""
    import unittest

    from app.final import final_check


    class FinalTests(unittest.TestCase):
        def test_final_fails_inner_class(self):
            try:
                final_check("inner")
                raise RuntimeError("Should not go here")
            except TypeError:
                pass

        def test_final_fails_in_else(self):
            try:
                final_check("other")
            except (TypeError, ValueError):
                pass
            else:
                raise AssertionError("no error")
""")


def test_a_try_that_raises_past_handlers_of_other_exceptions_is_an_assertion() -> None:
    report = check_tests([change("tests/test_final.py", None, EXPECTS_RAISE)])
    assert found(report, "tests.no-assertion") == []
    assert found(report, "tests.weak-assertions") == []


RAISE_LINE = '            raise RuntimeError("Should not go here")\n'


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # the closing raise removed: nothing fails when final_check accepts "inner"
        (RAISE_LINE, ""),
        # a handler that catches the closing raise too
        ("except TypeError:", "except Exception:"),
        ("except TypeError:", "except RuntimeError:"),
        ("except TypeError:", "except:"),
        ("except TypeError:", "except (KeyError, BaseException):"),
        # the raise only under a condition
        (RAISE_LINE, "            if False:\n    " + RAISE_LINE),
    ],
)
def test_a_try_whose_closing_raise_is_caught_or_missing_is_still_no_assertion(
    old: str, new: str
) -> None:
    gamed = EXPECTS_RAISE.split("    def test_final_fails_in_else")[0]
    assert old in gamed
    report = check_tests([change("tests/test_final.py", None, gamed.replace(old, new))])
    assert found(report, "tests.unparsable") == []
    assert found(report, "tests.no-assertion") == ["blocking"]


# tests.fewer-assertions: tomli 9eb2125e (an expected-failure branch removed from a loop)

DATA_TEST_BASE = dedent("""
    import unittest

    from app import loads
    from tests.data import CASES


    class TestData(unittest.TestCase):
        def test_valid(self):
            for name, text, expected in CASES:
                with self.subTest(msg=name):
                    if name in {"no-seconds", "common-31"}:
                        with self.assertRaises(ValueError):
                            loads(text)
                        continue
                    actual = loads(text)
                    self.assertEqual(actual, expected)
                    self.assertIn(name, CASES.names)
""")
EXEMPTION = dedent("""
    if name in {"no-seconds", "common-31"}:
        with self.assertRaises(ValueError):
            loads(text)
        continue
""")
EXEMPTION = textwrap.indent(EXEMPTION, " " * 16)


def test_an_expected_failure_branch_removed_whole_is_a_warning() -> None:
    assert EXEMPTION in DATA_TEST_BASE
    honest = DATA_TEST_BASE.replace(EXEMPTION, "")
    report = check_tests([change("tests/test_data.py", DATA_TEST_BASE, honest)])
    assert found(report, "tests.fewer-assertions") == ["warning"]
    (finding,) = [f for f in report.findings if f.check == "tests.fewer-assertions"]
    assert "exempted its cases" in finding.message


LAST_CHECK = "                self.assertIn(name, CASES.names)\n"
EXEMPTION_LAST = DATA_TEST_BASE.replace(EXEMPTION, "").replace(LAST_CHECK, LAST_CHECK + EXEMPTION)


@pytest.mark.parametrize(
    ("base", "gamed"),
    [
        # the assertion dropped, the exemption kept: those cases are checked by nothing
        (
            DATA_TEST_BASE,
            DATA_TEST_BASE.replace(
                "                    with self.assertRaises(ValueError):\n"
                "                        loads(text)\n",
                "",
            ),
        ),
        # the exemption removed, and one of the checks after it with it
        (DATA_TEST_BASE, DATA_TEST_BASE.replace(EXEMPTION, "").replace(LAST_CHECK, "")),
        # an exemption no check followed (its cases had them all already), removed
        (EXEMPTION_LAST, DATA_TEST_BASE.replace(EXEMPTION, "")),
    ],
)
def test_an_assertion_dropped_from_or_after_an_exemption_still_blocks(
    base: str, gamed: str
) -> None:
    assert gamed != base and "assertRaises" in base and LAST_CHECK in DATA_TEST_BASE
    report = check_tests([change("tests/test_data.py", base, gamed)])
    assert found(report, "tests.fewer-assertions") == ["blocking"]


# tests.no-assertion: tomli 41881885 (a test that only imports a module, to see it loads)

IMPORT_TEST = dedent("""
    import importlib
    import unittest

    import app


    class TestMisc(unittest.TestCase):
        def test_types_import(self):
            \"\"\"The module is for annotations only; nothing else imports it.\"\"\"
            importlib.import_module(f"{app.__name__}._types")
""")


def test_a_test_that_only_imports_is_a_weak_check_blocking_when_it_passes_at_the_parent() -> None:
    report = check_tests([change("tests/test_misc.py", None, IMPORT_TEST)])
    assert found(report, "tests.no-assertion") == []
    (weak,) = [f for f in report.findings if f.check == "tests.weak-assertions"]
    assert weak.severity.value == "warning" and "only that the module loads" in weak.message
    # red-green shows it passes without the change: weak and not red blocks
    not_red = warning("passes at the parent", "redgreen.not-red", "tests/test_misc.py")
    assert [f.severity.value for f in escalate([weak, not_red])] == ["blocking", "warning"]


@pytest.mark.parametrize(
    "body",
    [
        # an import and a call whose result nobody checks
        'importlib.import_module("app._types")\n        app.parse("x = 1")',
        # the module bound and used, nothing asserted
        'mod = importlib.import_module("app._types")\n        mod.parse("x = 1")',
        'mod = importlib.import_module("app._types")',
    ],
)
def test_an_import_next_to_unchecked_code_is_still_no_assertion(body: str) -> None:
    gamed = IMPORT_TEST.replace('importlib.import_module(f"{app.__name__}._types")', body)
    assert gamed != IMPORT_TEST
    report = check_tests([change("tests/test_misc.py", None, gamed)])
    assert found(report, "tests.unparsable") == []
    assert found(report, "tests.no-assertion") == ["blocking"]
