"""Test quality across versions: every test that existed at the base, compared with the
task's commit. A test deleted, renamed without its assertions, or weakened (fewer
assertions, a lost error case) is a finding; one moved into another test that now covers
what it did is not. Pure; ``testquality`` calls ``compare_versions`` with the
``TestVersion``s of both sides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from loop_orchestrator.verify import coverage
from loop_orchestrator.verify.models import Finding, blocking, warning

NEVER_WEAKEN = "Never weaken, skip or delete a test to pass a check."

Lang = Literal["python", "js"]


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

    @cached_property
    def evidence(self) -> coverage.Evidence:
        return self.collect()


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
    """Why the behaviour ``old`` checked is still checked, or None (issue 14).

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


def compare_versions(
    base: dict[tuple[str, str], TestVersion],
    head: dict[tuple[str, str], TestVersion],
    removed: set[str] | None = None,
) -> list[Finding]:
    """Deleted, renamed, moved and weakened tests.

    A deleted test blocks unless what it checked is visibly still checked (its assertions
    moved into a test this change added or changed, or the change removed the code it
    called): then it is a warning for the auditor and the human (issue 14). The same for
    fewer assertions: a test turned into a parametrized table, or whose removed
    assertions reappear in another changed test, is a warning.
    """
    removed = removed or set()
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
                findings.append(
                    blocking(
                        f"test {old.qualname} ({old.path}:{old.lineno} at the base) was deleted "
                        "or renamed and changed; the behaviour it checked is no longer checked.",
                        "tests.deleted",
                        old.path,
                        None,
                        fix=f"Restore the test. {NEVER_WEAKEN}",
                    )
                )
                continue
        if now.assertions < old.assertions:
            why = None
            if now.evidence.data_driven and not old.evidence.data_driven and now.assertions:
                why = "it now takes its cases from a table (parametrize or a loop)"
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
