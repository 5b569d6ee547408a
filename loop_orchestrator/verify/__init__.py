"""Independent verification of a task's commit: deterministic checks, the LLM auditor,
the verdict, reviews and rework prompts (issue 6; DESIGN.md section 7).

Importing this package pulls in pydantic and git helpers only; never tmux.
"""

from __future__ import annotations

from loop_orchestrator.verify.models import (
    AuditorResult,
    CheckRun,
    Finding,
    Severity,
    Verdict,
    VerificationFailed,
)
from loop_orchestrator.verify.review import rework_prompt, route_integration_failure, write_review
from loop_orchestrator.verify.verdict import load_verdict, verify_task

__all__ = [
    "AuditorResult",
    "CheckRun",
    "Finding",
    "Severity",
    "Verdict",
    "VerificationFailed",
    "load_verdict",
    "rework_prompt",
    "route_integration_failure",
    "verify_task",
    "write_review",
]
