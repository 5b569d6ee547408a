"""Test quality across versions: every test that existed at the base, compared with the
task's commit. A test deleted, renamed without its assertions, or weakened (fewer
assertions, a lost error case) is a finding; one moved into another test that now covers
what it did is not. Pure; ``testquality`` calls ``compare_versions``.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from loop_orchestrator import pyast
from loop_orchestrator.verify import coverage, pytests
from loop_orchestrator.verify.models import Finding, blocking, warning

Lang = Literal["python", "js"]

NEVER_WEAKEN = "Never weaken, skip or delete a test to pass a check."


@dataclass
class TestVersion:
    """What comparing needs from a Python or JS test."""

    path: str
    qualname: str
    name: str
    lineno: int
    end_lineno: int
    assertions: int
    fingerprint: str
    language: Lang
    #: computes what it checks, when a deleted or shrunk test needs it (most never do)
    collect: Callable[[], coverage.Evidence] = field(repr=False, compare=False)
    #: a mixin's test, run (and reported) only under its subclasses' names
    inherited: bool = False
    #: lines outside its body that make its cases (parametrize rows, the tables it reads)
    case_lines: frozenset[int] = frozenset()
    #: its function (Python), to tell what it exercised once deleted
    node: ast.FunctionDef | ast.AsyncFunctionDef | None = field(
        default=None, repr=False, compare=False
    )

    @cached_property
    def evidence(self) -> coverage.Evidence:
        return self.collect()


def _tree(source: str | None) -> ast.Module | None:
    if not source:
        return None
    try:
        return pyast.parse(source)
    except (SyntaxError, ValueError):
        return None


def _code_facts(tree: ast.Module | None) -> set[str]:
    """What a code module offers a test, as tokens a test's can meet: the names it defines
    (functions, classes, module and class attributes), each function's parameters as
    ``func(param=)``, and its distinctive literals (``'strict'``, ``1024``)."""
    if tree is None:
        return set()
    out: set[str] = set()
    bodies = [tree.body]
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(n.name)
            if isinstance(n, ast.ClassDef):
                bodies.append(n.body)
            else:
                args = n.args
                for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                    out.add(f"{n.name}({a.arg}=)")
        elif isinstance(n, ast.Constant) and not isinstance(n.value, bool):
            out |= coverage.distinctive(frozenset({repr(n.value)}))
    # module and class attributes (a function's locals are nothing a test can use)
    for body in bodies:
        for s in body:
            targets = (
                s.targets
                if isinstance(s, ast.Assign)
                else [s.target]
                if isinstance(s, ast.AnnAssign)
                else []
            )
            out |= {t.id for t in targets if isinstance(t, ast.Name)}
    return out


def removed_code(pairs: list[tuple[str | None, str | None]]) -> set[str]:
    """What the change removes from the code (Python modules, ``(old, new)`` texts): the
    facts of ``_code_facts`` at the base that no changed module has at the commit."""
    old: set[str] = set()
    new: set[str] = set()
    for before, after in pairs:
        old |= _code_facts(_tree(before))
        new |= _code_facts(_tree(after))
    return old - new


def exercised(fn: ast.AST) -> set[str]:
    """What a test exercises, as tokens ``removed_code`` can meet: the names it uses, the
    keywords it passes (``parse(text=)``) and its literals."""
    out: set[str] = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.Call):
            name = pytests.dotted(n.func).rsplit(".", 1)[-1]
            out |= {f"{name}({k.arg}=)" for k in n.keywords if k.arg}
        elif isinstance(n, ast.Constant) and not isinstance(n.value, bool):
            out.add(repr(n.value))
    return out


def _changed(
    base: dict[tuple[str, str], TestVersion], head: dict[tuple[str, str], TestVersion]
) -> list[tuple[TestVersion, coverage.Evidence | None]]:
    """Tests of the commit that are new or whose body changed, with their base evidence."""
    out = []
    for key, t in head.items():
        old = base.get(key)
        if old is None or old.fingerprint != t.fingerprint:
            out.append((t, old.evidence if old else None))
    return out


def _moved_into(
    old: TestVersion,
    changed: list[tuple[TestVersion, coverage.Evidence | None]],
    removed: set[str],
    base: dict[tuple[str, str], TestVersion],
) -> str | None:
    """Why the behaviour ``old`` checked is still checked, or None.

    Evidence is looked for in the assertions this change added to a new or changed test
    (what that test asserted at the base proves nothing new): every one of ``old``'s
    assertions, with its local names resolved; an assertion on the code its name says it
    checked and no neighbour asserted on; or the literals that named its cases. Anything
    weaker (an added assertion that merely looks alike, the small numbers every test uses)
    is not evidence.
    """
    ev = old.evidence
    # literals only this test used at the base: where they reappear, its checks went
    others = [t for k, t in base.items() if t.path == old.path and k != (old.path, old.qualname)]
    used_elsewhere = set().union(*(t.evidence.tokens for t in others))
    # what only it asserted on among its neighbours (its class, or its module's functions)
    group = old.qualname.rpartition("::")[0]
    own = ev.subjects - set().union(
        *(t.evidence.subjects for t in others if t.qualname.rpartition("::")[0] == group)
    )
    mine = coverage.distinctive(ev.tokens)
    for t, before in changed:
        if t.language != old.language or (t.path, t.qualname) == (old.path, old.qualname):
            continue
        gained_asserted = t.evidence.asserted - (before.asserted if before else frozenset())
        if ev.specific and ev.asserted <= gained_asserted:
            return f"{t.qualname} holds every assertion it had"
        gained = t.evidence.subjects - (before.subjects if before else frozenset())
        words = coverage.name_words(old.name)
        # what its name says it checked, asserted on by it, and now asserted elsewhere
        hit = {s for s in gained & own if coverage.name_words(s) & words}
        if hit and gained_asserted:
            return (
                f"{t.qualname} gained assertions on {', '.join(sorted(hit))}, what its "
                "name says it checked"
            )
        new_tokens = t.evidence.tokens - (before.tokens if before else frozenset())
        shared = ev.tokens & new_tokens
        # every case it named is tried again, one of them its own, and most of the rest
        if (
            gained_asserted
            and mine
            and mine <= t.evidence.tokens
            and mine & new_tokens - used_elsewhere
            and len(shared) * 2 >= len(ev.tokens)
        ):
            return (
                f"{t.qualname} gained assertions using the values that named its cases "
                f"({', '.join(sorted(mine)[:4])})"
            )
    gone = ev.subjects & removed
    if gone:
        return f"the change removes or renames {', '.join(sorted(gone))}, the code it checked"
    return None


def _grounds(old: TestVersion, gone: set[str]) -> str | None:
    """What the change removes that the deleted test ``old`` exercised, in words; None when
    everything it used still exists."""
    hit = sorted(exercised(old.node) & gone) if old.node is not None else []
    if not hit:
        return None
    names = [h for h in hit if h.isidentifier()]
    params = [h.replace("=)", ")") for h in hit if h.endswith("=)")]
    values = [h for h in hit if h not in names and not h.endswith("=)")]
    parts = []
    if names:
        parts.append("the code it used: " + ", ".join(names[:5]))
    if params:
        parts.append("the parameters it passed: " + ", ".join(params[:5]))
    if values:
        parts.append("the values its cases named: " + ", ".join(values[:5]))
    return "; ".join(parts)


def _asserts(node: ast.AST) -> Counter[str]:
    return Counter(ast.dump(n) for n in ast.walk(node) if pytests.is_assertion(n))


def _exemption_removed(old: ast.AST | None, now: ast.AST | None) -> str | None:
    """Why the assertions ``now`` lacks were an exemption, or None.

    An exemption is an ``if`` of the test that checks something and leaves (``continue``,
    ``return``) before the test's other checks, which the cases it takes then skip (an
    expected-failure list: ``if name in KNOWN_BAD: assertRaises(...); continue``). Removing
    it whole hands those cases to the checks after it: nothing is checked less. Only when
    every lost assertion was inside such an ``if`` that is gone (its condition nowhere in
    the test now), and every assertion outside those ``if``s is kept; dropping only the
    assertion and keeping the ``if ...: continue`` is exempting cases, not this."""
    if old is None or now is None:
        return None
    conditions = {ast.dump(n.test) for n in ast.walk(now) if isinstance(n, ast.If)}
    removed = [
        n
        for n in pytests.walk_shallow(old)
        if isinstance(n, ast.If)
        and n.body
        and isinstance(n.body[-1], ast.Continue | ast.Return)
        and ast.dump(n.test) not in conditions
    ]
    inside = Counter[str]()
    ids: set[int] = set()
    for branch in removed:
        for stmt in branch.body:
            inside += _asserts(stmt)
            ids |= {id(n) for n in ast.walk(stmt)}
    lost = _asserts(old) - _asserts(now)
    if not inside or not lost or lost - inside:
        return None
    rest = [n for n in ast.walk(old) if pytests.is_assertion(n) and id(n) not in ids]
    # each removed exemption is followed by checks its cases now reach, all of them kept
    end = max(b.end_lineno or b.lineno for b in removed if _asserts(b))
    if not any(getattr(n, "lineno", 0) > end for n in rest):
        return None
    cond = ast.unparse(removed[0].test)
    cond = cond if len(cond) <= 60 else cond[:57] + "..."
    return (
        f"the removed ones were in `if {cond}:`, a branch that exempted its cases from the "
        "test's other checks and is removed with them: those cases now get the other checks"
    )


def compare_versions(
    base: dict[tuple[str, str], TestVersion],
    head: dict[tuple[str, str], TestVersion],
    removed: set[str] | None = None,
    gone: set[str] | None = None,
) -> list[Finding]:
    """Deleted, renamed, moved and weakened tests.

    A deleted test blocks unless what it checked is visibly still checked (its assertions
    moved into a test this change added or changed, or the change removed the code it
    called): then it is a warning for the auditor and the human. The same for
    fewer assertions: a test turned into a parametrized table, or whose removed
    assertions reappear in another changed test, is a warning.
    """
    removed = removed or set()
    gone = gone or set()
    findings: list[Finding] = []
    changed = _changed(base, head)
    new_heads = [t for key, t in head.items() if key not in base]
    for key, old in sorted(base.items()):
        now = head.get(key)
        if now is None:
            moved = [
                t
                for t in new_heads
                if t.language == old.language
                and (t.qualname == old.qualname or t.name == old.name)
                and t.path != old.path
            ]
            if moved:
                now = max(moved, key=lambda t: t.assertions)
            else:
                twins = [
                    t
                    for t in new_heads
                    if t.language == old.language and t.fingerprint == old.fingerprint
                ]
                if twins:
                    findings.append(
                        warning(
                            f"test {old.qualname} ({old.path}:{old.lineno} at the base) was "
                            f"renamed to {twins[0].qualname} with the same body.",
                            "tests.renamed",
                            twins[0].path,
                            twins[0].lineno,
                            fix="Keep the original name unless the rename is part of the task.",
                        )
                    )
                    continue
                why = _moved_into(old, changed, removed, base)
                if why:
                    findings.append(
                        warning(
                            f"test {old.qualname} ({old.path}:{old.lineno} at the base) was "
                            f"deleted; what it checked looks still checked: {why}. Not proven: "
                            "the auditor and the reviewer judge it.",
                            "tests.deleted",
                            old.path,
                            None,
                            fix="Make sure every behaviour it checked is still asserted.",
                        )
                    )
                    continue
                grounds = _grounds(old, gone)
                deleted = blocking(
                    f"test {old.qualname} ({old.path}:{old.lineno} at the base) was deleted "
                    "or renamed and changed; the behaviour it checked is no longer checked.",
                    "tests.deleted",
                    old.path,
                    None,
                    fix=f"Restore the test. {NEVER_WEAKEN}",
                )
                if grounds:
                    deleted = deleted.model_copy(
                        update={
                            "grounds": f"the change removes {grounds}",
                            "fix": f"Restore the test, unless the task removes the behaviour "
                            f"it checked (the change removes {grounds}): then dispute this "
                            "finding saying so.",
                        }
                    )
                findings.append(deleted)
                continue
        if now.assertions < old.assertions:
            why = None
            if now.evidence.data_driven and not old.evidence.data_driven and now.assertions:
                why = "it now takes its cases from a table (parametrize or a loop)"
            elif exemption := _exemption_removed(old.node, now.node):
                why = exemption
            else:
                lost = old.evidence.asserted - now.evidence.asserted
                elsewhere = (
                    set().union(
                        *(
                            t.evidence.asserted - (before.asserted if before else frozenset())
                            for t, before in changed
                            if t is not now
                        )
                    )
                    if changed
                    else set()
                )
                if lost and lost <= old.evidence.specific and lost <= elsewhere:
                    why = "the removed assertions appear in other tests this change touched"
            if why:
                findings.append(
                    warning(
                        f"test {old.qualname} has {now.assertions} assertion(s), "
                        f"{old.assertions} at the base, but {why}. Not proven: the auditor and "
                        "the reviewer judge it.",
                        "tests.fewer-assertions",
                        now.path,
                        now.lineno,
                        fix="Make sure every case the removed assertions checked is still checked.",
                    )
                )
                continue
            findings.append(
                blocking(
                    f"test {old.qualname} has {now.assertions} assertion(s), {old.assertions} at "
                    "the base: checks were removed.",
                    "tests.fewer-assertions",
                    now.path,
                    now.lineno,
                    fix=f"Restore the removed assertions. {NEVER_WEAKEN}",
                )
            )
    return findings
