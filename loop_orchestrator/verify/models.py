"""What verification produces: findings, check runs, the auditor's answer and the verdict.

A ``Verdict`` is bound to one commit sha: it is stored next to that commit's evidence and
never reused for another sha (docs/design.md section 7).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from loop_orchestrator.errors import LoOrchError


class Severity(StrEnum):
    #: the task cannot pass while this finding stands
    BLOCKING = "blocking"
    #: shown to the agent, the auditor and the human; does not fail the task by itself
    WARNING = "warning"


#: every finding id: the table in ``verify/__init__.py`` (stable: reviews, disputes, the
#: ledger and Gate 2 name them; a test keeps the two alike)
CheckId = Literal[
    "scope.unowned",
    "scope.ci",
    "scope.test-config",
    "scope.orchestration",
    "scope.interpreter-hook",
    "scope.symlink",
    "scope.submodule",
    "scope.no-change",
    "tests.no-assertion",
    "tests.tautology",
    "tests.skip",
    "tests.early-exit",
    "tests.dead-code",
    "tests.swallowed-assertion",
    "tests.deleted",
    "tests.fewer-assertions",
    "tests.duplicate-name",
    "tests.unparsable",
    "tests.renamed",
    "tests.broad-raises",
    "tests.no-error-case",
    "tests.no-boundary-case",
    "tests.none-added",
    "tests.mutants-survive",
    "tests.mutants-few-killed",
    "tests.mutants-unexecuted",
    "tests.mutants-not-run",
    "tests.weak-assertions",
    "stubs.not-implemented",
    "stubs.empty-body",
    "stubs.hardcoded-return",
    "stubs.todo",
    "stubs.placeholder",
    "stubs.unparsable",
    "stubs.special-cased",
    "secrets.anthropic",
    "secrets.aws",
    "secrets.github",
    "secrets.google",
    "secrets.kubeconfig",
    "secrets.npm",
    "secrets.openai",
    "secrets.private-key",
    "secrets.slack",
    "secrets.stripe",
    "secrets.file",
    "secrets.cloud-credentials",
    "secrets.assignment",
    "secrets.url-credentials",
    "secrets.high-entropy",
    "secrets.unscanned",
    "conflict-marker",
    "done.failed",
    "done.timeout",
    "done.error",
    "done.no-report",
    "done.no-tests",
    "done.report-failed",
    "done.environment-changed",
    "done.new-test-missing",
    "done.new-test-skipped",
    "done.new-test-failed",
    "redgreen.not-red",
    "redgreen.unprovable",
    "redgreen.not-run",
]
CHECK_IDS: frozenset[str] = frozenset(get_args(CheckId))


class Finding(BaseModel):
    """One problem a check found, with a place, a reason and what to change."""

    model_config = ConfigDict(extra="forbid")

    check: CheckId
    severity: Severity
    message: str  # the reason, in words a person understands
    path: str | None = None
    line: int | None = None
    fix: str | None = None  # what to change
    #: the implementing session's reason when it disputes this finding
    dispute: str | None = None
    #: what the change itself shows that a dispute of this finding can rest on (a deleted
    #: test: the code it exercised that the change removes); for the findings whose
    #: disputes are judged on the diff, a dispute without grounds is refused
    grounds: str | None = None

    @property
    def blocking(self) -> bool:
        return self.severity is Severity.BLOCKING

    @property
    def location(self) -> str:
        if self.path is None:
            return "-"
        return f"{self.path}:{self.line}" if self.line else self.path

    def render(self) -> str:
        text = f"[{self.severity.value}] {self.check} {self.location}: {self.message}"
        if self.fix:
            text += f" Fix: {self.fix}"
        if self.dispute:
            text += f" Disputed by the session: {self.dispute}"
        return text


def blocking(
    message: str,
    check: CheckId,
    path: str | None = None,
    line: int | None = None,
    fix: str | None = None,
) -> Finding:
    return Finding(
        check=check, severity=Severity.BLOCKING, message=message, path=path, line=line, fix=fix
    )


def warning(
    message: str,
    check: CheckId,
    path: str | None = None,
    line: int | None = None,
    fix: str | None = None,
) -> Finding:
    return Finding(
        check=check, severity=Severity.WARNING, message=message, path=path, line=line, fix=fix
    )


class CheckRun(BaseModel):
    """One command run for evidence (a done-check, or a red/green test run)."""

    model_config = ConfigDict(extra="forbid")

    name: str  # "check-1", "red", "green", "setup"
    criterion: str | None = None
    argv: list[str]
    cwd_kind: Literal["commit", "base"] = "commit"
    exit_code: int | None  # None: timed out or could not start
    timed_out: bool = False
    duration: float = 0.0
    stdout_path: str | None = None
    stderr_path: str | None = None
    junit_path: str | None = None
    error: str | None = None  # could not start (command not found...)

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class AuditorResult(BaseModel):
    """The LLM test-quality auditor's answer (or why it was not asked)."""

    model_config = ConfigDict(extra="forbid")

    mode: str  # "agent", "off", "command"
    status: Literal["pass", "fail", "skipped"]
    reasons: list[str] = Field(default_factory=list)
    command: list[str] = Field(default_factory=list)
    exit_code: int | None = None
    duration: float = 0.0
    output_path: str | None = None

    @property
    def passed(self) -> bool:
        return self.status != "fail"


class Dispute(BaseModel):
    """A session's dispute of a heuristic finding, and how it was settled.

    outcome: ``upheld`` (the auditor agreed: the finding is a warning), ``rejected`` (the
    auditor did not: it blocks), ``carried`` (no auditor: the finding is a warning the
    person judges at Gate 2), ``deferred`` (other blocking findings stopped the auditor:
    it still blocks; dispute it again next round), ``moot`` (no such blocking finding),
    ``refused`` (a hard finding: never disputable).
    """

    model_config = ConfigDict(extra="forbid")

    check: str
    note: str
    outcome: Literal["upheld", "rejected", "carried", "deferred", "moot", "refused"]
    reason: str = ""


class Verdict(BaseModel):
    """The supervisor's decision about one task at one commit."""

    model_config = ConfigDict(extra="forbid")

    task: str
    commit: str
    base: str
    passed: bool
    findings: list[Finding] = Field(default_factory=list)
    checks: list[CheckRun] = Field(default_factory=list)
    auditor: AuditorResult | None = None
    evidence_dir: str | None = None
    evidence: list[str] = Field(default_factory=list)  # files worth opening, absolute
    created_at: str = ""
    disputes: list[Dispute] = Field(default_factory=list)

    @property
    def blocking(self) -> list[Finding]:
        return [f for f in self.findings if f.blocking]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if not f.blocking]

    def summary(self) -> str:
        """One line: the outcome and its main reasons."""
        head = f"task {self.task} @ {self.commit[:12]}: "
        if self.passed:
            extra = f" ({len(self.warnings)} warning(s))" if self.warnings else ""
            auditor = "" if self.auditor is None else f"; auditor {self.auditor.status}"
            return head + "PASSED" + extra + auditor
        parts = []
        if self.blocking:
            checks = sorted({f.check for f in self.blocking})
            parts.append(f"{len(self.blocking)} blocking finding(s): {', '.join(checks)}")
        if self.auditor is not None and self.auditor.status == "fail":
            first = self.auditor.reasons[0] if self.auditor.reasons else "no reason given"
            parts.append(f"auditor FAIL: {first}")
        return head + "FAILED: " + "; ".join(parts or ["no reason recorded"])


class VerificationFailed(LoOrchError):
    """A task did not pass verification (raised by `lo-orch audit` for exit code 1)."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(
            verdict.summary(),
            hint="Every blocking finding and the auditor's reasons are listed above.",
        )
        self.verdict = verdict
