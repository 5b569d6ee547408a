"""Weak assertions: checks that hold for almost any value the code could return.

``assert parse(s) is not None``, ``isinstance``, bare truthiness (of a result, or of an item
or slice of one: ``assertTrue(cache[3])``), ``len(x) > 0``,
``hasattr``, ``pytest.raises(Exception)``; in JS ``toBeDefined()``, ``toBeTruthy()``,
``toThrow()``. A test is weak when *every* check it makes is one of these: one strong check
(a value compared, an exact exception type, a message matched) makes it a real test.

Pure functions over a test's resolved assertions (the test's own, plus those of the helpers
it calls: ``pytests.helper_functions``); ``testquality`` turns the result into the
``tests.weak-assertions`` finding.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass

from loop_orchestrator.verify.jstests import JsTest, Lines, match_close
from loop_orchestrator.verify.pytests import BUILTIN_TYPES, constant_value, dotted, is_assertion


@dataclass(frozen=True)
class Weak:
    """One weak check: where, what it says, and what to compare instead."""

    line: int
    text: str  # the check as written, e.g. "parse(s) is not None"
    instead: str  # e.g. "compare it with the expected value"
    subject: str | None = None  # the function whose result is checked ("parse")
    #: it holds wherever it runs (``list(x) is not None``, ``len(x) >= 0``): it can fail
    #: only by the code raising before it
    cannot_fail: bool = False


_COMPARE = "compare it with the expected value"
_TYPE = "compare the value itself, not only its type"
_LEN = "compare the length with the expected count, or the items themselves"
_ATTR = "use the attribute or call it, and compare the result with the expected value"
_RAISES = "expect the specific exception type, and match= its message"
_SELF = "compare the result with an independently known expected value, not with itself"
_IMPORTS = (
    "it checks only that the module loads; call what the change makes it do and compare "
    "the results with the expected values"
)
_WARNS = "expect the specific warning category, and match= its message"
#: exception and warning classes so broad that expecting them checks nothing specific
_BROAD_ERRORS = frozenset({"Exception", "BaseException"})
_BROAD_WARNINGS = frozenset({"Warning"})
#: call names whose truth is a real answer (predicates), not "returned something"
_PREDICATE = re.compile(
    r"^(?:is[a-z]+$|is|has|can|should|must|was|were|will|does|did|contains|exists|matches|equals"
    r"|startswith|endswith|issubset|issuperset|isdisjoint|isfile|isdir|is_file|is_dir"
    r"|any|all|match|fullmatch|search|allclose|isclose|array_equal)(?:_|$|[A-Z])"
)
#: calls that are no check at all (they fail unconditionally where they run)
_NEUTRAL = frozenset({"pytest.fail", "self.fail", "fail", "pytest.skip", "self.skipTest"})


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _is_len(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and dotted(node.func) == "len"


def _is_type_expr(node: ast.AST) -> bool:
    """``type(x)``, ``x.__class__`` or a built-in type name."""
    if isinstance(node, ast.Call) and dotted(node.func) == "type" and len(node.args) == 1:
        return True
    if isinstance(node, ast.Attribute) and node.attr == "__class__":
        return True
    return isinstance(node, ast.Name) and node.id in BUILTIN_TYPES


def _int(node: ast.AST) -> int | None:
    ok, value = constant_value(node)
    return value if ok and isinstance(value, int) and not isinstance(value, bool) else None


def _weak_len(left: ast.AST, op: ast.cmpop, right: ast.AST) -> bool:
    """A length compared with a bound that every non-empty length meets: ``len(x) > 0``,
    ``len(x) >= 1``, ``len(x) != 0``, and the always-true ``len(x) >= 0``, ``len(x) > -1``,
    ``len(x) != -1``; mirrored too."""
    if _is_len(right) and not _is_len(left):
        mirror: dict[type[ast.cmpop], ast.cmpop] = {
            ast.Lt: ast.Gt(),
            ast.LtE: ast.GtE(),
            ast.Gt: ast.Lt(),
            ast.GtE: ast.LtE(),
        }
        left, op, right = right, mirror.get(type(op), op), left
    if not _is_len(left):
        return False
    n = _int(right)
    return n is not None and (
        (isinstance(op, ast.Gt) and n <= 0)
        or (isinstance(op, ast.GtE) and n <= 1)
        or (isinstance(op, ast.NotEq | ast.IsNot) and n <= 0)
    )


def _truth(expr: ast.AST, predicates: set[str], bound: set[str]) -> str | None:
    """Why asserting the truth of ``expr`` is weak, or None when it is a real answer."""
    if isinstance(expr, ast.Call):
        name = dotted(expr.func)
        last = name.rsplit(".", 1)[-1]
        if name == "isinstance":
            return _TYPE
        if name in ("hasattr", "callable"):
            return _ATTR
        if name == "bool" and expr.args:
            return _truth(expr.args[0], predicates, bound)
        if name == "len":
            return _LEN
        if _PREDICATE.match(last) or last in predicates:
            return None
        return _COMPARE
    if isinstance(expr, ast.Name):
        # a name bound to a call's result (`r = parse(s)`); a flag, a fixture or an
        # attribute (`verdict.passed`) may well be a real boolean answer
        return _COMPARE if expr.id in bound and expr.id not in predicates else None
    if isinstance(expr, ast.Subscript) and _element(expr):
        # an item or a slice of a call's result (`cache[3]`, `parse(s)[0]`, `rows[1:]`):
        # true for any non-empty, non-zero value; a string key (`result["ok"]`) names a
        # field, which may well be a flag
        base = expr.value
        while isinstance(base, ast.Subscript) and _element(base):
            base = base.value
        if isinstance(base, ast.Name | ast.Call):
            return _truth(base, predicates, bound)
    return None


def _element(expr: ast.Subscript) -> bool:
    """Whether ``expr`` takes an item by position or a slice, not a field by its name."""
    key = expr.slice
    return not (isinstance(key, ast.Constant) and isinstance(key.value, str))


def _expr_weakness(expr: ast.AST, predicates: set[str], bound: set[str]) -> str | None:
    """Why the asserted expression ``expr`` is weak, or None when it is strong."""
    if isinstance(expr, ast.BoolOp):
        parts = [_expr_weakness(v, predicates, bound) for v in expr.values]
        if isinstance(expr.op, ast.And):
            # weak only when every part is
            return parts[0] if all(parts) else None
        return next((p for p in parts if p), None)  # `a or b` passes when a weak part does
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
        left, op, right = expr.left, expr.ops[0], expr.comparators[0]
        if isinstance(op, ast.IsNot | ast.NotEq) and (_is_none(left) or _is_none(right)):
            return _COMPARE
        if _weak_len(left, op, right):
            return _LEN
        if isinstance(op, ast.Is | ast.Eq | ast.IsNot | ast.NotEq) and (
            _is_type_expr(left) or _is_type_expr(right)
        ):
            return _TYPE
        if (
            isinstance(op, ast.Is | ast.Eq)
            and isinstance(right, ast.Constant)
            and right.value is True
        ):
            # `bool(x) is True`, `isinstance(x, int) == True`, `(x is not None) is True`
            if isinstance(left, ast.Call):
                return _truth(left, predicates, bound)
            if isinstance(left, ast.Compare | ast.BoolOp):
                return _expr_weakness(left, predicates, bound)
        if (
            isinstance(op, ast.Eq | ast.Is)
            and ast.dump(left) == ast.dump(right)
            and any(isinstance(n, ast.Call) for n in ast.walk(left))
        ):
            # `f(x) == f(x)`: equal to itself whatever f returns (a name compared with
            # itself is the tautology check's: it may test the type's own __eq__)
            return _SELF
        return None
    if isinstance(expr, ast.Compare | ast.UnaryOp | ast.Constant):
        return None  # chains, `not x`, constants (tautologies are judged elsewhere)
    return _truth(expr, predicates, bound)


#: ``match=`` patterns that any message matches
_MATCH_ANYTHING = frozenset({"", ".*", ".+", ".", "^", "$", "(?s).*", "^.*$", "[\\s\\S]*"})


def _matches(call: ast.Call) -> bool:
    """Whether the call matches the message against a pattern that says something."""
    for k in call.keywords:
        if k.arg == "match":
            ok, value = constant_value(k.value)
            return not (ok and isinstance(value, str) and value in _MATCH_ANYTHING)
    return False


def _call_weakness(call: ast.Call, predicates: set[str], bound: set[str]) -> str | bool | None:
    """Why an assertion call is weak; None when strong; False when it checks nothing."""
    name = dotted(call.func)
    last = name.rsplit(".", 1)[-1]
    args = call.args
    if name in _NEUTRAL:
        return False
    if last in ("raises", "assertRaises") and args:
        broad = all(dotted(a) in _BROAD_ERRORS for a in _flat(args[0]))
        return _RAISES if broad and not _matches(call) else None
    if last == "warns" and args:
        broad = all(dotted(a) in _BROAD_WARNINGS for a in _flat(args[0]))
        return _WARNS if broad and not _matches(call) else None
    if last == "assertIsNotNone":
        return _COMPARE
    if last in ("assertIsInstance", "assertNotIsInstance"):
        return _TYPE
    if last in ("assertTrue", "assert_") and args:
        return _expr_weakness(args[0], predicates, bound)
    if last in ("assertIsNot", "assertNotEqual") and len(args) >= 2:
        if _is_none(args[0]) or _is_none(args[1]):
            return _COMPARE
        if _weak_len(args[0], ast.NotEq(), args[1]):
            return _LEN
    if last in ("assertGreater", "assertGreaterEqual", "assertLess", "assertLessEqual"):
        ops: dict[str, ast.cmpop] = {
            "assertGreater": ast.Gt(),
            "assertGreaterEqual": ast.GtE(),
            "assertLess": ast.Lt(),
            "assertLessEqual": ast.LtE(),
        }
        if len(args) >= 2 and _weak_len(args[0], ops[last], args[1]):
            return _LEN
    if (
        last in ("assertIs", "assertEqual")
        and len(args) >= 2
        and (_is_type_expr(args[0]) or _is_type_expr(args[1]))
    ):
        return _TYPE
    return None


#: built-in calls and the type of what they return whatever their argument (or they raise)
_TYPED_CALLS = {
    **{t: t for t in ("list", "tuple", "set", "frozenset", "dict", "str", "bytes", "bytearray")},
    **{t: t for t in ("int", "float", "bool", "complex")},
    **dict.fromkeys(("repr", "ascii", "format", "hex", "oct", "bin", "chr"), "str"),
    **dict.fromkeys(("len", "ord"), "int"),
    "sorted": "list",
}


def _typed(expr: ast.AST, typed: dict[str, str]) -> str | None:
    """The built-in type ``expr`` certainly has where it is evaluated: a call of ``list``,
    ``len``, ``repr``... or a name the test binds only to one (``typed``)."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
        return _TYPED_CALLS.get(expr.func.id)
    if isinstance(expr, ast.Name):
        return typed.get(expr.id)
    return None


def typed_names(scopes: Sequence[ast.AST]) -> dict[str, str]:
    """Names every binding of which in ``scopes`` is a call of ``_TYPED_CALLS`` of one type
    (``tail = list(it)``); a name bound anywhere to anything else (a parameter, a loop
    variable, another assignment) is left out."""
    kinds: dict[str, set[str | None]] = {}
    for scope in scopes:
        for node in ast.walk(scope):
            if isinstance(node, ast.arg):
                kinds.setdefault(node.arg, set()).add(None)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
                kinds.setdefault(node.id, set())
            if not isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.NamedExpr):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            plain = isinstance(node, ast.Assign) and len(targets) == 1
            kind = _typed(node.value, {}) if plain and node.value is not None else None
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        kinds.setdefault(n.id, set()).add(kind if t is n else None)
    # a Store not made by an assignment above (for, with, except, del...): not typed
    stores = {
        id(n)
        for scope in scopes
        for node in ast.walk(scope)
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.NamedExpr)
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        for n in ast.walk(t)
    }
    for scope in scopes:
        for node in ast.walk(scope):
            if (
                isinstance(node, ast.Name)
                and isinstance(node.ctx, ast.Store | ast.Del)
                and id(node) not in stores
            ):
                kinds[node.id].add(None)
    return {
        name: kind
        for name, found in kinds.items()
        if len(found) == 1 and (kind := next(iter(found))) is not None
    }


def _of_type(expr: ast.AST, types: ast.AST, typed: dict[str, str]) -> bool:
    kind = _typed(expr, typed)
    return kind is not None and any(dotted(t) in (kind, "object") for t in _flat(types))


def cannot_fail(node: ast.AST, typed: dict[str, str]) -> bool:
    """Whether the weak check ``node`` holds for every value it can see: ``X is not None``,
    ``isinstance(X, T)``, ``assertIsNotNone(X)``... of a value of a built-in type ``X``
    certainly has (``list(it)``, ``len(w)``), or a length bound every length meets
    (``len(x) >= 0``). Such a check fails only when the code raises before it."""
    if isinstance(node, ast.Assert):
        expr = node.test
        if isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.And):
            return all(cannot_fail(ast.Assert(test=v), typed) for v in expr.values)
        if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
            left, op, right = expr.left, expr.ops[0], expr.comparators[0]
            if isinstance(op, ast.IsNot | ast.NotEq) and (_is_none(left) or _is_none(right)):
                return _typed(right if _is_none(left) else left, typed) is not None
            return _len_always(left, op, right)
        if isinstance(expr, ast.Call) and dotted(expr.func) == "isinstance" and len(expr.args) == 2:
            return _of_type(expr.args[0], expr.args[1], typed)
        return False
    if isinstance(node, ast.Call):
        last = dotted(node.func).rsplit(".", 1)[-1]
        args = node.args
        if last == "assertIsNotNone" and args:
            return _typed(args[0], typed) is not None
        if last in ("assertIsNot", "assertNotEqual") and len(args) >= 2:
            if _is_none(args[1]) or _is_none(args[0]):
                return _typed(args[0] if _is_none(args[1]) else args[1], typed) is not None
            return _len_always(args[0], ast.NotEq(), args[1])
        if last == "assertIsInstance" and len(args) >= 2:
            return _of_type(args[0], args[1], typed)
        if last == "assertGreaterEqual" and len(args) >= 2:
            return _len_always(args[0], ast.GtE(), args[1])
        if last == "assertGreater" and len(args) >= 2:
            return _len_always(args[0], ast.Gt(), args[1])
    return False


def _len_always(left: ast.AST, op: ast.cmpop, right: ast.AST) -> bool:
    """``len(x) >= 0``, ``len(x) > -1``, ``len(x) != -1`` (mirrored too): always true."""
    if _is_len(right) and not _is_len(left):
        mirror: dict[type[ast.cmpop], ast.cmpop] = {ast.Lt: ast.Gt(), ast.LtE: ast.GtE()}
        left, op, right = right, mirror.get(type(op), op), left
    n = _int(right)
    if not _is_len(left) or n is None:
        return False
    return (
        (isinstance(op, ast.GtE) and n <= 0)
        or (isinstance(op, ast.Gt) and n < 0)
        or (isinstance(op, ast.NotEq | ast.IsNot) and n < 0)
    )


def _flat(node: ast.AST) -> list[ast.AST]:
    return list(node.elts) if isinstance(node, ast.Tuple) else [node]


def _subject(expr: ast.AST, calls: dict[str, str]) -> str | None:
    """The function whose result ``expr`` checks (a call in it, or a name bound to one)."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Call):
            name = dotted(node.func).rsplit(".", 1)[-1]
            if (
                name
                and name not in BUILTIN_TYPES
                and name
                not in (
                    "isinstance",
                    "hasattr",
                    "callable",
                    "len",
                    "type",
                    "repr",
                )
            ):
                return name
        if isinstance(node, ast.Name) and node.id in calls:
            return calls[node.id]
    return None


def bound_calls(fn: ast.AST) -> dict[str, str]:
    """Names a test binds to a call's result: ``r = parse(s)`` -> {"r": "parse"}."""
    out: dict[str, str] = {}
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Assign | ast.AnnAssign)
            and isinstance(node.value, ast.Call)
            and (name := dotted(node.value.func).rsplit(".", 1)[-1])
        ):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    out[t.id] = name
        elif (
            isinstance(node, ast.withitem)
            and isinstance(node.optional_vars, ast.Name)
            and isinstance(node.context_expr, ast.Call)
        ):
            out[node.optional_vars.id] = dotted(node.context_expr.func).rsplit(".", 1)[-1]
    # a name bound to such a name (`result = out`) holds the same call's result
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Name)
            and node.value.id in out
        ):
            for t in node.targets:
                if isinstance(t, ast.Name) and t.id not in out:
                    out[t.id] = out[node.value.id]
    return out


def _broad_handler(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(dotted(k).rsplit(".", 1)[-1] in ("Exception", "BaseException") for k in kinds)


def _handled(node: ast.Try | ast.TryStar) -> str:
    return ", ".join(ast.unparse(h.type) if h.type else "(bare)" for h in node.handlers)


def python_assertions(fn: ast.AST) -> list[ast.AST]:
    """The assertion nodes of one function (the test, or a helper it calls)."""
    return [n for n in ast.walk(fn) if is_assertion(n)]


def weak_python(
    assertions: Sequence[ast.AST],
    scopes: Sequence[ast.AST],
    checkers: frozenset[str] = frozenset(),
) -> list[Weak] | None:
    """Every check in ``assertions`` when all of them are weak; None when one is strong (or
    there is none). ``scopes``: the test and its helpers, read for the names they bind;
    ``checkers``: functions of the test module, whose truth is a check they compute
    (``assert _linked(lru, 3)``)."""
    calls: dict[str, str] = {}
    for scope in scopes:
        calls |= bound_calls(scope)
    predicates = {
        name for name, fn in calls.items() if _PREDICATE.match(fn) or fn in checkers
    } | set(checkers)
    bound = set(calls)
    typed = typed_names(scopes)
    weak: list[Weak] = []
    for node in assertions:
        why: str | bool | None
        if isinstance(node, ast.Assert):
            why = _expr_weakness(node.test, predicates, bound)
            expr: ast.AST = node.test
        elif isinstance(node, ast.Call):
            why = _call_weakness(node, predicates, bound)
            expr = node
        elif isinstance(node, ast.Import | ast.ImportFrom | ast.Expr):
            # a test that only imports: the module loads, whatever its code does
            weak.append(Weak(getattr(node, "lineno", 0), ast.unparse(node), _IMPORTS))
            continue
        elif isinstance(node, ast.Try | ast.TryStar):
            # a hand-written assertRaises: weak when a handler takes any exception
            if not any(_broad_handler(h) for h in node.handlers):
                return None
            line = getattr(node, "lineno", 0)
            weak.append(Weak(line, f"try: ... except {_handled(node)}", _RAISES))
            continue
        else:
            continue
        if why is False:
            continue
        if why is None:
            return None
        line = getattr(node, "lineno", 0)
        never = cannot_fail(node, typed)
        weak.append(Weak(line, ast.unparse(expr), str(why), _subject(expr, calls), never))
    return weak or None


# JavaScript -----------------------------------------------------------------------------

_JS_COMPARE = "compare it with the expected value (toBe / toEqual / assert.strictEqual)"
_JS_THROW = "pass the expected error class or message to toThrow"
_JS_WEAK_CHAINS = (
    (re.compile(r"^\.(?:toBeDefined|toBeTruthy)\(\s*\)"), _JS_COMPARE),
    (re.compile(r"^\.not\.(?:toBeUndefined|toBeNull|toBeFalsy|toBeNaN)\(\s*\)"), _JS_COMPARE),
    (re.compile(r"^\.not\.(?:toBe|toEqual|toStrictEqual)\((?:undefined|null)\)"), _JS_COMPARE),
    (re.compile(r"^\.(?:toEqual|toStrictEqual)\(expect\.anything\(\)\)"), _JS_COMPARE),
    (re.compile(r"^\.(?:toThrow|toThrowError)\(\s*\)"), _JS_THROW),
    (re.compile(r"^\.to\.(?:be\.)?throw\(\s*\)"), _JS_THROW),
    (
        re.compile(r"^\.(?:to|should)\.(?:exist|be\.ok|not\.be\.undefined|not\.be\.null)\b"),
        _JS_COMPARE,
    ),
    (re.compile(r"^\.toBeInstanceOf\("), "compare the value itself, not only its class"),
    (re.compile(r"^\.to\.be\.(?:an?|instanceOf)\("), "compare the value itself, not only its type"),
)
_JS_WEAK_LENGTH = re.compile(r"\.length\s*\)\s*$")
_JS_GREATER_ZERO = re.compile(
    r"^\.(?:toBeGreaterThan\(\s*0\s*\)|toBeGreaterThanOrEqual\(\s*1\s*\))"
)
_JS_STRONG_ARG = re.compile(r"===|!==|==|!=|<=|>=|<|>")
_JS_WEAK_ARG = re.compile(
    r"(?:!==?\s*(?:undefined|null)|(?:undefined|null)\s*!==?|\.length\s*(?:>\s*0|>=\s*1|!==?\s*0)"
    r"|typeof\s|instanceof\s)"
)
_JS_PREDICATE_CALL = re.compile(
    r"(?:^|[.\s(!])(?:is|has|can|should|includes|startsWith|endsWith|test|every|some|exists"
    r"|equals|matches)[A-Z_]?\w*\s*\("
)
_JS_CALL = re.compile(r"([A-Za-z_$][\w$]*)\s*\(")
_JS_CHAIN = re.compile(
    r"(?:\s*\.\s*(?:not|to|be|been|is|that|and|have|deep|should|resolves|rejects))*"
    r"\s*\.\s*[\w$]+(?:\s*\()?"
)


def _js_subject(arg: str) -> str | None:
    for m in _JS_CALL.finditer(arg):
        if m.group(1) not in ("typeof", "String", "Number", "Boolean", "Array", "Object"):
            return m.group(1)
    return None


def _chain(body: str, at: int) -> str:
    """The matcher chain after ``expect(...)``: ``.not.toBeNull()``, whitespace removed."""
    m = _JS_CHAIN.match(body, at)
    if not m:
        return ""
    end = m.end()
    if body[:end].rstrip().endswith("("):
        end = match_close(body, end - 1) + 1
    return re.sub(r"\s+", "", body[at:end])


def _expect_weakness(body: str, paren: int, close: int, arg: str) -> str | None:
    chain = _chain(body, close + 1)
    why = next((w for rx, w in _JS_WEAK_CHAINS if rx.match(chain)), None)
    length = _JS_WEAK_LENGTH.search(body[paren : close + 1])
    if why is None and length and _JS_GREATER_ZERO.match(chain):
        why = "compare the length with the expected count, or the items themselves"
    if why is None and arg.startswith("typeof ") and chain.startswith(".toBe("):
        why = "compare the value itself, not only its type"
    return why


def weak_js(test: JsTest, source_lines: Lines) -> list[Weak] | None:
    """Every assertion of a JS test when all of them are weak; None when one is strong."""
    body = test.masked_body
    text = test.body
    weak: list[Weak] = []
    done = 0  # the end of the last assertion read: `expect.anything()` inside it is no other
    for m in test.assertion_re.finditer(body):
        if m.start() < done:
            continue
        head = re.sub(r"\s+", "", m.group(0))
        line = source_lines.line(test.body_offset + m.start())
        if head == "assert.":
            meth = re.match(r"\s*(\w+)\s*\(", body[m.end() :])
            if not meth or meth.group(1) != "ok":
                return None  # assert.equal / strictEqual / throws...: strong
            paren, name = m.end() + meth.end() - 1, "assert.ok"
        elif head in ("assert(", "ok(", "expect("):
            paren, name = m.end() - 1, head[:-1]
        else:
            return None  # .should, sinon, t.* forms: not judged, taken as strong
        close = match_close(body, paren)
        done = close + 1 + len(_chain(body, close + 1)) if name == "expect" else close
        arg = text[paren + 1 : close].strip()
        if name == "expect":
            why = _expect_weakness(body, paren, close, arg)
            if why is None:
                return None
            chain = _chain(body, close + 1)
            shown = f"expect({arg}){chain}"
        else:
            if _JS_WEAK_ARG.search(arg):
                why = _JS_COMPARE
            elif _JS_STRONG_ARG.search(arg) or _JS_PREDICATE_CALL.search(arg):
                return None
            elif arg.startswith("!"):
                return None  # `assert(!x)` checks a falsy value: a real answer
            else:
                why = _JS_COMPARE
            shown = f"{name}({arg})"
        weak.append(Weak(line, shown[:120], why, _js_subject(arg)))
    return weak or None
