"""Whether what a deleted or shrunk test checked is still checked (issue 14).

Replayed on real upstream commits, "a test was deleted" and "a test has fewer assertions"
were often honest: the checks moved into a neighbouring test (more-itertools folded
``test_hash`` into ``test_eq``), a test was renamed and extended (``test_negative`` became
``test_invalid_n``), a list of assertions became a parametrized table (toolz'
``test_compose``), or the change removed or renamed the very function the test called
(toolz renamed ``pipeline`` to ``compose_left``). This module collects, per test, what its
assertions exercise, so ``testquality`` can tell those cases (a warning the auditor and
the human see) from a test deleted with nothing in its place (blocking).

Pure functions of parsed tests; no git, no I/O.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from loop_orchestrator import pyast
from loop_orchestrator.verify import jstests, pytests

#: names too common to say what a test is about
_STOP = frozenset({
    "self", "cls", "assert", "pytest", "raises", "mark", "parametrize", "true", "false",
    "none", "null", "undefined", "let", "const", "var", "function", "return", "await",
    "async", "new", "this", "for", "while", "if", "else", "try", "catch", "throw", "expect",
    "test", "tests", "it", "describe", "list", "dict", "set", "tuple", "len", "str", "int",
    "isinstance", "type", "range", "should", "with", "and", "the", "not", "equal",
    "subtest", "result", "expected", "actual", "value", "values", "args", "kwargs",
})
_JS_TOKEN = re.compile(r"[A-Za-z_$][\w$]*|-?\d+(?:\.\d+)?|'[^'\n]*'|\"[^\"\n]*\"")
_TRIVIAL = frozenset({"0", "1", "True", "False", "None", "''", '""'})


@dataclass(frozen=True)
class Evidence:
    """What one test checks, for comparing a base version with the commit's tests."""

    #: each assertion statement, normalised (Python: AST dump; JS: text without spaces)
    asserted: frozenset[str]
    #: the names called inside its assertions (last part of a dotted name)
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


def python(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Evidence:
    asserted, subjects = set(), set()
    for node in ast.walk(fn):
        statement = isinstance(node, ast.Assert) or (
            isinstance(node, ast.Expr) and pytests.is_assertion(node.value))
        context = isinstance(node, ast.With | ast.AsyncWith) and any(
            pytests.is_assertion(i.context_expr) for i in node.items)
        if statement or context:
            asserted.add(ast.dump(node, include_attributes=False))
            subjects |= _called(node)
    tokens = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if len(name) >= 3 and name.lower() not in _STOP:
                tokens.add(name)
        elif isinstance(node, ast.Constant):
            text = repr(node.value)
            if text not in _TRIVIAL:
                tokens.add(text)
        elif (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
              and isinstance(node.operand, ast.Constant)):
            tokens.add("-" + repr(node.operand.value))
    parametrized = any("parametrize" in pytests.dotted(d) for d in fn.decorator_list)
    looped = any(isinstance(n, ast.For | ast.AsyncFor | ast.While)
                 and any(pytests.is_assertion(m) for m in ast.walk(n)) for n in ast.walk(fn))
    return Evidence(frozenset(asserted), frozenset(subjects), frozenset(tokens),
                    parametrized or looped)


def js(test: jstests.JsTest) -> Evidence:
    asserted, subjects = set(), set()
    for line in test.body.splitlines():
        if test.assertion_re.search(line):
            asserted.add(re.sub(r"\s+", "", line))
            for m in re.finditer(r"([A-Za-z_$][\w$]*)\s*\(", line):
                name = m.group(1)
                if name.lower() not in _STOP and not test.assertion_re.match(name + "("):
                    subjects.add(name)
    tokens = {t for t in _JS_TOKEN.findall(test.body)
              if t not in _TRIVIAL and (len(t) >= 3 or not t[0].isalpha())
              and t.lower() not in _STOP and not test.assertion_re.match(t + "(")}
    looped = bool(re.search(r"\bfor\s*\(|\.forEach\(|\.each\b", test.masked_body))
    return Evidence(frozenset(asserted), frozenset(subjects), frozenset(tokens), looped)


def literals(tokens: frozenset[str]) -> set[str]:
    """The literal values among a test's tokens (numbers, strings)."""
    return {t for t in tokens if not (t[0].isalpha() or t[0] in "_$")}


def name_words(name: str) -> set[str]:
    """The words of a test's name that say what it is about (``test_hash`` -> {"hash"})."""
    return {w for w in pytests.words(name) if len(w) >= 3 and w not in _STOP
            and w not in ("avoids", "works", "handles", "check", "checks", "case", "cases")}


def defined_names(source: str | None) -> set[str]:
    """Functions and classes a Python module defines (any depth); empty when unparsable."""
    if not source:
        return set()
    try:
        tree = pyast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    return {n.name for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}


_JS_DEF = re.compile(r"(?:function\s+|(?:const|let|var)\s+)([A-Za-z_$][\w$]*)")


def js_defined_names(source: str | None) -> set[str]:
    return set(_JS_DEF.findall(source or ""))
