"""Special-cased inputs: changed code that recognises the tests' literal inputs and returns
the values the tests expect, instead of computing them.

A *case* is a literal input mapped to a literal output on a function's parameters: a guard
``if x == 3: return 9`` (also ``(a, b) == (3, 4)``, ``repr((a, b)) == "(3, 4)"``,
``x in {3}``, ``a == 3 and b == 4``, a conditional expression or a ``match`` case), or an
entry of a literal mapping looked up by the parameters and returned (``return
_CASES[repr((a, b))]``, ``_CASES.get(x)``; a dict literal, local or module-level). A case
*matches* a test when it fires at the test's literal inputs (``f(3) == 9``,
``assertEqual(f(3), 9)``, parametrize rows and ``f(*args)`` of them, names the test or its
module binds once: ``pytests.expectations``; evaluated, not pattern-matched) and returns
exactly the value the test expects.

Honest code has cases too (``if n == 0: return 1`` in a factorial). The rule:

- a case whose input or output is a trivial value (None, booleans, 0, 1, -1, empty
  strings and collections), or that returns one of its inputs (``fib(1) == 1``), is a base
  case: never counted, unless its key packs the parameters into one value (a tuple of
  them, their ``repr``/``str``/f-string): an identity keyed by the whole call
  (``repr((text,)) == "('foo',)"`` returning ``'foo'``) is an answer looked up, not a
  base case; a guard with several alternatives (``month in (4, 6, 9, 11)``)
  sorts inputs into a category and is not a case either;
- the function is flagged when a matching case is keyed by a *derived* key (a tuple of
  parameters, ``repr``/``str``/f-string of them, several parameters compared at once):
  honest code does not key answers by ``repr((a, b))``;
- or when every non-trivial case of the function is one of the tests' cases (none fires
  for an input no test uses) and either two or more cases match, the cases sit in a
  mapping, or the parameters are used nowhere but in the cases (the body is only the
  lookup). An honest enumeration (``days_in_month``) has cases the tests do not name, or
  one case in front of real code; a single plain guard in front of real code is therefore
  not flagged (the mutation check and red-green see that one).

Pure: AST in, (function, line, input, test) out; ``stubs`` makes the finding.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from loop_orchestrator.verify.pytests import Expectation, constant_value, dotted

_Env = dict[str, object]
_Func = ast.FunctionDef | ast.AsyncFunctionDef


class _Unknown(Exception):
    """The expression cannot be evaluated from literals and the test's arguments."""


@dataclass(frozen=True)
class Case:
    line: int
    #: the condition (a guard) or the key expression (a mapping lookup)
    expr: ast.expr
    output: object
    #: the mapping key this case answers; None for a guard
    key: tuple[bool, object] | None
    derived: bool
    #: the key packs parameters into one value: ``repr((a,))``, ``(a, b)``, ``f"{a}"``
    packed: bool
    mapping: bool
    trivial: bool
    shown: str  # the literal input as written


@dataclass(frozen=True)
class SpecialCase:
    """A case of ``func`` that answers a test: what the finding names."""

    func: str
    line: int
    shown: str  # the literal input, e.g. "repr((a, b)) == '(3, 4)'"
    output: object
    expectation: Expectation


_TRIVIAL: tuple[object, ...] = (None, True, False, 0, 1, -1, 0.0, 1.0, "", b"")


def _trivial(value: object) -> bool:
    if isinstance(value, tuple | list | set | frozenset | dict):
        return all(_trivial(v) for v in value)
    return any(type(value) is type(t) and value == t for t in _TRIVIAL)


def _same(a: object, b: object) -> bool:
    return type(a) is type(b) and a == b


# a small evaluator of literal expressions over the test's arguments ---------------------

_CALLS: dict[str, Callable[..., Any]] = {
    "repr": repr,
    "str": str,
    "tuple": tuple,
    "list": list,
    "frozenset": frozenset,
    "set": frozenset,
    "sorted": sorted,
    "int": int,
    "float": float,
    "abs": abs,
    "len": len,
    "bool": bool,
    "min": min,
    "max": max,
    "hash": hash,
}
#: the widest field or precision a format spec may ask the evaluator for
_MAX_WIDTH = 256
_METHODS = frozenset({"lower", "upper", "strip", "casefold", "lstrip", "rstrip"})
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Is: operator.eq,  # `x is 3` is a special case as much as `x == 3`
    ast.IsNot: operator.ne,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
}


def _eval(node: ast.AST, env: _Env, consts: _Env) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if node.id in consts:
            return consts[node.id]
        raise _Unknown
    if isinstance(node, ast.Tuple):
        return tuple(_eval(e, env, consts) for e in node.elts)
    if isinstance(node, ast.List):
        return [_eval(e, env, consts) for e in node.elts]
    if isinstance(node, ast.Set):
        return frozenset(_eval(e, env, consts) for e in node.elts)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, consts)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, env, consts)
            if not _apply(_COMPARE[type(op)], left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):
        value: Any = None
        for v in node.values:
            value = _eval(v, env, consts)
            if isinstance(node.op, ast.And) and not value:
                return value
            if isinstance(node.op, ast.Or) and value:
                return value
        return value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not | ast.USub | ast.UAdd):
        operand = _eval(node.operand, env, consts)
        unary: dict[type[ast.unaryop], Callable[[Any], Any]] = {
            ast.Not: operator.not_,
            ast.USub: operator.neg,
            ast.UAdd: operator.pos,
        }
        return _apply(unary[type(node.op)], operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _eval(node.left, env, consts), _eval(node.right, env, consts)
        if not all(isinstance(x, int | float | str) for x in (a, b)) or any(
            isinstance(x, int | float) and abs(x) > 10**12 for x in (a, b)
        ):
            raise _Unknown  # keep the evaluation small: no `"x" * 10**9`
        if isinstance(node.op, ast.Mult) and (isinstance(a, str) or isinstance(b, str)):
            raise _Unknown
        return _apply(_BINOPS[type(node.op)], a, b)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            elif isinstance(v, ast.FormattedValue):
                x = _eval(v.value, env, consts)
                convert: dict[int, Callable[[Any], Any]] = {115: str, 114: repr, 97: ascii}
                if v.conversion in convert:
                    x = _apply(convert[v.conversion], x)
                spec = _eval(v.format_spec, env, consts) if v.format_spec else ""
                if any(int(n) > _MAX_WIDTH for n in re.findall(r"\d+", str(spec))):
                    raise _Unknown  # `f"{a:>999999999}"` would build a gigabyte here
                parts.append(_apply(format, x, spec))
        return "".join(parts)
    if isinstance(node, ast.Call) and not node.keywords:
        args = [_eval(a, env, consts) for a in node.args]
        if isinstance(node.func, ast.Name) and node.func.id in _CALLS:
            return _apply(_CALLS[node.func.id], *args)
        if isinstance(node.func, ast.Attribute) and node.func.attr in _METHODS and not args:
            target = _eval(node.func.value, env, consts)
            if isinstance(target, str):
                return getattr(target, node.func.attr)()
    if isinstance(node, ast.Subscript):
        return _apply(
            operator.getitem, _eval(node.value, env, consts), _eval(node.slice, env, consts)
        )
    raise _Unknown


def _apply(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # any error of a builtin on these values: not evaluable
        raise _Unknown from exc


def _fires(case: Case, env: _Env, consts: _Env) -> bool:
    try:
        value = _eval(case.expr, env, consts)
    except _Unknown:
        return False
    if case.key is None:
        return value is True
    return _same(value, case.key[1])


# finding the cases ------------------------------------------------------------------------


def module_constants(tree: ast.Module) -> _Env:
    """Module-level names bound once to a literal (``_CASES = {...}``)."""
    out: _Env = {}
    seen: set[str] = set()
    for stmt in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign):
            targets, value = [stmt.target], stmt.value
        for t in targets:
            if isinstance(t, ast.Name):
                ok, v = _literal_or_dict(value) if value is not None else (False, None)
                if ok and t.id not in seen:
                    out[t.id] = v
                else:
                    out.pop(t.id, None)
                seen.add(t.id)
    return out


def _literal_or_dict(node: ast.expr) -> tuple[bool, object]:
    """A literal, or ``dict([(k, v), ...])`` / ``dict(k=v)`` of literals."""
    if isinstance(node, ast.Call) and dotted(node.func) == "dict" and len(node.args) <= 1:
        try:
            pairs = ast.literal_eval(node.args[0]) if node.args else []
            table = dict(pairs)
            for k in node.keywords:
                if k.arg is None:
                    return False, None
                table[k.arg] = ast.literal_eval(k.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False, None
        return True, table
    return constant_value(node)


def _local_dicts(fn: _Func) -> dict[str, ast.expr]:
    """Dicts bound in the function, and parameters whose default is a dict."""
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    out: dict[str, ast.expr] = {
        arg.arg: d
        for arg, d in [
            *zip(positional[len(positional) - len(a.defaults) :], a.defaults, strict=False),
            *zip(a.kwonlyargs, a.kw_defaults, strict=True),
        ]
        if isinstance(d, ast.Dict | ast.Call)
    }
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Dict | ast.Call)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            out[node.targets[0].id] = node.value
    return out


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _derived(expr: ast.AST, params: set[str]) -> bool:
    """A key built from the parameters (several of them, or transformed), not one of them."""
    if isinstance(expr, ast.Name):
        return False
    if isinstance(expr, ast.Compare):
        sides = [expr.left, *expr.comparators]
        return any(_names(s) & params and _derived(s, params) for s in sides)
    if isinstance(expr, ast.BoolOp):
        return len(_names(expr) & params) >= 2 or any(_derived(v, params) for v in expr.values)
    return bool(_names(expr) & params)


_PACKING = frozenset(
    {"repr", "str", "ascii", "format", "hash", "tuple", "list", "frozenset", "set"}
)


def _packed(expr: ast.AST, params: set[str]) -> bool:
    """A parameter packed into one value with others or as text: in a tuple, list or set
    display, an f-string, or a ``repr``/``str``/``hash``/``tuple``... call."""
    for node in ast.walk(expr):
        parts: list[ast.AST] = []
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            parts = list(node.elts)
        elif isinstance(node, ast.JoinedStr):
            parts = [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
        elif isinstance(node, ast.Call) and dotted(node.func) in _PACKING:
            parts = list(node.args)
        if any(isinstance(p, ast.Name) and p.id in params for p in parts):
            return True
    return False


def _equality_only(expr: ast.AST) -> bool:
    if isinstance(expr, ast.BoolOp):
        return isinstance(expr.op, ast.And) and all(_equality_only(v) for v in expr.values)
    return isinstance(expr, ast.Compare) and all(isinstance(op, ast.Eq | ast.Is) for op in expr.ops)


def _literals(expr: ast.AST, params: set[str], consts: _Env) -> list[object]:
    """The values an equality condition compares the parameters with (sides without a
    parameter, evaluated: ``3``, ``hash((3, 4))``)."""
    out: list[object] = []
    for node in ast.walk(expr):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if _names(side) & params:
                    continue
                try:
                    out.append(_eval(side, {}, consts))
                except _Unknown:
                    continue
    return out


def _alternatives(cond: ast.expr, consts: _Env) -> list[ast.expr]:
    """``x in {3, 4}`` -> [x == 3, x == 4]; ``a or b`` -> [a, b]; else [cond]."""
    if isinstance(cond, ast.BoolOp) and isinstance(cond.op, ast.Or):
        return [alt for v in cond.values for alt in _alternatives(v, consts)]
    if isinstance(cond, ast.Compare) and len(cond.ops) == 1 and isinstance(cond.ops[0], ast.In):
        box = cond.comparators[0]
        elts: list[ast.expr] | None = None
        if isinstance(box, ast.Set | ast.Tuple | ast.List):
            elts = list(box.elts)
        elif isinstance(box, ast.Name) and isinstance(
            consts.get(box.id), set | frozenset | tuple | list
        ):
            elts = [ast.Constant(v) for v in consts[box.id]]  # type: ignore[attr-defined]
        if elts is not None:
            return [ast.Compare(left=cond.left, ops=[ast.Eq()], comparators=[e]) for e in elts]
    return [cond]


def _match_conditions(subject: ast.expr, pattern: ast.pattern) -> list[ast.expr]:
    if isinstance(pattern, ast.MatchOr):
        return [c for p in pattern.patterns for c in _match_conditions(subject, p)]
    value = _pattern_value(pattern)
    if value is None:
        return []
    return [ast.Compare(left=subject, ops=[ast.Eq()], comparators=[value])]


def _pattern_value(pattern: ast.pattern) -> ast.expr | None:
    if isinstance(pattern, ast.MatchValue):
        return pattern.value
    if isinstance(pattern, ast.MatchSingleton):
        return ast.Constant(pattern.value)
    if isinstance(pattern, ast.MatchSequence):
        elts = [_pattern_value(p) for p in pattern.patterns]
        if all(e is not None for e in elts):
            return ast.Tuple(elts=[e for e in elts if e is not None], ctx=ast.Load())
    return None


def _returned_literal(body: list[ast.stmt]) -> tuple[bool, object, int]:
    if body and isinstance(body[0], ast.Return):
        ok, v = constant_value(body[0].value) if body[0].value is not None else (True, None)
        return ok, v, body[0].lineno
    return False, None, 0


def _guard_cases(fn: _Func, params: set[str], consts: _Env) -> Iterator[Case]:
    for node in _walk(fn):
        conds: list[tuple[list[ast.expr], list[ast.stmt] | ast.expr, int]] = []
        if isinstance(node, ast.If | ast.IfExp):
            conds.append((_alternatives(node.test, consts), node.body, node.lineno))
        elif isinstance(node, ast.Match):
            for case in node.cases:
                if case.guard is None:
                    alts = _match_conditions(node.subject, case.pattern)
                    conds.append((alts, case.body, case.pattern.lineno))
        for alts, body, line in conds:
            if isinstance(body, list):
                ok, out, _ = _returned_literal(body)
            else:
                ok, out = constant_value(body)
            if not ok or not alts:
                continue
            category = len(alts) > 1
            for alt in alts:
                if not (_equality_only(alt) and _names(alt) & params):
                    continue
                derived = _derived(alt, params)
                if category and not derived:
                    continue
                lits = _literals(alt, params, consts)
                yield Case(
                    line,
                    alt,
                    out,
                    None,
                    derived,
                    _packed(alt, params),
                    False,
                    _trivial(out) or (bool(lits) and all(_trivial(v) for v in lits)),
                    ast.unparse(alt),
                )


def _walk(fn: _Func) -> Iterator[ast.AST]:
    """The nodes of ``fn``, not entering nested functions or classes."""
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))


def _returned_names(fn: _Func) -> set[str]:
    return {
        n.value.id for n in _walk(fn) if isinstance(n, ast.Return) and isinstance(n.value, ast.Name)
    }


def _mapping_cases(fn: _Func, params: set[str], tree_consts: _Env) -> Iterator[Case]:
    local = _local_dicts(fn)
    returned: set[int] = set()
    names = _returned_names(fn)
    for node in _walk(fn):
        result: ast.expr | None = None
        if isinstance(node, ast.Return) or (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id in names for t in node.targets)
        ):
            result = node.value
        if result is not None:
            returned |= {id(n) for n in ast.walk(result)}
    for node in _walk(fn):
        if id(node) not in returned or not isinstance(node, ast.Subscript | ast.Call):
            continue
        mapping: ast.expr | None = None
        key: ast.expr | None = None
        if isinstance(node, ast.Subscript):
            mapping, key = node.value, node.slice
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
        ):
            mapping, key = node.func.value, node.args[0]
        if mapping is None or key is None or not (_names(key) & params):
            continue
        table: dict[object, object] | None = None
        if isinstance(mapping, ast.Dict):
            ok, value = constant_value(mapping)
            table = value if ok and isinstance(value, dict) else None
        elif isinstance(mapping, ast.Name):
            if mapping.id in local:
                ok, value = _literal_or_dict(local[mapping.id])
                table = value if ok and isinstance(value, dict) else None
            elif isinstance(tree_consts.get(mapping.id), dict):
                table = tree_consts[mapping.id]  # type: ignore[assignment]
        if not table:
            continue
        derived, packed = _derived(key, params), _packed(key, params)
        for k, out in table.items():
            yield Case(
                node.lineno,
                key,
                out,
                (True, k),
                derived,
                packed,
                True,
                _trivial(out) or _trivial(k),
                f"{ast.unparse(key)} == {k!r}",
            )


def _case_nodes(cases: Sequence[Case]) -> set[int]:
    return {id(n) for c in cases for n in ast.walk(c.expr)}


def _bind(fn: _Func, params: list[str], e: Expectation) -> _Env | None:
    if e.args is None:
        return None
    a = fn.args
    positional = [x.arg for x in (*a.posonlyargs, *a.args)]
    if positional and positional[0] not in params:
        positional = positional[1:]  # self / cls
    if len(e.args) > len(positional) and a.vararg is None:
        return None
    env: _Env = dict(zip(positional, e.args, strict=False))
    for name, value in e.kwargs:
        if name not in params:
            return None
        env[name] = value
    defaults = a.defaults
    pairs: list[tuple[str, ast.expr | None]] = [
        *zip(positional[len(positional) - len(defaults) :], defaults, strict=False),
        *zip([x.arg for x in a.kwonlyargs], a.kw_defaults, strict=True),
    ]
    for p, d in pairs:
        if d is not None:
            ok, v = constant_value(d)
            if ok:
                env.setdefault(p, v)
    return env


def special_cases(
    fn: _Func,
    params: list[str],
    expectations: Sequence[Expectation],
    consts: _Env,
) -> list[SpecialCase]:
    """The cases of ``fn`` that answer its tests, when they make it a table of the tests'
    answers (the rule in the module docstring); empty for honest code."""
    mine = [e for e in expectations if e.func == fn.name and e.args is not None]
    if not mine or not params:
        return []
    pset = set(params)
    cases = [*_guard_cases(fn, pset, consts), *_mapping_cases(fn, pset, consts)]
    if not cases:
        return []
    envs = [(e, env) for e in mine if (env := _bind(fn, params, e)) is not None]
    matched: dict[int, SpecialCase] = {}
    tested: set[int] = set()
    for i, case in enumerate(cases):
        for e, env in envs:
            if not _fires(case, env, consts):
                continue
            tested.add(i)
            if case.trivial or (
                not case.packed and any(_same(case.output, v) for v in env.values())
            ):
                continue
            if _same(case.output, e.expected) and i not in matched:
                matched[i] = SpecialCase(fn.name, case.line, case.shown, case.output, e)
    if not matched:
        return []
    counted = [cases[i] for i in matched]
    untested = [c for i, c in enumerate(cases) if i not in tested and not c.trivial]
    inside = _case_nodes(cases)
    elsewhere = any(
        isinstance(n, ast.Name) and n.id in pset and id(n) not in inside for n in _walk(fn)
    )
    if any(c.derived for c in counted) or (
        not untested and (len(counted) >= 2 or any(c.mapping for c in counted) or not elsewhere)
    ):
        return sorted(matched.values(), key=lambda s: s.line)
    return []
