"""Python tests read by AST: which tests a module defines and what each one asserts.

Knows pytest (``test*`` functions, ``Test*`` classes) and unittest (``TestCase``
subclasses), and the test methods of helper classes whose tests run through a subclass
(``class DecoratorTestMixin`` inherited by ``class LRUDecoratorTest(DecoratorTestMixin,
TestCase)``, as cachetools writes them; issue 14). Pure functions of source text;
``testquality`` turns the facts into findings.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from loop_orchestrator import pyast

#: dotted call names that assert (besides anything whose last part starts with "assert")
_ASSERT_CALLS = frozenset(
    {
        "pytest.raises",
        "pytest.warns",
        "pytest.deprecated_call",
        "pytest.fail",
        "raises",
        "warns",
        "self.fail",
        "expect",
    }
)
#: calls that prove an error case
_ERROR_CALLS = ("raises", "assertRaises", "assertRaisesRegex", "assertRaisesRegexp")
#: decorators and calls that skip or expect failure (matched on the dotted name's end)
_SKIP_SUFFIXES = (
    "mark.skip",
    "mark.skipif",
    "mark.xfail",
    "pytest.skip",
    "pytest.xfail",
    "pytest.importorskip",
    "unittest.skip",
    "unittest.skipIf",
    "unittest.skipUnless",
    "unittest.expectedFailure",
    "self.skipTest",
    "SkipTest",
)
_SKIP_BARE = frozenset(
    {
        "skip",
        "skipIf",
        "skipUnless",
        "expectedFailure",
        "xfail",
        "importorskip",
        "skipTest",
    }
)
_BROAD = frozenset({"Exception", "BaseException"})
#: words in a test name that announce a boundary case
BOUNDARY_WORDS = frozenset(
    {
        "edge",
        "edges",
        "boundary",
        "boundaries",
        "empty",
        "zero",
        "limit",
        "limits",
        "negative",
        "none",
        "null",
        "max",
        "min",
        "maximum",
        "minimum",
        "overflow",
        "underflow",
        "blank",
        "huge",
        "bound",
        "bounds",
        "extreme",
        "extremes",
        "nan",
        "inf",
        "infinity",
    }
)
#: words in a name (sys.maxsize, MAX_LEN, math.inf) that make a value a boundary value
_BOUNDARY_NAMES = frozenset(
    {"max", "min", "maxsize", "inf", "nan", "infinity", "maximum", "minimum", "epsilon", "eps"}
)


def words(identifier: str) -> set[str]:
    """``test_MaxLen_empty`` -> {"test", "max", "len", "empty"}."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", identifier)
    return {w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w}


@dataclass
class PyTest:
    path: str
    qualname: str  # "TestUser::test_email" or "test_email"
    name: str
    lineno: int
    end_lineno: int
    assertions: int
    body_dump: str
    node: ast.FunctionDef | ast.AsyncFunctionDef = field(repr=False, compare=False)
    #: defined in a helper class (a mixin) and run only through its subclasses, so a test
    #: report names it after each subclass, never after ``qualname``
    inherited: bool = False


@dataclass
class PyModule:
    path: str
    tree: ast.Module = field(repr=False)
    tests: list[PyTest]
    #: (qualname, first line, shadowing line): a later def hides the earlier test
    duplicates: list[tuple[str, int, int]]


def dotted(node: ast.AST) -> str:
    """``pytest.mark.skip`` for an Attribute chain, the function's name for a Call."""
    if isinstance(node, ast.Call):
        return dotted(node.func)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    return ""


def parse_module(path: str, source: str) -> PyModule:
    """The tests in ``source``; raises SyntaxError when it does not parse."""
    tree = pyast.parse(source, path)
    tests: list[PyTest] = []
    dups: list[tuple[str, int, int]] = []
    _collect(
        path, tree.body, "", is_test_scope=True, tests=tests, dups=dups, mixins=_mixins(tree.body)
    )
    return PyModule(path=path, tree=tree, tests=tests, duplicates=dups)


def _is_unittest_class(cls: ast.ClassDef) -> bool:
    return any(dotted(b).endswith("TestCase") for b in cls.bases)


def _collected(cls: ast.ClassDef) -> bool:
    return cls.name.startswith("Test") or _is_unittest_class(cls)


def _mixins(body: list[ast.stmt]) -> frozenset[str]:
    """Top-level classes pytest does not collect whose ``test*`` methods run through a
    subclass: a base (at any depth) of a collected class of the module, or a class named as
    a test helper (``...TestMixin``, ``BaseTest...``) whose subclasses live elsewhere."""
    classes = {s.name: s for s in body if isinstance(s, ast.ClassDef)}
    found: set[str] = set()
    todo = [c for c in classes.values() if _collected(c)]
    while todo:
        for b in todo.pop().bases:
            name = dotted(b)
            if name in classes and name not in found:
                found.add(name)
                todo.append(classes[name])
    for name in classes:
        w = words(name)
        if "mixin" in w or ({"test", "tests"} & w and {"base", "abstract"} & w):
            found.add(name)
    return frozenset(name for name in found if not _collected(classes[name]))


def _collect(
    path: str,
    body: list[ast.stmt],
    prefix: str,
    *,
    is_test_scope: bool,
    tests: list[PyTest],
    dups: list[tuple[str, int, int]],
    mixins: frozenset[str] = frozenset(),
    inherited: bool = False,
) -> None:
    seen: dict[str, int] = {}
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            if not (is_test_scope and stmt.name.startswith("test")):
                continue
            qual = prefix + stmt.name
            if stmt.name in seen:
                dups.append((qual, seen[stmt.name], stmt.lineno))
                # the later definition replaces the earlier one at import time
                tests[:] = [t for t in tests if t.qualname != qual]
            seen[stmt.name] = stmt.lineno
            tests.append(
                PyTest(
                    path=path,
                    qualname=qual,
                    name=stmt.name,
                    lineno=stmt.lineno,
                    end_lineno=stmt.end_lineno or stmt.lineno,
                    assertions=count_assertions(stmt),
                    body_dump="\n".join(ast.dump(s) for s in stmt.body),
                    node=stmt,
                    inherited=inherited,
                )
            )
        elif isinstance(stmt, ast.ClassDef):
            mixin = not prefix and stmt.name in mixins
            if _collected(stmt) or mixin:
                _collect(
                    path,
                    stmt.body,
                    f"{prefix}{stmt.name}::",
                    is_test_scope=True,
                    tests=tests,
                    dups=dups,
                    inherited=inherited or mixin,
                )


def walk_shallow(node: ast.AST) -> Iterator[ast.AST]:
    """Like ast.walk, without entering nested functions, lambdas or classes."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        yield child
        if not isinstance(
            child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef
        ):
            stack.extend(ast.iter_child_nodes(child))


def is_assertion(node: ast.AST) -> bool:
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.Call):
        name = dotted(node.func)
        last = name.rsplit(".", 1)[-1]
        return last.startswith("assert") or name in _ASSERT_CALLS
    return False


def count_assertions(fn: ast.AST) -> int:
    return sum(1 for n in ast.walk(fn) if is_assertion(n))


def assertion_lines(fn: ast.AST) -> list[int]:
    return sorted(
        n.lineno for n in walk_shallow(fn) if is_assertion(n) and isinstance(n, ast.stmt | ast.expr)
    )


# tautologies ----------------------------------------------------------------------------


def _const(node: ast.AST) -> tuple[bool, object]:
    """(is a constant expression, its value)."""
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _has_call(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) for n in ast.walk(node))


#: calls that build a value of a built-in type: comparing it with itself runs no project code
_BUILTIN_CONSTRUCTORS = frozenset(
    {
        "int",
        "float",
        "complex",
        "str",
        "bytes",
        "bytearray",
        "bool",
        "list",
        "dict",
        "set",
        "frozenset",
        "tuple",
        "range",
        "len",
        "sorted",
        "abs",
        "min",
        "max",
        "sum",
        "repr",
        "round",
        "ord",
        "chr",
        "hex",
        "oct",
        "bin",
    }
)


def _builtin_valued(node: ast.AST) -> bool:
    """Whether ``node`` evaluates to a value of a built-in type without running project code:
    literals, displays and comprehensions of such values, built-in constructors."""
    if _const(node)[0]:
        return True
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return all(_builtin_valued(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _builtin_valued(k) for k in node.keys) and all(
            _builtin_valued(v) for v in node.values
        )
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id in _BUILTIN_CONSTRUCTORS and all(_builtin_valued(a) for a in node.args)
    return False


def builtin_names(fn: ast.AST) -> set[str]:
    """Local names of a test bound only to built-in values (``x = [1, 2]``); a name bound
    anywhere to anything else (a project object, a parameter, a loop variable) is left out."""
    good: set[str] = set()
    bad: set[str] = set()
    if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
        a = fn.args
        bad |= {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    for node in walk_shallow(fn):
        targets: list[ast.expr] = []
        value: ast.AST | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets, value = [node.target], node.value
        elif isinstance(
            node,
            ast.For | ast.AsyncFor | ast.With | ast.AsyncWith | ast.NamedExpr | ast.comprehension,
        ):
            for n in ast.walk(node.target if hasattr(node, "target") else node):
                if isinstance(n, ast.Name):
                    bad.add(n.id)
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                (good if value is not None and _builtin_valued(value) else bad).add(target.id)
            else:
                bad |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return good - bad


def _self_comparison(
    left: ast.AST, right: ast.AST, identity: bool, builtins: set[str]
) -> bool | None:
    """Whether comparing ``left`` with ``right`` is certainly always true (True), may test a
    type's own comparison operators (None: not sure), or is not a self-comparison (False).

    Issue 14: ``assert cab >= cab`` in boltons' test of ``_ComplementSet.__ge__`` checks
    that the class's own operator is reflexive; only values of built-in types (literals,
    names bound only to them) compare equal to themselves whatever the project does. An
    identity check (``is``) cannot be overridden.
    """
    if ast.dump(left) != ast.dump(right) or _has_call(left):
        return False
    if identity or _builtin_valued(left):
        return True
    names = [n.id for n in ast.walk(left) if isinstance(n, ast.Name)]
    if isinstance(left, ast.Name) and left.id in builtins:
        return True
    if names and all(n in builtins for n in names) and not isinstance(left, ast.Attribute):
        return True
    return None


def _always_true(expr: ast.expr, builtins: set[str] | None = None) -> tuple[str, bool] | None:
    """(reason, certain) when the asserted expression is always true."""
    builtins = builtins or set()
    if isinstance(expr, ast.Tuple) and expr.elts:
        return "asserts a non-empty tuple, which is always true (a misplaced comma?)", True
    is_const, value = _const(expr)
    if is_const:
        return (f"asserts the constant {ast.unparse(expr)}", True) if value else None
    if isinstance(expr, ast.Compare):
        operands = [expr.left, *expr.comparators]
        if all(_const(o)[0] for o in operands):
            return f"compares constants: `{ast.unparse(expr)}`", True
        if len(expr.ops) == 1 and isinstance(expr.ops[0], ast.Eq | ast.Is | ast.LtE | ast.GtE):
            sure = _self_comparison(
                expr.left, expr.comparators[0], isinstance(expr.ops[0], ast.Is), builtins
            )
            if sure is not False:
                return f"compares a value with itself: `{ast.unparse(expr)}`", bool(sure)
    if isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.Or):
        for v in expr.values:
            ok, val = _const(v)
            if ok and val:
                return f"`or {ast.unparse(v)}` makes `{ast.unparse(expr)}` always true", True
    if (
        isinstance(expr, ast.Call)
        and dotted(expr.func) == "isinstance"
        and len(expr.args) == 2
        and dotted(expr.args[1]) == "object"
    ):
        return "isinstance(x, object) is always true", True
    return None


def _unittest_tautology(
    call: ast.Call, builtins: set[str] | None = None
) -> tuple[str, bool] | None:
    last = dotted(call.func).rsplit(".", 1)[-1]
    args = call.args
    if last in ("assertTrue", "assert_") and args:
        ok, value = _const(args[0])
        if ok and value:
            return f"{last}({ast.unparse(args[0])}) is always true", True
    if last == "assertFalse" and args:
        ok, value = _const(args[0])
        if ok and not value:
            return f"assertFalse({ast.unparse(args[0])}) is always true", True
    if last == "assertIsNotNone" and args:
        ok, value = _const(args[0])
        if ok and value is not None:
            return f"assertIsNotNone({ast.unparse(args[0])}) is always true", True
    if (
        last
        in (
            "assertEqual",
            "assertEquals",
            "assertIs",
            "assertCountEqual",
            "assertListEqual",
            "assertDictEqual",
            "assertAlmostEqual",
        )
        and len(args) >= 2
    ):
        a, b = args[0], args[1]
        (ca, va), (cb, vb) = _const(a), _const(b)
        if ca and cb and va == vb:
            return f"{last} compares two equal constants", True
        sure = _self_comparison(a, b, last == "assertIs", builtins or set())
        if sure is not False:
            return (
                f"{last}({ast.unparse(a)}, {ast.unparse(b)}) compares a value with itself",
                bool(sure),
            )
    return None


def _compared_with_others(fn: ast.AST, operand: ast.AST) -> bool:
    """Whether the test also compares ``operand`` with *other* values: then it is a test of
    the type's comparison operators, and a self-comparison there checks reflexivity."""
    mine = ast.dump(operand)
    for node in walk_shallow(fn):
        pairs: list[tuple[ast.AST, ast.AST]] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            pairs = list(itertools.pairwise(operands))
        elif (
            isinstance(node, ast.Call)
            and len(node.args) >= 2
            and dotted(node.func).rsplit(".", 1)[-1]
            in (
                "assertEqual",
                "assertNotEqual",
                "assertLess",
                "assertGreater",
                "assertLessEqual",
                "assertGreaterEqual",
            )
        ):
            pairs = [(node.args[0], node.args[1])]
        for a, b in pairs:
            da, db = ast.dump(a), ast.dump(b)
            if mine in (da, db) and da != db and not _const(a if db == mine else b)[0]:
                return True
    return False


def _self_operand(node: ast.AST) -> ast.AST | None:
    if isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare):
        return node.test.left
    if isinstance(node, ast.Call) and node.args:
        return node.args[0]
    return None


def tautologies(fn: ast.AST) -> list[tuple[int, str, bool]]:
    """Assertions that are always true: (line, reason, certain).

    A value compared with itself is certain when it is of a built-in type; a project
    object compared with itself is uncertain (a reflexivity check of its own operators)
    only in a test that also compares it with other values, and certain otherwise: a lone
    ``assert result == result`` checks nothing (issue 14).
    """
    builtins = builtin_names(fn)
    out: list[tuple[int, str, bool]] = []
    for node in walk_shallow(fn):
        found = None
        if isinstance(node, ast.Assert):
            found = _always_true(node.test, builtins)
        elif isinstance(node, ast.Call):
            found = _unittest_tautology(node, builtins)
        if found and isinstance(node, ast.Assert | ast.Call):
            reason, certain = found
            operand = _self_operand(node)
            if not certain and (operand is None or not _compared_with_others(fn, operand)):
                certain = True
            out.append((node.lineno, reason, certain))
    return out


# control flow that hides assertions ------------------------------------------------------


def early_returns(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[int, bool]]:
    """``return`` statements before the first assertion: (line, at the top level?).

    Only reported when assertions follow, i.e. when the return keeps them from running.
    """
    lines = assertion_lines(fn)
    if not lines:
        return []
    first = lines[0]
    top = {id(s) for s in fn.body}
    return [
        (n.lineno, id(n) in top)
        for n in walk_shallow(fn)
        if isinstance(n, ast.Return) and n.lineno < first
    ]


def dead_branches(fn: ast.AST) -> list[tuple[int, str]]:
    """``if False:`` / ``while 0:`` blocks that contain assertions."""
    out = []
    for node in walk_shallow(fn):
        if isinstance(node, ast.If | ast.While):
            ok, value = _const(node.test)
            if ok and not value and any(is_assertion(n) for s in node.body for n in ast.walk(s)):
                out.append(
                    (node.lineno, f"`{type(node).__name__.lower()} {ast.unparse(node.test)}:`")
                )
    return out


def _catches_assertion(handler: ast.ExceptHandler) -> str | None:
    if handler.type is None:
        return "a bare `except:`"
    names = (
        [dotted(e) for e in handler.type.elts]
        if isinstance(handler.type, ast.Tuple)
        else [dotted(handler.type)]
    )
    for name in names:
        last = name.rsplit(".", 1)[-1]
        if last in ("AssertionError", *_BROAD):
            return f"`except {last}`"
    return None


def swallowed_assertions(fn: ast.AST) -> list[tuple[int, str]]:
    """try blocks whose handler catches the assertion's failure and does not re-raise."""
    out = []
    for node in walk_shallow(fn):
        if isinstance(node, ast.Try | ast.TryStar):
            if not any(is_assertion(n) for s in node.body for n in ast.walk(s)):
                continue
            for handler in node.handlers:
                what = _catches_assertion(handler)
                reraises = any(isinstance(n, ast.Raise) for s in handler.body for n in ast.walk(s))
                fails = any(is_assertion(n) for s in handler.body for n in ast.walk(s))
                if what and not reraises and not fails:
                    out.append((handler.lineno, what))
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                expr = item.context_expr
                if (
                    isinstance(expr, ast.Call)
                    and dotted(expr.func).endswith("suppress")
                    and any(
                        dotted(a).rsplit(".", 1)[-1] in ("AssertionError", *_BROAD)
                        for a in expr.args
                    )
                    and any(is_assertion(n) for s in node.body for n in ast.walk(s))
                ):
                    out.append((node.lineno, f"`{ast.unparse(expr)}`"))
    return out


def broad_raises(fn: ast.AST) -> list[tuple[int, str]]:
    """``pytest.raises(Exception)`` / ``assertRaises(Exception)`` without ``match=``."""
    out = []
    for node in walk_shallow(fn):
        if isinstance(node, ast.Call) and node.args:
            last = dotted(node.func).rsplit(".", 1)[-1]
            if last in ("raises", "assertRaises") and dotted(node.args[0]) in _BROAD:
                if any(k.arg == "match" for k in node.keywords):
                    continue
                out.append((node.lineno, ast.unparse(node)))
    return out


def _is_skip_name(name: str, *, bare_ok: bool) -> bool:
    if bare_ok and name in _SKIP_BARE:
        return True
    return any(name == s or name.endswith("." + s) for s in _SKIP_SUFFIXES)


def optional_import_skips(tree: ast.AST) -> set[int]:
    """Lines of skips that only fire when an optional dependency is missing:
    ``pytest.importorskip(...)`` and a skip inside ``except ImportError:`` (python-tabulate's
    wide-character tests skip without ``wcwidth``). Whether such a test really ran is proven
    by the done-check's report (``done.new-test-skipped``), not guessed from the source."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and dotted(node.func).rsplit(".", 1)[-1] == "importorskip":
            lines.add(node.lineno)
        elif (
            isinstance(node, ast.ExceptHandler)
            and node.type is not None
            and {
                dotted(t).rsplit(".", 1)[-1]
                for t in (node.type.elts if isinstance(node.type, ast.Tuple) else [node.type])
            }
            <= {"ImportError", "ModuleNotFoundError"}
        ):
            lines |= {
                n.lineno
                for s in node.body
                for n in ast.walk(s)
                if isinstance(n, ast.Call | ast.Raise)
            }
    return lines


def skip_markers(tree: ast.AST) -> list[tuple[int, str]]:
    """Every skip / xfail / importorskip / skipTest in a module: (line, what), one per line."""
    found: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = dotted(node.func)
            if _is_skip_name(name, bare_ok=True):
                found.setdefault(node.lineno, name)
        elif isinstance(node, ast.Attribute):
            name = dotted(node)
            if _is_skip_name(name, bare_ok=False):
                found.setdefault(node.lineno, name)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            for deco in node.decorator_list:
                if isinstance(deco, ast.Name) and deco.id in _SKIP_BARE:
                    found.setdefault(deco.lineno, deco.id)
        elif (
            isinstance(node, ast.Raise)
            and node.exc is not None
            and dotted(node.exc).endswith("SkipTest")
        ):
            found.setdefault(node.lineno, "raise SkipTest")
    return sorted(found.items())


# file-level heuristics ---------------------------------------------------------------


def has_error_case(mod: PyModule) -> bool:
    for test in mod.tests:
        for node in ast.walk(test.node):
            if isinstance(node, ast.Call):
                last = dotted(node.func).rsplit(".", 1)[-1]
                if last in _ERROR_CALLS:
                    return True
    return False


def _is_boundary_value(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        v = node.value
        if v is None or v == "" or v == b"":
            return True
        if isinstance(v, int | float) and not isinstance(v, bool) and v == 0:
            return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return isinstance(node.operand, ast.Constant)
    if isinstance(node, ast.List | ast.Tuple | ast.Set) and not node.elts:
        return True
    if isinstance(node, ast.Dict) and not node.keys:
        return True
    if (
        isinstance(node, ast.Call)
        and not node.args
        and dotted(node.func) in ("set", "list", "dict", "tuple", "frozenset", "str", "bytes")
    ):
        return True
    name = dotted(node)
    if name and words(name.rsplit(".", 1)[-1]) & _BOUNDARY_NAMES:
        return True
    if isinstance(node, ast.Call) and dotted(node.func) == "float" and node.args:
        ok, value = _const(node.args[0])
        return ok and isinstance(value, str) and value.strip("+-").lower() in ("inf", "nan")
    return False


def has_boundary_case(mod: PyModule) -> bool:
    """Heuristic: a test named like a boundary case, or one using a boundary value.

    Boundary values: 0, 0.0, negative numbers, "", b"", None, empty list/tuple/set/dict,
    inf/nan, names containing max/min (sys.maxsize, MAX_LEN...).
    """
    for test in mod.tests:
        if words(test.name) & BOUNDARY_WORDS:
            return True
        if any(_is_boundary_value(n) for n in ast.walk(test.node)):
            return True
        # parametrize values count too
        for deco in test.node.decorator_list:
            if any(_is_boundary_value(n) for n in ast.walk(deco)):
                return True
    return False


# expectations, for the hard-coded-return check ------------------------------------------


@dataclass(frozen=True)
class Expectation:
    """A test asserting that ``func(*args) == expected`` (args None when not literal)."""

    func: str
    args: tuple[object, ...] | None
    expected: object
    path: str
    line: int


def _call_side(call: ast.AST, other: ast.AST, path: str, line: int) -> Expectation | None:
    if not isinstance(call, ast.Call):
        return None
    ok, expected = _const(other)
    if not ok:
        return None
    name = dotted(call.func).rsplit(".", 1)[-1]
    if not name:
        return None
    literal_args: list[object] = []
    for a in call.args:
        is_c, v = _const(a)
        if not is_c:
            return Expectation(name, None, expected, path, line)
        literal_args.append(v)
    return Expectation(name, tuple(literal_args), expected, path, line)


def expectations(path: str, tree: ast.AST) -> list[Expectation]:
    """``assert f(3) == 42``, ``assertEqual(f(3), 42)`` and the mirrored forms."""
    out: list[Expectation] = []
    for node in ast.walk(tree):
        pairs: list[tuple[ast.AST, ast.AST]] = []
        if (
            isinstance(node, ast.Assert)
            and isinstance(node.test, ast.Compare)
            and len(node.test.ops) == 1
            and isinstance(node.test.ops[0], ast.Eq | ast.Is)
        ):
            pairs = [(node.test.left, node.test.comparators[0])]
        elif (
            isinstance(node, ast.Call)
            and len(node.args) >= 2
            and dotted(node.func).rsplit(".", 1)[-1] in ("assertEqual", "assertEquals", "assertIs")
        ):
            pairs = [(node.args[0], node.args[1])]
        for a, b in pairs:
            line = node.lineno  # type: ignore[attr-defined]
            exp = _call_side(a, b, path, line) or _call_side(b, a, path, line)
            if exp is not None:
                out.append(exp)
    return out
