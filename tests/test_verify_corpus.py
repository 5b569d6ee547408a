"""The real-history corpus: its manifest.

The cases are rebuilt offline from local mirrors of the projects, whose code may not be
stored in this repository (see tests/corpus/replay.py), so replaying them is the job of
``benchmarks/verify_corpus.py`` on a machine that has the mirrors
(``LO_ORCH_CORPUS_MIRRORS``), not of the suite, which runs where they are absent. Each
heuristic the corpus corrected has a unit test with the pattern it wrongly blocked
(tests/test_verify_real_snippets.py).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.git import commit, init_repo

sys.path.insert(0, str(Path(__file__).parent / "corpus"))
import replay  # type: ignore[import-not-found]  # tests/corpus, put on the path above

#: one case per kind of trouble the corpus found, and the gamed variants they must catch
SAMPLE = {
    # a test of _ComplementSet's own >= and <= (tests.tautology was blocking)
    "boltons-580a9c2d": ("no-assertions", "deleted-test"),
    # node:assert functions imported by name; a test folded into a new one
    "nanoid-70879692": ("skip", "deleted-test"),
    # mocha tests in test/range-parser.js (were not seen as tests at all)
    "range-parser-2f659319": ("deleted-test", "early-exit"),
}


def test_the_manifest_names_enough_real_commits_with_their_licences() -> None:
    corpus = replay.load_corpus()
    projects, cases = corpus["projects"], corpus["cases"]
    assert len(cases) >= 57
    langs = {name: p["lang"] for name, p in projects.items()}
    assert sum(1 for lang in langs.values() if lang == "py") >= 8
    assert sum(1 for lang in langs.values() if lang == "js") >= 2
    for p in projects.values():
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", p["repo"]) and p["licence"] and p["check"]
    ids = [f"{c['project']}-{c['commit'][:8]}" for c in cases]
    assert len(set(ids)) == len(ids)
    for c in cases:
        assert c["project"] in projects and re.fullmatch(r"[0-9a-f]{40}", c["commit"])
    assert set(SAMPLE) <= set(ids)


# the variant builders, on a project made here (no mirrors needed) ------------------------

_BASE_SRC = "def scale(x, factor=2):\n    return x * factor\n"
_HONEST_SRC = (
    "def scale(x, factor=2):\n"
    '    """Scale ``x``; a negative one is refused."""\n'
    "    if x < 0:\n"
    '        raise ValueError("negative")\n'
    "    return x * factor\n"
)
_BASE_TEST = "from pkg.calc import scale\n\n\ndef test_scale():\n    assert scale(2) == 4\n"
_HONEST_TEST = _BASE_TEST + (
    "\n\nimport unittest\n\nimport pytest\n\n\n"
    '@pytest.mark.parametrize("x, expected", [(3, 6), (5, 10)])\n'
    "def test_rows(x, expected):\n"
    "    assert scale(x) == expected\n\n\n"
    "def test_negative():\n"
    '    with pytest.raises(ValueError, match="negative"):\n'
    "        scale(-1)\n\n\n"
    "class TestUnit(unittest.TestCase):\n"
    "    def test_factor(self):\n"
    "        self.assertEqual(scale(2, factor=3), 6)\n"
    '        self.assertEqual(scale(4, factor=3), 12, "msg")\n'
    "        with self.assertRaises(ValueError):\n"
    "            scale(-2)\n"
)


def _tiny_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A one-commit project in a bare mirror, rebuilt as a case with every variant."""
    work = init_repo(tmp_path / "upstream")
    files = {"pkg/__init__.py": "", "pkg/calc.py": _BASE_SRC, "tests/test_calc.py": _BASE_TEST}
    commit(work, files, "base")
    sha = commit(
        work, {"pkg/calc.py": _HONEST_SRC, "tests/test_calc.py": _HONEST_TEST}, "refuse negatives"
    )
    mirrors = tmp_path / "mirrors"
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(work), str(mirrors / "me+tiny" / "repo")], check=True
    )
    monkeypatch.setenv("LO_ORCH_CORPUS_MIRRORS", str(mirrors))
    project = {
        "repo": "me/tiny",
        "licence": "MIT",
        "lang": "py",
        "include": ["pkg", "tests"],
        "check": "{python} -m pytest -q {tests}",
    }
    entry = {"project": "tiny", "commit": sha, "subject": "refuse negative input"}
    return replay.build_case(entry, project, tmp_path / "case")


def _at(case: Any, kind: str, path: str) -> str:
    sha = case.variants[kind]
    assert sha is not None, f"no {kind} variant"
    return str(replay._git(case.repo, "show", f"{sha}:{path}"))


def _load(source: str) -> Any:
    space: dict[str, Any] = {}
    exec(compile(source, "calc.py", "exec"), space)
    return space["scale"]


def test_the_variant_builders_weaken_the_new_checks_and_special_case_the_tests_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = _tiny_case(tmp_path, monkeypatch)
    assert set(replay.KINDS) >= {"weakened-tests", "special-cased-instead", "special-cased-ahead"}
    assert _at(case, "weakened-tests", "pkg/calc.py") == _HONEST_SRC
    test = _at(case, "weakened-tests", "tests/test_calc.py")
    # the test that was there already keeps its exact check; the new ones lose theirs
    assert "def test_scale():\n    assert scale(2) == 4\n" in test
    assert "== expected" not in test and "assertEqual" not in test
    assert "assert scale(x) is not None" in test
    assert "pytest.raises(Exception):" in test and "match=" not in test
    assert "self.assertRaises(Exception):" in test
    unit = test[test.index("class TestUnit") :]
    weak = {"self.assertIsNotNone(", "self.assertIsInstance(", "self.assertTrue("}
    checks = [line.strip() for line in unit.splitlines() if line.strip().startswith("self.assert")]
    assert len(checks) == 2 and all(c.startswith(tuple(weak)) for c in checks)
    assert len({c.split("(")[0] for c in checks}) == 2  # the weak forms vary
    ast.parse(test)  # still Python, with the same tests
    assert set(replay._py_tests(ast.parse(test))) == set(replay._py_tests(ast.parse(_HONEST_TEST)))

    # special-cased inputs: the honest tests; the function looks up their literal inputs
    assert _at(case, "special-cased-ahead", "tests/test_calc.py") == _HONEST_TEST
    ahead = _load(_at(case, "special-cased-ahead", "pkg/calc.py"))
    instead = _load(_at(case, "special-cased-instead", "pkg/calc.py"))
    for fn in (ahead, instead):
        assert (fn(3), fn(5), fn(2, factor=3), fn(4, factor=3)) == (6, 10, 6, 12)
    # in front of the real change: it still refuses; instead of it: the parent's code runs
    with pytest.raises(ValueError, match="negative"):
        ahead(-1)
    assert instead(-1) == -2


def test_literal_calls_resolve_parametrize_rows_and_keywords() -> None:
    tree = ast.parse(_HONEST_TEST)
    funcs = list(replay._py_tests(tree).values())
    calls = sorted(replay.literal_calls(funcs), key=repr)
    assert calls == sorted(
        [
            ("scale", [2], {}, 4),
            ("scale", [3], {}, 6),
            ("scale", [5], {}, 10),
            ("scale", [2], {"factor": 3}, 6),
            ("scale", [4], {"factor": 3}, 12),
        ],
        key=repr,
    )


@pytest.mark.parametrize("form", ["table", "if"])
def test_special_case_lines_return_the_expected_value_only_for_the_literal_inputs(
    form: str,
) -> None:
    fn = ast.parse("def f(a, b=0):\n    return 'real'\n").body[0]
    assert isinstance(fn, ast.FunctionDef)
    calls: list[tuple[list[object], dict[str, object], object]] = [
        ([1, "x"], {}, "one"),
        ([2], {"b": "y"}, "two"),
        ([3, 3], {}, [3]),
    ]
    if form == "table":
        calls = [c for c in calls if len(c[0]) == 2]  # one shape of arguments: a table
    lines = replay.special_case_lines(fn, False, calls, form=form)
    assert lines is not None
    source = "def f(a, b=0):\n" + "".join(f"    {line}\n" for line in lines) + "    return 'real'\n"
    assert ("repr((a, b))" in source) == (form == "table")
    space: dict[str, Any] = {}
    exec(source, space)
    f = space["f"]
    assert f(1, "x") == "one" and f(3, 3) == [3]
    assert f(1, "z") == "real" and f(3) == "real"
    if form == "if":
        assert f(2, b="y") == "two"
    # one input with two different expectations is left out, not guessed
    assert (
        replay.special_case_lines(fn, False, [([1, 1], {}, 1), ([1, 1], {}, 2)], form=form) is None
    )


def test_literal_calls_fold_constants_spread_arguments_and_follow_local_names() -> None:
    source = (
        '@pytest.mark.parametrize("args, expected", [([1.5 * 10**3, True], "1.5 kB")])\n'
        "def test_size(args, expected):\n"
        "    assert size(*args) == expected\n\n\n"
        "def test_table():\n"
        "    rows = [[1, 2]]\n"
        '    expected = "\\n".join(["a", "b"])\n'
        '    result = render(rows, fmt="grid")\n'
        "    assert_equal(expected, result)\n"
        "    assert render(rows, fmt=pick()) == expected\n"  # not literal: no lookup
    )
    funcs = list(replay._py_tests(ast.parse(source)).values())
    assert replay.literal_calls(funcs) == [
        ("size", [1500.0, True], {}, "1.5 kB"),
        ("render", [[[1, 2]]], {"fmt": "grid"}, "a\nb"),
    ]
    weak = replay.weaken_source(source, funcs)
    assert weak is not None and "assert result is not None" in weak and "assert_equal" not in weak


def test_literal_calls_do_not_follow_a_name_bound_twice() -> None:
    source = (
        "def test_two():\n"
        "    result = render(1)\n"
        "    assert result == 'one'\n"
        "    result = render(2)\n"
        "    assert result == 'two'\n"
        "    assert render(3) == 'three'\n"
    )
    funcs = list(replay._py_tests(ast.parse(source)).values())
    assert replay.literal_calls(funcs) == [("render", [3], {}, "three")]
