"""JavaScript/TypeScript tests (jest, vitest, mocha) read by pattern, not by a parser.

The source is first *masked*: comments, and optionally string contents, become spaces
(newlines kept), so braces and keywords can be matched without being fooled by text inside
strings. Test blocks are ``it``/``test``/``specify`` calls; their titles are joined with the
enclosing ``describe`` titles into a qualified name. Good enough to count assertions, spot
skips and tautologies; not a JavaScript parser (regex literals are guessed).
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass

from loop_orchestrator.verify.pytests import BOUNDARY_WORDS, Expectation, words

_REGEX_PREV = set("(,=:[!&|?{};+-*%<>~^")


def mask(source: str, *, strings: bool = True) -> str:
    """``source`` with comments (and string contents when ``strings``) blanked out.

    Offsets and line numbers are unchanged: every masked character becomes a space,
    newlines stay.
    """
    out = list(source)
    i, n = 0, len(source)
    last_code = ""  # last non-space code character, to tell a regex from a division

    def blank(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = source[i]
        nxt = source[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            end = source.find("\n", i)
            end = n if end < 0 else end
            blank(i, end)
            i = end
            continue
        if c == "/" and nxt == "*":
            end = source.find("*/", i + 2)
            end = n if end < 0 else end + 2
            blank(i, end)
            i = end
            continue
        if c in "'\"`":
            j = i + 1
            while j < n and source[j] != c:
                if source[j] == "\\":
                    j += 1
                elif source[j] == "\n" and c != "`":
                    break
                j += 1
            if strings:
                blank(i + 1, j)
            i = j + 1
            last_code = c
            continue
        if c == "/" and (last_code in _REGEX_PREV or last_code == ""):
            j, in_class = i + 1, False
            while j < n and source[j] != "\n":
                ch = source[j]
                if ch == "\\":
                    j += 2
                    continue
                if ch == "[":
                    in_class = True
                elif ch == "]":
                    in_class = False
                elif ch == "/" and not in_class:
                    break
                j += 1
            if j < n and source[j] == "/":
                if strings:
                    blank(i + 1, j)
                i = j + 1
                last_code = "/"
                continue
        if not c.isspace():
            last_code = c
        i += 1
    return "".join(out)


def match_close(masked: str, start: int) -> int:
    """Index of the bracket closing the one at ``start`` (or len when unbalanced)."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack: list[str] = []
    for k in range(start, len(masked)):
        ch = masked[k]
        if ch in pairs:
            stack.append(pairs[ch])
        elif ch in ")}]":
            if stack and stack[-1] == ch:
                stack.pop()
                if not stack:
                    return k
            elif not stack:
                return k
    return len(masked)


class Lines:
    """Offset -> 1-based line number."""

    def __init__(self, text: str) -> None:
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset)


_TEST_CALL = re.compile(r"(?<![\w$.])(it|test|specify|xit|xtest|fit|xspecify)((?:\.\w+)*)\s*\(")
_SUITE_CALL = re.compile(
    r"(?<![\w$.])(describe|context|suite|xdescribe|fdescribe|xcontext)((?:\.\w+)*)\s*\("
)
_ASSERT = re.compile(
    r"(?<![\w$.])(?:expect|assert|expectTypeOf|assertType)\s*[.(]"
    r"|\.should\b|(?<![\w$])sinon\.assert\."
    r"|(?<![\w$.])t\.(?:is|not|deepEqual|notDeepEqual|true|false|truthy|falsy|throws"
    r"|throwsAsync|notThrows|regex|snapshot|assert|like)\s*\("
)
#: ``import { equal, throws as t } from 'node:assert'`` and ``const { ok } = require('assert')``:
#: node's assert functions called by their own names (corpus: ai/nanoid's tests)
_ASSERT_IMPORT = re.compile(
    r"import\s*\{(?P<a>[^}]*)\}\s*from\s*['\"](?:node:)?assert(?:/strict)?['\"]"
    r"|(?:const|let|var)\s*\{(?P<b>[^}]*)\}\s*=\s*require\(\s*['\"](?:node:)?assert"
    r"(?:/strict)?['\"]\s*\)"
)


def assertion_pattern(source: str) -> re.Pattern[str]:
    """What counts as an assertion in ``source``: the usual forms, plus the functions it
    imports from node's ``assert`` module by name."""
    names = []
    for m in _ASSERT_IMPORT.finditer(source):
        for part in (m.group("a") or m.group("b") or "").split(","):
            name = re.split(r"\s+as\s+|\s*:\s*", part.strip())[-1].strip()
            if re.fullmatch(r"[A-Za-z_$][\w$]*", name) and name not in (
                "default",
                "AssertionError",
            ):
                names.append(re.escape(name))
    if not names:
        return _ASSERT
    return re.compile(_ASSERT.pattern + rf"|(?<![\w$.])(?:{'|'.join(sorted(set(names)))})\s*\(")


_SKIP = re.compile(
    r"(?<![\w$.])(?:(?:it|test|describe|suite|context|specify|bench)(?:\.\w+)*?"
    r"\.(?:skip|only|todo|skipIf|runIf|fails|fixme)\b"
    r"|(?:xit|xtest|xdescribe|xcontext|xspecify|fit|fdescribe|fcontext)\s*\("
    r"|this\.skip\s*\()"
)
_ERROR_CASE = re.compile(
    r"\.(?:toThrow|toThrowError|toThrowErrorMatchingSnapshot|toThrowErrorMatchingInlineSnapshot)"
    r"\b|\.rejects\b|\.to\.(?:be\.)?(?:throw|rejected)|(?<![\w$])assert\.(?:throws|rejects)\b"
    r"|(?<![\w$.])t\.throws(?:Async)?\b"
)
_BOUNDARY_VALUE = re.compile(
    r"(?<![\w.$])(?:0|0\.0|-\d+(?:\.\d+)?)(?![\w.])|''|\"\"|``|\[\s*\]|(?<![\w$.])"
    r"(?:null|undefined|NaN|Infinity)\b|Number\.(?:MAX|MIN)_\w+|Number\.EPSILON"
)
_LIT = r"(?:true|false|null|undefined|-?\d+(?:\.\d+)?|'[^'\\\n]*'|\"[^\"\\\n]*\")"
_TAUTOLOGIES = (
    (
        re.compile(
            rf"expect\(\s*({_LIT})\s*\)\s*\.(?:not\.)?(?:toBe|toEqual|toStrictEqual)"
            rf"\(\s*({_LIT})\s*\)"
        ),
        "compares two constants",
    ),
    (
        re.compile(
            r"expect\(\s*(?:true|[1-9]\d*|'[^']+'|\"[^\"]+\")\s*\)\s*\."
            r"(?:toBeTruthy|toBeDefined)\(\s*\)"
        ),
        "expects a constant to be truthy",
    ),
    (
        re.compile(r"expect\(\s*([\w$.]+)\s*\)\s*\.(?:toBe|toEqual|toStrictEqual)\(\s*\1\s*\)"),
        "compares a value with itself",
    ),
    (re.compile(r"(?<![\w$.])assert(?:\.ok)?\(\s*(?:true|[1-9]\d*)\s*\)"), "asserts a constant"),
    (
        re.compile(
            rf"(?<![\w$])assert\.(?:equal|strictEqual|deepEqual|deepStrictEqual)\(\s*"
            rf"({_LIT}|[\w$.]+)\s*,\s*\1\s*\)"
        ),
        "compares a value with itself",
    ),
    (re.compile(r"(?<![\w$.])expect\(\s*true\s*\)\s*\.to\.be\.true"), "expects true to be true"),
)
_BROAD_THROW = re.compile(r"\.toThrow\(\s*\)")
_BARE_RETURN = re.compile(r"\breturn\s*(?:;|\}|\n|$)")


@dataclass
class JsTest:
    path: str
    qualname: str  # "suite > nested > title"
    title: str
    lineno: int
    end_lineno: int
    assertions: int
    body: str  # the body, comments removed, strings kept (tautologies, boundary values)
    masked_body: str  # the body with strings blanked too
    body_offset: int
    #: what counts as an assertion in this test's module (``assertion_pattern``)
    assertion_re: re.Pattern[str] = _ASSERT


@dataclass
class JsModule:
    path: str
    tests: list[JsTest]
    duplicates: list[tuple[str, int, int]]


def _title(source: str, masked: str, open_paren: int, close: int) -> tuple[str, int]:
    """The first argument's text (unquoted when a literal) and where it ends."""
    depth, k = 0, open_paren + 1
    while k < close:
        ch = masked[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            break
        k += 1
    raw = source[open_paren + 1 : k].strip()
    if len(raw) >= 2 and raw[0] in "'\"`" and raw[-1] == raw[0]:
        raw = raw[1:-1]
    return raw, k


def _body_range(masked: str, after: int, close: int) -> tuple[int, int]:
    """The function body inside a test call: a ``{...}`` block or an arrow expression."""
    arrow = masked.find("=>", after, close)
    func = masked.find("function", after, close)
    starts = [p for p in (arrow, func) if p >= 0]
    if not starts:
        return after, close
    start = min(starts)
    brace = masked.find("{", start, close)
    if arrow == start:
        rest = masked[arrow + 2 : close].lstrip()
        if not rest.startswith("{"):
            return arrow + 2, close
    if brace < 0:
        return start, close
    return brace, match_close(masked, brace) + 1


def parse_module(path: str, source: str) -> JsModule:
    masked = mask(source)
    no_comments = mask(source, strings=False)
    lines = Lines(source)
    suites = []
    for m in _SUITE_CALL.finditer(masked):
        open_paren = m.end() - 1
        close = match_close(masked, open_paren)
        title, _ = _title(source, masked, open_paren, close)
        suites.append((open_paren, close, title))
    tests: list[JsTest] = []
    dups: list[tuple[str, int, int]] = []
    seen: dict[str, int] = {}
    asserts = assertion_pattern(no_comments)
    for m in _TEST_CALL.finditer(masked):
        open_paren = m.end() - 1
        if ".each" in m.group(2):
            table_close = match_close(masked, open_paren)
            nxt = re.compile(r"\s*\(").match(masked, table_close + 1)
            if not nxt:
                continue
            open_paren = nxt.end() - 1
        close = match_close(masked, open_paren)
        title, after = _title(source, masked, open_paren, close)
        b0, b1 = _body_range(masked, after, close)
        enclosing = [t for (s, e, t) in suites if s < m.start() < e]
        qual = " > ".join([*enclosing, title])
        line = lines.line(m.start())
        if qual in seen:
            dups.append((qual, seen[qual], line))
        seen[qual] = line
        masked_body = masked[b0:b1]
        tests.append(
            JsTest(
                path=path,
                qualname=qual,
                title=title,
                lineno=line,
                end_lineno=lines.line(close),
                assertions=len(asserts.findall(masked_body)),
                body=no_comments[b0:b1],
                masked_body=masked_body,
                body_offset=b0,
                assertion_re=asserts,
            )
        )
    return JsModule(path=path, tests=tests, duplicates=dups)


def skip_markers(source: str) -> list[tuple[int, str]]:
    masked = mask(source)
    lines = Lines(source)
    return [(lines.line(m.start()), m.group(0).rstrip("( ")) for m in _SKIP.finditer(masked)]


def tautologies(test: JsTest, source_lines: Lines) -> list[tuple[int, str]]:
    found: dict[int, str] = {}
    for pattern, reason in _TAUTOLOGIES:
        for m in pattern.finditer(test.body):
            line = source_lines.line(test.body_offset + m.start())
            found.setdefault(line, f"{reason}: `{m.group(0)}`")
    return sorted(found.items())


def early_returns(test: JsTest, source_lines: Lines) -> list[int]:
    """Bare ``return`` statements before the first assertion (when assertions follow)."""
    first = test.assertion_re.search(test.masked_body)
    if first is None:
        return []
    return [
        source_lines.line(test.body_offset + m.start())
        for m in _BARE_RETURN.finditer(test.masked_body, 0, first.start())
    ]


def swallowed_assertions(test: JsTest, source_lines: Lines) -> list[int]:
    """``try { expect(...) } catch (e) { }`` where the catch neither rethrows nor asserts."""
    out = []
    body = test.masked_body
    for m in re.finditer(r"\btry\s*\{", body):
        t0 = m.end() - 1
        t1 = match_close(body, t0)
        c = re.compile(r"\s*catch\s*(?:\([^)]*\))?\s*\{").match(body, t1 + 1)
        if not c or not test.assertion_re.search(body, t0, t1):
            continue
        c0 = c.end() - 1
        c1 = match_close(body, c0)
        handler = body[c0:c1]
        if "throw" not in handler and not test.assertion_re.search(handler):
            out.append(source_lines.line(test.body_offset + c.start()))
    return out


def broad_throws(test: JsTest, source_lines: Lines) -> list[int]:
    return [
        source_lines.line(test.body_offset + m.start())
        for m in _BROAD_THROW.finditer(test.masked_body)
    ]


def has_error_case(mod: JsModule) -> bool:
    return any(_ERROR_CASE.search(t.masked_body) for t in mod.tests)


def has_boundary_case(mod: JsModule) -> bool:
    """Same heuristic as for Python: a boundary name, or 0/""/[]/null/-n/NaN/MAX_ values."""
    return any(words(t.title) & BOUNDARY_WORDS or _BOUNDARY_VALUE.search(t.body) for t in mod.tests)


# hard-coded returns ---------------------------------------------------------------------


def _js_value(lit: str) -> object:
    lit = lit.strip()
    if lit == "undefined":
        return None
    if lit.startswith("'") and lit.endswith("'"):
        return lit[1:-1]
    try:
        return json.loads(lit)
    except json.JSONDecodeError:
        return lit


_EXPECT_CALL = re.compile(
    rf"expect\(\s*([\w$.]+)\(([^()]*)\)\s*\)\s*\.(?:toBe|toEqual|toStrictEqual)\(\s*({_LIT})\s*\)"
)
_ARG_LIT = re.compile(rf"^\s*{_LIT}\s*$")


def expectations(path: str, source: str) -> list[Expectation]:
    text = mask(source, strings=False)
    lines = Lines(source)
    out = []
    for m in _EXPECT_CALL.finditer(text):
        name = m.group(1).rsplit(".", 1)[-1]
        raw_args = [a for a in m.group(2).split(",") if a.strip()]
        args: tuple[object, ...] | None = tuple(_js_value(a) for a in raw_args)
        if not all(_ARG_LIT.match(a) for a in raw_args):
            args = None
        out.append(Expectation(name, args, _js_value(m.group(3)), path, lines.line(m.start())))
    return out


_CONST_FUNCS = (
    re.compile(rf"function\s+([\w$]+)\s*\(([^)]*)\)[^{{]*\{{\s*return\s+({_LIT})\s*;?\s*\}}"),
    re.compile(
        rf"(?:const|let|var)\s+([\w$]+)\s*=\s*(?:async\s*)?\(([^)]*)\)\s*(?::[^=]+)?=>"
        rf"\s*(?:\{{\s*return\s+({_LIT})\s*;?\s*\}}|({_LIT})\s*[;\n])"
    ),
)


def constant_functions(source: str) -> list[tuple[str, bool, object, int]]:
    """Functions whose whole body returns one literal: (name, has params, value, line)."""
    text = mask(source, strings=False)
    lines = Lines(source)
    out = []
    for pattern in _CONST_FUNCS:
        for m in pattern.finditer(text):
            lit = m.group(3) if m.group(3) is not None else m.group(4)
            out.append(
                (m.group(1), bool(m.group(2).strip()), _js_value(lit), lines.line(m.start()))
            )
    return out


_NOT_IMPLEMENTED = re.compile(
    r"throw\s+new\s+\w*Error\(\s*['\"`][^'\"`]*not\s+(?:yet\s+)?implemented", re.IGNORECASE
)


def not_implemented(source: str) -> list[int]:
    text = mask(source, strings=False)
    lines = Lines(source)
    return [lines.line(m.start()) for m in _NOT_IMPLEMENTED.finditer(text)]
