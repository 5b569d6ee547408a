"""Python tests read by AST: which tests a module defines and what each one asserts.

Knows pytest (``test*`` functions, ``Test*`` classes) and unittest (``TestCase``
subclasses), and the test methods of helper classes whose tests run through a subclass
(``class DecoratorTestMixin`` inherited by ``class LRUDecoratorTest(DecoratorTestMixin,
TestCase)``, as cachetools writes them). Pure functions of source text;
``testquality`` turns the facts into findings. Tautologies are ``pytautologies.py``'s,
the other ways a test avoids failing (early returns, skips...) ``pyevasions.py``'s.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Iterable, Iterator
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


#: the built-in types: a value compared with one, or built by one, is no project value
BUILTIN_TYPES = frozenset(
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
        "type",
        "object",
    }
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
    #: lines outside its body that make its cases: its decorators (parametrize rows) and
    #: the module or class assignments of the tables they or its loops read
    case_lines: frozenset[int] = frozenset()


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
        path,
        tree.body,
        "",
        is_test_scope=True,
        tests=tests,
        dups=dups,
        mixins=_mixins(tree.body),
        scope=Scope.of(tree),
    )
    return PyModule(path=path, tree=tree, tests=tests, duplicates=dups)


def runs_as(mods: list[PyModule]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(path, qualname) of a test defined in a class -> the (path, qualname) of the same test
    run through each subclass in ``mods`` that does not define it again (a test report
    names it ``TestSub::test_m``, wherever ``test_m`` is written). Base classes are matched
    by their last name, in the module itself or in another of ``mods``."""
    classes: list[tuple[str, ast.ClassDef]] = [
        (m.path, s) for m in mods for s in m.tree.body if isinstance(s, ast.ClassDef)
    ]
    children: dict[tuple[str, str], list[tuple[str, ast.ClassDef]]] = {}
    names = {(path, c.name) for path, c in classes}
    for path, c in classes:
        for b in c.bases:
            base = dotted(b).rsplit(".", 1)[-1]
            owner = (path, base) if (path, base) in names else None
            if owner is None:
                owner = next(((p, n) for p, n in names if n == base and p != path), None)
            if owner is not None:
                children.setdefault(owner, []).append((path, c))
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for m in mods:
        for t in m.tests:
            cls, sep, name = t.qualname.rpartition("::")
            if not sep or "::" in cls:
                continue
            found: list[tuple[str, str]] = []
            seen: set[tuple[str, str]] = set()
            todo = list(children.get((m.path, cls), []))
            while todo:
                path, c = todo.pop(0)
                if (path, c.name) in seen:
                    continue
                seen.add((path, c.name))
                own = {
                    s.name for s in c.body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
                }
                if name in own:
                    continue  # its own test_m: another test
                if _collected(c):
                    found.append((path, f"{c.name}::{name}"))
                todo += children.get((path, c.name), [])
            if found:
                out[(t.path, t.qualname)] = found
    return out


# helpers a test calls, and the tables it reads ------------------------------------------

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
#: how many calls deep an assertion made in a helper still counts as the test's
HELPER_DEPTH = 3


@dataclass(frozen=True)
class Scope:
    """What a test's calls can reach in its own file: the module's functions and its
    classes (by name), and the assignments of module and class level names."""

    functions: dict[str, FunctionNode]
    classes: dict[str, ast.ClassDef]
    #: name -> the lines of its module or class level assignments
    tables: dict[str, frozenset[int]]

    @classmethod
    def of(cls, tree: ast.Module) -> Scope:
        functions = {
            s.name: s for s in tree.body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        classes: dict[str, ast.ClassDef] = {}
        tables: dict[str, set[int]] = {}
        todo: list[list[ast.stmt]] = [tree.body]
        while todo:
            for s in todo.pop():
                if isinstance(s, ast.ClassDef):
                    classes.setdefault(s.name, s)
                    todo.append(s.body)
                targets = (
                    s.targets
                    if isinstance(s, ast.Assign)
                    else [s.target]
                    if isinstance(s, ast.AnnAssign | ast.AugAssign)
                    else []
                )
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            lines = range(s.lineno, (s.end_lineno or s.lineno) + 1)
                            tables.setdefault(n.id, set()).update(lines)
        return cls(functions, classes, {k: frozenset(v) for k, v in tables.items()})

    def methods(self, cls_name: str | None) -> dict[str, FunctionNode]:
        """The methods of class ``cls_name`` and of its bases defined in the file, the
        nearest definition of each name winning (as attribute lookup does)."""
        out: dict[str, FunctionNode] = {}
        seen: set[str] = set()
        todo = [cls_name] if cls_name else []
        while todo:
            name = todo.pop(0)
            node = self.classes.get(name)
            if node is None or name in seen:
                continue
            seen.add(name)
            for s in node.body:
                if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef):
                    out.setdefault(s.name, s)
            todo += [dotted(b).rsplit(".", 1)[-1] for b in node.bases]
        return out


def _callee(call: ast.Call, scope: Scope, methods: dict[str, FunctionNode]) -> FunctionNode | None:
    """The function of the file a call runs: ``helper(...)``, ``self.helper(...)``,
    ``cls.helper(...)``, ``super().helper(...)``, ``Class.helper(...)``."""
    f = call.func
    if isinstance(f, ast.Name):
        return scope.functions.get(f.id)
    if isinstance(f, ast.Attribute):
        owner = f.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            return methods.get(f.attr)
        if isinstance(owner, ast.Call) and dotted(owner.func) == "super":
            return methods.get(f.attr)
        if isinstance(owner, ast.Name) and owner.id in scope.classes:
            return scope.methods(owner.id).get(f.attr)
    return None


def reached_assertions(
    fn: FunctionNode, scope: Scope, cls_name: str | None = None, depth: int = HELPER_DEPTH
) -> list[ast.AST]:
    """The assertion nodes a test runs: its own, and those of the helpers of its file it
    calls (module functions, methods of its class and its bases there), up to ``depth``
    calls deep, each helper read once. A test that checks through ``self.check_parse(...)``
    asserts what ``check_parse`` asserts."""
    methods = scope.methods(cls_name)
    out: list[ast.AST] = []
    seen = {id(fn)}
    todo: list[tuple[ast.AST, int]] = [(fn, 0)]
    while todo:
        node, level = todo.pop(0)
        for n in ast.walk(node):
            if is_assertion(n):
                out.append(n)
            elif isinstance(n, ast.Call) and level < depth:
                helper = _callee(n, scope, methods)
                if helper is not None and id(helper) not in seen:
                    seen.add(id(helper))
                    todo.append((helper, level + 1))
    return out


def case_lines(fn: FunctionNode, scope: Scope) -> frozenset[int]:
    """Lines outside ``fn``'s body that make its cases: its decorators (``parametrize``
    rows), and the module or class assignments of names its decorators or its loops
    (``for case in CASES: with self.subTest(case)``) read."""
    lines: set[int] = set()
    names: set[str] = set()
    for deco in fn.decorator_list:
        lines.update(range(deco.lineno, (deco.end_lineno or deco.lineno) + 1))
        names |= {n.id for n in ast.walk(deco) if isinstance(n, ast.Name)}
    for n in ast.walk(fn):
        if isinstance(n, ast.For | ast.AsyncFor | ast.comprehension):
            for m in ast.walk(n.iter):
                if isinstance(m, ast.Name):
                    names.add(m.id)
                elif isinstance(m, ast.Attribute) and dotted(m.value) in ("self", "cls"):
                    names.add(m.attr)  # a class-level table: self.CASES
    for name in names:
        lines |= scope.tables.get(name, frozenset())
    return frozenset(lines)


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
    scope: Scope,
    cls_name: str | None = None,
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
                    assertions=len(reached_assertions(stmt, scope, cls_name))
                    or len(import_checks(stmt)),
                    body_dump="\n".join(ast.dump(s) for s in stmt.body),
                    node=stmt,
                    inherited=inherited,
                    case_lines=case_lines(stmt, scope),
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
                    scope=scope,
                    cls_name=stmt.name,
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


def _builtin_exception(node: ast.AST | None) -> type[BaseException] | None:
    """The builtin exception class ``node`` names (``TypeError``, ``raise TypeError(...)``'s
    callee), or None for anything else."""
    if isinstance(node, ast.Call):
        node = node.func
    if not isinstance(node, ast.Name):
        return None
    value = getattr(builtins, node.id, None)
    return value if isinstance(value, type) and issubclass(value, BaseException) else None


def _catches(handler: ast.ExceptHandler, raised: type[BaseException]) -> bool:
    """Whether ``handler`` may catch ``raised``: a bare ``except:``, a builtin base of it,
    or a name this module cannot resolve to a builtin that is anything but a plain name."""
    if handler.type is None:
        return True
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    for kind in kinds:
        builtin = _builtin_exception(kind)
        if builtin is not None:
            if issubclass(raised, builtin):
                return True
        elif not isinstance(kind, ast.Name | ast.Attribute):
            return True
    return False


def expects_raise(node: ast.AST) -> bool:
    """A hand-written ``assertRaises``: a ``try`` whose body ends by raising a builtin
    exception that none of its handlers catches (``raise RuntimeError("not reached")``
    under ``except TypeError:``), or whose ``else:`` raises. The test fails unless the
    body raised what a handler names. A handler that catches the closing raise too
    (``except Exception:``, a bare ``except:``) checks nothing."""
    if not isinstance(node, ast.Try | ast.TryStar) or not node.handlers:
        return False
    if any(isinstance(s, ast.Raise) for s in node.orelse):
        return True
    last = node.body[-1]
    if not isinstance(last, ast.Raise) or len(node.body) < 2:
        return False
    raised = _builtin_exception(last.exc)
    return raised is not None and not any(_catches(h, raised) for h in node.handlers)


_IMPORT_CALLS = frozenset({"importlib.import_module", "import_module", "__import__"})


def import_checks(fn: FunctionNode) -> list[ast.stmt]:
    """The statements of a test that only imports (``import m``, ``from m import x``,
    ``importlib.import_module(...)``; a docstring aside): its one check is that the module
    loads without error, a weak one (``weakchecks``). Empty for any other test: an import
    next to a call that asserts nothing is no check."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    for stmt in body:
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            continue
        if (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and dotted(stmt.value.func) in _IMPORT_CALLS
        ):
            continue
        return []
    return list(body)


def is_assertion(node: ast.AST) -> bool:
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.Try | ast.TryStar):
        return expects_raise(node)
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
#: names a test binds once to an expression (``values = [1, 2]``, ``result = f(3)``)
_Bound = dict[str, ast.expr]
#: how deep a name bound to another name is followed
_MAX_DEPTH = 8


class _Scope:
    """What a name means in one parametrize row of a test: the row's value, or the one
    expression the test binds it to."""

    def __init__(self, env: _Env, bound: _Bound | None = None) -> None:
        self.env = env
        self.bound = bound or {}

    def value(self, node: ast.AST, depth: int = 0) -> tuple[bool, object]:
        """A literal, folded: the row's values and the test's names substituted,
        containers of them, ``-x`` and ``"sep".join([...])``."""
        ok, v = constant_value(node)
        if ok or depth > _MAX_DEPTH:
            return ok, v
        try:
            return True, self._fold(node, depth)
        except (_NotLiteral, TypeError):
            return False, None

    def call(self, node: ast.AST, depth: int = 0) -> ast.AST:
        """``node``, or the call a name stands for (``result = f(3)``)."""
        while isinstance(node, ast.Name) and node.id not in self.env and depth <= _MAX_DEPTH:
            bound = self.bound.get(node.id)
            if bound is None:
                break
            node, depth = bound, depth + 1
        return node

    def _fold(self, node: ast.AST, depth: int) -> object:
        ok, v = constant_value(node)
        if ok:
            return v
        if isinstance(node, ast.Name):
            if node.id in self.env:
                return self.env[node.id]
            if node.id in self.bound:
                ok, v = self.value(self.bound[node.id], depth + 1)
                if ok:
                    return v
            raise _NotLiteral
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            items = [self._fold(e, depth) for e in node.elts]
            if isinstance(node, ast.List):
                return items
            return tuple(items) if isinstance(node, ast.Tuple) else set(items)
        if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
            return {
                self._fold(k, depth): self._fold(v, depth)
                for k, v in zip(node.keys, node.values, strict=True)
                if k is not None
            }
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            x = self._fold(node.operand, depth)
            if isinstance(x, int | float | complex) and not isinstance(x, bool):
                return -x if isinstance(node.op, ast.USub) else x
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "join"
            and isinstance(node.func.value, ast.Constant)
            and isinstance(node.func.value.value, str)
            and len(node.args) == 1
            and not node.keywords
        ):
            parts = self._fold(node.args[0], depth)
            if isinstance(parts, list | tuple) and all(isinstance(x, str) for x in parts):
                return node.func.value.value.join(parts)
        raise _NotLiteral


class _NotLiteral(Exception):
    """The expression is not a literal in this scope."""


def _bound_once(fn: ast.FunctionDef | ast.AsyncFunctionDef, module: _Bound) -> _Bound:
    """Names ``fn`` binds exactly once, by a plain ``name = expr``, and never changes in
    place (``name.append(x)``, ``name[k] = v``) when they hold a container; its parameters
    (fixtures, parametrize arguments) are not among them. ``module``'s names (the test
    module's, ``_module_bound``) that ``fn`` neither binds nor takes are kept."""
    stores, value, mutated = _bindings(ast.walk(fn))
    a = fn.args
    params = {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x}
    mine = {
        name: expr
        for name, expr in value.items()
        if stores.get(name) == 1
        and name not in params
        and not (name in mutated and isinstance(expr, ast.List | ast.Dict | ast.Set))
    }
    inherited = {
        name: expr
        for name, expr in module.items()
        if name not in stores
        and name not in params
        and not (name in mutated and isinstance(expr, ast.List | ast.Dict | ast.Set))
    }
    return inherited | mine


def _module_bound(tree: ast.Module) -> _Bound:
    """Names the module's top level binds exactly once, by a plain ``NAME = expr``."""
    top: list[ast.AST] = []
    stack: list[ast.AST] = list(tree.body)
    while stack:  # the top level's statements, not the bodies of functions and classes
        node = stack.pop()
        top.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))
    stores, value, _mutated = _bindings(top)
    return {name: expr for name, expr in value.items() if stores.get(name) == 1}


#: the methods that change a list, dict or set in place
_MUTATORS = frozenset(
    {
        "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
        "update", "setdefault", "popitem", "add", "discard", "difference_update",
        "intersection_update", "symmetric_difference_update",
        "__setitem__", "__delitem__", "__iadd__",
    }
)  # fmt: skip


def _bindings(nodes: Iterable[ast.AST]) -> tuple[dict[str, int], _Bound, set[str]]:
    """How often each name is bound among ``nodes``, the value of each plain
    ``name = expr``, and the names changed in place (``name.append(x)``, ``name[k] = v``)."""
    stores: dict[str, int] = {}
    value: _Bound = {}
    mutated: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            stores[node.id] = stores.get(node.id, 0) + 1
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            value[node.targets[0].id] = node.value
        if (
            isinstance(node, ast.Attribute | ast.Subscript)
            and isinstance(node.value, ast.Name)
            and (
                node.attr in _MUTATORS
                if isinstance(node, ast.Attribute)
                else not isinstance(node.ctx, ast.Load)
            )
        ):
            mutated.add(node.value.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            stores[node.name] = stores.get(node.name, 0) + 1
        elif isinstance(node, ast.alias):
            name = (node.asname or node.name).split(".")[0]
            stores[name] = stores.get(name, 0) + 1
    return stores, value, mutated


def _call_side(
    call: ast.AST, other: ast.AST, path: str, line: int, scope: _Scope, test: str
) -> Expectation | None:
    call = scope.call(call)
    if not isinstance(call, ast.Call):
        return None
    ok, expected = scope.value(other)
    if not ok:
        return None
    name = dotted(call.func).rsplit(".", 1)[-1]
    if not name:
        return None
    literal_args: list[object] = []
    kwargs: list[tuple[str, object]] = []
    for a in call.args:
        if isinstance(a, ast.Starred):
            is_c, v = scope.value(a.value)
            if not (is_c and isinstance(v, list | tuple)):
                return Expectation(name, None, expected, path, line, test=test)
            literal_args.extend(v)
            continue
        is_c, v = scope.value(a)
        if not is_c:
            return Expectation(name, None, expected, path, line, test=test)
        literal_args.append(v)
    for k in call.keywords:
        is_c, v = scope.value(k.value)
        if k.arg is None and is_c and isinstance(v, dict) and all(isinstance(x, str) for x in v):
            kwargs.extend((str(x), y) for x, y in v.items())
            continue
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


#: calls that assert their first two arguments equal (unittest's, and the ``assert_equal``
#: of nose, numpy.testing and many projects' own test helpers)
_EQUALITY_HELPERS = ("assertEqual", "assertEquals", "assertIs", "assert_equal", "assert_equals")


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
        and dotted(node.func).rsplit(".", 1)[-1] in _EQUALITY_HELPERS
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


def _with_loop_rows(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, rows: list[_Scope]
) -> list[tuple[ast.AST, list[_Scope]]]:
    """Each node of ``fn`` with the rows it runs in: the parametrize rows, times the items
    of each ``for`` loop over a literal table around it (``for x, want in [(1, 2), ...]``,
    ``CASES.items()``) with the loop's names bound to the item."""
    out: list[tuple[ast.AST, list[_Scope]]] = []
    stack: list[tuple[ast.AST, list[_Scope]]] = [(fn, rows)]
    while stack:
        node, mine = stack.pop()
        out.append((node, mine))
        if isinstance(node, ast.For | ast.AsyncFor):
            inner = [
                _Scope(scope.env | env, scope.bound)
                for scope in mine
                for env in _loop_items(node, scope)
            ][:_MAX_ROWS]
            for child in ast.iter_child_nodes(node):
                in_body = any(child is s for s in node.body)
                stack.append((child, inner if in_body and inner else mine))
        else:
            stack.extend((child, mine) for child in ast.iter_child_nodes(node))
    return out


def _loop_items(loop: ast.For | ast.AsyncFor, scope: _Scope) -> list[_Env]:
    """The loop's names bound to each item of its literal table; [] when it is not one."""
    source: ast.AST = loop.iter
    items_of_dict = (
        isinstance(source, ast.Call)
        and isinstance(source.func, ast.Attribute)
        and source.func.attr == "items"
        and not source.args
    )
    if items_of_dict:
        source = source.func.value  # type: ignore[attr-defined]
    ok, table = scope.value(source)
    if items_of_dict:
        table = list(table.items()) if ok and isinstance(table, dict) else None
    if not (ok and isinstance(table, list | tuple)):
        return []
    out: list[_Env] = []
    for item in table:
        env: _Env = {}
        if not _unpack(loop.target, item, env):
            return []
        out.append(env)
    return out


def _helpers(tree: ast.Module) -> dict[str, tuple[ast.FunctionDef, bool]]:
    """The test module's functions and its classes' methods that are not tests, by name,
    each with whether it is a method; a name defined twice is left out."""
    out: dict[str, tuple[ast.FunctionDef, bool]] = {}
    twice: set[str] = set()
    defs = [(stmt, False) for stmt in tree.body] + [
        (m, True) for c in tree.body if isinstance(c, ast.ClassDef) for m in c.body
    ]
    for stmt, method in defs:
        if isinstance(stmt, ast.FunctionDef) and not stmt.name.startswith("test"):
            if stmt.name in out:
                twice.add(stmt.name)
            out[stmt.name] = (stmt, method)
    return {k: v for k, v in out.items() if k not in twice}


def _helper_calls(
    nodes: list[tuple[ast.AST, list[_Scope]]],
    helpers: dict[str, tuple[ast.FunctionDef, bool]],
    module: _Bound,
) -> list[tuple[ast.AST, list[_Scope]]]:
    """The nodes of the helpers a test calls with literal arguments (``check(3, 4, 12)``,
    ``self.check(...)``), each in the rows of the helper's parameters bound to them."""
    out: list[tuple[ast.AST, list[_Scope]]] = []
    for node, rows in nodes:
        if not isinstance(node, ast.Call):
            continue
        name, method = "", False
        if isinstance(node.func, ast.Name):
            name = node.func.id
        elif (
            isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in ("self", "cls")
        ):
            name, method = node.func.attr, True
        if name not in helpers or helpers[name][1] != method:
            continue
        helper = helpers[name][0]
        bound = _bound_once(helper, module)
        envs = [env for scope in rows if (env := _bind_helper(helper, method, node, scope))]
        if envs:
            out += _with_loop_rows(helper, [_Scope(env, bound) for env in envs])
    return out


def _bind_helper(helper: ast.FunctionDef, method: bool, call: ast.Call, scope: _Scope) -> _Env:
    """The helper's parameters bound to the call's literal arguments and the helper's
    literal defaults; {} when an argument is not a literal or does not fit."""
    a = helper.args
    positional = [x.arg for x in (*a.posonlyargs, *a.args)][1 if method else 0 :]
    if len(call.args) > len(positional) or a.vararg is not None or a.kwarg is not None:
        return {}
    env: _Env = {}
    defaults = list(zip(positional[len(positional) - len(a.defaults) :], a.defaults, strict=False))
    defaults += [(x.arg, d) for x, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d]
    for name, d in defaults:
        ok, v = constant_value(d)
        if ok:
            env[name] = v
    names = set(positional) | {x.arg for x in a.kwonlyargs}
    pairs: list[tuple[str | None, ast.expr]] = list(zip(positional, call.args, strict=False))
    pairs += [(k.arg, k.value) for k in call.keywords]
    for key, value in pairs:
        ok, v = scope.value(value)
        if key is None or key not in names or isinstance(value, ast.Starred) or not ok:
            return {}
        env[key] = v
    return env if names <= set(env) else {}


def _unpack(target: ast.expr, value: object, env: _Env) -> bool:
    if isinstance(target, ast.Name):
        env[target.id] = value
        return True
    if isinstance(target, ast.Tuple | ast.List) and isinstance(value, tuple | list):
        if len(target.elts) != len(value) or any(isinstance(e, ast.Starred) for e in target.elts):
            return False
        return all(_unpack(t, v, env) for t, v in zip(target.elts, value, strict=True))
    return False


def expectations(path: str, tree: ast.AST) -> list[Expectation]:
    """``assert f(3) == 42``, ``assertEqual(f(3), 42)`` and the mirrored forms, one per
    parametrize row, and per item of a loop over a literal table, when the arguments or the
    expected value are the row's."""
    out: list[Expectation] = []
    tests = list(_test_functions(tree.body)) if isinstance(tree, ast.Module) else []
    skip = {id(fn) for _, fn in tests}
    module = _module_bound(tree) if isinstance(tree, ast.Module) else {}
    scopes: list[tuple[str, list[tuple[ast.AST, list[_Scope]]]]] = [
        (qual, _with_loop_rows(fn, [_Scope(row, bound) for row in parametrize_rows(fn)]))
        for qual, fn in tests
        for bound in [_bound_once(fn, module)]
    ]
    helpers = _helpers(tree) if isinstance(tree, ast.Module) else {}
    for _qual, nodes in scopes:
        nodes += _helper_calls(nodes, helpers, module)
    rest: list[tuple[ast.AST, list[_Scope]]] = []  # the module outside its tests, once
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        rest.append((node, [_Scope({})]))
        stack.extend(n for n in ast.iter_child_nodes(node) if id(n) not in skip)
    scopes.append(("", rest))
    for qual, nodes in scopes:
        for node, rows in nodes:
            for a, b in _pairs(node):
                line = node.lineno  # type: ignore[attr-defined]
                seen: set[str] = set()  # by repr: the values may be unhashable lists
                for scope in rows:
                    exp = _call_side(a, b, path, line, scope, qual) or _call_side(
                        b, a, path, line, scope, qual
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


# fixtures: a changed fixture changes the tests that use it -------------------------------


def _is_fixture(fn: FunctionNode) -> bool:
    return any(dotted(d).rsplit(".", 1)[-1] == "fixture" for d in fn.decorator_list)


def _params(fn: FunctionNode) -> set[str]:
    a = fn.args
    return {p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]}


def _uses(fn: FunctionNode) -> set[str]:
    """The fixtures a test or fixture asks for: its parameters and ``usefixtures`` names."""
    names = _params(fn)
    for d in fn.decorator_list:
        if isinstance(d, ast.Call) and dotted(d.func).endswith("usefixtures"):
            names |= {
                a.value for a in d.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
            }
    return names


def changed_fixtures(tree: ast.Module, added: set[int]) -> set[str]:
    """The fixtures of a module (a conftest) with an added line (decorator included), and
    those of the module that ask for one of them."""
    fixtures = {
        s.name: s
        for s in ast.walk(tree)
        if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef) and _is_fixture(s)
    }
    changed = {
        name
        for name, fn in fixtures.items()
        if added
        & set(
            range(
                min([fn.lineno, *(d.lineno for d in fn.decorator_list)]),
                (fn.end_lineno or fn.lineno) + 1,
            )
        )
    }
    grew = True
    while grew:
        more = {n for n, fn in fixtures.items() if n not in changed and _uses(fn) & changed}
        changed |= more
        grew = bool(more)
    return changed


def fixture_users(tree: ast.Module, fixtures: set[str]) -> list[str]:
    """Qualnames of the tests of a module that use one of ``fixtures`` (as a parameter, by
    ``usefixtures``, or through a fixture of the module that uses one); a fixture of the
    module with the same name hides the one of the conftest."""
    local = {
        s.name: s
        for s in ast.walk(tree)
        if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef) and _is_fixture(s)
    }
    wanted = set(fixtures) - set(local)
    grew = True
    while grew:
        more = {n for n, fn in local.items() if n not in wanted and _uses(fn) & wanted}
        wanted |= more
        grew = bool(more)
    out: list[str] = []

    def visit(body: list[ast.stmt], prefix: str, inherited: set[str]) -> None:
        for s in body:
            if isinstance(s, ast.ClassDef):
                marks = set(inherited)
                for d in s.decorator_list:
                    if isinstance(d, ast.Call) and dotted(d.func).endswith("usefixtures"):
                        marks |= {
                            a.value
                            for a in d.args
                            if isinstance(a, ast.Constant) and isinstance(a.value, str)
                        }
                visit(s.body, f"{prefix}{s.name}::", marks)
            elif (
                isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
                and s.name.startswith("test")
                and (_uses(s) | inherited) & wanted
            ):
                out.append(prefix + s.name)

    visit(tree.body, "", set())
    return out
