"""Planning with a stand-in for headless Claude Code (tests/fixtures/intake/fake_claude.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from loop_orchestrator.cli.main import run_cli

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "intake"
FAKE = FIXTURES / "fake_claude.py"


class FakeClaude:
    """The stand-in configured as ``[agent] command`` through the environment layer."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        self.log = tmp_path / "fake-claude.jsonl"
        self.monkeypatch = monkeypatch
        monkeypatch.setenv("LO_ORCH_AGENT_COMMAND", f"{sys.executable} {FAKE}")
        monkeypatch.setenv("FAKE_CLAUDE_LOG", str(self.log))

    def answers(self, *names: str) -> None:
        self.monkeypatch.setenv("FAKE_CLAUDE_SCENARIO", ",".join(names))

    @property
    def calls(self) -> list[dict[str, Any]]:
        return calls(self.log)


def calls(log: Path) -> list[dict[str, Any]]:
    """The stand-in's calls (its argv, its stdin...), one logged line each."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def plan_cli(repo: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`lo-orch plan ARGS --repo REPO` in this process; (exit code, stdout, stderr)."""
    code = run_cli(["plan", *args, "--repo", str(repo)])
    out, err = capsys.readouterr()
    return code, out, err
