"""`lo-orch audit TASK`: the verification checks on demand."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loop_orchestrator import config
from loop_orchestrator.verify.models import Verdict, VerificationFailed
from loop_orchestrator.verify.on_demand import audit_task


@dataclass(frozen=True)
class AuditResult:
    """The verdict on the task's current commit; ``error`` is what to raise after showing
    it when the task does not pass (exit code 1)."""

    verdict: Verdict

    @property
    def error(self) -> VerificationFailed | None:
        return None if self.verdict.passed else VerificationFailed(self.verdict)


def audit(repo: Path, task: str, *, use_llm: bool = True) -> AuditResult:
    """`lo-orch audit TASK [--no-llm]`: verify the task's commit (its status's, else its
    branch tip) against the run's base."""

    return AuditResult(audit_task(repo, task, config.load_settings(repo), use_llm=use_llm))
