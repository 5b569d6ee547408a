"""Exact signatures of named outputs, read from source, for dependents' briefs.

Python: ``def``/``class`` headers with their decorators and annotations, via ``ast`` and
``tokenize`` (the text is cut from the source, so it is exactly what the producer wrote).
TypeScript/JavaScript: exported functions, classes, types, interfaces, enums and consts, by
pattern over the source with comments and string literals masked out, so a brace inside a
string or a comment never ends a declaration early.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass

from loop_orchestrator import pyast
from loop_orchestrator.verify.jstests import mask


@dataclass(frozen=True)
class Signature:
    name: str
    source: str  # repo-relative path
    text: str


# Python ---------------------------------------------------------------------------------

_Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _header(lines: list[str], node: _Def) -> str:
    """The source of a def/class header: decorators through the colon, comments kept.

    The colon is found with ``tokenize`` (the first ``:`` at bracket depth 0 after the
    ``def``/``class`` keyword), so annotations, defaults and lambdas holding colons, a body
    on the same line and comments between the header and the body are all handled.
    """
    start = node.decorator_list[0].lineno - 1 if node.decorator_list else node.lineno - 1
    body_end = node.body[0].lineno  # 1-based, inclusive: the header ends at or before it
    region = lines[start:body_end]
    keyword = "class" if isinstance(node, ast.ClassDef) else "def"
    depth = 0
    seen_keyword = False
    reader = io.StringIO("".join(region)).readline
    try:
        for tok in tokenize.generate_tokens(reader):
            if tok.type == tokenize.OP and tok.string in "([{":
                depth += 1
            elif tok.type == tokenize.OP and tok.string in ")]}":
                depth -= 1
            elif tok.type == tokenize.NAME and tok.string == keyword and depth == 0:
                seen_keyword = True
            elif seen_keyword and depth == 0 and tok.type == tokenize.OP and tok.string == ":":
                row, col = tok.end
                cut = [*region[: row - 1], region[row - 1][:col]]
                return _dedent("".join(cut).rstrip())
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return _dedent(region[0].rstrip() if region else "")  # pragma: no cover - ast parsed it


def _dedent(text: str) -> str:
    """Remove the indentation of the first line from every line (methods of a class)."""
    first = text.splitlines()[0] if text else ""
    indent = len(first) - len(first.lstrip())
    if not indent:
        return text
    return "\n".join(
        line[indent:] if line[:indent].isspace() else line for line in text.splitlines()
    )


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())


def _is_public_member(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def _class_text(source: str, lines: list[str], node: ast.ClassDef) -> str:
    """A class header with its fields, constants and public method headers (no bodies)."""
    parts = [_header(lines, node)]
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if _is_public_member(item.name):
                parts.append(_indent(_header(lines, item)))
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            if _is_public_member(item.target.id):
                parts.append(_indent(ast.get_source_segment(source, item) or ""))
        elif isinstance(item, ast.Assign) and all(isinstance(t, ast.Name) for t in item.targets):
            # enum members and class constants are part of the contract
            names = [t.id for t in item.targets if isinstance(t, ast.Name)]
            if any(_is_public_member(n) for n in names):
                parts.append(_indent(_first_line(ast.get_source_segment(source, item) or "")))
    return "\n".join(p for p in parts if p.strip())


def _first_line(text: str) -> str:
    lines = text.splitlines()
    if len(lines) <= 1:
        return text
    return lines[0] + " ..."


def python_signatures(source: str, path: str) -> dict[str, Signature]:
    """Top-level functions and classes (with their public members) of a Python file.

    Overloads of one function are kept together, in source order. Module-level assignments
    and (Python 3.12+) ``type`` aliases are given by their first line.
    """
    try:
        tree = pyast.parse(source, path)
    except SyntaxError:
        return {}
    lines = source.splitlines(keepends=True)
    found: dict[str, Signature] = {}
    type_alias = getattr(ast, "TypeAlias", None)  # Python 3.12+

    def add(name: str, text: str, *, join: bool = False) -> None:
        if join and name in found:
            text = found[name].text + "\n" + text
        found[name] = Signature(name, path, text)

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            add(node.name, _header(lines, node), join=True)
        elif isinstance(node, ast.ClassDef):
            add(node.name, _class_text(source, lines, node))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    seg = ast.get_source_segment(source, node) or t.id
                    add(t.id, _first_line(seg))
        elif type_alias is not None and isinstance(node, type_alias):
            name = getattr(node, "name", None)
            if isinstance(name, ast.Name):
                add(name.id, _first_line(ast.get_source_segment(source, node) or name.id))
    return found


# TypeScript / JavaScript ------------------------------------------------------------------

_TS_EXPORT = re.compile(
    r"^export[ \t]+(?:default[ \t]+)?(?:declare[ \t]+)?(?:async[ \t]+)?"
    r"(?P<kind>function[ \t]*\*?|abstract[ \t]+class|class|interface|type|const[ \t]+enum|"
    r"enum|const|let|var)[ \t]+(?P<name>[A-Za-z_$][\w$]*)",
    re.MULTILINE,
)
_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = frozenset(")]}")


def _prev_significant(masked: str, pos: int) -> str:
    j = pos - 1
    while j >= 0 and masked[j].isspace():
        j -= 1
    return masked[j] if j >= 0 else ""


def _skip_block(masked: str, pos: int) -> int:
    """Index just after the bracket block opening at ``pos`` (or the end of the text)."""
    stack: list[str] = []
    for i in range(pos, len(masked)):
        ch = masked[i]
        if ch in _OPEN:
            stack.append(_OPEN[ch])
        elif ch in _CLOSE and stack and stack.pop() and not stack:
            return i + 1
    return len(masked)


def _declaration_end(masked: str, start: int, kind: str) -> tuple[int, bool]:
    """Where a declaration's signature ends, and whether the body was cut off.

    Scans at bracket depth 0: a function or class header ends at its body ``{`` (a ``{``
    right after ``:``, ``|``, ``&``, ``<`` or ``,`` opens an object *type* and is skipped);
    a ``const`` ends before ``=>`` or its initializer's block; a type alias, declaration or
    statement ends at ``;`` or at a line break that does not continue the expression.
    """
    i, n = start, len(masked)
    depth = 0  # () and [] and <> of generics
    while i < n:
        ch = masked[i]
        two = masked[i : i + 2]
        if two == "=>":
            if depth == 0 and kind.startswith(("const", "let", "var")):
                return i, True
            i += 2
            continue
        if ch in "([<":
            depth += 1
        elif ch in ")]>":
            depth = max(0, depth - 1)
        elif ch == "{":
            prev = _prev_significant(masked, i)
            if depth > 0 or prev in (":", "|", "&", "<", ",", "(") or kind == "type":
                i = _skip_block(masked, i)  # an object type, not a body
                continue
            if kind in ("interface", "enum", "const enum"):
                return _skip_block(masked, i), False
            return i, True
        elif ch == ";" and depth == 0:
            return i + 1, False
        elif ch == "\n" and depth == 0 and kind in ("type", "const", "let", "var"):
            prev = _prev_significant(masked, i)
            following = masked[i:].lstrip()[:1]
            if prev not in ("=", "|", "&", ",", "<", "(", ":", "?") and following not in (
                "|",
                "&",
                "?",
                ":",
                ".",
                "=",
            ):
                return i, False
        i += 1
    return n, False


_TS_MODIFIERS = frozenset(
    {
        "static",
        "readonly",
        "async",
        "get",
        "set",
        "abstract",
        "override",
        "declare",
        "public",
        "protected",
        "private",
    }
)


def _class_members(source: str, masked: str, body_start: int) -> list[str]:
    """Public member signatures of a class body starting at ``body_start`` (its ``{``)."""
    end = _skip_block(masked, body_start) - 1
    members: list[str] = []
    i = body_start + 1
    while i < end:
        while i < end and (masked[i].isspace() or masked[i] == ";"):
            i += 1
        if i >= end:
            break
        start = k = i
        while k < end and masked[k] == "@":  # decorators stay with their member
            k += 1
            while k < end and (masked[k].isalnum() or masked[k] in "_$."):
                k += 1
            if k < end and masked[k] == "(":
                k = _skip_block(masked, k)
            while k < end and masked[k].isspace():
                k += 1
        stop, has_body = _member_end(masked, k, end)
        text = source[start:stop].rstrip().rstrip(";").rstrip()
        i = _skip_block(masked, stop) if has_body else max(stop, i + 1)
        words = masked[k:stop].split()
        hidden = False
        for word in words:
            if word in ("private", "protected"):
                hidden = True
            if word not in _TS_MODIFIERS:
                hidden = hidden or word.startswith("#")
                break
        if text and not hidden:
            members.append("  " + text)
    return members


def _member_end(masked: str, i: int, end: int) -> tuple[int, bool]:
    """End of a class member's signature: its body ``{``, a ``;`` or a line break."""
    depth = 0
    j = i
    while j < end:
        ch = masked[j]
        if masked[j : j + 2] == "=>":
            j += 2
            continue
        if ch in "([<":
            depth += 1
        elif ch in ")]>":
            depth = max(0, depth - 1)
        elif ch == "{":
            prev = _prev_significant(masked, j)
            if depth > 0 or prev in (":", "|", "&", "<", ",", "(", "="):
                j = _skip_block(masked, j)
                continue
            return j, True
        elif ch == ";" and depth == 0:
            return j, False
        elif ch == "\n" and depth == 0:
            prev = _prev_significant(masked, j)
            if prev not in (":", "|", "&", ",", "(", "=", "<"):
                return j, False
        j += 1
    return end, False


def ts_signatures(source: str, path: str) -> dict[str, Signature]:
    """Exported functions, classes, interfaces, types, enums and consts of a TS/JS file.

    Interfaces, enums and type aliases are given whole (they are the contract); functions
    and consts up to their body; classes as their header with public member signatures.
    """
    # comments, strings and regex literals blanked, offsets kept (shared with verify)
    masked = mask(source)
    found: dict[str, Signature] = {}
    for m in _TS_EXPORT.finditer(masked):
        start = m.start()
        kind = " ".join(m.group("kind").replace("*", "").split())
        name = m.group("name")
        end, has_body = _declaration_end(masked, m.end(), kind)
        text = source[start:end].rstrip()
        if kind.endswith("class") and has_body:
            members = _class_members(source, masked, end)
            text = text + " {\n" + "\n".join(members) + ("\n}" if members else "}")
        elif has_body or kind.startswith(("const", "let", "var")):
            text = text.rstrip().rstrip("=").rstrip()
        text = text.rstrip(";").rstrip() if kind.startswith("function") else text
        if name in found and kind.startswith("function"):
            # overloads: every declaration, in order
            text = found[name].text + "\n" + text
        found[name] = Signature(name, path, text.strip())
    return found


# lookup -----------------------------------------------------------------------------------

PY_SUFFIXES = (".py", ".pyi")
TS_SUFFIXES = (".ts", ".tsx", ".mts", ".cts", ".js", ".jsx", ".mjs", ".cjs")
SOURCE_SUFFIXES = PY_SUFFIXES + TS_SUFFIXES


def signatures_in(path: str, source: str) -> dict[str, Signature]:
    """Every signature a file exposes, by name (empty for other languages)."""
    if path.endswith(PY_SUFFIXES):
        return python_signatures(source, path)
    if path.endswith(TS_SUFFIXES):
        return ts_signatures(source, path)
    return {}


def comment_prefix(path: str) -> str:
    """The line-comment marker of the file's language (for ``# app/db.py`` notes)."""
    return "//" if path.endswith(TS_SUFFIXES) else "#"


def find(names: Iterable[str], files: dict[str, str]) -> list[Signature]:
    """The signature of each name, looked up in ``files`` (path -> source).

    The first file (in path order) that defines a name wins; names found nowhere are left
    out. ``Class.member`` is not split: give the class name to get its members.
    """
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
