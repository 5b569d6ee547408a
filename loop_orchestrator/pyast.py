"""Parsing Python source from several threads at once.

CPython 3.11 keeps the AST builder's recursion counter in interpreter-wide state, so two
threads inside ``ast.parse`` at the same time can fail with ``SystemError: AST constructor
recursion depth mismatch`` (python/cpython#106905). It happened in this project's CI while
the supervisor verified two tasks at once. Every parse in lo-orch goes through
:func:`parse`, which lets one thread in at a time.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename=filename)
