"""Tautologies in Python tests: assertions that hold whatever the code under test does
(``assert True``, ``x == x``, a builtin compared with itself, ``assertTrue(1)``...). Pure
functions of a test's AST; ``testquality`` turns them into findings.
"""

from __future__ import annotations

import ast
import itertools

from loop_orchestrator.verify.pytests import BUILTIN_TYPES, constant_value, dotted, walk_shallow


def _has_call(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) for n in ast.walk(node))


#: calls that build a value of a built-in type: comparing it with itself runs no project code
_BUILTIN_CONSTRUCTORS = (BUILTIN_TYPES - {"type", "object"}) | frozenset(
    {
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
    if constant_value(node)[0]:
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
    is_const, value = constant_value(expr)
    if is_const:
        return (f"asserts the constant {ast.unparse(expr)}", True) if value else None
    if isinstance(expr, ast.Compare):
        operands = [expr.left, *expr.comparators]
        if all(constant_value(o)[0] for o in operands):
            return f"compares constants: `{ast.unparse(expr)}`", True
        if len(expr.ops) == 1 and isinstance(expr.ops[0], ast.Eq | ast.Is | ast.LtE | ast.GtE):
            sure = _self_comparison(
                expr.left, expr.comparators[0], isinstance(expr.ops[0], ast.Is), builtins
            )
            if sure is not False:
                return f"compares a value with itself: `{ast.unparse(expr)}`", bool(sure)
    if isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.Or):
        for v in expr.values:
            ok, val = constant_value(v)
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
        ok, value = constant_value(args[0])
        if ok and value:
            return f"{last}({ast.unparse(args[0])}) is always true", True
    if last == "assertFalse" and args:
        ok, value = constant_value(args[0])
        if ok and not value:
            return f"assertFalse({ast.unparse(args[0])}) is always true", True
    if last == "assertIsNotNone" and args:
        ok, value = constant_value(args[0])
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
        (ca, va), (cb, vb) = constant_value(a), constant_value(b)
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
            if mine in (da, db) and da != db and not constant_value(a if db == mine else b)[0]:
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
    ``assert result == result`` checks nothing.
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
