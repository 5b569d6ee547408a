"""`lo-orch doctor`: the machine's tools, the agent CLI, its login state and the plugin."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loop_orchestrator import config
from loop_orchestrator import readiness as checks_mod
from loop_orchestrator.cluster.checks import check_cluster
from loop_orchestrator.commands.repo import find_repo
from loop_orchestrator.errors import ConfigError, LoOrchError
from loop_orchestrator.readiness import Check


@dataclass(frozen=True)
class DoctorReport:
    """Every check in display order; ``error`` is what to raise after showing them when a
    required one failed (exit code 1)."""

    checks: tuple[Check, ...]

    @property
    def failed(self) -> list[str]:
        return [c.name for c in self.checks if c.status == "fail"]

    @property
    def error(self) -> LoOrchError | None:
        failed = self.failed
        if not failed:
            return None
        return LoOrchError(
            f"{len(failed)} required check{'s' if len(failed) != 1 else ''} failed: "
            + ", ".join(failed),
            hint="Fix the rows marked FAIL and run `lo-orch doctor` again.",
        )


def doctor(repo: Path | None = None) -> DoctorReport:
    """`lo-orch doctor [--repo]`: outside a repository it still checks the machine (an
    explicit ``repo`` that is not one is an error)."""

    root: Path | None
    try:
        root = find_repo(repo)
    except LoOrchError:
        if repo is not None:
            raise
        root = None  # outside a repository: still check the machine
    checks: list[Check] = []
    try:
        settings = config.load_settings(root)
    except ConfigError as exc:
        checks.append(Check("config", "fail", exc.message, exc.hint or ""))
        settings = config.Settings()
    checks += checks_mod.run_checks(root, settings)
    checks += check_cluster(root, settings)
    return DoctorReport(tuple(checks))
