"""Whether what a deleted or shrunk test checked is still checked.

Replayed on real upstream commits, "a test was deleted" and "a test has fewer assertions"
were often honest: the checks moved into a neighbouring test (more-itertools folded
``test_hash`` into ``test_eq``), a test was renamed and extended (``test_negative`` became
``test_invalid_n``), a list of assertions became a parametrized table (toolz'
``test_compose``), or the change removed or renamed the very function the test called
(toolz renamed ``pipeline`` to ``compose_left``). This module collects, per test, what its
assertions exercise, so ``testquality`` can tell those cases (a warning the auditor and
the human see) from a test deleted with nothing in its place (blocking).

An assertion is compared with what its local names hold (``assert_equal(expected,
result)`` after ``result = tabulate(rows, tablefmt="plain")`` is compared as
``assert_equal(<literal>, tabulate(rows, tablefmt="plain"))``): compared as written, every
tabulate test had "the same" assertion, and a deleted test passed as moved into any new
one. Only a *specific* assertion (one that calls code or names a literal once its names are
resolved) is evidence that a check moved, and only *distinctive* literals (not 0-99, not
one-letter strings) say which case it was.

Pure functions of parsed tests; no git, no I/O.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

from loop_orchestrator import pyast
from loop_orchestrator.verify import jstests, pytests

#: names too common to say what a test is about
_STOP = frozenset(
    {
        "self",
        "cls",
        "assert",
        "pytest",
        "raises",
        "mark",
        "parametrize",
        "true",
        "false",
        "none",
        "null",
        "undefined",
        "let",
        "const",
        "var",
        "function",
        "return",
        "await",
        "async",
        "new",
        "this",
        "for",
        "while",
        "if",
        "else",
        "try",
        "catch",
        "throw",
        "expect",
        "test",
        "tests",
        "it",
        "describe",
        "list",
        "dict",
        "set",
        "tuple",
        "len",
        "str",
        "int",
        "isinstance",
        "type",
        "range",
        "should",
        "with",
        "and",
        "the",
        "not",
        "equal",
        "subtest",
        "result",
        "expected",
        "actual",
        "value",
        "values",
        "args",
        "kwargs",
    }
)
_JS_TOKEN = re.compile(r"[A-Za-z_$][\w$]*|-?\d+(?:\.\d+)?|'[^'\n]*'|\"[^\"\n]*\"")
_TRIVIAL = frozenset({"0", "1", "True", "False", "None", "''", '""'})


@dataclass(frozen=True)
class Evidence:
    """What one test checks, for comparing a base version with the commit's tests."""

    #: each assertion statement, normalised (Python: AST dump with local names replaced
    #: by the value last assigned to them; JS: text without spaces)
    asserted: frozenset[str]
    #: those of ``asserted`` that call code or name a literal (not ``assert a == b`` alone)
    specific: frozenset[str]
    #: the names called inside its assertions as written (last part of a dotted name)
    subjects: frozenset[str]
    #: significant identifiers and literals of its body
    tokens: frozenset[str]
    #: cases come from a table: a parametrize decorator, or assertions inside a loop
    data_driven: bool


def _called(node: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            name = pytests.dotted(n.func).rsplit(".", 1)[-1]
            if name and not name.startswith("assert") and name.lower() not in _STOP:
                out.add(name)
    return out


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement under ``body`` in source order (nested blocks after their head)."""
    for stmt in body:
        yield stmt
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.stmt):
                yield from _statements([child])
            elif isinstance(child, ast.ExceptHandler | ast.match_case):
                yield from _statements(child.body)


_NAME_LOAD = re.compile(r"Name\(id='(\w+)', ctx=Load\(\)\)")
#: a resolved value longer than this (characters of its dump) is not substituted (chains
#: like ``x = f(x, x)`` double at every step)
_MAX_RESOLVED_CHARS = 4000


@dataclass(frozen=True)
class _Value:
    """What a local name holds: its value's dump (names in it resolved), and whether that
    value calls code or names a literal."""

    dump: str
    specific: bool


def _resolved(node: ast.AST, env: dict[str, _Value]) -> _Value:
    """``node``'s dump with the local names in ``env`` replaced by their values (a string
    substitution on ``ast.dump``: no copies of trees, a module of a thousand tests stays
    fast)."""
    specific = _specific(node)

    def value(m: re.Match[str]) -> str:
        nonlocal specific
        held = env.get(m.group(1))
        if held is None:
            return m.group(0)
        specific = specific or held.specific
        return held.dump

    return _Value(_NAME_LOAD.sub(value, ast.dump(node, include_attributes=False)), specific)


def _bind(stmt: ast.stmt, env: dict[str, _Value]) -> None:
    """Record what ``stmt`` assigns to plain local names; forget names it rebinds otherwise."""
    pairs: list[tuple[ast.expr, ast.expr | None]] = []
    if isinstance(stmt, ast.Assign):
        for target in stmt.targets:
            if (
                isinstance(target, ast.Tuple)
                and isinstance(stmt.value, ast.Tuple)
                and len(target.elts) == len(stmt.value.elts)
            ):
                pairs += zip(target.elts, stmt.value.elts, strict=True)
            else:
                pairs.append((target, stmt.value))
    elif isinstance(stmt, ast.AnnAssign):
        pairs.append((stmt.target, stmt.value))
    elif isinstance(stmt, ast.AugAssign | ast.For | ast.AsyncFor):
        pairs.append((stmt.target, None))
    elif isinstance(stmt, ast.With | ast.AsyncWith):
        pairs += [(i.optional_vars, None) for i in stmt.items if i.optional_vars]
    for target, value in pairs:
        if isinstance(target, ast.Name) and value is not None:
            resolved = _resolved(value, env)
            if len(resolved.dump) <= _MAX_RESOLVED_CHARS:
                env[target.id] = resolved
                continue
        for n in ast.walk(target):
            if isinstance(n, ast.Name):
                env.pop(n.id, None)


def _specific(node: ast.AST) -> bool:
    """Whether an assertion calls code (not an assert helper) or names a literal."""
    return bool(_called(node)) or any(
        isinstance(n, ast.Constant) and repr(n.value) not in _TRIVIAL for n in ast.walk(node)
    )


def python(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Evidence:
    asserted, specific, subjects = set(), set(), set()
    env: dict[str, _Value] = {}
    for node in _statements(fn.body):
        statement = isinstance(node, ast.Assert) or (
            isinstance(node, ast.Expr) and pytests.is_assertion(node.value)
        )
        context = isinstance(node, ast.With | ast.AsyncWith) and any(
            pytests.is_assertion(i.context_expr) for i in node.items
        )
        if statement or context:
            resolved = _resolved(node, env)
            asserted.add(resolved.dump)
            if resolved.specific:
                specific.add(resolved.dump)
            # as written: a name's value says which object, not what the test is about
            subjects |= _called(node)
        _bind(node, env)
    tokens = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Name | ast.Attribute):
            name = n.id if isinstance(n, ast.Name) else n.attr
            if len(name) >= 3 and name.lower() not in _STOP:
                tokens.add(name)
        elif isinstance(n, ast.Constant):
            text = repr(n.value)
            if text not in _TRIVIAL:
                tokens.add(text)
        elif (
            isinstance(n, ast.UnaryOp)
            and isinstance(n.op, ast.USub)
            and isinstance(n.operand, ast.Constant)
        ):
            tokens.add("-" + repr(n.operand.value))
    parametrized = any("parametrize" in pytests.dotted(d) for d in fn.decorator_list)
    looped = any(
        isinstance(n, ast.For | ast.AsyncFor | ast.While)
        and any(pytests.is_assertion(m) for m in ast.walk(n))
        for n in ast.walk(fn)
    )
    return Evidence(
        frozenset(asserted),
        frozenset(specific),
        frozenset(subjects),
        frozenset(tokens),
        parametrized or looped,
    )


def js(test: jstests.JsTest) -> Evidence:
    asserted, specific, subjects = set(), set(), set()
    for line in test.body.splitlines():
        if test.assertion_re.search(line):
            text = re.sub(r"\s+", "", line)
            asserted.add(text)
            called = set()
            for m in re.finditer(r"([A-Za-z_$][\w$]*)\s*\(", line):
                name = m.group(1)
                if name.lower() not in _STOP and not test.assertion_re.match(name + "("):
                    called.add(name)
            subjects |= called
            if called or literals(
                frozenset(t for t in _JS_TOKEN.findall(line) if t not in _TRIVIAL)
            ):
                specific.add(text)
    tokens = {
        t
        for t in _JS_TOKEN.findall(test.body)
        if t not in _TRIVIAL
        and (len(t) >= 3 or not t[0].isalpha())
        and t.lower() not in _STOP
        and not test.assertion_re.match(t + "(")
    }
    looped = bool(re.search(r"\bfor\s*\(|\.forEach\(|\.each\b", test.masked_body))
    return Evidence(
        frozenset(asserted), frozenset(specific), frozenset(subjects), frozenset(tokens), looped
    )


def literals(tokens: frozenset[str]) -> set[str]:
    """The literal values among a test's tokens (numbers, strings)."""
    return {t for t in tokens if not (t[0].isalpha() or t[0] in "_$")}


def distinctive(tokens: frozenset[str]) -> set[str]:
    """The literals that name one case: numbers of three digits or more, strings of three
    characters or more (``2147483648``, ``'bytes=500-20'``), not ``2`` or ``'a'``, which
    every cache or list test uses."""
    out = set()
    for t in literals(tokens):
        if t[0] in "'\"" or t[:2] in ("b'", 'b"'):
            body = t[2:-1] if t[0] == "b" else t[1:-1]
            if len(body) >= 3:
                out.add(t)
        elif sum(c.isdigit() for c in t) >= 3:
            out.add(t)
    return out


def name_words(name: str) -> set[str]:
    """The words of a test's name that say what it is about (``test_hash`` -> {"hash"})."""
    return {
        w
        for w in pytests.words(name)
        if len(w) >= 3
        and w not in _STOP
        and w not in ("avoids", "works", "handles", "check", "checks", "case", "cases")
    }


def defined_names(source: str | None) -> set[str]:
    """Functions and classes a Python module defines (any depth); empty when unparsable."""
    if not source:
        return set()
    try:
        tree = pyast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    return {
        n.name
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


_JS_DEF = re.compile(r"(?:function\s+|(?:const|let|var)\s+)([A-Za-z_$][\w$]*)")


def js_defined_names(source: str | None) -> set[str]:
    return set(_JS_DEF.findall(source or ""))
