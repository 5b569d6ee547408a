"""Disputable findings.

A heuristic finding can be wrong about honest work (a test of a class's own ``__ge__``
compares a value with itself on purpose). Sent back for it, an agent would make the code
worse to please the checker, and after three rounds the task ends blocked. So the session
may dispute a heuristic finding with a reason:

    $LO_ORCH_BIN signal impl_done --dispute tests.tautology --note "tests __ge__ reflexivity"

The supervisor does not take the agent's word for it. The disputed finding stops blocking
only for the auditor's judgement: the auditor sees the diff, the evidence and the reason,
and its verdict settles the dispute (PASS: upheld, the finding stays as a warning; FAIL:
rejected, it blocks). With no auditor, the finding is carried to Gate 2 as a warning the
person judges. Hard findings are facts, not guesses, and are never disputable: scope,
secrets, conflict markers, failed or missing done-checks and test evidence
(``loop_orchestrator.verify.disputable``, shared with `lo-orch signal`).

Some disputes are judged on the diff first (``JUDGED_ON_DIFF``): a deleted test may be
disputed only as a test of behaviour the same change removes, and that is a fact of the
diff (``Finding.grounds``: the code it used is gone). A dispute of such a finding without
grounds is refused and the finding keeps blocking, whatever the reason says.

Pure functions; the supervisor records every dispute and its outcome in the ledger and the
review file.
"""

from __future__ import annotations

from collections.abc import Sequence

from loop_orchestrator.verify.disputable import JUDGED_ON_DIFF, MAX_NOTE, is_hard, problem
from loop_orchestrator.verify.models import Dispute, Finding, Severity


def disputable(findings: Sequence[Finding]) -> list[str]:
    """The ids of the blocking findings a session may dispute, in order of appearance."""
    out: list[str] = []
    refused = {f.check for f in findings if f.blocking and _ungrounded(f)}
    for f in findings:
        if f.blocking and not is_hard(f.check) and f.check not in refused and f.check not in out:
            out.append(f.check)
    return out


def _ungrounded(f: Finding) -> bool:
    """A finding judged on the diff for which the diff shows nothing a dispute can rest on."""
    return f.check in JUDGED_ON_DIFF and f.grounds is None


def _normal(claims: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The claims as ``hold`` reads them: the first of each id, its reason stripped and cut."""
    seen: dict[str, str] = {}
    for check, note in claims:
        seen.setdefault(check, note.strip()[:MAX_NOTE])
    return list(seen.items())


def judged(disputes: Sequence[Dispute], claims: Sequence[tuple[str, str]]) -> bool:
    """Whether a verdict with ``disputes`` judged exactly these ``claims``: a verdict of the
    same commit made with other disputes (or none) cannot be reused for them, or a session
    that disputes instead of changing correct code would never have its dispute heard."""
    return [(d.check, d.note) for d in disputes] == _normal(claims)


def hold(
    findings: list[Finding], claims: Sequence[tuple[str, str]]
) -> tuple[list[Finding], list[Dispute]]:
    """Apply the session's disputes before the verdict is decided.

    Each disputed blocking heuristic finding becomes a warning carrying the session's
    reason; the returned disputes have a provisional outcome (``carried``) that ``settle``
    replaces once it is known whether the auditor judged them.
    """
    out = list(findings)
    disputes: list[Dispute] = []
    for check, note in _normal(claims):
        why = problem(check)
        if why:
            disputes.append(Dispute(check=check, note=note, outcome="refused", reason=why))
            continue
        hits = [i for i, f in enumerate(out) if f.check == check and f.blocking]
        if not hits:
            disputes.append(
                Dispute(
                    check=check,
                    note=note,
                    outcome="moot",
                    reason="no blocking finding with this id in this round",
                )
            )
            continue
        bare = [out[i] for i in hits if _ungrounded(out[i])]
        if bare:
            where = ", ".join(f.message.split(" (", 1)[0] for f in bare[:3])
            disputes.append(
                Dispute(
                    check=check,
                    note=note,
                    outcome="refused",
                    reason=f"judged on the diff: the change does not remove what {where} "
                    "exercised (the code it used still exists); restore the test",
                )
            )
            continue
        for i in hits:
            out[i] = out[i].model_copy(update={"severity": Severity.WARNING, "dispute": note})
        disputes.append(Dispute(check=check, note=note, outcome="carried"))
    return out, disputes


def settle(
    findings: list[Finding],
    disputes: list[Dispute],
    *,
    auditor_status: str,
    auditor_mode: str,
    reasons: Sequence[str],
) -> tuple[list[Finding], list[Dispute]]:
    """The disputes' outcomes once the rest of the verdict is known.

    ``auditor_status``: ``pass``/``fail`` when the auditor judged, ``skipped`` otherwise
    (other blocking findings, or the auditor is off).
    """
    held = [d for d in disputes if d.outcome == "carried"]
    if not held:
        return findings, disputes
    restore = False
    outcome: str
    if auditor_status == "pass":
        outcome, why = "upheld", "the auditor passed the task with the finding disputed"
    elif auditor_status == "fail":
        outcome, restore = "rejected", True
        why = "the auditor failed the task: " + ("; ".join(reasons[:2]) or "no reason given")
    elif auditor_mode == "off" and not any(f.blocking for f in findings):
        outcome, why = "carried", "no auditor: the person judges it at Gate 2"
    else:
        outcome, restore = "deferred", True
        why = (
            "other blocking findings stopped the auditor: the finding still blocks; "
            "dispute it again with your next impl_done if it still applies"
        )
    checks = {d.check for d in held}
    if restore:
        findings = [
            f.model_copy(update={"severity": Severity.BLOCKING})
            if f.dispute is not None and f.check in checks
            else f
            for f in findings
        ]
    settled = [
        d.model_copy(update={"outcome": outcome, "reason": why}) if d.outcome == "carried" else d
        for d in disputes
    ]
    return findings, settled
