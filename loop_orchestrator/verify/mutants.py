"""Mutants of the source lines a task changed, and what their survival says about its tests.

A test that passes whether or not the code is right proves nothing, whatever it looks like:
``assert f(2) is not None``, a comparison of types, a tautology hidden in a helper. The
checks that read tests can only recognise the kinds of weak test they were written for;
a mutant cannot be fooled by how a test is written. Each mutant changes one thing on a line
the task changed (``<`` into ``<=``, ``+`` into ``-``, ``and`` into ``or``, a constant, a
negated condition, ``return X`` into ``return None``, a statement into ``pass``); the
task's tests, run against it, should fail. A mutant they pass *survived*: nothing in the
tests depends on what it changed.

Why a module of our own rather than mutmut, cosmic-ray or mutatest: they mutate a whole
project by rewriting its files in place and drive their own runner, session database and
configuration; what verification needs is the few lines one commit changed, mutated in a
throw-away copy of a clean checkout, under a time bound, run with the plan's own pytest and
the checks' locked-down environment (``checkout.check_env``). The operators are a handful
of ``ast`` rewrites; the run is ``verify.mutation``.

Mutants are made by replacing the source text of one node (``ast`` offsets), not by
unparsing the module: comments, formatting and line numbers of everything else are kept
(a replacement spanning several lines is padded with the same number of newlines).

Pure functions; no I/O. ``judge`` decides the findings from the outcomes.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from loop_orchestrator import pyast
from loop_orchestrator.verify.junit import FailedBy
from loop_orchestrator.verify.models import Finding, blocking, warning

Outcome = Literal["killed", "timeout", "survived", "not-run", "not-executed"]

#: outcomes that count as the tests noticing the mutant (a hang past its timeout is one)
KILLED = frozenset({"killed", "timeout"})
#: "few killed": fewer than this share of the mutants the tests execute (and ran)
FEW_KILLED_RATIO = 1 / 3
#: ... among at least this many such mutants (one survivor of two says little)
FEW_KILLED_MIN = 3
#: survivors listed in a finding's message (all of them are in mutants.json)
MAX_LISTED = 10

#: finding ids
SURVIVE: Final = "tests.mutants-survive"
FEW_KILLED: Final = "tests.mutants-few-killed"
NOT_RUN: Final = "tests.mutants-not-run"
UNEXECUTED: Final = "tests.mutants-unexecuted"

_COMPARE: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_ARITH: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
}
_SYMBOL: dict[type[ast.AST], str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.And: "and",
    ast.Or: "or",
}
#: longest code shown in a message
_SHOWN = 60
#: ``return X`` becomes ``return`` this applied to X: for the built-in value types another
#: value of X's type, the empty one (0, "", [], False...) or, when X is already empty, a
#: non-empty one (1, "x", [None]...); None for any other type. A plain ``return None`` would
#: be killed by exactly the weak tests this check is for (``is not None``, ``isinstance``);
#: a different value of the right type survives them and fails every test of the value.
_OTHER = (
    "{int: 1, float: 1.0, complex: 1j, str: 'x', bytes: b'x', bool: True, list: [None], "
    "dict: {None: None}, tuple: (None,), set: {None}, frozenset: frozenset({None})}"
)
NEUTRAL = (
    f"(lambda v, t=({_OTHER}): (type(v)() if v != type(v)() else t[type(v)]) "
    "if type(v) in t else None)"
)
#: simple statements a mutant may replace by ``pass``
_REMOVABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Raise, ast.Delete)

#: what a test should do to kill a surviving mutant of each kind
HINTS = {
    "compare": "a case at the boundary, where the two comparisons disagree",
    "arith": "an expected value that depends on this arithmetic",
    "bool": "a case where exactly one side of the condition holds",
    "const": "an expected value that depends on this constant",
    "negate": "a case for each branch of this condition, with its own expected result",
    "return": "the value returned here, compared with the exact expected value (not only "
    "its type or that it is not None)",
    "remove": "the effect of this statement (its result, state change or exception)",
}


@dataclass(frozen=True)
class Mutant:
    """One changed copy of one file."""

    path: str
    line: int  # first line of the node changed
    end_line: int
    kind: str  # a key of HINTS
    before: str  # the code as written, e.g. "<"
    after: str  # what the mutant has instead, e.g. "<="
    source: str  # the whole mutated file

    @property
    def ident(self) -> str:
        return f"{self.path}:{self.line}:{self.kind}:{self.before}->{self.after}"

    def describe(self) -> str:
        return f"{self.path}:{self.line}: `{self.before}` → `{self.after}`"


@dataclass(frozen=True)
class Result:
    mutant: Mutant
    outcome: Outcome
    seconds: float = 0.0
    #: how the tests failed against a killed mutant (``junit.failed_by``): on a check, only
    #: by exceptions the code raised, or not known ("")
    failed_by: FailedBy = ""


# -- making mutants ----------------------------------------------------------------------


def _span(node: ast.AST) -> tuple[int, int, int, int]:
    """(first line, start byte, last line, end byte) of ``node``, lines counted from 0."""
    line: int = getattr(node, "lineno", 1)
    end_line: int = getattr(node, "end_lineno", None) or line
    start: int = getattr(node, "col_offset", 0)
    end: int | None = getattr(node, "end_col_offset", None)
    return line - 1, start, end_line - 1, start if end is None else end


class _Text:
    """The file as UTF-8 lines, for replacing the text of a node (ast offsets are bytes)."""

    def __init__(self, source: str) -> None:
        self.lines = source.encode("utf-8").splitlines(keepends=True)

    def replace(self, node: ast.AST, new: str) -> str | None:
        first, start, last, end = _span(node)
        if last >= len(self.lines):
            return None
        head = self.lines[first][:start]
        tail = self.lines[last][end:]
        # keep every later line where it was
        padding = "\n" * max(0, last - first - new.count("\n"))
        if padding:
            new = new + padding if new == "pass" else f"({new}{padding})"
        body = b"".join(
            [*self.lines[:first], head, new.encode("utf-8"), tail, *self.lines[last + 1 :]]
        )
        return body.decode("utf-8")

    def raw(self, node: ast.AST) -> str:
        """The exact source text of ``node``."""
        first, start, last, end = _span(node)
        data: bytes
        if first == last:
            data = self.lines[first][start:end]
        else:
            data = b"".join(
                [self.lines[first][start:], *self.lines[first + 1 : last], self.lines[last][:end]]
            )
        return data.decode("utf-8", "replace")

    def segment(self, node: ast.AST) -> str:
        """``node``'s text on one line, shortened, for messages."""
        text = " ".join(self.raw(node).split())
        return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _skipped(tree: ast.Module) -> set[int]:
    """Ids of nodes never mutated: docstrings, annotations, f-string parts."""
    out: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            out |= {id(n) for n in ast.walk(body[0])}
        annotations: list[ast.AST | None] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            annotations.append(node.returns)
            args = node.args
            annotations += [
                a.annotation
                for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
                if a is not None
            ]
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        elif isinstance(node, ast.JoinedStr):
            annotations.append(node)
        for ann in annotations:
            if ann is not None:
                out |= {id(n) for n in ast.walk(ann)}
    return out


def _expr_mutants(node: ast.AST, text: _Text) -> Iterator[tuple[str, str, str, ast.AST, str]]:
    """(kind, before, after, node replaced, new text of that node) for one expression."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            swapped = _COMPARE.get(type(op))
            if swapped is None:
                continue
            clone = copy.copy(node)
            clone.ops = [*node.ops[:i], swapped(), *node.ops[i + 1 :]]
            yield "compare", _SYMBOL[type(op)], _SYMBOL[swapped], node, ast.unparse(clone)
    elif isinstance(node, ast.BinOp):
        arith = _ARITH.get(type(node.op))
        if arith is not None:
            binop = copy.copy(node)
            binop.op = arith()
            yield "arith", _SYMBOL[type(node.op)], _SYMBOL[arith], node, ast.unparse(binop)
    elif isinstance(node, ast.BoolOp):
        other: ast.boolop = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        boolop = copy.copy(node)
        boolop.op = other
        yield "bool", _SYMBOL[type(node.op)], _SYMBOL[type(other)], node, ast.unparse(boolop)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield (
            "negate",
            text.segment(node),
            text.segment(node.operand),
            node,
            (f"({text.raw(node.operand)})"),
        )
    elif isinstance(node, ast.Constant):
        value = node.value
        new: object
        if isinstance(value, bool):
            new = not value
        elif isinstance(value, int | float):
            new = 1 if value == 0 else value + 1
        elif isinstance(value, str) and value:
            new = ""
        elif isinstance(value, bytes) and value:
            new = b""
        else:
            return
        yield "const", text.segment(node), repr(new), node, repr(new)


def _condition(stmt: ast.AST) -> ast.expr | None:
    if isinstance(stmt, ast.If | ast.While | ast.IfExp):
        return stmt.test
    return None


def mutants_of(path: str, source: str, lines: Iterable[int]) -> list[Mutant]:
    """Every mutant of ``source`` whose changed node starts on one of ``lines``, in source
    order; mutants that would not parse or change nothing are left out."""
    wanted = set(lines)
    if not wanted:
        return []
    try:
        tree = pyast.parse(source, filename=path)
    except (SyntaxError, ValueError):
        return []
    text = _Text(source)
    skipped = _skipped(tree)
    raw: list[tuple[int, int, str, str, str, ast.AST, str]] = []

    def add(kind: str, before: str, after: str, node: ast.AST, new: str) -> None:
        first, start, _, _ = _span(node)
        raw.append((first + 1, start, kind, before, after, node, new))

    for node in ast.walk(tree):
        if isinstance(node, ast.comprehension):
            for cond in node.ifs:
                if cond.lineno in wanted and id(cond) not in skipped:
                    seg = text.segment(cond)
                    add("negate", seg, f"not ({seg})", cond, f"(not ({text.raw(cond)}))")
        if id(node) in skipped or getattr(node, "lineno", None) not in wanted:
            continue
        for mutation in _expr_mutants(node, text):
            add(*mutation)
        test = _condition(node)
        if test is not None and not (
            isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        ):
            seg = text.segment(test)
            add("negate", seg, f"not ({seg})", test, f"(not ({text.raw(test)}))")
        if isinstance(node, ast.AugAssign) and type(node.op) in _ARITH:
            swapped = _ARITH[type(node.op)]
            clone = copy.copy(node)
            clone.op = swapped()
            before, after = _SYMBOL[type(node.op)] + "=", _SYMBOL[swapped] + "="
            add("arith", before, after, node, ast.unparse(clone))
        if (
            isinstance(node, ast.Return)
            and node.value is not None
            and not (isinstance(node.value, ast.Constant) and node.value.value is None)
        ):
            add(
                "return",
                f"return {text.segment(node.value)}",
                "return <another value of its type: 0, '', [] or 1, 'x'...; else None>",
                node.value,
                f"{NEUTRAL}({text.raw(node.value)})",
            )
        if isinstance(node, _REMOVABLE) and not (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        ):
            add("remove", text.segment(node), "pass", node, "pass")
    out: list[Mutant] = []
    seen: set[str] = set()
    for line, _col, kind, before, after, node, new in sorted(raw, key=lambda r: r[:5]):
        mutated = text.replace(node, new)
        if mutated is None or mutated == source or mutated in seen:
            continue
        try:
            pyast.parse(mutated, filename=path)
        except (SyntaxError, ValueError):
            continue
        seen.add(mutated)
        end = _span(node)[2] + 1
        out.append(Mutant(path, line, end, kind, before, after, mutated))
    return out


def select(candidates: Sequence[Mutant], limit: int) -> list[Mutant]:
    """At most ``limit`` mutants, spread over the lines: the first mutant of every line (in
    file and line order), then the second of every line, and so on. Deterministic: the
    same candidates always give the same choice, in the same order."""
    by_line: dict[tuple[str, int], list[Mutant]] = {}
    for m in candidates:
        by_line.setdefault((m.path, m.line), []).append(m)
    keys = sorted(by_line)
    out: list[Mutant] = []
    depth = 0
    while len(out) < limit and any(len(by_line[k]) > depth for k in keys):
        for key in keys:
            if len(out) >= limit:
                break
            if len(by_line[key]) > depth:
                out.append(by_line[key][depth])
        depth += 1
    return out


def executed(mutant: Mutant, hits: set[tuple[str, int]]) -> bool:
    """Whether the tests ran any line of the node the mutant changes."""
    return any((mutant.path, n) in hits for n in range(mutant.line, mutant.end_line + 1))


# -- judging -----------------------------------------------------------------------------


def _listed(survivors: Sequence[Mutant]) -> str:
    lines = [
        f"   - `{m.path}:{m.line}`: `{m.before}` → `{m.after}`; a test should check "
        f"{HINTS[m.kind]}."
        for m in survivors[:MAX_LISTED]
    ]
    if len(survivors) > MAX_LISTED:
        lines.append(f"   - ... and {len(survivors) - MAX_LISTED} more (mutants.json)")
    return "\n".join(lines)


def judge(results: Sequence[Result], *, seconds: float) -> list[Finding]:
    """The findings from the mutants' outcomes.

    Only mutants of lines the tests execute count: a mutant of a line no test runs
    survives whatever the tests assert, which says the line is untested, not that the tests
    are weak (they are listed in mutants.json). Blocking when the tests kill none of those
    that ran; a warning when they kill fewer than a third (``FEW_KILLED_RATIO``) of at
    least ``FEW_KILLED_MIN``: equivalent mutants (a changed constant that is overwritten
    later, a removed log call) survive honest tests too, so "few" is a heuristic.
    """
    ran = [r for r in results if r.outcome in (*KILLED, "survived")]
    not_run = [r for r in results if r.outcome == "not-run"]
    unexecuted = sorted(
        {(r.mutant.path, r.mutant.line) for r in results}
        - {(r.mutant.path, r.mutant.line) for r in results if r.outcome != "not-executed"}
    )
    if not ran:
        if unexecuted and not not_run:
            shown = ", ".join(f"{p}:{n}" for p, n in unexecuted[:MAX_LISTED])
            more = (
                f" and {len(unexecuted) - MAX_LISTED} more" if len(unexecuted) > MAX_LISTED else ""
            )
            return [
                warning(
                    f"the task's new and changed tests execute none of the source lines it "
                    f"changed ({shown}{more}): they cannot show that the change works.",
                    UNEXECUTED,
                    unexecuted[0][0],
                    unexecuted[0][1],
                    fix="Add tests that call the changed code and check its results.",
                )
            ]
        if not_run:
            return [
                warning(
                    f"no mutant of the changed lines could be run within the mutation budget "
                    f"({seconds:.0f} s); the tests' strength was not checked.",
                    NOT_RUN,
                )
            ]
        return []
    killed = [r for r in ran if r.outcome in KILLED]
    survivors = [r.mutant for r in ran if r.outcome == "survived"]
    first = survivors[0] if survivors else None
    if not killed:
        return [
            blocking(
                f"the task's tests kill none of the {len(ran)} mutant(s) of the changed lines "
                "they run: each mutant changes one thing in your change, and the tests still "
                "pass, so they do not check what the change does. Surviving mutants:\n"
                + _listed(survivors),
                SURVIVE,
                first.path if first else None,
                first.line if first else None,
                fix="Make the tests compare exact results (values, exception types, state) "
                "that each change above would alter; a test that only checks `is not None`, "
                "a type or truthiness passes for every one of them.",
            )
        ]
    if len(ran) >= FEW_KILLED_MIN and len(killed) < FEW_KILLED_RATIO * len(ran):
        return [
            warning(
                f"the task's tests kill only {len(killed)} of the {len(ran)} mutant(s) of the "
                "changed lines they run. Surviving mutants:\n" + _listed(survivors),
                FEW_KILLED,
                first.path if first else None,
                first.line if first else None,
                fix="Add assertions that fail for the changes above (some may be equivalent "
                "to your code; if so, say why).",
            )
        ]
    return []
