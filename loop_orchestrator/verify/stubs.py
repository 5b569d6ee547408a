"""Stubs and placeholders in the non-test code a task added.

- ``raise NotImplementedError`` and bodies of only ``pass``/``...`` (a docstring alone
  counts as empty), except in Protocols, abstract methods and ``@overload`` stubs;
  ``throw new Error("not implemented")`` in JS/TS.
- TODO/FIXME/XXX/HACK, "placeholder", "lorem ipsum", "not implemented" in added lines.
  A TODO that names an issue (``TODO(#12)``, ``TODO(PROJ-12)``, ``TODO: https://...``) is a
  tracked follow-up: a warning. In documentation files every marker is a warning.
- Hard-coded answers: a function with parameters whose whole body returns the literal a
  test expects from it (``assert f(3) == 42`` and ``def f(x): return 42``).
- Special-cased inputs: a function that recognises the tests' literal inputs (guards,
  mappings) and returns their expected outputs; the rule is ``specialcases``'.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Sequence

from loop_orchestrator import pyast
from loop_orchestrator.verify import classify, jstests, specialcases
from loop_orchestrator.verify.models import Finding, blocking, warning
from loop_orchestrator.verify.pytests import Expectation, dotted, walk_shallow
from loop_orchestrator.verify.specialcases import SpecialCase
from loop_orchestrator.verify.testquality import FileChange

_MARKER = re.compile(r"\b(TODO|FIXME|XXX|HACK)\b")
_TRACKED_TODO = re.compile(r"\bTODO\b\s*(?:\(\s*)?:?\s*(?:#\d+|[A-Z][A-Z0-9]+-\d+|https?://)")
_PLACEHOLDER = re.compile(
    r"(?i)\blorem\s+ipsum\b|(?<![:.\-\w])placeholder(?![\w\-]|\s*[=:({])"
    r"|\bnot\s+(?:yet\s+)?implemented\b"
)
_EXEMPT_DECORATORS = (
    "abstractmethod",
    "abstractproperty",
    "abstractclassmethod",
    "abstractstaticmethod",
    "overload",
)


def _same(a: object, b: object) -> bool:
    """Equal with the same type (so True is not 1)."""
    return type(a) is type(b) and a == b


def check_stubs(files: Sequence[FileChange], expectations: Sequence[Expectation]) -> list[Finding]:
    findings: list[Finding] = []
    for f in files:
        if f.new is None or not f.added or _not_code(f.path):
            continue
        code: list[Finding] = []
        if classify.is_python(f.path):
            code = _python(f, expectations)
        elif classify.is_js(f.path):
            code = _js(f, expectations)
        findings += code
        flagged = {x.line for x in code}
        findings += [m for m in _markers(f) if m.line not in flagged]
    return findings


def _not_code(path: str) -> bool:
    return (
        classify.is_test_code(path)
        or classify.is_test_config_path(path)
        or classify.is_lock_file(path)
        or path.endswith(".pyi")
    )


def _markers(f: FileChange) -> list[Finding]:
    out = []
    lines = (f.new or "").splitlines()
    doc = classify.is_doc(f.path)
    for ln in sorted(f.added):
        if ln > len(lines):
            continue
        text = lines[ln - 1]
        m = _MARKER.search(text)
        if m:
            tracked = m.group(1) == "TODO" and _TRACKED_TODO.search(text)
            make = warning if (tracked or doc) else blocking
            out.append(
                make(
                    f"adds a {m.group(1)} marker: `{text.strip()[:120]}`"
                    + (
                        " (tracked by an issue)"
                        if tracked
                        else "; the work it announces is not done."
                    ),
                    "stubs.todo",
                    f.path,
                    ln,
                    fix="Finish the work now, or, if it is really out of the task's scope, "
                    "reference an issue: TODO(#123).",
                )
            )
            continue
        p = _PLACEHOLDER.search(text)
        if p:
            make = warning if doc else blocking
            out.append(
                make(
                    f"adds placeholder text ({p.group(0)!r}): `{text.strip()[:120]}`",
                    "stubs.placeholder",
                    f.path,
                    ln,
                    fix="Replace the placeholder with the real implementation or content.",
                )
            )
    return out


# Python ---------------------------------------------------------------------------------

_Func = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(
    body: list[ast.stmt], cls: ast.ClassDef | None
) -> Iterator[tuple[_Func, ast.ClassDef | None]]:
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            yield stmt, cls
            yield from _functions(stmt.body, None)
        elif isinstance(stmt, ast.ClassDef):
            yield from _functions(stmt.body, stmt)
        elif isinstance(stmt, ast.If | ast.Try | ast.With):
            for block in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(stmt, block, [])
                for item in inner:
                    if isinstance(item, ast.ExceptHandler):
                        yield from _functions(item.body, cls)
                yield from _functions([s for s in inner if isinstance(s, ast.stmt)], cls)


def _exempt(fn: _Func, cls: ast.ClassDef | None) -> bool:
    if any(dotted(d).rsplit(".", 1)[-1] in _EXEMPT_DECORATORS for d in fn.decorator_list):
        return True
    return cls is not None and any(
        dotted(b).rsplit(".", 1)[-1] == "Protocol" or dotted(b).startswith("Protocol[")
        for b in cls.bases
    )


def _body(fn: _Func) -> list[ast.stmt]:
    body = fn.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    return body


def _params(fn: _Func, cls: ast.ClassDef | None) -> list[str]:
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    static = any(dotted(d).endswith("staticmethod") for d in fn.decorator_list)
    if cls is not None and names and not static:
        names = names[1:]
    return names


def _literal(node: ast.AST | None) -> tuple[bool, object]:
    if node is None:
        return False, None
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _python(f: FileChange, expectations: Sequence[Expectation]) -> list[Finding]:
    try:
        tree = pyast.parse(f.new or "", f.path)
    except SyntaxError as exc:
        return [
            warning(
                f"could not be parsed ({exc.msg}, line {exc.lineno}); stubs not checked.",
                "stubs.unparsable",
                f.path,
                exc.lineno,
            )
        ]
    out: list[Finding] = []
    consts = specialcases.module_constants(tree)
    for fn, cls in _functions(tree.body, None):
        span = range(fn.lineno, (fn.end_lineno or fn.lineno) + 1)
        if not any(ln in f.added for ln in span):
            continue
        name = f"{cls.name}.{fn.name}" if cls else fn.name
        exempt = _exempt(fn, cls)
        body = _body(fn)
        if not exempt:
            for node in walk_shallow(fn):
                if (
                    isinstance(node, ast.Raise)
                    and node.exc is not None
                    and dotted(node.exc).endswith("NotImplementedError")
                    and node.lineno in f.added
                ):
                    out.append(
                        blocking(
                            f"{name}() raises NotImplementedError: it is a stub.",
                            "stubs.not-implemented",
                            f.path,
                            node.lineno,
                            fix="Implement it; if it is meant to be overridden, make it an "
                            "@abstractmethod of an ABC.",
                        )
                    )
            if all(
                isinstance(s, ast.Pass)
                or (
                    isinstance(s, ast.Expr)
                    and isinstance(s.value, ast.Constant)
                    and s.value.value is Ellipsis
                )
                for s in body
            ):
                out.append(
                    blocking(
                        f"{name}() has an empty body (only pass, ... or a docstring).",
                        "stubs.empty-body",
                        f.path,
                        fn.lineno,
                        fix="Implement it, or remove it if nothing calls it.",
                    )
                )
        params = _params(fn, cls)
        hard = _hardcoded(f, fn, name, body, params, expectations)
        out += hard
        if not hard:
            found = specialcases.special_cases(fn, params, expectations, consts)
            if found:
                out += _special_cased(f, fn, name, params, found)
    return out


def _hardcoded(
    f: FileChange,
    fn: _Func,
    name: str,
    body: list[ast.stmt],
    params: list[str],
    expectations: Sequence[Expectation],
) -> list[Finding]:
    mine = [e for e in expectations if e.func == fn.name]
    if not mine or not params:
        return []
    if len(body) == 1 and isinstance(body[0], ast.Return):
        ok, value = _literal(body[0].value)
        for e in mine:
            if ok and _same(value, e.expected):
                return [
                    blocking(
                        f"{name}() ignores its arguments and returns {value!r}, exactly what "
                        f"the test at {e.path}:{e.line} expects: the answer is hard-coded.",
                        "stubs.hardcoded-return",
                        f.path,
                        body[0].lineno,
                        fix="Compute the result from the arguments.",
                    )
                ]
    return []


def _special_cased(
    f: FileChange, fn: _Func, name: str, params: list[str], found: Sequence[SpecialCase]
) -> list[Finding]:
    first = found[0]
    e = first.expectation
    where = f"test {e.test} ({e.path}:{e.line})" if e.test else f"the test at {e.path}:{e.line}"
    others = f"; and {len(found) - 1} more of the tests' cases" if len(found) > 1 else ""
    return [
        blocking(
            f"{name}() special-cases the tests' literal inputs: line {first.line} returns "
            f"{first.output!r} when `{first.shown}`, the input and expected value of {where}: "
            f"`{e.func}{_call_text(e)} == {e.expected!r}`{others}. It answers the tests "
            "instead of computing the result.",
            "stubs.special-cased",
            f.path,
            first.line,
            fix="Remove the cases keyed by the tests' inputs and implement the general rule "
            "they are examples of.",
        )
    ]


def _call_text(e: Expectation) -> str:
    args = [repr(a) for a in e.args or ()] + [f"{k}={v!r}" for k, v in e.kwargs]
    return f"({', '.join(args)})"


# JavaScript / TypeScript ---------------------------------------------------------------


def _js(f: FileChange, expectations: Sequence[Expectation]) -> list[Finding]:
    source = f.new or ""
    out = [
        blocking(
            "throws a 'not implemented' error: it is a stub.",
            "stubs.not-implemented",
            f.path,
            ln,
            fix="Implement it.",
        )
        for ln in jstests.not_implemented(source)
        if ln in f.added
    ]
    for name, has_params, value, line in jstests.constant_functions(source):
        if line not in f.added or not has_params:
            continue
        for e in expectations:
            if e.func == name and _same(value, e.expected):
                out.append(
                    blocking(
                        f"{name}() ignores its arguments and returns {value!r}, exactly what the "
                        f"test at {e.path}:{e.line} expects: the answer is hard-coded.",
                        "stubs.hardcoded-return",
                        f.path,
                        line,
                        fix="Compute the result from the arguments.",
                    )
                )
                break
    return out
