"""Exact signatures of named outputs, read from source, for dependents' briefs.

Python: ``def``/``class`` headers with their annotations, via ``ast`` (the text is cut
from the source, so it is exactly what the producer wrote). TypeScript/JavaScript:
exported functions, classes, types and interfaces, by pattern.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Signature:
    name: str
    source: str  # repo-relative path
    text: str


def python_signatures(source: str, path: str) -> dict[str, Signature]:
    """Top-level functions and classes (with their public methods) of a Python file."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    lines = source.splitlines()
    found: dict[str, Signature] = {}

    def header(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
        start = node.lineno - 1
        if node.decorator_list:
            start = node.decorator_list[0].lineno - 1
        body_line = node.body[0].lineno - 1
        text = "\n".join(lines[start:body_line]).rstrip()
        if not text.endswith(":"):
            # a one-line body (`def f(): return 1`): keep the header only
            first = "\n".join(lines[start : node.end_lineno or start + 1])
            text = first.split(":", 1)[0] + ":" if ":" in first else first
        return text

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = Signature(node.name, path, header(node))
        elif isinstance(node, ast.ClassDef):
            parts = [header(node)]
            for item in node.body:
                is_fn = isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                if is_fn and (not item.name.startswith("_") or item.name == "__init__"):
                    parts.append(header(item))
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    parts.append(ast.get_source_segment(source, item) or "")
            found[node.name] = Signature(node.name, path, "\n".join(p for p in parts if p))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    seg = ast.get_source_segment(source, node) or t.id
                    found[t.id] = Signature(t.id, path, seg.splitlines()[0])
    return found


_TS_EXPORT = re.compile(
    r"^export\s+(?:default\s+)?(?:declare\s+)?(?:async\s+)?"
    r"(?P<kind>function\*?|class|interface|type|const|let|enum|abstract\s+class)\s+"
    r"(?P<name>[A-Za-z_$][\w$]*)",
    re.MULTILINE,
)


def ts_signatures(source: str, path: str) -> dict[str, Signature]:
    """Exported functions, classes, interfaces, types and consts of a TS/JS file."""
    found: dict[str, Signature] = {}
    for m in _TS_EXPORT.finditer(source):
        start = m.start()
        kind = m.group("kind")
        rest = source[start:]
        if kind in ("interface", "enum") or kind.endswith("class"):
            end = _matching_brace(rest)
            text = rest[:end] if end else rest.splitlines()[0]
        elif kind == "type":
            text = rest.split(";", 1)[0] + ";" if ";" in rest else rest.splitlines()[0]
        else:
            text = re.split(r"\{|=>", rest, maxsplit=1)[0].rstrip()
        found[m.group("name")] = Signature(m.group("name"), path, text.strip())
    return found


def _matching_brace(text: str) -> int:
    depth = 0
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return 0


def signatures_in(path: str, source: str) -> dict[str, Signature]:
    if path.endswith(".py"):
        return python_signatures(source, path)
    if path.endswith((".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs")):
        return ts_signatures(source, path)
    return {}


def find(names: Iterable[str], files: dict[str, str]) -> list[Signature]:
    """The signature of each name, looked up in ``files`` (path -> source)."""
    wanted = list(dict.fromkeys(names))
    result: list[Signature] = []
    index: dict[str, Signature] = {}
    for path in sorted(files):
        for name, sig in signatures_in(path, files[path]).items():
            index.setdefault(name, sig)
    for name in wanted:
        if name in index:
            result.append(index[name])
    return result
