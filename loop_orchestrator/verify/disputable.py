"""Which verification findings a session may dispute; standard library only, so
the sessions' end (`lo-orch signal`) and the supervisor judge by the same rule.

Heuristic findings (test quality, stubs) are guesses that can be wrong about honest work;
hard findings are facts and never disputable: scope, secrets, conflict markers, failed or
missing done-checks and test evidence. How a dispute is settled: ``verify.disputes``.
"""

from __future__ import annotations

import re

#: findings that are facts: never disputable
HARD_PREFIXES = ("scope.", "secrets.", "conflict-marker", "done.")
CHECK_RE = re.compile(r"^[a-z][a-z0-9-]*(?:\.[a-z0-9-]+)+\Z")
#: the longest reason kept
MAX_NOTE = 2000
#: heuristic findings whose dispute is judged on the diff before anyone hears it: accepted
#: only where the change itself shows the ground (a deleted test whose behaviour the same
#: change removes: the names, parameters or values it exercised are gone from the code)
JUDGED_ON_DIFF = frozenset({"tests.deleted"})


def is_hard(check: str) -> bool:
    return check.startswith(HARD_PREFIXES)


def problem(check: str) -> str | None:
    """Why ``check`` cannot be disputed, or None when it can."""
    if not CHECK_RE.match(check):
        return f"{check!r} is not a finding id (like tests.tautology)"
    if is_hard(check):
        return (
            f"{check} is a hard finding (scope, secrets, conflict markers, done-checks "
            "and test evidence are facts, not heuristics) and cannot be disputed; fix it"
        )
    return None
