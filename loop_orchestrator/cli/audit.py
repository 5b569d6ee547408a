"""`lo-orch audit TASK`: run the verification checks on demand."""

from __future__ import annotations

import json
from pathlib import Path

import click

from loop_orchestrator.cli.common import repo_option, resolve_repo


@click.command("audit")
@click.argument("task")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as a JSON object.")
@click.option("--no-llm", is_flag=True, help="Skip the LLM auditor (deterministic checks only).")
@repo_option
def audit_command(task: str, as_json: bool, no_llm: bool, repo: Path | None) -> None:
    """Verify TASK's current commit against the run's base and print the findings.

    The commit is the one in the task's status, else the tip of its branch. Exit code 0
    when the task passes, 1 when it does not (or cannot be audited).
    """
    from loop_orchestrator.commands import audit as auditing

    result = auditing.audit(resolve_repo(repo), task, use_llm=not no_llm)
    verdict = result.verdict
    if as_json:
        doc = verdict.model_dump(mode="json")
        doc["summary"] = verdict.summary()
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(verdict.summary())
        for f in verdict.findings:
            click.echo(f"  {f.render()}")
        for r in verdict.checks:
            state = (
                "timed out"
                if r.timed_out
                else "could not start"
                if r.exit_code is None
                else f"exit {r.exit_code}"
            )
            click.echo(f"  ran {r.name}: {' '.join(r.argv)} -> {state} ({r.duration:.1f} s)")
        if verdict.auditor is not None:
            reasons = "; ".join(verdict.auditor.reasons) or "-"
            click.echo(f"  auditor ({verdict.auditor.mode}): {verdict.auditor.status}: {reasons}")
        click.echo(f"Evidence: {verdict.evidence_dir}")
    if result.error is not None:
        raise result.error
