"""Python tests read by AST: which tests a module defines and what each one asserts.

Knows pytest (``test*`` functions, ``Test*`` classes) and unittest (``TestCase``
subclasses), and the test methods of helper classes whose tests run through a subclass
(``class DecoratorTestMixin`` inherited by ``class LRUDecoratorTest(DecoratorTestMixin,
TestCase)``, as cachetools writes them; issue 14). Pure functions of source text;
``testquality`` turns the facts into findings. Tautologies are ``pytautologies.py``'s,
the other ways a test avoids failing (early returns, skips...) ``pyevasions.py``'s.
"""

from __future__ import annotations

import ast
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


def constant_value(node: ast.AST) -> tuple[bool, object]:
    """(is a constant expression, its value)."""
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


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
        ok, value = constant_value(node.args[0])
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
    #: literal keyword arguments, (name, value) in call order
    kwargs: tuple[tuple[str, object], ...] = ()
    #: the test making the assertion ("TestX::test_y"), "" outside a test
    test: str = ""


_Env = dict[str, object]


def _value(node: ast.AST, env: _Env) -> tuple[bool, object]:
    """A literal, or a parametrize argument's value in this row."""
    if isinstance(node, ast.Name) and node.id in env:
        return True, env[node.id]
    return constant_value(node)


def _call_side(
    call: ast.AST, other: ast.AST, path: str, line: int, env: _Env, test: str
) -> Expectation | None:
    if not isinstance(call, ast.Call):
        return None
    ok, expected = _value(other, env)
    if not ok:
        return None
    name = dotted(call.func).rsplit(".", 1)[-1]
    if not name:
        return None
    literal_args: list[object] = []
    kwargs: list[tuple[str, object]] = []
    for a in call.args:
        is_c, v = _value(a, env)
        if not is_c:
            return Expectation(name, None, expected, path, line, test=test)
        literal_args.append(v)
    for k in call.keywords:
        is_c, v = _value(k.value, env)
        if k.arg is None or not is_c:
            return Expectation(name, None, expected, path, line, test=test)
        kwargs.append((k.arg, v))
    return Expectation(name, tuple(literal_args), expected, path, line, tuple(kwargs), test)


#: the most parametrize rows read for one test (a product of decorators can be large)
_MAX_ROWS = 200


def parametrize_rows(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[_Env]:
    """The literal argument values of each ``pytest.mark.parametrize`` row (a product over
    stacked decorators); ``[{}]`` without one. A value that is not literal is left out."""
    rows: list[_Env] = [{}]
    for deco in fn.decorator_list:
        if not (isinstance(deco, ast.Call) and dotted(deco.func).endswith("parametrize")):
            continue
        if len(deco.args) < 2:
            continue
        ok, names_value = constant_value(deco.args[0])
        if not ok:
            continue
        if isinstance(names_value, str):
            names = [n.strip() for n in names_value.split(",") if n.strip()]
        elif isinstance(names_value, list | tuple):
            names = [str(n) for n in names_value]
        else:
            continue
        table = deco.args[1]
        if not isinstance(table, ast.List | ast.Tuple):
            continue
        mine: list[_Env] = []
        for row in table.elts:
            if isinstance(row, ast.Call) and dotted(row.func).endswith("param"):
                values: list[ast.expr] = list(row.args)
            elif len(names) == 1:
                values = [row]
            elif isinstance(row, ast.Tuple | ast.List):
                values = list(row.elts)
            else:
                continue
            env: _Env = {}
            for name, node in zip(names, values, strict=False):
                is_c, v = constant_value(node)
                if is_c:
                    env[name] = v
            mine.append(env)
        rows = [old | new for old in rows for new in mine][:_MAX_ROWS]
    return rows


def _pairs(node: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    if (
        isinstance(node, ast.Assert)
        and isinstance(node.test, ast.Compare)
        and len(node.test.ops) == 1
        and isinstance(node.test.ops[0], ast.Eq | ast.Is)
    ):
        return [(node.test.left, node.test.comparators[0])]
    if (
        isinstance(node, ast.Call)
        and len(node.args) >= 2
        and dotted(node.func).rsplit(".", 1)[-1] in ("assertEqual", "assertEquals", "assertIs")
    ):
        return [(node.args[0], node.args[1])]
    return []


def _test_functions(
    body: list[ast.stmt], prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name.startswith(
            "test"
        ):
            yield prefix + stmt.name, stmt
        elif isinstance(stmt, ast.ClassDef):
            yield from _test_functions(stmt.body, f"{prefix}{stmt.name}::")


def expectations(path: str, tree: ast.AST) -> list[Expectation]:
    """``assert f(3) == 42``, ``assertEqual(f(3), 42)`` and the mirrored forms, one per
    parametrize row when the arguments or the expected value are the row's."""
    out: list[Expectation] = []
    tests = list(_test_functions(tree.body)) if isinstance(tree, ast.Module) else []
    skip = {id(fn) for _, fn in tests}
    scopes: list[tuple[str, list[ast.AST], list[_Env]]] = [
        (qual, list(ast.walk(fn)), parametrize_rows(fn)) for qual, fn in tests
    ]
    rest: list[ast.AST] = []  # the module outside its tests, walked once
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        rest.append(node)
        stack.extend(n for n in ast.iter_child_nodes(node) if id(n) not in skip)
    scopes.append(("", rest, [{}]))
    for qual, nodes, rows in scopes:
        for node in nodes:
            for a, b in _pairs(node):
                line = node.lineno  # type: ignore[attr-defined]
                seen: set[str] = set()  # by repr: the values may be unhashable lists
                for env in rows:
                    exp = _call_side(a, b, path, line, env, qual) or _call_side(
                        b, a, path, line, env, qual
                    )
                    if exp is not None and repr(exp) not in seen:
                        seen.add(repr(exp))
                        out.append(exp)
    return out


# helpers a test calls ------------------------------------------------------------------


def helper_functions(tree: ast.Module, test: PyTest, depth: int = 3) -> list[ast.FunctionDef]:
    """The functions of the module a test calls, to ``depth`` levels: module-level
    ``helper(...)``, and ``self.helper(...)`` / ``cls.helper(...)`` methods of the test's
    class or of a base class the module defines. What they assert is the test's too."""
    top: dict[str, ast.FunctionDef] = {}
    classes: dict[str, ast.ClassDef] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and not stmt.name.startswith("test"):
            top[stmt.name] = stmt
        elif isinstance(stmt, ast.ClassDef):
            classes[stmt.name] = stmt
    methods: dict[str, ast.FunctionDef] = {}
    owner = test.qualname.split("::")[0] if "::" in test.qualname else None
    todo = [owner] if owner else []
    seen_classes: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen_classes or name not in classes:
            continue
        seen_classes.add(name)
        for stmt in classes[name].body:
            if isinstance(stmt, ast.FunctionDef) and not stmt.name.startswith("test"):
                methods.setdefault(stmt.name, stmt)
        todo += [dotted(b) for b in classes[name].bases]
    found: list[ast.FunctionDef] = []
    frontier: list[ast.AST] = [test.node]
    for _ in range(depth):
        nxt: list[ast.AST] = []
        for fn in frontier:
            for node in walk_shallow(fn):
                if not isinstance(node, ast.Call):
                    continue
                target: ast.FunctionDef | None = None
                if isinstance(node.func, ast.Name):
                    target = top.get(node.func.id)
                elif (
                    isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in ("self", "cls")
                ):
                    target = methods.get(node.func.attr)
                if target is not None and target not in found:
                    found.append(target)
                    nxt.append(target)
        frontier = nxt
    return found
