"""How a Python test avoids failing without a tautology: early returns, dead branches,
swallowed assertion errors, ``pytest.raises(Exception)``, skip markers and skips of
optional imports. Pure functions of a test's AST; ``testquality`` turns them into findings.
"""

from __future__ import annotations

import ast

from loop_orchestrator.verify.pytests import (
    assertion_lines,
    constant_value,
    dotted,
    is_assertion,
    walk_shallow,
)

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
            ok, value = constant_value(node.test)
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


#: skips that take a condition as their first argument (``skipUnless`` skips when it is false)
_CONDITIONED = ("skipIf", "skipUnless", "skipif")
#: skips that fire when reached (under an ``if``, their condition is the ``if``'s)
_REACHED = ("skip", "skipTest", "SkipTest")


def _conditioned(deco: ast.AST) -> bool:
    """A ``skipIf(cond, ...)`` / ``mark.skipif(cond, ...)`` whose condition is not a constant
    (``skipIf(True)`` skips everywhere: it is a skip, whatever the report says)."""
    if not isinstance(deco, ast.Call) or not deco.args:
        return False
    last = dotted(deco.func).rsplit(".", 1)[-1]
    constant, value = constant_value(deco.args[0])
    # pytest evaluates a string condition (``skipif("sys.platform == 'win32'")``)
    return last in _CONDITIONED and (not constant or (last == "skipif" and isinstance(value, str)))


def _guarded_skips(fn: ast.AST) -> set[int]:
    """Lines of skips in a test's body that run only under an ``if`` whose test is not a
    constant: ``if sys.platform == "win32": self.skipTest(...)``."""
    lines: set[int] = set()
    for node in walk_shallow(fn):
        if isinstance(node, ast.If) and not constant_value(node.test)[0]:
            for n in (m for s in node.body for m in ast.walk(s)):
                if (isinstance(n, ast.Call) and dotted(n.func).rsplit(".", 1)[-1] in _REACHED) or (
                    isinstance(n, ast.Raise)
                    and n.exc is not None
                    and dotted(n.exc).endswith("SkipTest")
                ):
                    lines.add(n.lineno)
    return lines


def conditional_skips(tree: ast.Module) -> dict[int, list[str]]:
    """Skips that fire only when a condition holds, by line, with the tests they govern
    (qualnames ``Class::test``): a conditioned decorator on a test or on its class, or a
    skip under an ``if`` in a test's body. Whether the condition held where the checks ran
    is a fact of the checks' report (the test ran, or was skipped), not of the source."""
    out: dict[int, list[str]] = {}

    def tests_in(body: list[ast.stmt], prefix: str) -> list[str]:
        found = []
        for s in body:
            if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef) and s.name.startswith("test"):
                found.append(prefix + s.name)
            elif isinstance(s, ast.ClassDef):
                found += tests_in(s.body, f"{prefix}{s.name}::")
        return found

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for s in body:
            if isinstance(s, ast.ClassDef):
                governed = tests_in(s.body, f"{prefix}{s.name}::")
                for deco in s.decorator_list:
                    if _conditioned(deco):
                        out.setdefault(deco.lineno, []).extend(governed)
                visit(s.body, f"{prefix}{s.name}::")
            elif isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef):
                if not s.name.startswith("test"):
                    continue
                for deco in s.decorator_list:
                    if _conditioned(deco):
                        out.setdefault(deco.lineno, []).append(prefix + s.name)
                for line in _guarded_skips(s):
                    out.setdefault(line, []).append(prefix + s.name)

    visit(tree.body, "")
    return out
