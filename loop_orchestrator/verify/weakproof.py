"""When a weak test blocks: the runs' evidence that it does not check what the change does.

A changed or new test whose every check is weak (``weakchecks``: ``is not None``,
``isinstance``, truthiness, ``raises(Exception)``...) is a warning alone: a test of a
function that returns nothing may honestly check little. ``tests.weak-assertions`` becomes
blocking when the runs agree that the test does not depend on the change:

- **at the parent it is not red by a check.** It passes there, or it fails only because a
  name the change adds does not exist yet: an ImportError, an AttributeError or NameError
  of that name, a TypeError for a keyword argument the change adds, or a collection error
  of its module for one of those. Such an error proves the name is new, not that the test
  checks its behaviour: the check itself never ran. A failed assertion, or another
  exception the parent's code raised (a crash the change fixes), is red.
- **a mutant that changes a value survived.** A mutant of a changed line the tests execute
  that changes an operator, a constant, a condition or the value returned (not one that
  removes a statement, which is more often equivalent) passed every test of the task, this
  one too: a wrong value passes its checks.
- **no check of the task's tests was ever seen failing.** Every new or changed test of the
  task is weak; at the parent none fails on a check and this one stops on an exception
  the parent's code raises (a crash the change fixes); and every mutant the tests kill
  stops them the same way, by an exception or a hang, none on a failed check (nor in a way
  not known: ``Result.failed_by``). The weak checks never told a wrong result from a right
  one: the test notices that the code crashes, not what it returns. One strong test in the
  task, or one check failing anywhere, and this does not hold.
- **none of its checks can fail**: each is a weak check of a value of a built-in type the
  code cannot fail to give (``list(it) is not None``, ``isinstance(len(w), int)``,
  ``len(x) >= 0``): a test that only shows the code runs without raising, like a test
  without assertions (which blocks as ``tests.no-assertion``). Read from the source alone.
- for every weak test of the task, as before: the task's tests pass at the parent
  (``redgreen.not-red``) or the mutants' own findings (none or few killed).

A heuristic: the finding stays disputable, and its message names the evidence (the
parent's error, the surviving mutant) next to the weak checks and what to compare instead.

Pure: the findings, the red run's JUnit cases, the mutants' outcomes and the source texts
in, the findings out.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from loop_orchestrator import pyast
from loop_orchestrator.verify import classify, junit
from loop_orchestrator.verify.models import Finding, Severity
from loop_orchestrator.verify.mutants import FEW_KILLED, KILLED, SURVIVE, Result
from loop_orchestrator.verify.testquality import FileChange, TestRef, WeakTest

#: produced by the test-quality check: a changed or new test whose every check is weak
WEAK_ASSERTIONS: Final = "tests.weak-assertions"
#: findings that show the task's tests as a whole do not depend on its change
_UNPROVEN = {
    "redgreen.not-red": "the task's tests also pass at the parent, without the change",
    SURVIVE: "mutants of the change survive the task's tests",
    FEW_KILLED: "mutants of the change survive the task's tests",
}
#: mutant kinds that change a value (``mutants.HINTS``); "remove" is often equivalent
VALUE_KINDS = frozenset({"compare", "arith", "bool", "const", "negate", "return"})
#: surviving mutants named in one finding
_SHOWN = 3

ParentKind = Literal["passed", "skipped", "check", "raised", "missing"]

#: errors that name what is missing; the name is group 1
_MISSING = (
    re.compile(r"cannot import name '(\w+)'"),
    re.compile(r"has no attribute '(\w+)'"),
    re.compile(r"name '(\w+)' is not defined"),
    re.compile(r"unexpected keyword argument '(\w+)'"),
    # a call with the arguments of a signature the change gives the function
    re.compile(r"(\w+)\(\) (?:takes|missing|got)\b"),
)
_TEMP_PATH = re.compile(r" \(/[^)]*\)")
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError"})
_NAME_ERRORS = frozenset({"AttributeError", "NameError", "UnboundLocalError", "TypeError"})


@dataclass(frozen=True)
class ParentResult:
    """How one run of a test at the parent ended, by kind of failure."""

    kind: ParentKind
    detail: str = ""  # e.g. "AttributeError: module 'm' has no attribute 'f'"


@dataclass(frozen=True)
class WeakProof:
    """What the runs showed, for ``escalate``."""

    weak: Sequence[WeakTest] = ()
    #: the JUnit cases of the red run (the task's tests at the parent); None: it did not
    #: run or did not complete
    parent: Sequence[junit.Case] | None = None
    runs_as: Mapping[tuple[str, str], Sequence[TestRef]] = field(default_factory=dict)
    mutants: Sequence[Result] = ()
    #: names the change defines that the parent does not have (``added_names``)
    added: frozenset[str] = frozenset()
    #: the task's new and changed Python tests (all of them, weak or not); empty: not known
    tests: Sequence[TestRef] = ()


def _detail(case: junit.Case) -> str:
    """The error as pytest shows it: the message, or for a collection error ("collection
    failure") the first ``E`` line of the report that names the exception; without the
    checkout's temporary path."""
    kind = case.exception_type
    lines = (case.message or case.text).strip().splitlines()
    if kind and kind not in case.message:
        lines = [ln[1:] for ln in case.text.splitlines() if ln.startswith("E ") and kind in ln]
    first = _TEMP_PATH.sub("", lines[0].strip()) if lines else case.outcome
    return first[:200]


def parent_result(case: junit.Case, added: frozenset[str]) -> ParentResult:
    """The kind of ``case``'s outcome at the parent: a check failed ("check"), the code
    raised ("raised"), or it failed only because a name is missing ("missing")."""
    if case.outcome in ("passed", "skipped"):
        return ParentResult(case.outcome)
    if case.is_assertion_failure:
        return ParentResult("check", _detail(case))
    kind = case.exception_type
    text = f"{case.message}\n{case.text}"
    if kind in _IMPORT_ERRORS:
        # the test never ran: whatever it checks, the import stopped it first
        return ParentResult("missing", _detail(case))
    names = {m.group(1) for rx in _MISSING for m in rx.finditer(text)}
    if (kind in _NAME_ERRORS or kind is None) and names & added:
        return ParentResult("missing", _detail(case))
    return ParentResult("raised", _detail(case))


def _module_errors(cases: Sequence[junit.Case], path: str) -> list[junit.Case]:
    """Collection errors of the test module ``path`` (pytest names the module alone)."""
    dotted = path[:-3].replace("/", ".") if path.endswith(".py") else path
    return [
        c
        for c in cases
        if c.outcome == "error"
        and not c.classname
        and c.name
        and (dotted == c.name or dotted.endswith("." + c.name))
    ]


def not_red(
    ref: TestRef,
    cases: Sequence[junit.Case],
    added: frozenset[str],
    also: Sequence[TestRef] = (),
) -> str | None:
    """Why ``ref`` is not shown red at the parent by ``cases`` (the red run's report), or
    None when it is red (a check failed, or the parent's code raised) or nothing is known."""
    hits = junit.results_for(cases, ref, also) or _module_errors(cases, ref.path)
    results = [parent_result(c, added) for c in hits]
    ran = [r for r in results if r.kind != "skipped"]
    if not ran or any(r.kind in ("check", "raised") for r in ran):
        return None
    missing = next((r for r in ran if r.kind == "missing"), None)
    if missing is None:
        return "the test also passes at the parent, without the change"
    return (
        f"at the parent the test fails only because a name the change adds is missing "
        f"({missing.detail}), which shows the name is new, not that the test checks what "
        "it does"
    )


def raised_only(
    ref: TestRef,
    cases: Sequence[junit.Case],
    added: frozenset[str],
    also: Sequence[TestRef] = (),
) -> ParentResult | None:
    """The parent's first exception when ``ref`` is red there only because the code raised
    (no check of it failed, no row passed it by a check); None otherwise."""
    hits = junit.results_for(cases, ref, also) or _module_errors(cases, ref.path)
    ran = [r for r in (parent_result(c, added) for c in hits) if r.kind != "skipped"]
    if any(r.kind == "check" for r in ran):
        return None
    return next((r for r in ran if r.kind == "raised"), None)


def crashes_only(results: Iterable[Result]) -> bool:
    """Whether the tests killed mutants, and every one of them by an exception the mutated
    code raised or by a hang, none on a failed check (nor in a way not known)."""
    killed = [r for r in results if r.outcome in KILLED]
    return bool(killed) and all(r.outcome == "timeout" or r.failed_by == "raised" for r in killed)


def _never_checked(proof: WeakProof, test: WeakTest) -> str | None:
    """Why no check of the task's tests was ever seen failing, when every new or changed
    test of the task is weak: at the parent and under every mutant killed, the runs stopped
    on exceptions (or hangs), so the weak checks themselves never told a wrong result from
    a right one; None when one of them did, or when it is not known."""
    if proof.parent is None or not proof.tests or not crashes_only(proof.mutants):
        return None
    weak = {(w.ref.path, w.ref.qualname) for w in proof.weak}
    if any((t.path, t.qualname) not in weak for t in proof.tests):
        return None  # a strong test of the task may be what kills them
    raised = None
    for t in proof.tests:
        also = proof.runs_as.get((t.path, t.qualname), ())
        hits = junit.results_for(proof.parent, t, also) or _module_errors(proof.parent, t.path)
        if any(parent_result(c, proof.added).kind == "check" for c in hits):
            return None
        if t.path == test.ref.path and t.qualname == test.ref.qualname:
            raised = raised_only(t, proof.parent, proof.added, also)
    if raised is None:
        return None
    return (
        f"no check of the task's tests was seen failing: at the parent this test stops on an "
        f"exception the code raises ({raised.detail}), and every mutant the tests kill stops "
        "them the same way (an exception or a hang), never on a failed check; the test "
        "notices that the code crashes, not what it returns"
    )


def value_survivors(results: Iterable[Result]) -> list[Result]:
    """Mutants that change a value and that every test of the task passed."""
    return [r for r in results if r.outcome == "survived" and r.mutant.kind in VALUE_KINDS]


def _cannot_fail(test: WeakTest) -> str:
    shown = ", ".join(f"`{w.text}`" for w in test.checks[:_SHOWN])
    return (
        f"none of its checks can fail ({shown}: each holds for every value it can be given), "
        "so the test shows only that the code runs without raising, as one without "
        "assertions would"
    )


def _survived(survivors: Sequence[Result]) -> str:
    shown = "; ".join(
        f"`{r.mutant.path}:{r.mutant.line}`: `{r.mutant.before}` → `{r.mutant.after}`"
        for r in survivors[:_SHOWN]
    )
    more = f" and {len(survivors) - _SHOWN} more (mutants.json)" if len(survivors) > _SHOWN else ""
    return (
        f"a mutant that changes a value on a changed line the tests run survived them "
        f"({shown}{more}): the test passes with a wrong result"
    )


def escalate(findings: Sequence[Finding], proof: WeakProof | None = None) -> list[Finding]:
    """Weak-assertion findings made blocking where the runs agree that the test does not
    check the change (module docstring); every other finding unchanged."""
    proof = proof or WeakProof()
    task_wide = list(dict.fromkeys(_UNPROVEN[f.check] for f in findings if f.check in _UNPROVEN))
    by_place = {(w.ref.path, w.line): w for w in proof.weak}
    survivors = value_survivors(proof.mutants)
    out: list[Finding] = []
    for f in findings:
        if f.check != WEAK_ASSERTIONS or f.blocking:
            out.append(f)
            continue
        reasons = list(task_wide)
        test = by_place.get((f.path or "", f.line or 0))
        if test is not None and test.ref.language == "python":
            if all(w.cannot_fail for w in test.checks):
                reasons.append(_cannot_fail(test))
            if proof.parent is not None:
                also = proof.runs_as.get((test.ref.path, test.ref.qualname), ())
                why = not_red(test.ref, proof.parent, proof.added, also)
                if why and "redgreen.not-red" not in {g.check for g in findings}:
                    reasons.append(why)
            if survivors:
                reasons.append(_survived(survivors))
            elif not reasons and (crashed := _never_checked(proof, test)):
                reasons.append(crashed)
        if not reasons:
            out.append(f)
            continue
        out.append(
            f.model_copy(
                update={
                    "severity": Severity.BLOCKING,
                    "message": f"{f.message} This blocks because {'; and '.join(reasons)}.",
                }
            )
        )
    return out


def _signatures(tree: ast.AST) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            params = [*a.posonlyargs, *a.args, a.vararg, *a.kwonlyargs, a.kwarg]
            out[node.name] = tuple(p.arg if p else "" for p in params)
    return out


def _defined(tree: ast.AST) -> set[str]:
    """Names a module defines: functions, classes, their parameters, assigned names and
    attributes, imported names."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        if isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.alias):
            out.add((node.asname or node.name).split(".")[0])
    return out


def added_names(files: Sequence[FileChange]) -> frozenset[str]:
    """Names the change's Python source (not its tests) defines that the parent's does not,
    and the functions whose parameters it changes."""
    new: set[str] = set()
    old: set[str] = set()
    resigned: set[str] = set()
    for f in files:
        if not classify.is_python(f.path) or classify.is_test_code(f.path):
            continue
        trees = []
        for text in (f.old, f.new):
            try:
                trees.append(pyast.parse(text, f.path) if text is not None else None)
            except (SyntaxError, ValueError):
                trees.append(None)
        before, after = trees
        if before is not None:
            old |= _defined(before)
        if after is not None:
            new |= _defined(after)
        if before is not None and after is not None:
            was, now = _signatures(before), _signatures(after)
            resigned |= {name for name, params in now.items() if was.get(name, params) != params}
    return frozenset((new - old) | resigned)
