"""Turning a failed verdict into work: the review file, the rework prompt, and routing
integration failures back to the tasks that own the failing files."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from loop_orchestrator import templating
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.plan.globs import path_matches
from loop_orchestrator.runstate.state import RunDir
from loop_orchestrator.verify import disputes
from loop_orchestrator.verify.models import Verdict

if TYPE_CHECKING:
    from loop_orchestrator.plan.model import Task

#: how many findings the rework prompt repeats inline (the review file has all of them)
PROMPT_FINDINGS = 8


def write_review(
    rundir: RunDir, task: Task, round_no: int, verdict: Verdict, *, max_rounds: int | None = None
) -> Path:
    """Render ``reviews/<task>-rN.md`` from templates/review.md.j2 and return its path."""

    path = rundir.review_path(task.id, round_no)
    text = templating.render(
        "review.md.j2",
        task=task,
        round_no=round_no,
        max_rounds=max_rounds,
        verdict=verdict,
        blocking=verdict.blocking,
        warnings=verdict.warnings,
        summary=verdict.summary(),
        evidence_dir=verdict.evidence_dir,
        evidence=verdict.evidence,
        disputable=disputes.disputable(verdict.findings),
    )
    atomic_write_text(path, text)
    return path


def rework_prompt(
    review_path: Path,
    *,
    task_id: str,
    round_no: int,
    max_rounds: int,
    verdict: Verdict | None = None,
) -> str:
    """The prompt sent to the session for rework round ``round_no`` (prompt_rework.md.j2)."""

    lines: list[str] = []
    disputable: list[str] = []
    if verdict is not None:
        disputable = disputes.disputable(verdict.findings)
        lines.append(verdict.summary())
        for f in verdict.blocking[:PROMPT_FINDINGS]:
            lines.append(f"- {f.location}: {f.message.splitlines()[0]}")
        more = len(verdict.blocking) - PROMPT_FINDINGS
        if more > 0:
            lines.append(f"- ... and {more} more in the review")
        if verdict.auditor is not None and verdict.auditor.status == "fail":
            lines += [f"- auditor: {r}" for r in verdict.auditor.reasons[:3]]
        # what became of this round's disputes: a session that does not hear "rejected"
        # or "moot" would only send the same dispute again
        lines += [
            f"- your dispute of {d.check}: {d.outcome} ({d.reason})"
            for d in verdict.disputes
            if d.outcome != "carried"
        ]
    return templating.render(
        "prompt_rework.md.j2",
        task=task_id,
        round=round_no,
        max_rounds=max_rounds,
        review=str(review_path),
        summary="\n".join(lines),
        disputable=disputable,
    )


#: how many of one task's heuristic warnings Gate 2 repeats
GATE2_WARNINGS = 5


def gate2_notes(verdicts: Mapping[str, Verdict]) -> list[str]:
    """What the person at Gate 2 must judge in the verified tasks: disputes the
    auditor did not settle (carried) or upheld, and the heuristics' warnings (a check that
    could not be sure says so instead of blocking). ``verdicts``: task -> its verdict."""
    lines: list[str] = []
    for tid, verdict in sorted(verdicts.items()):
        for d in verdict.disputes:
            if d.outcome in ("carried", "upheld"):
                lines.append(
                    f'{tid}: finding {d.check} disputed by the session ({d.outcome}): "{d.note}"'
                )
        heuristic = [f for f in verdict.warnings if f.check.startswith(("tests.", "stubs."))]
        for f in heuristic[:GATE2_WARNINGS]:
            lines.append(f"{tid}: {f.check} at {f.location}: {f.message.splitlines()[0]}")
        if len(heuristic) > GATE2_WARNINGS:
            lines.append(
                f"{tid}: ... and {len(heuristic) - GATE2_WARNINGS} more warning(s) "
                f"in {verdict.evidence_dir}/verdict.json"
            )
    return lines


_UNITTEST_FAIL = re.compile(r"^(?:FAIL|ERROR): \S+ \(([\w.]+)\)", re.M)
_PYTEST_FAIL = re.compile(r"^(?:FAILED|ERROR) ([^\s:]+)(?:::|\s|$)", re.M)
_TRACE_FILE = re.compile(r'File "([^"]+)", line \d+')
_PATH_TOKEN = re.compile(r"[\w./-]+\.[A-Za-z0-9]+")


def failing_files(output: str, files: Sequence[str]) -> list[str]:
    """Files of the tree that an integration command's output blames, most specific first:
    failing test modules (pytest ``FAILED path::test``, unittest ``FAIL: t (pkg.mod.Class)``),
    then files in tracebacks (matched by their path suffix, since the command ran in a
    temporary checkout), then any other mention of a tracked path."""
    known = set(files)
    found: list[str] = []

    def add(path: str) -> None:
        if path in known and path not in found:
            found.append(path)

    for m in _PYTEST_FAIL.finditer(output):
        add(m.group(1))
    for m in _UNITTEST_FAIL.finditer(output):
        # `pkg.test_mod.Class.test` (3.11+) or `pkg.test_mod.Class`: the longest prefix that
        # is a file of the tree is the module
        parts = m.group(1).split(".")
        for end in range(len(parts), 0, -1):
            candidate = "/".join(parts[:end]) + ".py"
            if candidate in known:
                add(candidate)
                break
    by_suffix = sorted(known, key=len, reverse=True)
    for m in _TRACE_FILE.finditer(output):
        raw = m.group(1).replace("\\", "/")
        for path in by_suffix:
            if raw == path or raw.endswith("/" + path):
                add(path)
                break
    if not found:
        for m in _PATH_TOKEN.finditer(output):
            add(m.group(0).lstrip("./"))
    return found


def route_integration_failure(
    failing_files: Sequence[str],
    tasks: Sequence[Task],
    *,
    depends: Mapping[str, Sequence[str]] | None = None,
) -> dict[str | None, list[str]]:
    """Map each failing file to the task that owns it; unowned files go under ``None``.

    When several tasks own a file (tasks that run one after the other may share paths),
    the last writer gets it: an owner no other owner depends on. ``depends`` (task ->
    transitive or direct dependencies) defaults to each task's ``depends_on``. A ``None``
    key means a human must look: the run waits.
    """

    deps = {t.id: set(t.depends_on) for t in tasks}
    if depends is not None:
        deps = {k: set(v) for k, v in depends.items()}
    closure = {tid: _closure(tid, deps) for tid in deps}
    routed: dict[str | None, list[str]] = {}
    for path in failing_files:
        owners = [t.id for t in tasks if path_matches(path, t.owns)]
        if not owners:
            routed.setdefault(None, []).append(path)
            continue
        # drop an owner when another owner builds on it (that one wrote last)
        last = [
            o
            for o in owners
            if not any(o in closure.get(other, set()) for other in owners if other != o)
        ]
        for owner in last or owners:
            routed.setdefault(owner, []).append(path)
    return routed


def _closure(tid: str, deps: Mapping[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(deps.get(tid, ()))
    while stack:
        d = stack.pop()
        if d not in seen:
            seen.add(d)
            stack.extend(deps.get(d, ()))
    return seen
