"""The `lo-orch` command line in this process, and plan files written for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from loop_orchestrator.cli.main import run_cli


class Outcome:
    """What a command did: its exit code and what it wrote."""

    def __init__(self, code: int, stdout: str, stderr: str) -> None:
        self.code, self.stdout, self.stderr = code, stdout, stderr

    def __repr__(self) -> str:
        return f"Outcome({self.code}, stdout={self.stdout!r}, stderr={self.stderr!r})"


def invoke(*args: str | Path) -> Outcome:
    """Run the CLI in-process through run_cli, the one place that maps errors to exits."""
    runner = CliRunner()
    with runner.isolation() as (out, err, _):
        code = run_cli([str(a) for a in args])
        return Outcome(code, out.getvalue().decode(), err.getvalue().decode())


def write_plan(tmp_path: Path, data: dict[str, Any], name: str = "bad.yaml") -> Path:
    """``data`` as a plan file ``name`` in ``tmp_path``."""
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path
