"""Test quality: compare the tests at the base and at the task's commit.

Pure: works on ``FileChange`` records (path, status, text at base, text at commit, added
line numbers). Only tests the task touched (new, or with an added line) are judged for
assertions, tautologies and control flow, so a task is never blamed for old tests; every
test that existed at the base is checked for deletion, renaming and lost assertions.
Check ids and severities are listed in ``loop_orchestrator.verify`` (package docstring).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import PurePosixPath

from loop_orchestrator import pyast
from loop_orchestrator.verify import (
    classify,
    coverage,
    jstests,
    pyevasions,
    pytautologies,
    pytests,
    weakchecks,
)
from loop_orchestrator.verify.models import Finding, Severity, blocking, warning
from loop_orchestrator.verify.pytests import Expectation
from loop_orchestrator.verify.testchanges import (
    NEVER_WEAKEN,
    Lang,
    TestVersion,
    compare_versions,
    removed_code,
)


@dataclass
class FileChange:
    """One changed file as the checks see it."""

    path: str
    status: str  # "A" | "M" | "D" | "T"
    old: str | None  # text at the base (None: absent or binary)
    new: str | None  # text at the commit
    added: set[int] = field(default_factory=set)  # line numbers added (commit side)


@dataclass(frozen=True)
class TestRef:
    """A test function the task added or changed."""

    __test__ = False  # not a pytest test class, despite the name

    path: str
    qualname: str  # Python "TestX::test_y"; JS "suite > title"
    language: Lang
    new: bool  # absent at the base (by path and name)

    @property
    def name(self) -> str:
        return self.qualname.rsplit("::", 1)[-1]


@dataclass(frozen=True)
class ConditionalSkip:
    path: str
    line: int
    tests: tuple[TestRef, ...]


@dataclass(frozen=True)
class WeakTest:
    """A changed or new test whose every check is weak, as its finding names it."""

    ref: TestRef
    line: int  # the finding's line: the first weak check
    checks: tuple[weakchecks.Weak, ...]


@dataclass
class TestReport:
    __test__ = False  # not a pytest test class, despite the name
    findings: list[Finding] = field(default_factory=list)
    touched: list[TestRef] = field(default_factory=list)
    #: touched tests of mixin classes: judged, but a test report knows them only under
    #: their subclasses' names, so they are not looked up there
    inherited: list[TestRef] = field(default_factory=list)
    expectations: list[Expectation] = field(default_factory=list)
    #: (path, qualname) of a test defined in a class -> the same test run through its
    #: subclasses, as a test report names it (``pytests.runs_as``)
    runs_as: dict[tuple[str, str], list[TestRef]] = field(default_factory=dict)
    #: added skips that fire only under a condition, with the tests they govern: not a skip
    #: where the checks' report shows those tests ran (``redgreen.judge_skips``)
    conditional_skips: list[ConditionalSkip] = field(default_factory=list)
    #: conftest path -> its fixtures the task changed; the tests that use them are tests
    #: the task changed (``fixture_refs``)
    fixtures: dict[str, set[str]] = field(default_factory=dict)
    #: tests whose own text is unchanged but that use a changed fixture: red-green judges
    #: them, the other checks (about what a test's text says) do not
    fixture_users: list[TestRef] = field(default_factory=list)
    #: the tests behind the ``tests.weak-assertions`` findings (``verify.weakproof``)
    weak: list[WeakTest] = field(default_factory=list)

    @property
    def new_tests(self) -> list[TestRef]:
        return [t for t in self.touched if t.new]


def _py_tests(mod: pytests.PyModule) -> list[TestVersion]:
    return [
        TestVersion(
            t.path,
            t.qualname,
            t.name,
            t.lineno,
            t.end_lineno,
            t.assertions,
            t.body_dump,
            "python",
            partial(coverage.python, t.node),
            t.inherited,
            t.case_lines,
            t.node,
        )
        for t in mod.tests
    ]


def _js_tests(mod: jstests.JsModule) -> list[TestVersion]:
    return [
        TestVersion(
            t.path,
            t.qualname,
            t.title,
            t.lineno,
            t.end_lineno,
            t.assertions,
            re.sub(r"\s+", "", t.body),
            "js",
            partial(coverage.js, t),
        )
        for t in mod.tests
    ]


def _parse(path: str, text: str | None) -> tuple[object | None, str | None]:
    """(module, error) for a Python or JS test module."""
    if text is None:
        return None, None
    if classify.is_python(path):
        try:
            return pytests.parse_module(path, text), None
        except SyntaxError as exc:
            return None, f"line {exc.lineno}: {exc.msg}"
    return jstests.parse_module(path, text), None


def _tests_of(mod: object | None) -> list[TestVersion]:
    if isinstance(mod, pytests.PyModule):
        return _py_tests(mod)
    if isinstance(mod, jstests.JsModule):
        return _js_tests(mod)
    return []


def check_tests(files: Sequence[FileChange]) -> TestReport:
    """Findings about the tests in ``files`` and the list of tests the task touched."""
    report = TestReport()
    removed: set[str] = set()  # functions and classes the change removed from the code
    changed = changed_functions(files)
    code_pairs: list[tuple[str | None, str | None]] = []
    for f in files:
        if classify.is_test_code(f.path) or f.old is None:
            continue
        if classify.is_python(f.path):
            removed |= coverage.defined_names(f.old) - coverage.defined_names(f.new)
            code_pairs.append((f.old, f.new))
        elif classify.is_js(f.path):
            removed |= coverage.js_defined_names(f.old) - coverage.js_defined_names(f.new)
    base: dict[tuple[str, str], TestVersion] = {}
    head: dict[tuple[str, str], TestVersion] = {}
    head_modules: list[tuple[FileChange, object]] = []
    for f in files:
        if PurePosixPath(f.path).name == "conftest.py" and f.new and f.added:
            try:
                tree = pyast.parse(f.new, f.path)
            except SyntaxError:
                continue
            own_fixtures = pytests.changed_fixtures(tree, f.added)
            if own_fixtures:
                report.fixtures[f.path] = own_fixtures
        if not classify.is_test_module(f.path):
            continue
        old_mod, _ = _parse(f.path, f.old)
        for t in _tests_of(old_mod):
            base[(t.path, t.qualname)] = t
        new_mod, error = _parse(f.path, f.new)
        if error:
            report.findings.append(
                blocking(
                    f"the test module does not parse ({error}), so none of its tests can run.",
                    "tests.unparsable",
                    f.path,
                    fix="Fix the syntax error.",
                )
            )
        if new_mod is not None:
            head_modules.append((f, new_mod))
            for t in _tests_of(new_mod):
                head[(t.path, t.qualname)] = t

    for f, mod in head_modules:
        if isinstance(mod, pytests.PyModule):
            _judge_python(f, mod, base, report, changed)
        elif isinstance(mod, jstests.JsModule):
            _judge_js(f, mod, base, report, changed)
    aliases = pytests.runs_as([m for _, m in head_modules if isinstance(m, pytests.PyModule)])
    report.runs_as = {
        key: [TestRef(p, q, "python", False) for p, q in also] for key, also in aliases.items()
    }
    known = {(r.path, r.qualname) for r in [*report.touched, *report.inherited]}
    for f, mod in head_modules:
        if isinstance(mod, pytests.PyModule):
            own = pytests.changed_fixtures(mod.tree, f.added)
            for q in pytests.fixture_users(mod.tree, own) if own else []:
                if (f.path, q) not in known:
                    report.fixture_users.append(TestRef(f.path, q, "python", False))
    gone = removed_code(code_pairs) if any(k not in head for k in base) else set()
    report.findings += compare_versions(base, head, removed, gone)
    return report


_JS_DEF_LINE = re.compile(
    r"(?:function\s*\*?\s*([A-Za-z_$][\w$]*)|(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*=)"
)


def changed_functions(files: Sequence[FileChange]) -> dict[str, str]:
    """Functions of the non-test code whose definition has an added line: name -> path."""
    out: dict[str, str] = {}
    for f in files:
        if f.new is None or not f.added or classify.is_test_code(f.path):
            continue
        if classify.is_python(f.path):
            try:
                tree = pyast.parse(f.new, f.path)
            except (SyntaxError, ValueError):
                continue
            for n in ast.walk(tree):
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                    ln in f.added for ln in range(n.lineno, (n.end_lineno or n.lineno) + 1)
                ):
                    out.setdefault(n.name, f.path)
        elif classify.is_js(f.path):
            lines = f.new.splitlines()
            for ln in sorted(f.added):
                for m in _JS_DEF_LINE.finditer(lines[ln - 1] if ln <= len(lines) else ""):
                    out.setdefault(m.group(1) or m.group(2), f.path)
    return out


def _weak_finding(
    path: str, test: str, weak: list[weakchecks.Weak], changed: dict[str, str]
) -> Finding:
    """``tests.weak-assertions`` for a test whose every check is weak."""
    shown = [f"line {w.line} asserts `{w.text}`: {w.instead}" for w in weak[:3]]
    more = f"; and {len(weak) - 3} more" if len(weak) > 3 else ""
    mine = sorted({w.subject for w in weak if w.subject and w.subject in changed})
    touched = "".join(
        f" The checks are on the result of {name}(), which this change modifies "
        f"({changed[name]}): a wrong result would pass them."
        for name in mine[:2]
    )
    return warning(
        f"test {test} makes only weak checks, which almost any result passes: "
        + "; ".join(shown)
        + more
        + "."
        + touched,
        "tests.weak-assertions",
        path,
        weak[0].line,
        fix="Compare the results with the values the behaviour must produce, and expect the "
        "exact exception type (with its message).",
    )


def fixture_refs(
    fixtures: dict[str, set[str]], modules: dict[str, str], known: set[tuple[str, str]]
) -> list[TestRef]:
    """The tests of ``modules`` (path -> text at the commit) that use a fixture of
    ``fixtures`` (conftest path -> changed fixtures) in the conftest's folder or below,
    except those in ``known`` (already judged as changed)."""
    out: list[TestRef] = []
    for path, text in sorted(modules.items()):
        names: set[str] = set()
        for conftest, changed in fixtures.items():
            folder = str(PurePosixPath(conftest).parent)
            if folder == "." or path.startswith(folder + "/"):
                names |= changed
        if not names:
            continue
        try:
            tree = pyast.parse(text, path)
        except SyntaxError:
            continue
        out += [
            TestRef(path, q, "python", False)
            for q in pytests.fixture_users(tree, names)
            if (path, q) not in known
        ]
    return out


def _touched(f: FileChange, t: TestVersion, base: dict[tuple[str, str], TestVersion]) -> bool:
    """New, or an added line in its body or in what makes its cases: a parametrize row, or
    a row of a table its decorator or its loop reads, is a test case added."""
    return (
        (t.path, t.qualname) not in base
        or any(ln in f.added for ln in range(t.lineno, t.end_lineno + 1))
        or bool(t.case_lines & f.added)
    )


def _where(t: TestVersion) -> str:
    return f"test {t.qualname}"


def _common(
    f: FileChange,
    mod_tests: list[TestVersion],
    duplicates: list[tuple[str, int, int]],
    base: dict[tuple[str, str], TestVersion],
    report: TestReport,
    cases: tuple[bool, bool],
) -> list[TestVersion]:
    """Findings every language shares; returns the touched tests."""
    touched = []
    for qual, first, second in duplicates:
        if first in f.added or second in f.added:
            report.findings.append(
                blocking(
                    f"test {qual} is defined twice (lines {first} and {second}); only the later "
                    "definition runs, so the earlier one silently disappears.",
                    "tests.duplicate-name",
                    f.path,
                    second,
                    fix="Give each test its own name.",
                )
            )
    for t in mod_tests:
        if not _touched(f, t, base):
            continue
        touched.append(t)
        new = (t.path, t.qualname) not in base
        ref = TestRef(t.path, t.qualname, t.language, new)
        (report.inherited if t.inherited else report.touched).append(ref)
        if t.assertions == 0:
            report.findings.append(
                blocking(
                    f"{_where(t)} has no assertion: it passes whatever the code does.",
                    "tests.no-assertion",
                    t.path,
                    t.lineno,
                    fix="Assert on the result (assert / self.assert* / expect). A helper of "
                    "the same file that asserts counts (a function, or a method of the test's "
                    "class or its bases); one imported from elsewhere must be named assert_*.",
                )
            )
    if (f.status == "A" or f.old is None) and mod_tests:
        report.findings += _new_file_findings(f, *cases)
    return touched


def _new_file_findings(f: FileChange, has_error: bool, has_boundary: bool) -> list[Finding]:
    """Heuristics for a new test module: an error case and a boundary case."""
    out = []
    if not has_error:
        out.append(
            warning(
                "the new test module has no error case (pytest.raises / assertRaises / toThrow "
                "/ rejects): nothing shows that invalid input is refused.",
                "tests.no-error-case",
                f.path,
                fix="Add a test that passes invalid input and expects the documented error.",
            )
        )
    if not has_boundary:
        out.append(
            warning(
                "the new test module has no boundary case (no test named edge/boundary/empty/"
                "zero/limit/... and none using 0, '', None/null, an empty collection, a "
                "negative number or a max/min value).",
                "tests.no-boundary-case",
                f.path,
                fix="Add a test at the edge of the input range (empty, zero, the limit).",
            )
        )
    return out


def _skips(
    f: FileChange,
    markers: list[tuple[int, str]],
    report: TestReport,
    optional: set[int] | None = None,
    conditional: dict[int, list[str]] | None = None,
) -> None:
    for line, what in markers:
        governed = (conditional or {}).get(line)
        if line in f.added and governed:
            report.conditional_skips.append(
                ConditionalSkip(
                    f.path, line, tuple(TestRef(f.path, q, "python", False) for q in governed)
                )
            )
        if line in f.added and line in (optional or set()):
            report.findings.append(
                warning(
                    f"adds `{what}` for when an optional dependency is missing: the test is "
                    "skipped where that package is not installed.",
                    "tests.skip",
                    f.path,
                    line,
                    fix="Make sure the checks' environment has the dependency; a new test "
                    "skipped by the done-check blocks the task (done.new-test-skipped).",
                )
            )
        elif line in f.added:
            report.findings.append(
                blocking(
                    f"adds `{what}`: a skipped, expected-to-fail or focused test hides "
                    "failures (or, with `.only`, every other test).",
                    "tests.skip",
                    f.path,
                    line,
                    fix=f"Remove `{what}` and make the test pass for real. {NEVER_WEAKEN}",
                )
            )


def _judge_python(
    f: FileChange,
    mod: pytests.PyModule,
    base: dict[tuple[str, str], TestVersion],
    report: TestReport,
    changed: dict[str, str],
) -> None:
    cases = (pytests.has_error_case(mod), pytests.has_boundary_case(mod))
    touched = {t.qualname for t in _common(f, _py_tests(mod), mod.duplicates, base, report, cases)}
    _skips(
        f,
        pyevasions.skip_markers(mod.tree),
        report,
        pyevasions.optional_import_skips(mod.tree),
        pyevasions.conditional_skips(mod.tree),
    )
    report.expectations += pytests.expectations(f.path, mod.tree)
    checkers = frozenset(
        s.name for s in mod.tree.body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
    )
    for t in mod.tests:
        if t.qualname not in touched:
            continue
        helpers = pytests.helper_functions(mod.tree, t)
        scopes: list[ast.AST] = [t.node, *helpers]
        asserted = [a for s in scopes for a in weakchecks.python_assertions(s)]
        asserted = asserted or [*pytests.import_checks(t.node)]
        weak = weakchecks.weak_python(asserted, scopes, checkers)
        if weak:
            report.findings.append(_weak_finding(f.path, t.qualname, weak, changed))
            ref = TestRef(f.path, t.qualname, "python", (f.path, t.qualname) not in base)
            report.weak.append(WeakTest(ref, weak[0].line, tuple(weak)))
        for line, reason, certain in pytautologies.tautologies(t.node):
            if certain:
                report.findings.append(
                    blocking(
                        f"test {t.qualname} {reason}; it cannot fail.",
                        "tests.tautology",
                        f.path,
                        line,
                        fix="Compare the code's result with an independently known expected value.",
                    )
                )
            else:
                report.findings.append(
                    warning(
                        f"test {t.qualname} {reason}: this checks something only when the "
                        "value's own type defines the comparison (a reflexivity test of a "
                        "class's operators); for built-in values it cannot fail.",
                        "tests.tautology",
                        f.path,
                        line,
                        fix="If the test is not about the type's own operators, compare with an "
                        "independently known expected value.",
                    )
                )
        for line, top in pyevasions.early_returns(t.node):
            report.findings.append(
                Finding(
                    check="tests.early-exit",
                    severity=Severity.BLOCKING if top else Severity.WARNING,
                    path=f.path,
                    line=line,
                    message=(
                        f"test {t.qualname} returns before its first assertion"
                        + (
                            "; the assertions after it never run."
                            if top
                            else " on some path; on that path nothing is checked."
                        )
                    ),
                    fix="Remove the return; use pytest.mark.parametrize for variants.",
                )
            )
        for line, what in pyevasions.dead_branches(t.node):
            report.findings.append(
                blocking(
                    f"test {t.qualname} puts assertions under {what}, so they never run.",
                    "tests.dead-code",
                    f.path,
                    line,
                    fix="Remove the dead branch.",
                )
            )
        for line, what in pyevasions.swallowed_assertions(t.node):
            report.findings.append(
                blocking(
                    f"test {t.qualname} catches its own assertion failures with {what} and "
                    "does not re-raise, so it cannot fail.",
                    "tests.swallowed-assertion",
                    f.path,
                    line,
                    fix="Let assertion errors propagate; use pytest.raises for expected errors.",
                )
            )
        for line, text in pyevasions.broad_raises(t.node):
            report.findings.append(
                warning(
                    f"test {t.qualname} expects any exception (`{text}`): a TypeError from a "
                    "typo would pass too.",
                    "tests.broad-raises",
                    f.path,
                    line,
                    fix="Expect the specific exception (and a match= on its message).",
                )
            )


def _judge_js(
    f: FileChange,
    mod: jstests.JsModule,
    base: dict[tuple[str, str], TestVersion],
    report: TestReport,
    changed: dict[str, str],
) -> None:
    cases = (jstests.has_error_case(mod), jstests.has_boundary_case(mod))
    touched = {t.qualname for t in _common(f, _js_tests(mod), mod.duplicates, base, report, cases)}
    source = f.new or ""
    lines = jstests.Lines(source)
    _skips(f, jstests.skip_markers(source), report)
    report.expectations += jstests.expectations(f.path, source)
    for t in mod.tests:
        if t.qualname not in touched:
            continue
        weak = weakchecks.weak_js(t, lines)
        if weak:
            report.findings.append(_weak_finding(f.path, f"'{t.qualname}'", weak, changed))
        for line, reason in jstests.tautologies(t, lines):
            report.findings.append(
                blocking(
                    f"test '{t.qualname}' {reason}; it cannot fail.",
                    "tests.tautology",
                    f.path,
                    line,
                    fix="Compare the code's result with an independently known expected value.",
                )
            )
        for line in jstests.early_returns(t, lines):
            report.findings.append(
                blocking(
                    f"test '{t.qualname}' returns before its first assertion; the assertions "
                    "after it never run.",
                    "tests.early-exit",
                    f.path,
                    line,
                    fix="Remove the return.",
                )
            )
        for line in jstests.swallowed_assertions(t, lines):
            report.findings.append(
                blocking(
                    f"test '{t.qualname}' catches its own assertion failures and neither "
                    "rethrows nor asserts in the catch, so it cannot fail.",
                    "tests.swallowed-assertion",
                    f.path,
                    line,
                    fix="Let the failure propagate; use expect(...).toThrow for expected errors.",
                )
            )
        for line in jstests.broad_throws(t, lines):
            report.findings.append(
                warning(
                    f"test '{t.qualname}' expects any error (`.toThrow()`): a TypeError from a "
                    "typo would pass too.",
                    "tests.broad-raises",
                    f.path,
                    line,
                    fix="Pass the expected error class or message to toThrow.",
                )
            )
