"""Python source is parsed one thread at a time (CPython 3.11's AST builder is not thread-safe)."""

from __future__ import annotations

import ast
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from loop_orchestrator import pyast

PACKAGE = Path(__file__).resolve().parent.parent / "loop_orchestrator"


def test_parse_lets_one_thread_in_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    inside = 0
    most = 0
    guard = threading.Lock()
    real_parse = ast.parse

    def slow_parse(*args: Any, **kwargs: Any) -> ast.Module:
        nonlocal inside, most
        with guard:
            inside += 1
            most = max(most, inside)
        time.sleep(0.02)  # wide enough for the other threads to arrive
        try:
            tree: ast.Module = real_parse(*args, **kwargs)
            return tree
        finally:
            with guard:
                inside -= 1

    monkeypatch.setattr(ast, "parse", slow_parse)
    trees: list[ast.Module] = []

    def work(n: int) -> None:
        for i in range(5):
            trees.append(pyast.parse(f"x{n}_{i} = {i}\n", f"t{n}.py"))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(trees) == 20
    assert most == 1


def test_parse_returns_the_module_and_raises_syntax_errors_with_the_file_name() -> None:
    tree = pyast.parse("def f():\n    return 1\n", "m.py")
    assert isinstance(tree.body[0], ast.FunctionDef)
    with pytest.raises(SyntaxError) as info:
        pyast.parse("def (:\n", "broken.py")
    assert info.value.filename == "broken.py"


def test_no_module_parses_python_around_the_lock() -> None:
    """The supervisor verifies tasks in threads: a direct ``ast.parse`` would race."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "pyast.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            direct = (
                isinstance(func, ast.Attribute)
                and func.attr == "parse"
                and (isinstance(func.value, ast.Name) and func.value.id == "ast")
            )
            only_ast = (
                isinstance(func, ast.Name)
                and func.id == "compile"
                and any(
                    isinstance(a, ast.Attribute) and a.attr == "PyCF_ONLY_AST"
                    for a in ast.walk(node)
                )
            )
            if direct or only_ast:
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offenders == []
