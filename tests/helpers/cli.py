"""The `lo-orch` command line in this process, and plan files written for it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from loop_orchestrator.cli.main import run_cli

#: ``lo-orch ARGS`` as a new process that a Ctrl-C (SIGINT) interrupts, as one started from
#: a person's terminal is: a process started by the test suite inherits SIGINT ignored when
#: the suite runs in the background (`.ci/run &`), and Python then installs no handler
INTERRUPTIBLE = [
    sys.executable,
    "-c",
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('loop_orchestrator', run_name='__main__', alter_sys=True)",
]


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
